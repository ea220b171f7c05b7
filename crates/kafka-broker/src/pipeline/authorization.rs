//! The authorization layer: every request is checked against what its principal may do
//! before its handler sees it.
//!
//! For each request the layer takes the checks [`api::required`] lists (an API the
//! table does not know is never let through: the connection is closed) and decides each
//! one with every source of decisions: the ACL snapshot ([`AclAuthorizer`]) and the
//! other [`Authorizer`]s (the principal's Iggy permissions with the bridge). A check
//! passes when all of them allow its operation on its resource; a check with an
//! alternative (the cluster, or "any topic") also passes when every source allows the
//! alternative. Super users skip all of this.
//!
//! What a refusal does depends on the check:
//!
//! - a request-wide check (a transactional id, the group of a group API, the cluster for
//!   cluster APIs) answers the whole request without its handler, every entry of the
//!   request mirrored with the error code, as Kafka does;
//! - a per-entry check takes the refused entries out of the request before the handler
//!   sees it (so nothing is written, deleted, created or revealed for them) and puts
//!   their error entries back into the response on its way out; when nothing is left,
//!   the layer answers alone. A Produce with `acks=0` has no answer to carry an error:
//!   the connection is closed before anything is written, as Kafka closes it;
//! - listings (Metadata for all topics, ListGroups, ListTransactions, OffsetFetch for
//!   every topic of a group, the topics of each transaction DescribeTransactions
//!   describes) are filtered on the way out: what the principal may not describe is
//!   left out as if it did not exist.
//!
//! Topics named by id are resolved through the log store first. An id the store does
//! not know is left to the handler, which answers `UNKNOWN_TOPIC_ID` whatever the ACLs
//! say; a refused id is answered with the id only, never the name.
//!
//! Metadata's auto-creation needs CREATE on the cluster or the topic. When a topic's
//! CREATE is refused, the layer looks the topic up: an existing topic is described as
//! usual, a missing one is refused with `TOPIC_AUTHORIZATION_FAILED` and taken out of
//! the request, so the handler never creates it.
//!
//! KIP-430 authorized operations (Metadata, DescribeCluster, DescribeGroups) are filled
//! on the way out with the bitfield of the operations every source allows.
//!
//! The common case costs little: when every check passes and nothing is listed or asked
//! for, the request goes on untouched, and what the layer allocated is the list of checks
//! (borrowing the request's names) and the principal's and peer's text.

use crate::authz::api::{self, Alternative, Check, Target, When};
use crate::authz::{
    AclAuthorizer, Acls, Authorizer, CLUSTER_NAME, Caller, Decision, Operation, ResourceType,
    needs_explicit_grant,
};
use crate::handlers::caps;
use crate::pipeline::{Layer, Request, RequestInfo, Verdict};
use crate::session::Session;
use crate::store::LogStore;
use async_trait::async_trait;
use bytestring::ByteString;
use kafka_protocol::messages::*;
use kafka_protocol::{ErrorCode, RecordSet, RequestBody, ResponseBody, Uuid};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Warnings a client can trigger (a source failing to prepare, an unknown API) are
/// logged at most once per this interval, with how many there were.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// The layer. Built by the server with what it needs, since layers do not see the
/// broker.
pub(crate) struct Authorization {
    acls: Arc<AclAuthorizer>,
    sources: Vec<Arc<dyn Authorizer>>,
    super_users: Vec<String>,
    log: Arc<dyn LogStore>,
    auto_create_topics: bool,
    max_entries: usize,
    warnings: Mutex<Throttled>,
    denials: Mutex<Throttled>,
}

impl fmt::Debug for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorization")
            .field("acls", &self.acls)
            .field("sources", &self.sources)
            .field("super_users", &self.super_users.len())
            .finish()
    }
}

/// A log line at most once per [`WARN_EVERY`], with the count of the ones left out.
#[derive(Debug, Default)]
struct Throttled {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttled {
    /// Whether to log now, and how many were left out since the last line.
    fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < WARN_EVERY)
        {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// What the layer carries from a request to its response.
#[derive(Debug, Default)]
struct Note {
    /// The error entries of refused entries, merged into the response (taken once).
    errors: Mutex<Option<ResponseBody>>,
    /// Filter the listing in the response.
    hide: bool,
    /// The KIP-430 bitfields to fill.
    operations: Asked,
    /// CreateTopics: a created topic's configs are shown only with DESCRIBE_CONFIGS.
    topic_configs: bool,
}

/// Which KIP-430 bitfields a request asks for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Asked {
    topics: bool,
    cluster: bool,
    groups: bool,
}

impl Asked {
    fn any(self) -> bool {
        self.topics || self.cluster || self.groups
    }
}

impl Authorization {
    /// A layer deciding with `acls` and `sources`, letting `super_users` (`User:admin`)
    /// through, resolving topic ids and checking existence in `log`.
    pub(crate) fn new(
        acls: Arc<AclAuthorizer>,
        sources: Vec<Arc<dyn Authorizer>>,
        super_users: Vec<String>,
        log: Arc<dyn LogStore>,
        auto_create_topics: bool,
        max_entries: usize,
    ) -> Authorization {
        Authorization {
            acls,
            sources,
            super_users,
            log,
            auto_create_topics,
            max_entries,
            warnings: Mutex::default(),
            denials: Mutex::default(),
        }
    }

    fn warn(&self, what: &'static str, detail: &dyn fmt::Display) {
        let due = match self.warnings.lock() {
            Ok(mut t) => t.due(),
            Err(p) => p.into_inner().due(),
        };
        if let Some(suppressed) = due {
            warn!(suppressed, error = %detail, "{what}, closing connection");
        }
    }

    fn denied(&self, session: &Session, api: &'static str) {
        let due = match self.denials.lock() {
            Ok(mut t) => t.due(),
            Err(p) => p.into_inner().due(),
        };
        if let Some(suppressed) = due {
            info!(
                principal = %session.principal,
                api,
                suppressed,
                "request refused by authorization (further refusals counted, not logged)"
            );
        }
    }

    fn decider<'a>(&'a self, acls: Arc<Acls>, principal: &'a str, host: &'a str) -> Decider<'a> {
        Decider {
            acls,
            sources: &self.sources,
            caller: Caller { principal, host },
        }
    }
}

/// The peer's IP address as text, written on the stack (the longest IPv6 text is 45
/// bytes), so a request's decisions allocate nothing for it.
pub(crate) struct HostText([u8; 48]);

impl Default for HostText {
    fn default() -> Self {
        HostText([0; 48])
    }
}

impl HostText {
    pub(crate) fn of(&mut self, session: &Session) -> &str {
        use std::io::Write;
        let mut cursor = std::io::Cursor::new(&mut self.0[..]);
        // Cannot fail: an address's text fits the buffer.
        let _ = write!(cursor, "{}", session.peer.ip());
        let n = usize::try_from(cursor.position()).unwrap_or(0);
        // An address's text is ASCII; an empty host would match only `*` bindings.
        std::str::from_utf8(&self.0[..n]).unwrap_or("")
    }
}

/// Decisions for one caller: the ACL snapshot of the request and the other sources.
pub(crate) struct Decider<'a> {
    acls: Arc<Acls>,
    sources: &'a [Arc<dyn Authorizer>],
    caller: Caller<'a>,
}

impl<'a> Decider<'a> {
    /// Decisions for `principal` at `host` with the ACL snapshot `acls` and `sources`
    /// (each already prepared for the principal, as the layer does for every request).
    pub(crate) fn for_caller(
        acls: Arc<Acls>,
        sources: &'a [Arc<dyn Authorizer>],
        principal: &'a str,
        host: &'a str,
    ) -> Decider<'a> {
        Decider {
            acls,
            sources,
            caller: Caller { principal, host },
        }
    }
}

impl Decider<'_> {
    /// Whether `operation` on the resource is allowed: an ALLOW binding (or a super user)
    /// and every other source; or, where no binding covers the resource, every other
    /// source, when `allow_everyone_if_no_acl_found` opens it or some source grants on
    /// its own for the type (the Iggy permissions). A DENY, or bindings none of which
    /// allows, refuse.
    pub(crate) fn allows(
        &self,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let acls = self.acls.decide(
            self.caller.principal,
            self.caller.host,
            operation,
            resource_type,
            name,
        );
        self.settle(acls, operation, resource_type)
            && self
                .sources
                .iter()
                .all(|s| s.authorize(&self.caller, operation, resource_type, name))
    }

    /// Whether every source allows `operation` on some resource of the type (as
    /// [`Decider::allows`] combines them).
    fn allows_any(&self, operation: Operation, resource_type: ResourceType) -> bool {
        let acls = self.acls.decide_any(
            self.caller.principal,
            self.caller.host,
            operation,
            resource_type,
        );
        self.settle(acls, operation, resource_type)
            && self
                .sources
                .iter()
                .all(|s| s.authorize_any(&self.caller, operation, resource_type))
    }

    /// Whether the ACLs' `decision` lets the other sources decide.
    fn settle(
        &self,
        decision: Decision,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        match decision {
            Decision::Allowed => true,
            Decision::Denied => false,
            Decision::NoBinding => {
                self.acls.open_without_binding(resource_type, operation)
                    || self.sources.iter().any(|s| s.grants(resource_type))
            }
        }
    }

    /// Whether `check` passes for the resource `name` of `resource_type`.
    ///
    /// The cluster alternative of a topic check (CREATE on the cluster for CreateTopics
    /// and auto-creation) stands in for a binding on the topic, not for the other
    /// sources' judgement of the topic itself: with the Iggy permissions, a principal who
    /// may create topics in the default stream still needs the right to create in the
    /// stream the topic map routes this topic to.
    fn passes(&self, check: &Check<'_>, resource_type: ResourceType, name: &str) -> bool {
        self.allows(check.operation, resource_type, name)
            || match check.alternative {
                Alternative::None => false,
                Alternative::Cluster => {
                    self.allows(check.operation, ResourceType::Cluster, CLUSTER_NAME)
                        && (resource_type != ResourceType::Topic
                            || self.sources.iter().all(|s| {
                                s.authorize(&self.caller, check.operation, resource_type, name)
                            }))
                }
                Alternative::AnyOf(rt, op) => self.allows_any(op, rt),
            }
    }

    /// The KIP-430 bitfield of what every source allows on the resource.
    pub(crate) fn operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        api::operations_bitfield(
            api::supported_operations(resource_type)
                .iter()
                .copied()
                .filter(|op| self.allows(*op, resource_type, name)),
        )
    }

    /// The cluster's bitfield: 0 without DESCRIBE on the cluster, as Kafka answers.
    fn cluster_operations(&self) -> i32 {
        if self.allows(Operation::Describe, ResourceType::Cluster, CLUSTER_NAME) {
            self.operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    }
}

/// Whether `check` (or its alternative) asks for an operation that only an explicit grant
/// opens ([`needs_explicit_grant`]).
fn guarded(check: &Check<'_>) -> bool {
    let named = match &check.target {
        Target::Named(rt, _) => needs_explicit_grant(*rt, check.operation),
        _ => false,
    };
    named
        || match check.alternative {
            Alternative::None => false,
            Alternative::Cluster => needs_explicit_grant(ResourceType::Cluster, check.operation),
            Alternative::AnyOf(rt, op) => needs_explicit_grant(rt, op),
        }
}

/// The KIP-430 bitfields the request asks for.
fn wants_operations(body: &RequestBody) -> Asked {
    match body {
        RequestBody::Metadata(r) => Asked {
            topics: r.include_topic_authorized_operations,
            cluster: r.include_cluster_authorized_operations,
            groups: false,
        },
        RequestBody::DescribeCluster(r) => Asked {
            cluster: r.include_cluster_authorized_operations,
            ..Asked::default()
        },
        RequestBody::DescribeGroups(r) => Asked {
            groups: r.include_authorized_operations,
            ..Asked::default()
        },
        _ => Asked::default(),
    }
}

/// The refused entries of a request, by resource.
#[derive(Debug, Default)]
pub(crate) struct Denied {
    /// Every entry, with this code (a request-wide refusal).
    all: Option<ErrorCode>,
    topics: HashMap<String, ErrorCode>,
    ids: HashMap<Uuid, ErrorCode>,
    groups: HashMap<String, ErrorCode>,
    transactional_ids: HashMap<String, ErrorCode>,
    cluster: Option<ErrorCode>,
}

impl Denied {
    fn everything(code: ErrorCode) -> Denied {
        Denied {
            all: Some(code),
            ..Denied::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.all.is_none()
            && self.topics.is_empty()
            && self.ids.is_empty()
            && self.groups.is_empty()
            && self.transactional_ids.is_empty()
            && self.cluster.is_none()
    }

    fn add(&mut self, resource_type: ResourceType, name: &str, code: ErrorCode) {
        let map = match resource_type {
            ResourceType::Topic => &mut self.topics,
            ResourceType::Group => &mut self.groups,
            ResourceType::TransactionalId => &mut self.transactional_ids,
            _ => {
                self.cluster.get_or_insert(code);
                return;
            }
        };
        map.entry(name.to_owned()).or_insert(code);
    }

    fn code(&self, map: &HashMap<String, ErrorCode>, name: &str) -> Option<i16> {
        self.all
            .or_else(|| map.get(name).copied())
            .map(ErrorCode::code)
    }

    fn topic(&self, name: &str) -> Option<i16> {
        self.code(&self.topics, name)
    }

    /// A topic named by name, or by id when the name is empty.
    fn topic_or_id(&self, name: &str, id: Uuid) -> Option<i16> {
        if name.is_empty() && id != Uuid::ZERO {
            self.all
                .or_else(|| self.ids.get(&id).copied())
                .map(ErrorCode::code)
        } else {
            self.topic(name)
        }
    }

    fn group(&self, name: &str) -> Option<i16> {
        self.code(&self.groups, name)
    }

    fn transactional_id(&self, name: &str) -> Option<i16> {
        self.code(&self.transactional_ids, name)
    }

    fn cluster(&self) -> Option<i16> {
        self.all.or(self.cluster).map(ErrorCode::code)
    }

    /// A config resource (DescribeConfigs, AlterConfigs): topics by name, the rest is
    /// the cluster.
    fn config(&self, resource_type: i8, name: &str) -> Option<i16> {
        if resource_type == api::CONFIG_TOPIC {
            self.topic(name)
        } else {
            self.cluster()
        }
    }
}

/// Moves the entries `refused` gives a code out of `v`, with their codes.
fn take<T>(v: &mut Vec<T>, refused: impl Fn(&T) -> Option<i16>) -> Vec<(T, i16)> {
    if v.iter().all(|t| refused(t).is_none()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut keep = Vec::with_capacity(v.len());
    for t in v.drain(..) {
        match refused(&t) {
            Some(code) => out.push((t, code)),
            None => keep.push(t),
        }
    }
    *v = keep;
    out
}

/// The refused entries' answer: error entries to merge into the handler's response, or
/// the whole answer when nothing is left for the handler.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Nothing was refused.
    Nothing,
    /// These error entries go into the handler's response.
    Merge(ResponseBody),
    /// The answer, without the handler.
    Answer(ResponseBody),
}

fn taken<B: Into<ResponseBody>>(refused: bool, empty: bool, body: B) -> Taken {
    if !refused {
        Taken::Nothing
    } else if empty {
        Taken::Answer(body.into())
    } else {
        Taken::Merge(body.into())
    }
}

/// Takes the entries `refused` gives a code out of `list`, turns each into its error
/// entry with `entry`, and builds the answer for them with `answer`; `last` is whether
/// an emptied list leaves nothing for the handler (the layer then answers alone).
fn split<T, E, B: Into<ResponseBody>>(
    list: &mut Vec<T>,
    last: bool,
    refused: impl Fn(&T) -> Option<i16>,
    entry: impl Fn(T, i16) -> E,
    answer: impl FnOnce(Vec<E>) -> B,
) -> Taken {
    let errors: Vec<E> = take(list, refused)
        .into_iter()
        .map(|(t, code)| entry(t, code))
        .collect();
    taken(!errors.is_empty(), last && list.is_empty(), answer(errors))
}

/// The answer of an API whose refusal is its top-level error code.
macro_rules! top_level {
    ($code:expr, $($response:ident)::+) => {
        match $code {
            None => Taken::Nothing,
            Some(code) => Taken::Answer(
                $($response)::+ {
                    error_code: code,
                    ..Default::default()
                }
                .into(),
            ),
        }
    };
}

/// Every partition of a topic entry, answered with `code` by `partition`.
fn partitions<P, E>(list: &[P], code: i16, partition: impl Fn(&P, i16) -> E) -> Vec<E> {
    list.iter().map(|p| partition(p, code)).collect()
}

/// Takes the entries `denied` refuses out of `body`. `None` for an API this layer cannot
/// take entries from (the caller closes the connection rather than let it through).
pub(crate) fn take_refused(body: &mut RequestBody, version: i16, denied: &Denied) -> Option<Taken> {
    use create_topics_response as ct;
    use delete_topics_response as dt;
    use fetch_response as fr;
    use list_offsets_response as lo;
    use offset_commit_response as oc;
    use offset_delete_response as od;
    use offset_fetch_response as of;
    use offset_for_leader_epoch_response as ol;
    use produce_response as pr;
    Some(match body {
        RequestBody::Produce(r) => {
            // A refused transactional id refuses every entry with its code (once: the
            // call below refuses everything, so it does not come back here).
            let transactional = match (denied.all, r.transactional_id.as_deref()) {
                (None, Some(t)) => denied.transactional_ids.get(t).copied(),
                _ => None,
            };
            if let Some(code) = transactional {
                // Every entry of the request gets the transactional id's error.
                return take_refused(body, version, &Denied::everything(code));
            }
            split(
                &mut r.topic_data,
                true,
                |t| denied.topic_or_id(&t.name, t.topic_id),
                |t, code| pr::TopicProduceResponse {
                    name: t.name,
                    topic_id: t.topic_id,
                    partition_responses: partitions(&t.partition_data, code, |p, code| {
                        pr::PartitionProduceResponse {
                            index: p.index,
                            error_code: code,
                            base_offset: -1,
                            log_append_time_ms: -1,
                            log_start_offset: -1,
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
                |responses| pr::ProduceResponse {
                    responses,
                    ..Default::default()
                },
            )
        }
        RequestBody::Fetch(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic_or_id(&t.topic, t.topic_id),
            |t, code| fr::FetchableTopicResponse {
                topic: t.topic,
                topic_id: t.topic_id,
                partitions: partitions(&t.partitions, code, |p, code| fr::PartitionData {
                    partition_index: p.partition,
                    error_code: code,
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    records: Some(RecordSet::new()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            |responses| fr::FetchResponse {
                responses,
                ..Default::default()
            },
        ),
        RequestBody::ListOffsets(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic(&t.name),
            |t, code| lo::ListOffsetsTopicResponse {
                name: t.name,
                partitions: partitions(&t.partitions, code, |p, code| {
                    lo::ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: code,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
            |topics| lo::ListOffsetsResponse {
                topics,
                ..Default::default()
            },
        ),
        RequestBody::OffsetForLeaderEpoch(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic(&t.topic),
            |t, code| ol::OffsetForLeaderTopicResult {
                topic: t.topic,
                partitions: partitions(&t.partitions, code, |p, code| ol::EpochEndOffset {
                    error_code: code,
                    partition: p.partition,
                    leader_epoch: -1,
                    end_offset: -1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            |topics| ol::OffsetForLeaderEpochResponse {
                topics,
                ..Default::default()
            },
        ),
        RequestBody::Metadata(r) => match r.topics.as_mut() {
            None => Taken::Nothing,
            // An empty list means "every topic" at v0: answer alone there. Later
            // versions go on to the handler with the list emptied (brokers, cluster id).
            Some(list) => split(
                list,
                version == 0,
                |t| denied.topic_or_id(t.name.as_deref().unwrap_or(""), t.topic_id),
                |t, code| metadata_response::MetadataResponseTopic {
                    error_code: code,
                    name: t.name,
                    topic_id: t.topic_id,
                    ..Default::default()
                },
                |topics| metadata_response::MetadataResponse {
                    topics,
                    ..Default::default()
                },
            ),
        },
        RequestBody::CreateTopics(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic(&t.name),
            |t, code| ct::CreatableTopicResult {
                name: t.name,
                error_code: code,
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            },
            |topics| ct::CreateTopicsResponse {
                topics,
                ..Default::default()
            },
        ),
        RequestBody::DeleteTopics(r) => {
            let names = take(&mut r.topic_names, |n| denied.topic(n));
            let ids = take(&mut r.topics, |t| {
                denied.topic_or_id(t.name.as_deref().unwrap_or(""), t.topic_id)
            });
            let mut responses: Vec<_> = names
                .into_iter()
                .map(|(n, code)| dt::DeletableTopicResult {
                    name: Some(n),
                    error_code: code,
                    ..Default::default()
                })
                .collect();
            // A topic refused by id is answered with its id alone, never its name.
            responses.extend(ids.into_iter().map(|(t, code)| dt::DeletableTopicResult {
                name: t.name,
                topic_id: t.topic_id,
                error_code: code,
                ..Default::default()
            }));
            taken(
                !responses.is_empty(),
                r.topic_names.is_empty() && r.topics.is_empty(),
                dt::DeleteTopicsResponse {
                    responses,
                    ..Default::default()
                },
            )
        }
        RequestBody::DeleteRecords(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic(&t.name),
            |t, code| delete_records_response::DeleteRecordsTopicResult {
                name: t.name,
                partitions: partitions(&t.partitions, code, |p, code| {
                    delete_records_response::DeleteRecordsPartitionResult {
                        partition_index: p.partition_index,
                        low_watermark: -1,
                        error_code: code,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
            |topics| delete_records_response::DeleteRecordsResponse {
                topics,
                ..Default::default()
            },
        ),
        RequestBody::CreatePartitions(r) => split(
            &mut r.topics,
            true,
            |t| denied.topic(&t.name),
            |t, code| create_partitions_response::CreatePartitionsTopicResult {
                name: t.name,
                error_code: code,
                ..Default::default()
            },
            |results| create_partitions_response::CreatePartitionsResponse {
                results,
                ..Default::default()
            },
        ),
        RequestBody::DescribeConfigs(r) => split(
            &mut r.resources,
            true,
            |c| denied.config(c.resource_type, &c.resource_name),
            |c, code| describe_configs_response::DescribeConfigsResult {
                error_code: code,
                resource_type: c.resource_type,
                resource_name: c.resource_name,
                ..Default::default()
            },
            |results| describe_configs_response::DescribeConfigsResponse {
                results,
                ..Default::default()
            },
        ),
        RequestBody::AlterConfigs(r) => split(
            &mut r.resources,
            true,
            |c| denied.config(c.resource_type, &c.resource_name),
            |c, code| alter_configs_response::AlterConfigsResourceResponse {
                error_code: code,
                resource_type: c.resource_type,
                resource_name: c.resource_name,
                ..Default::default()
            },
            |responses| alter_configs_response::AlterConfigsResponse {
                responses,
                ..Default::default()
            },
        ),
        RequestBody::IncrementalAlterConfigs(r) => {
            use incremental_alter_configs_response as ia;
            split(
                &mut r.resources,
                true,
                |c| denied.config(c.resource_type, &c.resource_name),
                |c, code| ia::AlterConfigsResourceResponse {
                    error_code: code,
                    resource_type: c.resource_type,
                    resource_name: c.resource_name,
                    ..Default::default()
                },
                |responses| ia::IncrementalAlterConfigsResponse {
                    responses,
                    ..Default::default()
                },
            )
        }
        RequestBody::FindCoordinator(r) => {
            let transaction = r.key_type == api::KEY_TYPE_TRANSACTION;
            let refused = |k: &str| {
                if transaction {
                    denied.transactional_id(k)
                } else {
                    denied.group(k)
                }
            };
            if r.coordinator_keys.is_empty() {
                // One key (before v4): the answer's top-level error.
                return Some(match refused(&r.key) {
                    None => Taken::Nothing,
                    Some(code) => Taken::Answer(
                        find_coordinator_response::FindCoordinatorResponse {
                            error_code: code,
                            node_id: -1,
                            port: -1,
                            ..Default::default()
                        }
                        .into(),
                    ),
                });
            }
            split(
                &mut r.coordinator_keys,
                true,
                |k| refused(k),
                |key, code| find_coordinator_response::Coordinator {
                    key,
                    node_id: -1,
                    port: -1,
                    error_code: code,
                    ..Default::default()
                },
                |coordinators| find_coordinator_response::FindCoordinatorResponse {
                    coordinators,
                    ..Default::default()
                },
            )
        }
        RequestBody::JoinGroup(r) => match denied.group(&r.group_id) {
            None => Taken::Nothing,
            Some(code) => Taken::Answer(
                join_group_response::JoinGroupResponse {
                    error_code: code,
                    generation_id: -1,
                    // Nullable from v7; an empty string before.
                    protocol_name: (version < 7).then(ByteString::new),
                    ..Default::default()
                }
                .into(),
            ),
        },
        RequestBody::SyncGroup(r) => {
            top_level!(
                denied.group(&r.group_id),
                sync_group_response::SyncGroupResponse
            )
        }
        RequestBody::Heartbeat(r) => {
            top_level!(
                denied.group(&r.group_id),
                heartbeat_response::HeartbeatResponse
            )
        }
        RequestBody::LeaveGroup(r) => {
            top_level!(
                denied.group(&r.group_id),
                leave_group_response::LeaveGroupResponse
            )
        }
        RequestBody::OffsetCommit(r) => {
            let group = denied.group(&r.group_id);
            let mut answer = split(
                &mut r.topics,
                true,
                |t| group.or_else(|| denied.topic(&t.name)),
                |t, code| oc::OffsetCommitResponseTopic {
                    name: t.name,
                    partitions: partitions(&t.partitions, code, |p, code| {
                        oc::OffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code: code,
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
                |topics| oc::OffsetCommitResponse {
                    topics,
                    ..Default::default()
                },
            );
            // A refused group with no topic: answered alone all the same.
            if group.is_some()
                && let Taken::Nothing = answer
            {
                answer = Taken::Answer(oc::OffsetCommitResponse::default().into());
            }
            answer
        }
        RequestBody::OffsetFetch(r) if r.groups.is_empty() => {
            let group = denied
                .all
                .or_else(|| denied.groups.get(&*r.group_id).copied());
            let Some(ts) = r.topics.as_mut() else {
                // Every topic of the group (v2+): a refused group is the top-level error.
                return Some(top_level!(
                    group.map(ErrorCode::code),
                    of::OffsetFetchResponse
                ));
            };
            if let Some(code) = group
                && version >= 2
            {
                return Some(Taken::Answer(
                    of::OffsetFetchResponse {
                        error_code: code.code(),
                        ..Default::default()
                    }
                    .into(),
                ));
            }
            // v0-1 carry a refused group's error on every partition.
            let group = group.map(ErrorCode::code);
            split(
                ts,
                true,
                |t| group.or_else(|| denied.topic(&t.name)),
                |t, code| of::OffsetFetchResponseTopic {
                    name: t.name,
                    partitions: partitions(&t.partition_indexes, code, |p, code| {
                        of::OffsetFetchResponsePartition {
                            partition_index: *p,
                            committed_offset: -1,
                            committed_leader_epoch: -1,
                            metadata: Some(ByteString::new()),
                            error_code: code,
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
                |topics| of::OffsetFetchResponse {
                    topics,
                    ..Default::default()
                },
            )
        }
        RequestBody::OffsetFetch(r) => {
            let mut groups: Vec<_> = take(&mut r.groups, |g| denied.group(&g.group_id))
                .into_iter()
                .map(|(g, code)| of::OffsetFetchResponseGroup {
                    group_id: g.group_id,
                    error_code: code,
                    ..Default::default()
                })
                .collect();
            for g in &mut r.groups {
                let Some(ts) = g.topics.as_mut() else {
                    continue;
                };
                let topics: Vec<_> = take(ts, |t| denied.topic(&t.name))
                    .into_iter()
                    .map(|(t, code)| of::OffsetFetchResponseTopics {
                        name: t.name,
                        partitions: partitions(&t.partition_indexes, code, |p, code| {
                            of::OffsetFetchResponsePartitions {
                                partition_index: *p,
                                committed_offset: -1,
                                committed_leader_epoch: -1,
                                metadata: Some(ByteString::new()),
                                error_code: code,
                                ..Default::default()
                            }
                        }),
                        ..Default::default()
                    })
                    .collect();
                if !topics.is_empty() {
                    // Merged into the group's answer (error code NONE here).
                    groups.push(of::OffsetFetchResponseGroup {
                        group_id: g.group_id.clone(),
                        topics,
                        ..Default::default()
                    });
                }
            }
            taken(
                !groups.is_empty(),
                r.groups.is_empty(),
                of::OffsetFetchResponse {
                    groups,
                    ..Default::default()
                },
            )
        }
        RequestBody::OffsetDelete(r) => {
            if let Some(code) = denied.group(&r.group_id) {
                return Some(top_level!(Some(code), od::OffsetDeleteResponse));
            }
            split(
                &mut r.topics,
                true,
                |t| denied.topic(&t.name),
                |t, code| od::OffsetDeleteResponseTopic {
                    name: t.name,
                    partitions: partitions(&t.partitions, code, |p, code| {
                        od::OffsetDeleteResponsePartition {
                            partition_index: p.partition_index,
                            error_code: code,
                        }
                    }),
                },
                |topics| od::OffsetDeleteResponse {
                    topics,
                    ..Default::default()
                },
            )
        }
        RequestBody::DescribeGroups(r) => split(
            &mut r.groups,
            true,
            |g| denied.group(g),
            |group_id, code| describe_groups_response::DescribedGroup {
                error_code: code,
                group_id,
                ..Default::default()
            },
            |groups| describe_groups_response::DescribeGroupsResponse {
                groups,
                ..Default::default()
            },
        ),
        RequestBody::DeleteGroups(r) => split(
            &mut r.groups_names,
            true,
            |g| denied.group(g),
            |group_id, code| delete_groups_response::DeletableGroupResult {
                group_id,
                error_code: code,
                ..Default::default()
            },
            |results| delete_groups_response::DeleteGroupsResponse {
                results,
                ..Default::default()
            },
        ),
        RequestBody::InitProducerId(r) => {
            let code = match r.transactional_id.as_deref() {
                Some(t) => denied.transactional_id(t),
                None => denied.cluster(),
            };
            match code {
                None => Taken::Nothing,
                Some(code) => Taken::Answer(
                    init_producer_id_response::InitProducerIdResponse {
                        error_code: code,
                        producer_id: -1,
                        producer_epoch: -1,
                        ..Default::default()
                    }
                    .into(),
                ),
            }
        }
        RequestBody::AddPartitionsToTxn(r) if api::is_broker_add_partitions(r) => {
            top_level!(
                denied.cluster(),
                add_partitions_to_txn_response::AddPartitionsToTxnResponse
            )
        }
        RequestBody::AddPartitionsToTxn(r) => {
            use add_partitions_to_txn_response as ap;
            let whole = denied.transactional_id(&r.v3_and_below_transactional_id);
            let refused = |t: &add_partitions_to_txn_request::AddPartitionsToTxnTopic| {
                whole.or_else(|| denied.topic(&t.name))
            };
            if r.v3_and_below_topics.iter().all(|t| refused(t).is_none()) {
                return Some(Taken::Nothing);
            }
            // A refused topic fails the whole request: the others are not attempted.
            let others = ErrorCode::OPERATION_NOT_ATTEMPTED.code();
            let results_by_topic_v3_and_below = std::mem::take(&mut r.v3_and_below_topics)
                .into_iter()
                .map(|t| {
                    let code = refused(&t).unwrap_or(others);
                    ap::AddPartitionsToTxnTopicResult {
                        results_by_partition: partitions(&t.partitions, code, |p, code| {
                            ap::AddPartitionsToTxnPartitionResult {
                                partition_index: *p,
                                partition_error_code: code,
                                ..Default::default()
                            }
                        }),
                        name: t.name,
                        ..Default::default()
                    }
                })
                .collect();
            Taken::Answer(
                ap::AddPartitionsToTxnResponse {
                    results_by_topic_v3_and_below,
                    ..Default::default()
                }
                .into(),
            )
        }
        RequestBody::AddOffsetsToTxn(r) => {
            let code = denied
                .transactional_id(&r.transactional_id)
                .or_else(|| denied.group(&r.group_id));
            top_level!(code, add_offsets_to_txn_response::AddOffsetsToTxnResponse)
        }
        RequestBody::EndTxn(r) => match denied.transactional_id(&r.transactional_id) {
            None => Taken::Nothing,
            Some(code) => Taken::Answer(
                end_txn_response::EndTxnResponse {
                    error_code: code,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                }
                .into(),
            ),
        },
        RequestBody::WriteTxnMarkers(r) => match denied.cluster() {
            None => Taken::Nothing,
            Some(code) => {
                use write_txn_markers_response as wm;
                let markers = std::mem::take(&mut r.markers)
                    .into_iter()
                    .map(|m| wm::WritableTxnMarkerResult {
                        producer_id: m.producer_id,
                        topics: m
                            .topics
                            .into_iter()
                            .map(|t| wm::WritableTxnMarkerTopicResult {
                                partitions: partitions(&t.partition_indexes, code, |p, code| {
                                    wm::WritableTxnMarkerPartitionResult {
                                        partition_index: *p,
                                        error_code: code,
                                        ..Default::default()
                                    }
                                }),
                                name: t.name,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect();
                Taken::Answer(
                    wm::WriteTxnMarkersResponse {
                        markers,
                        ..Default::default()
                    }
                    .into(),
                )
            }
        },
        RequestBody::TxnOffsetCommit(r) => {
            use txn_offset_commit_response as to;
            let whole = denied
                .transactional_id(&r.transactional_id)
                .or_else(|| denied.group(&r.group_id));
            let mut answer = split(
                &mut r.topics,
                true,
                |t| whole.or_else(|| denied.topic(&t.name)),
                |t, code| to::TxnOffsetCommitResponseTopic {
                    name: t.name,
                    partitions: partitions(&t.partitions, code, |p, code| {
                        to::TxnOffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code: code,
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
                |topics| to::TxnOffsetCommitResponse {
                    topics,
                    ..Default::default()
                },
            );
            // A refused id or group with no topic: answered alone all the same.
            if whole.is_some()
                && let Taken::Nothing = answer
            {
                answer = Taken::Answer(to::TxnOffsetCommitResponse::default().into());
            }
            answer
        }
        RequestBody::DescribeTransactions(r) => split(
            &mut r.transactional_ids,
            true,
            |t| denied.transactional_id(t),
            |transactional_id, code| describe_transactions_response::TransactionState {
                error_code: code,
                transactional_id,
                ..Default::default()
            },
            |transaction_states| describe_transactions_response::DescribeTransactionsResponse {
                transaction_states,
                ..Default::default()
            },
        ),
        RequestBody::DescribeClientQuotas(_) => top_level!(
            denied.cluster(),
            describe_client_quotas_response::DescribeClientQuotasResponse
        ),
        RequestBody::DescribeUserScramCredentials(_) => top_level!(
            denied.cluster(),
            describe_user_scram_credentials_response::DescribeUserScramCredentialsResponse
        ),
        RequestBody::DescribeAcls(_) => top_level!(
            denied.cluster(),
            describe_acls_response::DescribeAclsResponse
        ),
        // Cluster-wide APIs with per-entry results: every entry gets the code.
        RequestBody::AlterClientQuotas(r) => {
            use alter_client_quotas_response as aq;
            let all = denied.cluster();
            split(
                &mut r.entries,
                true,
                |_| all,
                |e, code| aq::EntryData {
                    error_code: code,
                    entity: e
                        .entity
                        .into_iter()
                        .map(|d| aq::EntityData {
                            entity_type: d.entity_type,
                            entity_name: d.entity_name,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                },
                |entries| aq::AlterClientQuotasResponse {
                    entries,
                    ..Default::default()
                },
            )
        }
        RequestBody::AlterUserScramCredentials(r) => match denied.cluster() {
            None => Taken::Nothing,
            Some(code) => {
                use alter_user_scram_credentials_response as au;
                let mut users: Vec<&ByteString> = Vec::new();
                for u in r
                    .deletions
                    .iter()
                    .map(|d| &d.name)
                    .chain(r.upsertions.iter().map(|u| &u.name))
                {
                    if !users.contains(&u) {
                        users.push(u);
                    }
                }
                let results = users
                    .into_iter()
                    .map(|u| au::AlterUserScramCredentialsResult {
                        user: u.clone(),
                        error_code: code,
                        ..Default::default()
                    })
                    .collect();
                Taken::Answer(
                    au::AlterUserScramCredentialsResponse {
                        results,
                        ..Default::default()
                    }
                    .into(),
                )
            }
        },
        RequestBody::CreateAcls(r) => {
            let all = denied.cluster();
            split(
                &mut r.creations,
                true,
                |_| all,
                |_, code| create_acls_response::AclCreationResult {
                    error_code: code,
                    ..Default::default()
                },
                |results| create_acls_response::CreateAclsResponse {
                    results,
                    ..Default::default()
                },
            )
        }
        RequestBody::DeleteAcls(r) => {
            let all = denied.cluster();
            split(
                &mut r.filters,
                true,
                |_| all,
                |_, code| delete_acls_response::DeleteAclsFilterResult {
                    error_code: code,
                    ..Default::default()
                },
                |filter_results| delete_acls_response::DeleteAclsResponse {
                    filter_results,
                    ..Default::default()
                },
            )
        }
        _ => {
            if denied.is_empty() {
                Taken::Nothing
            } else {
                return None;
            }
        }
    })
}

/// Puts the refused entries' error entries into the handler's response.
fn merge(body: &mut ResponseBody, errors: ResponseBody) {
    match (body, errors) {
        (ResponseBody::Produce(b), ResponseBody::Produce(e)) => b.responses.extend(e.responses),
        (ResponseBody::Fetch(b), ResponseBody::Fetch(e)) => b.responses.extend(e.responses),
        (ResponseBody::ListOffsets(b), ResponseBody::ListOffsets(e)) => b.topics.extend(e.topics),
        (ResponseBody::OffsetForLeaderEpoch(b), ResponseBody::OffsetForLeaderEpoch(e)) => {
            b.topics.extend(e.topics)
        }
        (ResponseBody::Metadata(b), ResponseBody::Metadata(e)) => b.topics.extend(e.topics),
        (ResponseBody::CreateTopics(b), ResponseBody::CreateTopics(e)) => b.topics.extend(e.topics),
        (ResponseBody::DeleteTopics(b), ResponseBody::DeleteTopics(e)) => {
            b.responses.extend(e.responses)
        }
        (ResponseBody::DeleteRecords(b), ResponseBody::DeleteRecords(e)) => {
            b.topics.extend(e.topics)
        }
        (ResponseBody::CreatePartitions(b), ResponseBody::CreatePartitions(e)) => {
            b.results.extend(e.results)
        }
        (ResponseBody::DescribeConfigs(b), ResponseBody::DescribeConfigs(e)) => {
            b.results.extend(e.results)
        }
        (ResponseBody::AlterConfigs(b), ResponseBody::AlterConfigs(e)) => {
            b.responses.extend(e.responses)
        }
        (ResponseBody::IncrementalAlterConfigs(b), ResponseBody::IncrementalAlterConfigs(e)) => {
            b.responses.extend(e.responses)
        }
        (ResponseBody::FindCoordinator(b), ResponseBody::FindCoordinator(e)) => {
            b.coordinators.extend(e.coordinators)
        }
        (ResponseBody::OffsetCommit(b), ResponseBody::OffsetCommit(e)) => b.topics.extend(e.topics),
        (ResponseBody::OffsetFetch(b), ResponseBody::OffsetFetch(e)) => {
            b.topics.extend(e.topics);
            for g in e.groups {
                match b.groups.iter_mut().find(|x| x.group_id == g.group_id) {
                    Some(x) if g.error_code == 0 => x.topics.extend(g.topics),
                    _ => b.groups.push(g),
                }
            }
        }
        (ResponseBody::OffsetDelete(b), ResponseBody::OffsetDelete(e)) => b.topics.extend(e.topics),
        (ResponseBody::DescribeGroups(b), ResponseBody::DescribeGroups(e)) => {
            b.groups.extend(e.groups)
        }
        (ResponseBody::DeleteGroups(b), ResponseBody::DeleteGroups(e)) => {
            b.results.extend(e.results)
        }
        (ResponseBody::TxnOffsetCommit(b), ResponseBody::TxnOffsetCommit(e)) => {
            b.topics.extend(e.topics)
        }
        (ResponseBody::DescribeTransactions(b), ResponseBody::DescribeTransactions(e)) => {
            b.transaction_states.extend(e.transaction_states)
        }
        // A handler answering with another API is caught by the dispatcher.
        _ => {}
    }
}

#[async_trait]
impl Layer for Authorization {
    fn name(&self) -> &'static str {
        "authorization"
    }

    async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
        let Some(checks) = api::required(&request.body) else {
            self.warn(
                "request of an API without an authorization rule",
                &request.api.name(),
            );
            return Verdict::Close("no authorization rule for the API");
        };
        let operations = wants_operations(&request.body);
        // Metadata v0: an empty list is every topic, a listing to filter.
        let v0_all = matches!(&request.body, RequestBody::Metadata(r)
            if request.version == 0 && r.topics.as_ref().is_some_and(Vec::is_empty));
        if checks.is_empty() && !operations.any() && !v0_all {
            return Verdict::Pass;
        }
        // Over the entry cap: the handler refuses it without looking at any entry.
        if caps::entries(&request.body).is_some_and(|n| n > self.max_entries) {
            return Verdict::Pass;
        }
        // No binding, everyone allowed where none is found, no other source, and no check
        // that only an explicit grant passes: every check passes (and every bitfield is
        // the handlers' "everything").
        let acls = self.acls.acls();
        if acls.is_empty()
            && self.sources.is_empty()
            && self.acls.allow_everyone_if_no_acl_found()
            && !checks.iter().any(guarded)
        {
            return Verdict::Pass;
        }
        let principal = session.principal.to_string();
        if self.super_users.contains(&principal) {
            return Verdict::Pass;
        }
        for source in &self.sources {
            if let Err(e) = source.prepare(&principal).await {
                self.warn("authorization source failed", &e);
                return Verdict::Close("authorization source failed");
            }
        }
        let mut host = HostText::default();
        let decider = self.decider(acls, &principal, host.of(session));
        let mut note = Note {
            operations,
            hide: v0_all,
            ..Note::default()
        };
        let mut has_errors = false;
        let mut denied: Option<Denied> = None;
        let mut whole: Option<ErrorCode> = None;
        let mut resolved: HashMap<Uuid, Option<String>> = HashMap::new();
        for check in &checks {
            let (resource_type, name): (ResourceType, &str) = match &check.target {
                Target::Named(rt, n) => (*rt, n),
                Target::TopicId(id) => {
                    if !resolved.contains_key(id) {
                        let name = match self.log.topic_by_id(id.as_u128()).await {
                            Ok(t) => t.map(|t| t.name),
                            Err(e) => {
                                self.warn("topic id lookup failed", &e);
                                return Verdict::Close("topic id lookup failed");
                            }
                        };
                        resolved.insert(*id, name);
                    }
                    match resolved.get(id) {
                        // Unknown: the handler answers UNKNOWN_TOPIC_ID.
                        Some(None) | None => continue,
                        Some(Some(n)) => {
                            if decider.passes(check, ResourceType::Topic, n) {
                                continue;
                            }
                            denied
                                .get_or_insert_with(Denied::default)
                                .ids
                                .entry(*id)
                                .or_insert(check.error);
                            continue;
                        }
                    }
                }
                Target::EachListed(_) => {
                    note.hide = true;
                    continue;
                }
            };
            if decider.passes(check, resource_type, name) {
                continue;
            }
            if check.when == When::Creating {
                if !self.auto_create_topics
                    || denied.as_ref().is_some_and(|d| d.topic(name).is_some())
                {
                    continue;
                }
                // Refused only when the request would create the topic.
                match self.log.topic(name).await {
                    Ok(Some(_)) => continue,
                    Ok(None) => {}
                    Err(e) => {
                        self.warn("topic lookup failed", &e);
                        return Verdict::Close("topic lookup failed");
                    }
                }
            }
            if check.request_wide {
                whole = Some(check.error);
                break;
            }
            denied
                .get_or_insert_with(Denied::default)
                .add(resource_type, name, check.error);
        }
        drop(checks);
        let denied = match whole {
            Some(code) => Some(Denied::everything(code)),
            None => denied,
        };
        if let Some(denied) = denied {
            self.denied(session, request.api.name());
            if let RequestBody::Produce(p) = &request.body
                && p.acks == 0
            {
                return Verdict::Close("produce with acks=0 refused by authorization");
            }
            match take_refused(&mut request.body, request.version, &denied) {
                None => return Verdict::Close("refused by authorization"),
                Some(Taken::Nothing) => {}
                Some(Taken::Answer(body)) => return Verdict::Answer(body),
                Some(Taken::Merge(errors)) => {
                    note.errors = Mutex::new(Some(errors));
                    has_errors = true;
                }
            }
        }
        note.topic_configs = matches!(request.body, RequestBody::CreateTopics(_));
        if has_errors || note.hide || note.operations.any() || note.topic_configs {
            request.notes.put(note);
        }
        Verdict::Pass
    }

    fn on_reply(&self, session: &Session, request: &RequestInfo, body: &mut ResponseBody) {
        let Some(note) = request.notes.get::<Note>() else {
            return;
        };
        if note.hide || note.operations.any() || note.topic_configs {
            let principal = session.principal.to_string();
            let mut host = HostText::default();
            let decider = self.decider(self.acls.acls(), &principal, host.of(session));
            if note.hide {
                hide(&decider, body);
            }
            fill_operations(&decider, note.operations, request.version, body);
            if note.topic_configs {
                withhold_configs(&decider, body);
            }
        }
        let errors = match note.errors.lock() {
            Ok(mut e) => e.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(errors) = errors {
            merge(body, errors);
        }
    }
}

/// Leaves out of a listing what the caller may not describe.
fn hide(d: &Decider<'_>, body: &mut ResponseBody) {
    let topic = |name: &str| d.allows(Operation::Describe, ResourceType::Topic, name);
    match body {
        ResponseBody::Metadata(b) => b.topics.retain(|t| t.name.as_deref().is_some_and(&topic)),
        ResponseBody::ListGroups(b)
            if !d.allows(Operation::Describe, ResourceType::Cluster, CLUSTER_NAME) =>
        {
            b.groups
                .retain(|g| d.allows(Operation::Describe, ResourceType::Group, &g.group_id));
        }
        ResponseBody::ListTransactions(b) => b.transaction_states.retain(|t| {
            d.allows(
                Operation::Describe,
                ResourceType::TransactionalId,
                &t.transactional_id,
            )
        }),
        ResponseBody::DescribeTransactions(b) => {
            for state in &mut b.transaction_states {
                state.topics.retain(|t| topic(&t.topic));
            }
        }
        ResponseBody::OffsetFetch(b) => {
            b.topics.retain(|t| topic(&t.name));
            for g in &mut b.groups {
                g.topics.retain(|t| topic(&t.name));
            }
        }
        _ => {}
    }
}

/// CreateTopics: the configs of a created topic the caller may not DESCRIBE_CONFIGS are
/// left out, its config error set to TOPIC_AUTHORIZATION_FAILED (the topic is created).
fn withhold_configs(d: &Decider<'_>, body: &mut ResponseBody) {
    if let ResponseBody::CreateTopics(b) = body {
        for t in &mut b.topics {
            if t.error_code == 0
                && !d.allows(Operation::DescribeConfigs, ResourceType::Topic, &t.name)
            {
                t.configs = None;
                t.topic_config_error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
            }
        }
    }
}

/// Fills the KIP-430 bitfields a request asked for (before the refused entries are
/// merged, which keep the field's "not given" value).
fn fill_operations(d: &Decider<'_>, asked: Asked, version: i16, body: &mut ResponseBody) {
    match body {
        ResponseBody::Metadata(b) => {
            if asked.topics && version >= 8 {
                for t in &mut b.topics {
                    if let Some(n) = t.name.as_deref() {
                        t.topic_authorized_operations = d.operations(ResourceType::Topic, n);
                    }
                }
            }
            if asked.cluster && (8..=10).contains(&version) {
                b.cluster_authorized_operations = d.cluster_operations();
            }
        }
        ResponseBody::DescribeCluster(b) if asked.cluster => {
            b.cluster_authorized_operations = d.cluster_operations();
        }
        ResponseBody::DescribeGroups(b) if asked.groups => {
            for g in &mut b.groups {
                g.authorized_operations = d.operations(ResourceType::Group, &g.group_id);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[path = "authorization_tests.rs"]
pub(crate) mod tests;
