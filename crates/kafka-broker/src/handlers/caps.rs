//! Entry caps: how many list elements (topics, partitions, groups, members, names,
//! configs) one request of an API this module covers may carry.
//!
//! The count is taken on the decoded request before a handler starts, so a request over
//! the cap never makes the broker look anything up, build per-entry state or a
//! per-entry response. Kafka has no such cap, so there is no Kafka answer to copy; the
//! gateway answers the way that costs nothing per entry:
//!
//! - APIs whose response has a top-level error code (Fetch v7+, LeaveGroup, OffsetFetch
//!   v2-v7, OffsetDelete, ListGroups, DescribeUserScramCredentials, AddPartitionsToTxn
//!   v4+, ListTransactions) get `INVALID_REQUEST`
//!   there and no entries;
//! - every other API (whose only errors are per entry) gets its connection closed, with
//!   one log line for the request.
//!
//! Produce, ListOffsets, DeleteRecords and InitProducerId are counted by their own
//! handlers. CreateTopics keeps its own per-topic `POLICY_VIOLATION` answer below the
//! general cap.

use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResponse;
use kafka_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResponse;
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::leave_group_response::LeaveGroupResponse;
use kafka_protocol::messages::list_groups_response::ListGroupsResponse;
use kafka_protocol::messages::list_transactions_response::ListTransactionsResponse;
use kafka_protocol::messages::offset_delete_response::OffsetDeleteResponse;
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponse;
use kafka_protocol::{ErrorCode, RequestBody, ResponseBody};

/// Sums the lengths of the lists of a request, with a `+1` floor per nested list owner so
/// an empty topic still counts. `None` for APIs this module does not count.
pub(crate) fn entries(body: &RequestBody) -> Option<usize> {
    fn nested<T>(outer: &[T], inner: impl Fn(&T) -> usize) -> usize {
        outer
            .iter()
            .fold(0usize, |n, t| n.saturating_add(1).saturating_add(inner(t)))
    }
    Some(match body {
        RequestBody::Metadata(r) => r.topics.as_ref().map_or(0, Vec::len),
        RequestBody::Fetch(r) => nested(&r.topics, |t| t.partitions.len())
            .saturating_add(nested(&r.forgotten_topics_data, |t| t.partitions.len())),
        RequestBody::OffsetCommit(r) => nested(&r.topics, |t| t.partitions.len()),
        RequestBody::OffsetFetch(r) => {
            let own = r
                .topics
                .as_deref()
                .map_or(0, |ts| nested(ts, |t| t.partition_indexes.len()));
            own.saturating_add(nested(&r.groups, |g| {
                g.topics
                    .as_deref()
                    .map_or(0, |ts| nested(ts, |t| t.partition_indexes.len()))
            }))
        }
        RequestBody::OffsetDelete(r) => nested(&r.topics, |t| t.partitions.len()),
        RequestBody::OffsetForLeaderEpoch(r) => nested(&r.topics, |t| t.partitions.len()),
        RequestBody::DescribeGroups(r) => r.groups.len(),
        RequestBody::DeleteGroups(r) => r.groups_names.len(),
        RequestBody::FindCoordinator(r) => r.coordinator_keys.len(),
        RequestBody::LeaveGroup(r) => r.members.len(),
        RequestBody::JoinGroup(r) => r.protocols.len(),
        RequestBody::SyncGroup(r) => r.assignments.len(),
        RequestBody::ListGroups(r) => r.states_filter.len().saturating_add(r.types_filter.len()),
        RequestBody::DeleteTopics(r) => r.topics.len().saturating_add(r.topic_names.len()),
        RequestBody::CreateTopics(r) => nested(&r.topics, |t| {
            nested(&t.assignments, |a| a.broker_ids.len()).saturating_add(t.configs.len())
        }),
        RequestBody::CreatePartitions(r) => nested(&r.topics, |t| {
            t.assignments
                .as_deref()
                .map_or(0, |a| nested(a, |a| a.broker_ids.len()))
        }),
        RequestBody::DescribeConfigs(r) => nested(&r.resources, |c| {
            c.configuration_keys.as_deref().map_or(0, <[_]>::len)
        }),
        RequestBody::AlterConfigs(r) => nested(&r.resources, |c| c.configs.len()),
        RequestBody::IncrementalAlterConfigs(r) => nested(&r.resources, |c| c.configs.len()),
        RequestBody::DescribeUserScramCredentials(r) => r.users.as_ref().map_or(0, Vec::len),
        RequestBody::AlterUserScramCredentials(r) => {
            r.deletions.len().saturating_add(r.upsertions.len())
        }
        RequestBody::AddPartitionsToTxn(r) => {
            nested(&r.v3_and_below_topics, |t| t.partitions.len())
                .saturating_add(nested(&r.transactions, |x| {
                    nested(&x.topics, |t| t.partitions.len())
                }))
        }
        RequestBody::WriteTxnMarkers(r) => nested(&r.markers, |m| {
            nested(&m.topics, |t| t.partition_indexes.len())
        }),
        RequestBody::TxnOffsetCommit(r) => nested(&r.topics, |t| t.partitions.len()),
        RequestBody::DescribeTransactions(r) => r.transactional_ids.len(),
        RequestBody::ListTransactions(r) => r
            .state_filters
            .len()
            .saturating_add(r.producer_id_filters.len()),
        RequestBody::CreateAcls(r) => r.creations.len(),
        RequestBody::DeleteAcls(r) => r.filters.len(),
        _ => return None,
    })
}

/// The answer to a request over the cap, when its API has a top-level error code;
/// `None` means close the connection.
pub(crate) fn refusal(body: &RequestBody, version: i16) -> Option<ResponseBody> {
    let invalid = ErrorCode::INVALID_REQUEST.code();
    Some(match body {
        RequestBody::Fetch(_) if version >= 7 => FetchResponse {
            error_code: invalid,
            ..FetchResponse::default()
        }
        .into(),
        RequestBody::LeaveGroup(_) => LeaveGroupResponse {
            error_code: invalid,
            ..LeaveGroupResponse::default()
        }
        .into(),
        RequestBody::ListGroups(_) => ListGroupsResponse {
            error_code: invalid,
            ..ListGroupsResponse::default()
        }
        .into(),
        RequestBody::OffsetDelete(_) => OffsetDeleteResponse {
            error_code: invalid,
            ..OffsetDeleteResponse::default()
        }
        .into(),
        RequestBody::OffsetFetch(_) if (2..8).contains(&version) => OffsetFetchResponse {
            error_code: invalid,
            ..OffsetFetchResponse::default()
        }
        .into(),
        RequestBody::AddPartitionsToTxn(_) if version >= 4 => AddPartitionsToTxnResponse {
            error_code: invalid,
            ..AddPartitionsToTxnResponse::default()
        }
        .into(),
        RequestBody::ListTransactions(_) => ListTransactionsResponse {
            error_code: invalid,
            ..ListTransactionsResponse::default()
        }
        .into(),
        RequestBody::DescribeUserScramCredentials(_) => DescribeUserScramCredentialsResponse {
            error_code: invalid,
            ..DescribeUserScramCredentialsResponse::default()
        }
        .into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
    use kafka_protocol::messages::metadata_request::MetadataRequest;

    #[test]
    fn entries_are_counted_over_every_level() {
        let fetch = FetchRequest {
            topics: vec![
                FetchTopic {
                    partitions: vec![FetchPartition::default(); 3],
                    ..FetchTopic::default()
                },
                FetchTopic::default(),
            ],
            ..FetchRequest::default()
        };
        assert_eq!(entries(&RequestBody::Fetch(fetch)), Some(5));
        let describe = DescribeGroupsRequest {
            groups: vec!["g".into(); 7],
            ..DescribeGroupsRequest::default()
        };
        assert_eq!(entries(&RequestBody::DescribeGroups(describe)), Some(7));
        let all_topics = MetadataRequest {
            topics: None,
            ..MetadataRequest::default()
        };
        assert_eq!(entries(&RequestBody::Metadata(all_topics)), Some(0));
    }

    #[test]
    fn only_apis_with_a_top_level_error_are_answered() {
        let fetch = RequestBody::Fetch(FetchRequest::default());
        assert!(refusal(&fetch, 7).is_some());
        assert!(
            refusal(&fetch, 6).is_none(),
            "Fetch v6 has no top-level error"
        );
        let describe = RequestBody::DescribeGroups(DescribeGroupsRequest::default());
        assert!(refusal(&describe, 5).is_none());
    }
}
