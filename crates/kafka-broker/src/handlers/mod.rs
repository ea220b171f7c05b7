//! One module per Kafka API. A handler takes the typed request and returns the typed
//! response; it never sees sockets or bytes. A handler says how it proceeds: done now
//! ([`Step::Done`]), or started with the rest completing later ([`Step::Later`]: Produce,
//! whose appends hold their place in their partitions before the store confirms them).

pub(crate) mod acls;
pub(crate) mod api_versions;
pub(crate) mod caps;
pub(crate) mod client_quotas;
pub(crate) mod configs;
pub(crate) mod describe_cluster;
pub(crate) mod fetch;
pub(crate) mod groups;
pub(crate) mod init_producer_id;
pub(crate) mod leader_epoch;
pub(crate) mod list_offsets;
pub(crate) mod metadata;
pub(crate) mod offsets;
pub(crate) mod produce;
pub(crate) mod records;
pub(crate) mod scram_credentials;
pub(crate) mod topics;
pub(crate) mod txn;
pub(crate) mod txn_markers;

use crate::broker::Broker;
use crate::session::Session;
use bytestring::ByteString;
use kafka_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use kafka_protocol::messages::sasl_handshake_response::SaslHandshakeResponse;
use kafka_protocol::{ApiKey, RequestBody, ResponseBody, VersionRange};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What every handler knows about the request besides its body.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) broker: &'a Broker,
    /// The negotiated version of the request.
    pub(crate) version: i16,
    /// The connection's session as it was when the request started (read-only).
    pub(crate) session: Arc<Session>,
}

/// The APIs this gateway implements: only these are advertised and accepted.
const IMPLEMENTED: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::ApiVersions,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::WriteTxnMarkers,
    ApiKey::TxnOffsetCommit,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::DescribeAcls,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::CreatePartitions,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::DescribeCluster,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    ApiKey::DescribeClientQuotas,
    ApiKey::AlterClientQuotas,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::DescribeUserScramCredentials,
    ApiKey::AlterUserScramCredentials,
];

/// The newest version served of a key whose codec knows newer ones: only transaction
/// protocol version 1 is spoken (no `transaction.version` feature is advertised), so
/// EndTxn and TxnOffsetCommit stop before their v5, which only means something with
/// version 2; WriteTxnMarkers v2 and ListTransactions v2 (id pattern) are not served.
const CAPS: &[(ApiKey, i16)] = &[
    (ApiKey::EndTxn, 4),
    (ApiKey::WriteTxnMarkers, 1),
    (ApiKey::TxnOffsetCommit, 4),
    (ApiKey::ListTransactions, 1),
];

/// The version range advertised for a key, `None` when the key is not served.
pub(crate) fn advertised(key: ApiKey) -> Option<VersionRange> {
    if !IMPLEMENTED.contains(&key) {
        return None;
    }
    let range = key.versions()?;
    match CAPS.iter().find(|(k, _)| *k == key) {
        Some((_, max)) if *max < range.max => Some(VersionRange::new(range.min, *max)),
        _ => Some(range),
    }
}

/// Every served key with its range, in key order.
pub(crate) fn advertised_all() -> impl Iterator<Item = (ApiKey, VersionRange)> {
    ApiKey::ALL
        .iter()
        .filter_map(|k| advertised(*k).map(|r| (*k, r)))
}

/// What a handler produced.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A response to send.
    Body(ResponseBody),
    /// A response that is not sent (Produce with acks=0); the pipeline's layers still see
    /// it.
    Unsent(ResponseBody),
    /// Close the connection.
    Close,
}

/// How a handler proceeds.
pub(crate) enum Step<'a> {
    /// Handled.
    Done(Reply),
    /// Started: the request's effects hold their place, and the future completes it.
    Later {
        reply: Pin<Box<dyn Future<Output = Reply> + Send + 'a>>,
    },
}

/// Whether a request may start while the connection's earlier requests are still
/// completing. Only appends overlap (a producer's pipelined Produce requests): they take
/// their place in their partitions in request order when started. Anything else waits
/// until every earlier request is complete, so it sees their effects, as with Kafka.
pub(crate) fn overlaps(body: &RequestBody) -> bool {
    matches!(body, RequestBody::Produce(_))
}

/// Routes a request to its handler.
pub(crate) async fn handle(ctx: Ctx<'_>, body: RequestBody) -> Step<'_> {
    let ctx = match body {
        RequestBody::Produce(r) => return produce::start(ctx, r).await,
        _ => ctx,
    };
    let cap = ctx.broker.config.limits.max_entries_per_request;
    if let Some(n) = caps::entries(&body).filter(|n| *n > cap) {
        let refusal = caps::refusal(&body, ctx.version);
        tracing::warn!(
            api = body.api_key().name(),
            entries = n,
            cap,
            closed = refusal.is_none(),
            "request over the entry cap refused"
        );
        return Step::Done(refusal.map_or(Reply::Close, Reply::Body));
    }
    let ctx = &ctx;
    Step::Done(Reply::Body(match body {
        RequestBody::ApiVersions(r) => api_versions::handle(ctx, r).into(),
        RequestBody::Metadata(r) => metadata::handle(ctx, r).await.into(),
        RequestBody::CreateTopics(r) => topics::create_topics(ctx, r).await.into(),
        RequestBody::DeleteTopics(r) => topics::delete_topics(ctx, r).await.into(),
        RequestBody::CreatePartitions(r) => topics::create_partitions(ctx, r).await.into(),
        RequestBody::Fetch(r) => fetch::handle(ctx, r).await.into(),
        RequestBody::ListOffsets(r) => list_offsets::handle(ctx, r).await.into(),
        RequestBody::OffsetForLeaderEpoch(r) => leader_epoch::handle(ctx, r).await.into(),
        RequestBody::DescribeConfigs(r) => configs::describe(ctx, r).await.into(),
        RequestBody::AlterConfigs(r) => configs::alter(ctx, r).await.into(),
        RequestBody::IncrementalAlterConfigs(r) => configs::incremental_alter(ctx, r).await.into(),
        RequestBody::DeleteRecords(r) => records::delete_records(ctx, r).await.into(),
        RequestBody::InitProducerId(r) => init_producer_id::handle(ctx, r).await.into(),
        RequestBody::DescribeCluster(r) => describe_cluster::handle(ctx, r).into(),
        RequestBody::FindCoordinator(r) => groups::find_coordinator(ctx, r).into(),
        RequestBody::JoinGroup(r) => groups::join_group(ctx, r).await.into(),
        RequestBody::SyncGroup(r) => groups::sync_group(ctx, r).await.into(),
        RequestBody::Heartbeat(r) => groups::heartbeat(ctx, r).await.into(),
        RequestBody::LeaveGroup(r) => groups::leave_group(ctx, r).await.into(),
        RequestBody::DescribeGroups(r) => groups::describe_groups(ctx, r).await.into(),
        RequestBody::ListGroups(r) => groups::list_groups(ctx, r).await.into(),
        RequestBody::DeleteGroups(r) => groups::delete_groups(ctx, r).await.into(),
        RequestBody::OffsetCommit(r) => offsets::offset_commit(ctx, r).await.into(),
        RequestBody::OffsetFetch(r) => offsets::offset_fetch(ctx, r).await.into(),
        RequestBody::OffsetDelete(r) => offsets::offset_delete(ctx, r).await.into(),
        RequestBody::TxnOffsetCommit(r) => offsets::txn_offset_commit(ctx, r).await.into(),
        RequestBody::AddPartitionsToTxn(r) => txn::add_partitions(ctx, r).await.into(),
        RequestBody::AddOffsetsToTxn(r) => txn::add_offsets(ctx, r).await.into(),
        RequestBody::EndTxn(r) => txn::end_txn(ctx, r).await.into(),
        RequestBody::DescribeTransactions(r) => txn::describe_transactions(ctx, r).await.into(),
        RequestBody::ListTransactions(r) => txn::list_transactions(ctx, r).await.into(),
        RequestBody::WriteTxnMarkers(r) => txn_markers::handle(ctx, r).await.into(),
        RequestBody::DescribeClientQuotas(r) => client_quotas::describe(ctx, r).into(),
        RequestBody::AlterClientQuotas(r) => client_quotas::alter(ctx, r).into(),
        RequestBody::DescribeUserScramCredentials(r) => {
            scram_credentials::describe(ctx, r).await.into()
        }
        RequestBody::AlterUserScramCredentials(r) => scram_credentials::alter(ctx, r).await.into(),
        RequestBody::DescribeAcls(r) => acls::describe(ctx, r).await.into(),
        RequestBody::CreateAcls(r) => acls::create(ctx, r).await.into(),
        RequestBody::DeleteAcls(r) => acls::delete(ctx, r).await.into(),
        // Without an authentication layer (no authenticator), the SASL APIs reach here:
        // this listener does not use SASL.
        RequestBody::SaslHandshake(_) => SaslHandshakeResponse {
            error_code: kafka_protocol::ErrorCode::ILLEGAL_SASL_STATE.code(),
            mechanisms: Vec::new(),
        }
        .into(),
        RequestBody::SaslAuthenticate(_) => SaslAuthenticateResponse {
            error_code: kafka_protocol::ErrorCode::ILLEGAL_SASL_STATE.code(),
            error_message: Some(ByteString::from_static("this listener does not use SASL")),
            ..Default::default()
        }
        .into(),
        // The firewall admits only implemented keys; anything else cannot reach here, but
        // answering nothing would desynchronise the connection, so close it instead.
        other => {
            tracing::error!(
                api = other.api_key().name(),
                "request for an unimplemented API passed the firewall"
            );
            return Step::Done(Reply::Close);
        }
    }))
}

/// Kafka's rules for topic names: 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(crate) fn valid_topic_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("topic name is empty");
    }
    if name == "." || name == ".." {
        return Err("topic name cannot be '.' or '..'");
    }
    if name.len() > 249 {
        return Err("topic name is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err("topic name may contain only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// Converts a string to the protocol's string type.
pub(crate) fn bs(s: impl Into<String>) -> ByteString {
    ByteString::from(s.into())
}
