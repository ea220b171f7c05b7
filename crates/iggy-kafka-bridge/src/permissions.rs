//! Kafka authorization from the Iggy user behind a Kafka principal.
//!
//! The bridge sends and polls as its own Iggy account, so Iggy's own checks only ever see
//! that account. [`IggyPermissions`] closes the gap: it is a
//! [`kafka_authz::Authorizer`] that answers from the permissions of the Iggy user named by
//! the principal (`User:alice` is Iggy user `alice`), so a Kafka client never does more
//! than that user could do with a native Iggy client.
//!
//! How it works:
//!
//! - [`Authorizer::prepare`] reads the user (`get_user` with the bridge's account, which
//!   needs Iggy's `read_users` and `read_streams` permissions) when nothing is cached for
//!   the principal or what is cached is older than `permissions_refresh`. Iggy keys
//!   stream and topic permissions by numeric id; the ids are turned into names once per
//!   read (`get_stream` for each stream the permissions mention, cached for the same
//!   interval), so the snapshot ([`Grants`]) is keyed by names and every decision after
//!   that is a synchronous lookup.
//! - Concurrent prepares of one principal share one read. A failed read keeps the last
//!   snapshot for another interval (with a rate-limited warning); with nothing cached the
//!   prepare fails and the pipeline closes the connection.
//! - At most `permissions_cache_entries` principals are cached; the one read longest ago
//!   goes first.
//! - An unknown or inactive Iggy user, a name Iggy cannot hold, Kafka's anonymous
//!   principal (`User:ANONYMOUS`, even if Iggy has such a user) and any principal that is
//!   not `User:` have no permissions: everything Iggy governs (topics, the cluster) is
//!   refused. Consumer groups, transactional ids and delegation tokens are not Iggy's to
//!   judge: allowed here, left to the ACLs.
//! - Iggy's root user (user id 0) passes every check without one, whatever permissions
//!   it holds; the server does the same (root's permissions cannot be changed either).
//!
//! The mapping from Iggy permissions to Kafka operations ([`Grants::allows`]) follows
//! the server's own rules for the matching Iggy calls (a stream-level or global
//! permission covers every topic below it; `manage_*` implies `read_*`, which implies
//! `poll_messages`); `docs/authorization.md` has the table.

use crate::bridge::IggyBridge;
use crate::config::{IggyTopicRef, TopicMap};
use async_trait::async_trait;
use iggy::prelude::{IggyClient, StreamClient, UserClient};
use iggy_common::{
    GlobalPermissions, Identifier, IggyError, Permissions, StreamPermissions, TopicPermissions,
    UserStatus,
};
use kafka_authz::{
    AclBinding, AclBindingFilter, Authorizer, AuthzError, CLUSTER_NAME, Caller, Operation,
    PatternType, Permission, READ_ONLY_HOST, ResourceType, WILDCARD_RESOURCE,
};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Iggy's root user id: the first user, never deletable, its permissions never changed.
const ROOT_USER_ID: u32 = 0;

/// Most Iggy users whose permissions DescribeAcls shows when its filter names no
/// principal (the first ones by Iggy's listing order).
pub const MAX_DESCRIBED_USERS: usize = 1_000;

/// Most Iggy users one DescribeAcls may read from Iggy (users not in the cache): past
/// it the request is refused with a hint to name a principal, so one request costs at
/// most this many Iggy calls (plus the listing).
pub const MAX_DESCRIBE_LOOKUPS: usize = 100;

/// At most one warning about failed permission reads per this interval.
const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// The principal type Iggy users are named with.
const USER_PREFIX: &str = "User:";

/// Kafka's principal of clients that did not authenticate (`User:ANONYMOUS`): never an
/// Iggy user, even if Iggy has a user of that name.
const ANONYMOUS: &str = "User:ANONYMOUS";

/// The Iggy user a principal names, if any.
fn iggy_user(principal: &str) -> Option<&str> {
    if principal == ANONYMOUS {
        return None;
    }
    principal.strip_prefix(USER_PREFIX)
}

/// The Kafka operations on a topic that Iggy permissions decide.
const TOPIC_OPERATIONS: [Operation; 8] = [
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::Describe,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
];

/// The Kafka operations on the cluster that Iggy permissions decide.
const CLUSTER_OPERATIONS: [Operation; 7] = [
    Operation::Create,
    Operation::Alter,
    Operation::Describe,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
];

/// The names of one Iggy stream and its topics, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamNames {
    /// The stream's name.
    pub name: String,
    /// Topic id -> topic name.
    pub topics: HashMap<u32, String>,
}

/// One stream's permissions, keyed by names.
#[derive(Debug, Clone, Default, PartialEq)]
struct StreamGrants {
    /// The stream-level flags (`topics` left empty: they are below).
    stream: StreamPermissions,
    /// Topic name -> its permissions.
    topics: HashMap<String, TopicPermissions>,
}

/// One user's Iggy permissions with stream and topic ids replaced by names: what every
/// decision about that user is taken from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grants {
    root: bool,
    global: GlobalPermissions,
    streams: HashMap<String, StreamGrants>,
}

/// The permission levels that apply to one topic.
#[derive(Clone, Copy, Default)]
struct Levels<'a> {
    global: Option<&'a GlobalPermissions>,
    stream: Option<&'a StreamPermissions>,
    topic: Option<&'a TopicPermissions>,
}

impl Levels<'_> {
    /// `manage_topic` on this topic, as Iggy decides it.
    fn manage(&self) -> bool {
        self.create() || self.topic.is_some_and(|t| t.manage_topic)
    }

    /// Creating topics in this topic's stream (Iggy's `create_topic`).
    fn create(&self) -> bool {
        self.global
            .is_some_and(|g| g.manage_streams || g.manage_topics)
            || self
                .stream
                .is_some_and(|s| s.manage_stream || s.manage_topics)
    }

    /// Iggy's `poll_messages` on this topic.
    fn poll(&self) -> bool {
        self.manage()
            || self
                .global
                .is_some_and(|g| g.read_streams || g.read_topics || g.poll_messages)
            || self
                .stream
                .is_some_and(|s| s.read_stream || s.read_topics || s.poll_messages)
            || self.topic.is_some_and(|t| t.read_topic || t.poll_messages)
    }

    /// Iggy's `send_messages` on this topic.
    fn send(&self) -> bool {
        self.manage()
            || self.global.is_some_and(|g| g.send_messages)
            || self.stream.is_some_and(|s| s.send_messages)
            || self.topic.is_some_and(|t| t.send_messages)
    }

    /// Whether Kafka operation `op` on this topic is allowed.
    fn allows(&self, op: Operation) -> bool {
        match op {
            Operation::Read => self.poll(),
            Operation::Write => self.send(),
            // Any permission on a topic lets its holder see it.
            Operation::Describe | Operation::DescribeConfigs => self.poll() || self.send(),
            Operation::Create => self.create(),
            Operation::Delete | Operation::Alter | Operation::AlterConfigs => self.manage(),
            // Not topic operations in Kafka; never asked for a topic.
            Operation::Any
            | Operation::All
            | Operation::ClusterAction
            | Operation::IdempotentWrite
            | Operation::CreateTokens
            | Operation::DescribeTokens => false,
        }
    }
}

impl Grants {
    /// No permissions at all (unknown or inactive users, non-`User` principals).
    pub fn none() -> Grants {
        Grants::default()
    }

    /// Iggy's root user: everything.
    pub fn root() -> Grants {
        Grants {
            root: true,
            ..Grants::default()
        }
    }

    /// The snapshot of `permissions` (`None`: the user has none), with ids named by
    /// `names` (stream id -> names). Permissions on a stream `names` does not know (it no
    /// longer exists) or on a topic it does not list are dropped: they govern nothing.
    pub fn from_permissions(
        permissions: Option<&Permissions>,
        names: &HashMap<u32, StreamNames>,
    ) -> Grants {
        let Some(p) = permissions else {
            return Grants::none();
        };
        let mut streams = HashMap::new();
        for (id, sp) in p.streams.iter().flatten() {
            let Some(stream) = u32::try_from(*id).ok().and_then(|id| names.get(&id)) else {
                continue;
            };
            let mut topics = HashMap::new();
            for (tid, tp) in sp.topics.iter().flatten() {
                if let Some(name) = u32::try_from(*tid).ok().and_then(|t| stream.topics.get(&t)) {
                    topics.insert(name.clone(), tp.clone());
                }
            }
            streams.insert(
                stream.name.clone(),
                StreamGrants {
                    stream: StreamPermissions {
                        topics: None,
                        ..sp.clone()
                    },
                    topics,
                },
            );
        }
        Grants {
            root: false,
            global: p.global.clone(),
            streams,
        }
    }

    /// Whether this is Iggy's root user.
    pub fn is_root(&self) -> bool {
        self.root
    }

    fn levels<'a>(&'a self, target: &IggyTopicRef) -> Levels<'a> {
        let stream = self.streams.get(&target.stream);
        Levels {
            global: Some(&self.global),
            stream: stream.map(|s| &s.stream),
            topic: stream.and_then(|s| s.topics.get(&target.topic)),
        }
    }

    /// Whether `op` on resource `name` of `resource_type` is allowed, with Kafka topics
    /// placed in Iggy by `map`. A topic that does not exist yet is judged by the
    /// permissions of its stream and the global ones.
    pub fn allows(
        &self,
        map: &TopicMap,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.root {
            return true;
        }
        match resource_type {
            ResourceType::Topic => self.levels(&map.resolve(name)).allows(op),
            ResourceType::Cluster => self.cluster_allows(map, op),
            // Not Iggy's to judge.
            ResourceType::Group
            | ResourceType::TransactionalId
            | ResourceType::DelegationToken
            | ResourceType::Any => true,
        }
    }

    /// Whether `op` is allowed on at least one resource of `resource_type` a Kafka
    /// client can reach through `map`.
    pub fn allows_any(&self, map: &TopicMap, op: Operation, resource_type: ResourceType) -> bool {
        if self.root {
            return true;
        }
        match resource_type {
            ResourceType::Topic => self.any_topic_allows(map, op),
            ResourceType::Cluster => self.cluster_allows(map, op),
            ResourceType::Group
            | ResourceType::TransactionalId
            | ResourceType::DelegationToken
            | ResourceType::Any => true,
        }
    }

    fn any_topic_allows(&self, map: &TopicMap, op: Operation) -> bool {
        let global = Levels {
            global: Some(&self.global),
            ..Levels::default()
        };
        if global.allows(op) {
            return true;
        }
        let reachable = map.streams();
        self.streams.iter().any(|(stream, grants)| {
            if !reachable.contains(stream) {
                return false;
            }
            let levels = Levels {
                stream: Some(&grants.stream),
                ..global
            };
            levels.allows(op)
                || grants.topics.iter().any(|(topic, tp)| {
                    let target = IggyTopicRef {
                        stream: stream.clone(),
                        topic: topic.clone(),
                    };
                    map.reverse(&target).is_some()
                        && Levels {
                            topic: Some(tp),
                            ..levels
                        }
                        .allows(op)
                })
        })
    }

    fn cluster_allows(&self, map: &TopicMap, op: Operation) -> bool {
        let g = &self.global;
        match op {
            Operation::Describe | Operation::DescribeConfigs => g.read_servers || g.manage_servers,
            Operation::Alter | Operation::AlterConfigs => g.manage_servers,
            // What gateways send each other (WriteTxnMarkers, AddPartitionsToTxn v4+): no
            // Iggy permission of an ordinary user stands for it; only root (above), a
            // super user or an ACL binding.
            Operation::ClusterAction => false,
            // Auto-creation and CreateTopics without a per-topic grant: topics in the
            // default stream.
            Operation::Create => self
                .levels(&IggyTopicRef {
                    stream: map.default_stream().to_owned(),
                    topic: String::new(),
                })
                .create(),
            Operation::IdempotentWrite => self.any_topic_allows(map, Operation::Write),
            Operation::Any
            | Operation::All
            | Operation::Read
            | Operation::Write
            | Operation::Delete
            | Operation::CreateTokens
            | Operation::DescribeTokens => false,
        }
    }

    /// These permissions as ALLOW bindings for `principal` with host
    /// [`READ_ONLY_HOST`]: global ones on the LITERAL topic `*`, the default stream's on
    /// `*` too, another stream's on each Kafka topic the map routes there, a topic's on
    /// its Kafka name, and the cluster's on the cluster. Root holds ALL on topic `*` and
    /// the cluster.
    pub fn bindings(&self, principal: &str, map: &TopicMap) -> Vec<AclBinding> {
        let binding = |resource_type, name: &str, operation| AclBinding {
            resource_type,
            name: name.to_owned(),
            pattern: PatternType::Literal,
            principal: principal.to_owned(),
            host: READ_ONLY_HOST.to_owned(),
            operation,
            permission: Permission::Allow,
        };
        if self.root {
            return vec![
                binding(ResourceType::Topic, WILDCARD_RESOURCE, Operation::All),
                binding(ResourceType::Cluster, CLUSTER_NAME, Operation::All),
            ];
        }
        let mut out: Vec<AclBinding> = Vec::new();
        let mut add = |name: &str, levels: Levels<'_>| {
            for op in TOPIC_OPERATIONS {
                let b = binding(ResourceType::Topic, name, op);
                if levels.allows(op) && !out.contains(&b) {
                    out.push(b);
                }
            }
        };
        add(
            WILDCARD_RESOURCE,
            Levels {
                global: Some(&self.global),
                ..Levels::default()
            },
        );
        let mut streams: Vec<_> = self.streams.iter().collect();
        streams.sort_by(|a, b| a.0.cmp(b.0));
        for (stream, grants) in streams {
            let levels = Levels {
                stream: Some(&grants.stream),
                ..Levels::default()
            };
            if stream == map.default_stream() {
                add(WILDCARD_RESOURCE, levels);
            } else {
                for kafka in map.overrides_in(stream) {
                    add(&kafka, levels);
                }
            }
            let mut topics: Vec<_> = grants.topics.iter().collect();
            topics.sort_by(|a, b| a.0.cmp(b.0));
            for (topic, tp) in topics {
                let target = IggyTopicRef {
                    stream: stream.clone(),
                    topic: topic.clone(),
                };
                if let Some(kafka) = map.reverse(&target) {
                    add(
                        &kafka,
                        Levels {
                            topic: Some(tp),
                            ..Levels::default()
                        },
                    );
                }
            }
        }
        for op in CLUSTER_OPERATIONS {
            if self.cluster_allows(map, op) {
                out.push(binding(ResourceType::Cluster, CLUSTER_NAME, op));
            }
        }
        out
    }
}

/// A cached snapshot and when it was read (or last tried).
struct Cached<T> {
    at: Instant,
    value: T,
}

#[derive(Default)]
struct Cache {
    users: HashMap<String, Cached<Arc<Grants>>>,
    streams: HashMap<u32, Cached<Option<Arc<StreamNames>>>>,
}

/// Removes the entry read longest ago when `map` holds `max` entries or more.
fn make_room<K: Clone + Eq + std::hash::Hash, V>(map: &mut HashMap<K, Cached<V>>, max: usize) {
    while map.len() >= max.max(1) {
        let Some(oldest) = map.iter().min_by_key(|(_, c)| c.at).map(|(k, _)| k.clone()) else {
            return;
        };
        map.remove(&oldest);
    }
}

/// The Iggy-permissions source of authorization decisions. Get one from
/// [`IggyBridge::permissions`].
pub struct IggyPermissions {
    bridge: IggyBridge,
    refresh: Duration,
    max_entries: usize,
    cache: Mutex<Cache>,
    /// One lock per principal being read, so concurrent prepares share one read.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    last_warning: Mutex<Option<Instant>>,
    reads: AtomicU64,
}

impl fmt::Debug for IggyPermissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IggyPermissions")
            .field("refresh", &self.refresh)
            .field("max_entries", &self.max_entries)
            .field("cached", &self.cached_principals())
            .finish_non_exhaustive()
    }
}

/// Why reading a user failed (never a secret: Iggy's error text).
type ReadError = String;

impl IggyPermissions {
    /// A source reading users through `bridge`, each snapshot used for `refresh`, at most
    /// `max_entries` principals cached.
    pub fn new(bridge: IggyBridge, refresh: Duration, max_entries: usize) -> IggyPermissions {
        IggyPermissions {
            bridge,
            refresh,
            max_entries: max_entries.max(1),
            cache: Mutex::new(Cache::default()),
            inflight: Mutex::new(HashMap::new()),
            last_warning: Mutex::new(None),
            reads: AtomicU64::new(0),
        }
    }

    /// How long a snapshot is used before it is read again.
    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    /// Users read from Iggy so far (each `get_user`), for tests and metrics.
    pub fn user_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Principals cached now.
    pub fn cached_principals(&self) -> usize {
        self.lock_cache().users.len()
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The cached snapshot of Iggy user `user`, fresh or not.
    fn cached(&self, user: &str) -> Option<(Arc<Grants>, bool)> {
        let cache = self.lock_cache();
        cache
            .users
            .get(user)
            .map(|c| (c.value.clone(), c.at.elapsed() < self.refresh))
    }

    fn store(&self, user: &str, grants: Arc<Grants>) {
        let mut cache = self.lock_cache();
        if !cache.users.contains_key(user) {
            make_room(&mut cache.users, self.max_entries);
        }
        cache.users.insert(
            user.to_owned(),
            Cached {
                at: Instant::now(),
                value: grants,
            },
        );
    }

    /// The snapshot decisions about `principal` are taken from: none for principals
    /// that are not Iggy users or were never prepared.
    fn grants_of(&self, principal: &str) -> Option<Arc<Grants>> {
        let user = iggy_user(principal)?;
        self.cached(user).map(|(g, _)| g)
    }

    fn warn(&self, user: &str, error: &str, kept: bool) {
        let mut last = match self.last_warning.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if last.is_some_and(|at| at.elapsed() < WARN_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            user,
            error,
            kept_last_snapshot = kept,
            "cannot read an Iggy user's permissions (further failures are not logged for {WARN_INTERVAL:?})"
        );
    }

    /// Makes sure a fresh snapshot of Iggy user `user` is cached (one read for all
    /// concurrent callers); returns it.
    async fn ensure(&self, user: &str) -> Result<Arc<Grants>, AuthzError> {
        if let Some((grants, true)) = self.cached(user) {
            return Ok(grants);
        }
        let lock = {
            let mut inflight = match self.inflight.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            inflight.entry(user.to_owned()).or_default().clone()
        };
        let _reading = lock.lock().await;
        // Another caller may have read it while this one waited.
        let result = match self.cached(user) {
            Some((grants, true)) => Ok(grants),
            previous => match self.read_user(user).await {
                Ok(grants) => {
                    let grants = Arc::new(grants);
                    self.store(user, grants.clone());
                    Ok(grants)
                }
                Err(error) => match previous {
                    Some((grants, _)) => {
                        self.warn(user, &error, true);
                        // Used for another interval rather than retried per request.
                        self.store(user, grants.clone());
                        Ok(grants)
                    }
                    None => {
                        self.warn(user, &error, false);
                        Err(AuthzError::Unavailable(format!(
                            "the Iggy permissions of user {user:?} cannot be read: {error}"
                        )))
                    }
                },
            },
        };
        if let Ok(mut inflight) = self.inflight.lock() {
            inflight.remove(user);
        }
        result
    }

    async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, IggyError>>,
    ) -> Result<Result<T, IggyError>, ReadError> {
        let (_, limit) = self.bridge.admin_session();
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| format!("{what}: no answer within {limit:?}"))
    }

    fn session(&self) -> &IggyClient {
        self.bridge.admin_session().0
    }

    /// Reads Iggy user `user` and names the ids in its permissions.
    async fn read_user(&self, user: &str) -> Result<Grants, ReadError> {
        // A name Iggy cannot hold is no Iggy user.
        let Ok(id) = Identifier::named(user) else {
            return Ok(Grants::none());
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let details = match self.timed("get_user", self.session().get_user(&id)).await? {
            Ok(Some(d)) => d,
            Ok(None) | Err(IggyError::ResourceNotFound(_) | IggyError::InvalidUsername) => {
                return Ok(Grants::none());
            }
            Err(e) => return Err(format!("get_user: {e}")),
        };
        if details.status != UserStatus::Active {
            return Ok(Grants::none());
        }
        if details.id == ROOT_USER_ID {
            return Ok(Grants::root());
        }
        let mut names = HashMap::new();
        if let Some(permissions) = &details.permissions {
            for stream_id in permissions.streams.iter().flatten().map(|(id, _)| *id) {
                let Ok(stream_id) = u32::try_from(stream_id) else {
                    continue;
                };
                if let Some(stream) = self.stream_names(stream_id).await? {
                    names.insert(stream_id, (*stream).clone());
                }
            }
        }
        Ok(Grants::from_permissions(
            details.permissions.as_ref(),
            &names,
        ))
    }

    /// The names of stream `id` and its topics (`None`: no such stream), cached for the
    /// refresh interval.
    async fn stream_names(&self, id: u32) -> Result<Option<Arc<StreamNames>>, ReadError> {
        {
            let cache = self.lock_cache();
            if let Some(c) = cache.streams.get(&id)
                && c.at.elapsed() < self.refresh
            {
                return Ok(c.value.clone());
            }
        }
        let sid = Identifier::numeric(id).map_err(|e| format!("stream id {id}: {e}"))?;
        let names = match self
            .timed("get_stream", self.session().get_stream(&sid))
            .await?
        {
            Ok(Some(d)) => Some(Arc::new(StreamNames {
                name: d.name,
                topics: d.topics.into_iter().map(|t| (t.id, t.name)).collect(),
            })),
            Ok(None) | Err(IggyError::ResourceNotFound(_) | IggyError::StreamIdNotFound(_)) => None,
            Err(e) => return Err(format!("get_stream: {e}")),
        };
        let mut cache = self.lock_cache();
        if !cache.streams.contains_key(&id) {
            make_room(&mut cache.streams, self.max_entries);
        }
        cache.streams.insert(
            id,
            Cached {
                at: Instant::now(),
                value: names.clone(),
            },
        );
        Ok(names)
    }

    /// The Iggy users DescribeAcls shows when its filter names no principal.
    async fn all_users(&self) -> Result<Vec<String>, AuthzError> {
        match self.timed("get_users", self.session().get_users()).await {
            Ok(Ok(users)) => Ok(users
                .into_iter()
                .filter(|u| u.status == UserStatus::Active)
                .take(MAX_DESCRIBED_USERS)
                .map(|u| u.username)
                .collect()),
            Ok(Err(e)) => Err(AuthzError::Unavailable(format!("get_users: {e}"))),
            Err(e) => Err(AuthzError::Unavailable(e)),
        }
    }
}

#[async_trait]
impl Authorizer for IggyPermissions {
    fn name(&self) -> &'static str {
        "iggy-permissions"
    }

    async fn prepare(&self, principal: &str) -> Result<(), AuthzError> {
        match iggy_user(principal) {
            Some(user) => self.ensure(user).await.map(|_| ()),
            // Not an Iggy user: nothing to read, everything Iggy governs refused.
            None => Ok(()),
        }
    }

    /// Iggy permissions are a grant of their own for topics and the cluster: where no ACL
    /// binding covers one, what the principal's Iggy user may do decides.
    fn grants(&self, resource_type: ResourceType) -> bool {
        matches!(resource_type, ResourceType::Topic | ResourceType::Cluster)
    }

    fn authorize(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let map = self.bridge.topic_map();
        match self.grants_of(caller.principal) {
            Some(g) => g.allows(map, operation, resource_type, name),
            None => Grants::none().allows(map, operation, resource_type, name),
        }
    }

    fn authorize_any(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        let map = self.bridge.topic_map();
        match self.grants_of(caller.principal) {
            Some(g) => g.allows_any(map, operation, resource_type),
            None => Grants::none().allows_any(map, operation, resource_type),
        }
    }

    async fn derived_bindings(
        &self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, AuthzError> {
        if matches!(
            filter.resource_type,
            Some(
                ResourceType::Group | ResourceType::TransactionalId | ResourceType::DelegationToken
            )
        ) || filter.host.as_deref().is_some_and(|h| h != READ_ONLY_HOST)
            || filter.permission == Some(Permission::Deny)
        {
            return Ok(Vec::new());
        }
        let users = match &filter.principal {
            Some(principal) => match iggy_user(principal) {
                Some(user) => vec![user.to_owned()],
                None => return Ok(Vec::new()),
            },
            None => self.all_users().await?,
        };
        let uncached = users
            .iter()
            .filter(|u| self.cached(u).is_none_or(|(_, fresh)| !fresh))
            .count();
        if uncached > MAX_DESCRIBE_LOOKUPS {
            return Err(AuthzError::TooBroad(format!(
                "listing the permissions of {uncached} Iggy users would take as many Iggy \
                 calls (at most {MAX_DESCRIBE_LOOKUPS} per request); name a principal in \
                 the filter"
            )));
        }
        let map = self.bridge.topic_map();
        let mut out = Vec::new();
        for user in users {
            let grants = self.ensure(&user).await?;
            let principal = format!("{USER_PREFIX}{user}");
            out.extend(
                grants
                    .bindings(&principal, map)
                    .into_iter()
                    .filter(|b| filter.matches(b)),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
