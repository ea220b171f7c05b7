//! Which operation on which resource each served API needs, as Kafka's request handlers
//! check it, and what an entry gets when the check fails.
//!
//! [`required`] turns a decoded request into a list of [`Check`]s. A check names one
//! resource (or "each one the answer would list", for listings that hide what the
//! principal may not see), the operation, the error code a refused entry gets, and
//! whether a refused entry is refused or silently left out. The authorization layer of
//! the pipeline ([`crate::pipeline::authorization`]) evaluates them.

use super::{CLUSTER_NAME, Operation, ResourceType};
use kafka_protocol::{ApiKey, ErrorCode, RequestBody, Uuid};

/// What a check is about; names borrow from the request, so building the checks of a
/// request copies no string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// The named resource of the type (`kafka-cluster` for the cluster).
    Named(ResourceType, &'a str),
    /// A topic the request names only by id; the layer resolves the name first (an
    /// unknown id is answered UNKNOWN_TOPIC_ID whatever the ACLs say).
    TopicId(Uuid),
    /// Every resource of the type the answer would list (Metadata for all topics,
    /// ListGroups, OffsetFetch for all of a group's topics): filtered, never refused.
    EachListed(ResourceType),
}

impl Target<'_> {
    fn cluster() -> Target<'static> {
        Target::Named(ResourceType::Cluster, CLUSTER_NAME)
    }
}

/// When a refused check applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeny {
    /// The entry (or, for a request-wide check, the whole request) gets the error code.
    Refuse,
    /// The entry is left out of the answer, as if it did not exist.
    Hide,
}

/// Another way to pass a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alternative {
    /// Only the check itself.
    None,
    /// The same operation on the cluster also passes (CREATE for topic creation,
    /// DESCRIBE for ListGroups).
    Cluster,
    /// The operation on any resource of the type passes
    /// ([`super::Acls::authorize_any`]; WRITE on any topic for InitProducerId).
    AnyOf(ResourceType, Operation),
}

/// Whether a check always applies or only in a situation the handler discovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// Only when the request would create the topic (Metadata auto-creation of a missing
    /// topic); a refusal then leaves the topic uncreated and answers
    /// TOPIC_AUTHORIZATION_FAILED for it.
    Creating,
}

/// One authorization check a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check<'a> {
    /// What it is about.
    pub target: Target<'a>,
    /// The operation needed.
    pub operation: Operation,
    /// Another way to pass.
    pub alternative: Alternative,
    /// The error code a refused entry gets.
    pub error: ErrorCode,
    /// Refused or hidden.
    pub on_deny: OnDeny,
    /// Always or only when creating.
    pub when: When,
    /// Whether a refusal refuses the whole request (group-wide or cluster-wide checks)
    /// rather than one entry.
    pub request_wide: bool,
}

impl<'a> Check<'a> {
    fn new(target: Target<'a>, operation: Operation, error: ErrorCode) -> Check<'a> {
        Check {
            target,
            operation,
            alternative: Alternative::None,
            error,
            on_deny: OnDeny::Refuse,
            when: When::Always,
            request_wide: false,
        }
    }

    fn topic(name: &'a str, operation: Operation) -> Check<'a> {
        Check::new(
            Target::Named(ResourceType::Topic, name),
            operation,
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        )
    }

    /// A topic named by name, or by id when the name is empty (newer versions).
    fn topic_or_id(name: &'a str, id: Uuid, operation: Operation) -> Check<'a> {
        if name.is_empty() && id != Uuid::ZERO {
            Check::new(
                Target::TopicId(id),
                operation,
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            )
        } else {
            Check::topic(name, operation)
        }
    }

    fn group(name: &'a str, operation: Operation) -> Check<'a> {
        Check::new(
            Target::Named(ResourceType::Group, name),
            operation,
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
        )
    }

    fn transactional_id(name: &'a str, operation: Operation) -> Check<'a> {
        Check::new(
            Target::Named(ResourceType::TransactionalId, name),
            operation,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
        .whole()
    }

    fn cluster(operation: Operation) -> Check<'a> {
        Check::new(
            Target::cluster(),
            operation,
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        )
        .whole()
    }

    fn hidden(resource_type: ResourceType, operation: Operation, error: ErrorCode) -> Check<'a> {
        Check {
            on_deny: OnDeny::Hide,
            ..Check::new(Target::EachListed(resource_type), operation, error)
        }
    }

    fn whole(mut self) -> Check<'a> {
        self.request_wide = true;
        self
    }

    fn or(mut self, alternative: Alternative) -> Check<'a> {
        self.alternative = alternative;
        self
    }

    fn creating(mut self) -> Check<'a> {
        self.when = When::Creating;
        self
    }
}

/// Config resource types of DescribeConfigs / AlterConfigs (Kafka's `ConfigResource`).
pub const CONFIG_TOPIC: i8 = 2;

/// The check for a config resource: topics by name, everything else (brokers, broker
/// loggers) is the cluster.
fn config_check(resource_type: i8, name: &str, operation: Operation) -> Check<'_> {
    if resource_type == CONFIG_TOPIC {
        Check::topic(name, operation)
    } else {
        Check::new(
            Target::cluster(),
            operation,
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        )
    }
}

/// One OffsetFetch group's checks, the group's first and its topics after it: DESCRIBE
/// on the group, and DESCRIBE on each named topic, or on each listed topic (hidden) when
/// the request asks for all of the group's topics.
fn offset_fetch_group<'a>(
    v: &mut Vec<Check<'a>>,
    group: &'a str,
    topics: Option<impl Iterator<Item = &'a str>>,
    request_wide: bool,
) {
    let mut g = Check::group(group, Operation::Describe);
    g.request_wide = request_wide;
    v.push(g);
    match topics {
        None => v.push(Check::hidden(
            ResourceType::Topic,
            Operation::Describe,
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        )),
        Some(ts) => v.extend(ts.map(|t| Check::topic(t, Operation::Describe))),
    }
}

/// FindCoordinator key types.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// Whether an AddPartitionsToTxn request is the batched form (v4+) gateways send each
/// other (verification), which needs CLUSTER_ACTION on the cluster, rather than a
/// client's (v0-3), which needs WRITE on its transactional id and topics. The decoded
/// request fills the fields of its version only: a v4+ request lists transactions, a
/// v0-3 request names its transactional id.
pub fn is_broker_add_partitions(
    r: &kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnRequest,
) -> bool {
    !r.transactions.is_empty()
        || (r.v3_and_below_transactional_id.is_empty() && r.v3_and_below_topics.is_empty())
}

/// Every API that needs no authorization: the ones a client must be able to call before
/// it has a principal, and DescribeCluster (Kafka answers it to everyone; only its
/// authorized-operations field depends on DESCRIBE on the cluster).
pub const UNCHECKED: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::DescribeCluster,
];

/// The operations KIP-430's authorized-operations bitfields cover for a resource type
/// (Kafka's `AclEntry.supportedOperations`): the bitfield has bit `code` set for each of
/// these the principal may perform.
pub fn supported_operations(resource_type: ResourceType) -> &'static [Operation] {
    use Operation as Op;
    match resource_type {
        ResourceType::Topic => &[
            Op::Read,
            Op::Write,
            Op::Create,
            Op::Describe,
            Op::Delete,
            Op::Alter,
            Op::DescribeConfigs,
            Op::AlterConfigs,
        ],
        ResourceType::Group => &[Op::Read, Op::Describe, Op::Delete],
        ResourceType::Cluster => &[
            Op::Create,
            Op::ClusterAction,
            Op::DescribeConfigs,
            Op::AlterConfigs,
            Op::IdempotentWrite,
            Op::Alter,
            Op::Describe,
        ],
        ResourceType::TransactionalId => &[Op::Describe, Op::Write],
        ResourceType::DelegationToken => &[Op::Describe],
        _ => &[],
    }
}

/// The KIP-430 bitfield of every supported operation of a resource type: what Kafka
/// answers when no authorizer is configured.
pub fn all_operations(resource_type: ResourceType) -> i32 {
    operations_bitfield(supported_operations(resource_type).iter().copied())
}

/// The KIP-430 bitfield of `operations` (bit `code` set for each).
pub fn operations_bitfield(operations: impl IntoIterator<Item = Operation>) -> i32 {
    operations
        .into_iter()
        .fold(0i32, |bits, op| bits | (1i32 << op.code()))
}

/// The checks a request needs; `None` for an API this table does not know (the caller
/// must refuse it rather than let it through), an empty list for the APIs in
/// [`UNCHECKED`].
///
/// Checks come in request order: request-wide ones (transactional id, group) first, then
/// one per entry in the order the request lists them. For OffsetFetch with several
/// groups, each group's check is followed by the checks of that group's topics.
pub fn required(body: &RequestBody) -> Option<Vec<Check<'_>>> {
    use Operation as Op;
    let checks = match body {
        RequestBody::ApiVersions(_)
        | RequestBody::SaslHandshake(_)
        | RequestBody::SaslAuthenticate(_)
        | RequestBody::DescribeCluster(_) => Vec::new(),
        RequestBody::Produce(r) => {
            let mut v = Vec::with_capacity(r.topic_data.len() + 1);
            if let Some(t) = &r.transactional_id {
                v.push(Check::transactional_id(t, Op::Write));
            }
            v.extend(
                r.topic_data
                    .iter()
                    .map(|t| Check::topic_or_id(&t.name, t.topic_id, Op::Write)),
            );
            v
        }
        RequestBody::Fetch(r) => r
            .topics
            .iter()
            .map(|t| Check::topic_or_id(&t.topic, t.topic_id, Op::Read))
            .collect(),
        RequestBody::ListOffsets(r) => r
            .topics
            .iter()
            .map(|t| Check::topic(&t.name, Op::Describe))
            .collect(),
        RequestBody::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .map(|t| Check::topic(&t.topic, Op::Describe))
            .collect(),
        RequestBody::Metadata(r) => match &r.topics {
            None => vec![Check::hidden(
                ResourceType::Topic,
                Op::Describe,
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            )],
            Some(topics) => {
                let mut v = Vec::with_capacity(topics.len() * 2);
                for t in topics {
                    let name = t.name.as_deref().unwrap_or("");
                    v.push(Check::topic_or_id(name, t.topic_id, Op::Describe));
                    if r.allow_auto_topic_creation && !name.is_empty() {
                        v.push(
                            Check::topic(name, Op::Create)
                                .or(Alternative::Cluster)
                                .creating(),
                        );
                    }
                }
                v
            }
        },
        RequestBody::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| Check::topic(&t.name, Op::Create).or(Alternative::Cluster))
            .collect(),
        RequestBody::DeleteTopics(r) => {
            let mut v: Vec<Check<'_>> = r
                .topic_names
                .iter()
                .map(|n| Check::topic(n, Op::Delete))
                .collect();
            v.extend(r.topics.iter().map(|t| {
                Check::topic_or_id(t.name.as_deref().unwrap_or(""), t.topic_id, Op::Delete)
            }));
            v
        }
        RequestBody::DeleteRecords(r) => r
            .topics
            .iter()
            .map(|t| Check::topic(&t.name, Op::Delete))
            .collect(),
        RequestBody::CreatePartitions(r) => r
            .topics
            .iter()
            .map(|t| Check::topic(&t.name, Op::Alter))
            .collect(),
        RequestBody::InitProducerId(r) => match &r.transactional_id {
            Some(t) => vec![Check::transactional_id(t, Op::Write)],
            None => vec![
                Check::cluster(Op::IdempotentWrite)
                    .or(Alternative::AnyOf(ResourceType::Topic, Op::Write)),
            ],
        },
        RequestBody::DescribeConfigs(r) => r
            .resources
            .iter()
            .map(|c| config_check(c.resource_type, &c.resource_name, Op::DescribeConfigs))
            .collect(),
        RequestBody::AlterConfigs(r) => r
            .resources
            .iter()
            .map(|c| config_check(c.resource_type, &c.resource_name, Op::AlterConfigs))
            .collect(),
        RequestBody::IncrementalAlterConfigs(r) => r
            .resources
            .iter()
            .map(|c| config_check(c.resource_type, &c.resource_name, Op::AlterConfigs))
            .collect(),
        RequestBody::FindCoordinator(r) => {
            let keys: Vec<&str> = if r.coordinator_keys.is_empty() {
                vec![&r.key]
            } else {
                r.coordinator_keys.iter().map(|k| &**k).collect()
            };
            keys.into_iter()
                .map(|k| {
                    if r.key_type == KEY_TYPE_TRANSACTION {
                        Check::new(
                            Target::Named(ResourceType::TransactionalId, k),
                            Op::Describe,
                            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        )
                    } else {
                        Check::group(k, Op::Describe)
                    }
                })
                .collect()
        }
        RequestBody::JoinGroup(r) => vec![Check::group(&r.group_id, Op::Read).whole()],
        RequestBody::SyncGroup(r) => vec![Check::group(&r.group_id, Op::Read).whole()],
        RequestBody::Heartbeat(r) => vec![Check::group(&r.group_id, Op::Read).whole()],
        RequestBody::LeaveGroup(r) => vec![Check::group(&r.group_id, Op::Read).whole()],
        RequestBody::OffsetCommit(r) => {
            let mut v = vec![Check::group(&r.group_id, Op::Read).whole()];
            v.extend(r.topics.iter().map(|t| Check::topic(&t.name, Op::Read)));
            v
        }
        RequestBody::OffsetFetch(r) => {
            let mut v = Vec::new();
            if r.groups.is_empty() {
                let topics = r.topics.as_ref().map(|ts| ts.iter().map(|t| &*t.name));
                offset_fetch_group(&mut v, &r.group_id, topics, true);
            } else {
                for g in &r.groups {
                    let topics = g.topics.as_ref().map(|ts| ts.iter().map(|t| &*t.name));
                    offset_fetch_group(&mut v, &g.group_id, topics, false);
                }
            }
            v
        }
        RequestBody::OffsetDelete(r) => {
            let mut v = vec![Check::group(&r.group_id, Op::Delete).whole()];
            v.extend(r.topics.iter().map(|t| Check::topic(&t.name, Op::Read)));
            v
        }
        RequestBody::DescribeGroups(r) => r
            .groups
            .iter()
            .map(|g| Check::group(g, Op::Describe))
            .collect(),
        RequestBody::ListGroups(_) => vec![
            Check::hidden(
                ResourceType::Group,
                Op::Describe,
                ErrorCode::GROUP_AUTHORIZATION_FAILED,
            )
            .or(Alternative::Cluster),
        ],
        RequestBody::DeleteGroups(r) => r
            .groups_names
            .iter()
            .map(|g| Check::group(g, Op::Delete))
            .collect(),
        RequestBody::AddPartitionsToTxn(r) if is_broker_add_partitions(r) => {
            vec![Check::cluster(Op::ClusterAction)]
        }
        RequestBody::AddPartitionsToTxn(r) => {
            let mut v = Vec::with_capacity(r.v3_and_below_topics.len() + 1);
            v.push(Check::transactional_id(
                &r.v3_and_below_transactional_id,
                Op::Write,
            ));
            v.extend(
                r.v3_and_below_topics
                    .iter()
                    .map(|t| Check::topic(&t.name, Op::Write)),
            );
            v
        }
        RequestBody::AddOffsetsToTxn(r) => vec![
            Check::transactional_id(&r.transactional_id, Op::Write),
            Check::group(&r.group_id, Op::Read).whole(),
        ],
        RequestBody::EndTxn(r) => vec![Check::transactional_id(&r.transactional_id, Op::Write)],
        RequestBody::WriteTxnMarkers(_) => vec![Check::cluster(Op::ClusterAction)],
        RequestBody::TxnOffsetCommit(r) => {
            let mut v = Vec::with_capacity(r.topics.len() + 2);
            v.push(Check::transactional_id(&r.transactional_id, Op::Write));
            v.push(Check::group(&r.group_id, Op::Read).whole());
            v.extend(r.topics.iter().map(|t| Check::topic(&t.name, Op::Read)));
            v
        }
        RequestBody::DescribeTransactions(r) => {
            let mut v: Vec<Check<'_>> = r
                .transactional_ids
                .iter()
                .map(|t| {
                    Check::new(
                        Target::Named(ResourceType::TransactionalId, t),
                        Op::Describe,
                        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    )
                })
                .collect();
            // The topics of each transaction: shown only where the caller may
            // DESCRIBE them, as Kafka filters them.
            v.push(Check::hidden(
                ResourceType::Topic,
                Op::Describe,
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            ));
            v
        }
        RequestBody::ListTransactions(_) => vec![Check::hidden(
            ResourceType::TransactionalId,
            Op::Describe,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )],
        RequestBody::DescribeClientQuotas(_) => vec![Check::cluster(Op::DescribeConfigs)],
        RequestBody::AlterClientQuotas(_) => vec![Check::cluster(Op::AlterConfigs)],
        RequestBody::DescribeUserScramCredentials(_) => vec![Check::cluster(Op::Describe)],
        RequestBody::AlterUserScramCredentials(_) => vec![Check::cluster(Op::Alter)],
        RequestBody::DescribeAcls(_) => vec![Check::cluster(Op::Describe)],
        RequestBody::CreateAcls(_) | RequestBody::DeleteAcls(_) => {
            vec![Check::cluster(Op::Alter)]
        }
        _ => return None,
    };
    Some(checks)
}
