//! Kafka's authorization model, without I/O: ACL bindings, the filters DescribeAcls and
//! DeleteAcls match them with, the decision whether a principal may perform an operation
//! on a resource, where bindings are stored, and the [`Authorizer`] seam the gateway's
//! request pipeline asks.
//!
//! - [`AclBinding`]: one rule, "principal P from host H is allowed (or denied) operation
//!   O on resources of type T whose name matches N literally, by prefix, or by the `*`
//!   wildcard".
//! - [`Acls`]: a set of bindings and [`Acls::authorize`], following the rules of Kafka's
//!   standard authorizer: super users may do anything; a matching DENY beats any ALLOW;
//!   an ALLOW for an operation also allows the operations it implies (READ, WRITE,
//!   DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies
//!   everything); and when no binding at all matches the resource, the answer is the
//!   `allow_everyone_if_no_acl_found` setting.
//! - [`AclBindingFilter`]: what a DescribeAcls or DeleteAcls request selects, with the
//!   ANY and MATCH pattern types.
//! - [`store`]: the durable-store seam ([`store::AclStore`]) and the in-memory store,
//!   loadable from a JSON file.
//! - [`authorizer`]: the [`Authorizer`] trait (one source of decisions; the pipeline
//!   allows what every source allows) and [`AclAuthorizer`], the source backed by an
//!   ACL store.

pub mod authorizer;
pub mod store;

#[cfg(test)]
mod tests;

pub use authorizer::{AclAuthorizer, Authorizer, Caller};
pub use store::AuthzError;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// The principal that matches every principal in a binding (`User:*`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host that matches every host in a binding.
pub const WILDCARD_HOST: &str = "*";
/// The resource name that matches every name of a type in a LITERAL binding.
pub const WILDCARD_RESOURCE: &str = "*";
/// The host DescribeAcls shows on the bindings a source derives from elsewhere (Iggy
/// permissions): they are read-only, and CreateAcls refuses a binding with this host, so
/// the mark cannot be confused with a stored binding.
pub const READ_ONLY_HOST: &str = "iggy-permission";
/// The only name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Kafka's resource types, with their wire codes (`ResourceType` in the ACL APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// Filters only: any type (1).
    Any,
    /// A topic (2).
    Topic,
    /// A consumer group (3).
    Group,
    /// The cluster (4).
    Cluster,
    /// A transactional id (5).
    TransactionalId,
    /// A delegation token (6).
    DelegationToken,
}

impl ResourceType {
    /// The wire code.
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Any => 1,
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
        }
    }

    /// The type for a wire code; `None` for UNKNOWN (0) and codes Kafka does not define.
    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            1 => ResourceType::Any,
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            _ => return None,
        })
    }

    /// Kafka's name (`TOPIC`, `GROUP`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Any => "ANY",
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
            ResourceType::DelegationToken => "DELEGATION_TOKEN",
        }
    }

    /// The type for Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Every type, `Any` first.
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Any,
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
    ];
}

/// How a binding's resource name matches names, with the wire codes
/// (`PatternType` in the ACL APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// Filters only: any pattern type (1).
    Any,
    /// Filters only: every binding that would apply to the filter's name (2).
    Match,
    /// The name itself, or every name when it is `*` (3).
    Literal,
    /// Every name that starts with the binding's name (4).
    Prefixed,
}

impl PatternType {
    /// The wire code.
    pub fn code(self) -> i8 {
        match self {
            PatternType::Any => 1,
            PatternType::Match => 2,
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    /// The pattern type for a wire code; `None` for UNKNOWN (0) and undefined codes.
    pub fn from_code(code: i8) -> Option<PatternType> {
        Some(match code {
            1 => PatternType::Any,
            2 => PatternType::Match,
            3 => PatternType::Literal,
            4 => PatternType::Prefixed,
            _ => return None,
        })
    }

    /// Kafka's name (`LITERAL`, `PREFIXED`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Any => "ANY",
            PatternType::Match => "MATCH",
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }

    /// The pattern type for Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<PatternType> {
        [
            PatternType::Any,
            PatternType::Match,
            PatternType::Literal,
            PatternType::Prefixed,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// Kafka's ACL operations, with the wire codes (`Operation` in the ACL APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Filters only: any operation (1).
    Any,
    /// Every operation (2).
    All,
    /// 3.
    Read,
    /// 4.
    Write,
    /// 5.
    Create,
    /// 6.
    Delete,
    /// 7.
    Alter,
    /// 8.
    Describe,
    /// 9.
    ClusterAction,
    /// 10.
    DescribeConfigs,
    /// 11.
    AlterConfigs,
    /// 12.
    IdempotentWrite,
    /// 13.
    CreateTokens,
    /// 14.
    DescribeTokens,
}

impl Operation {
    /// Every operation, in code order.
    pub const ALL: [Operation; 14] = [
        Operation::Any,
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
    ];

    /// The wire code.
    pub fn code(self) -> i8 {
        match self {
            Operation::Any => 1,
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
        }
    }

    /// The operation for a wire code; `None` for UNKNOWN (0) and undefined codes.
    pub fn from_code(code: i8) -> Option<Operation> {
        Operation::ALL.iter().copied().find(|o| o.code() == code)
    }

    /// Kafka's name (`READ`, `DESCRIBE_CONFIGS`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Operation::Any => "ANY",
            Operation::All => "ALL",
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Create => "CREATE",
            Operation::Delete => "DELETE",
            Operation::Alter => "ALTER",
            Operation::Describe => "DESCRIBE",
            Operation::ClusterAction => "CLUSTER_ACTION",
            Operation::DescribeConfigs => "DESCRIBE_CONFIGS",
            Operation::AlterConfigs => "ALTER_CONFIGS",
            Operation::IdempotentWrite => "IDEMPOTENT_WRITE",
            Operation::CreateTokens => "CREATE_TOKENS",
            Operation::DescribeTokens => "DESCRIBE_TOKENS",
        }
    }

    /// The operation for Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<Operation> {
        Operation::ALL
            .iter()
            .copied()
            .find(|o| o.name().eq_ignore_ascii_case(name))
    }

    /// Whether an ALLOW binding for `self` allows `requested`: the same operation, ALL, or
    /// an operation that implies it (DESCRIBE from READ, WRITE, DELETE, ALTER;
    /// DESCRIBE_CONFIGS from ALTER_CONFIGS).
    pub fn allows(self, requested: Operation) -> bool {
        self == requested
            || self == Operation::All
            || (requested == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (requested == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY binding for `self` denies `requested`: the same operation or ALL
    /// (a denial does not spread to implied operations).
    pub fn denies(self, requested: Operation) -> bool {
        self == requested || self == Operation::All
    }
}

/// Allow or deny, with the wire codes (`PermissionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Filters only: either (1).
    Any,
    /// 2.
    Deny,
    /// 3.
    Allow,
}

impl Permission {
    /// The wire code.
    pub fn code(self) -> i8 {
        match self {
            Permission::Any => 1,
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    /// The permission for a wire code; `None` for UNKNOWN (0) and undefined codes.
    pub fn from_code(code: i8) -> Option<Permission> {
        Some(match code {
            1 => Permission::Any,
            2 => Permission::Deny,
            3 => Permission::Allow,
            _ => return None,
        })
    }

    /// Kafka's name (`ALLOW`, `DENY`, `ANY`).
    pub fn name(self) -> &'static str {
        match self {
            Permission::Any => "ANY",
            Permission::Deny => "DENY",
            Permission::Allow => "ALLOW",
        }
    }

    /// The permission for Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<Permission> {
        [Permission::Any, Permission::Deny, Permission::Allow]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// Why a binding cannot be stored (CreateAcls answers INVALID_REQUEST for these).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBinding {
    /// A filter-only value (ANY, MATCH) in a binding.
    #[error("a binding cannot use the filter-only value {0}")]
    FilterOnly(&'static str),
    /// The resource name is empty.
    #[error("the resource name is empty")]
    EmptyName,
    /// A CLUSTER binding must name `kafka-cluster` literally.
    #[error("a CLUSTER binding must use the LITERAL name kafka-cluster")]
    ClusterName,
    /// The principal is not `Type:name`.
    #[error("the principal must have the form Type:name")]
    Principal,
    /// The host is empty.
    #[error("the host is empty (use * for every host)")]
    EmptyHost,
}

/// One ACL rule. Principals are Kafka's `Type:name` strings (`User:alice`, `User:*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// What kind of resource it is about.
    pub resource_type: ResourceType,
    /// The resource name, or the prefix for PREFIXED, or `*` for all.
    pub name: String,
    /// LITERAL or PREFIXED.
    pub pattern: PatternType,
    /// `Type:name`, or `User:*` for everyone.
    pub principal: String,
    /// The client's address, or `*` for every host.
    pub host: String,
    /// The operation allowed or denied.
    pub operation: Operation,
    /// ALLOW or DENY.
    pub permission: Permission,
}

impl AclBinding {
    /// Checks the binding is storable (no filter-only values, a sensible name, principal
    /// and host).
    pub fn validate(&self) -> Result<(), InvalidBinding> {
        if self.resource_type == ResourceType::Any {
            return Err(InvalidBinding::FilterOnly("resource type ANY"));
        }
        if !matches!(self.pattern, PatternType::Literal | PatternType::Prefixed) {
            return Err(InvalidBinding::FilterOnly(self.pattern.name()));
        }
        if self.operation == Operation::Any {
            return Err(InvalidBinding::FilterOnly("operation ANY"));
        }
        if self.permission == Permission::Any {
            return Err(InvalidBinding::FilterOnly("permission ANY"));
        }
        if self.name.is_empty() {
            return Err(InvalidBinding::EmptyName);
        }
        if self.resource_type == ResourceType::Cluster
            && (self.pattern != PatternType::Literal || self.name != CLUSTER_NAME)
        {
            return Err(InvalidBinding::ClusterName);
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Err(InvalidBinding::Principal),
        }
        if self.host.is_empty() {
            return Err(InvalidBinding::EmptyHost);
        }
        Ok(())
    }

    /// Whether the binding's resource pattern covers resource `name` of its type.
    fn covers(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.name == WILDCARD_RESOURCE || self.name == name,
            PatternType::Prefixed => name.starts_with(self.name.as_str()),
            PatternType::Any | PatternType::Match => false,
        }
    }

    /// Whether the binding applies to `principal` connecting from `host`.
    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD_HOST)
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} from {} on {}:{}:{}",
            self.principal,
            self.permission.name(),
            self.operation.name(),
            self.host,
            self.resource_type.name(),
            self.pattern.name(),
            self.name
        )
    }
}

/// Bindings by what they cover.
#[derive(Debug, Clone, Default)]
struct Index {
    /// LITERAL bindings (on `*` too) by type and name.
    literal: HashMap<ResourceType, HashMap<String, Vec<AclBinding>>>,
    /// PREFIXED bindings by type and prefix.
    prefixed: HashMap<ResourceType, HashMap<String, Vec<AclBinding>>>,
    /// Per type, the byte lengths of the prefixes in use, with how many prefixes have
    /// each length.
    prefix_lengths: HashMap<ResourceType, BTreeMap<usize, usize>>,
}

impl Index {
    fn map(&mut self, b: &AclBinding) -> &mut HashMap<String, Vec<AclBinding>> {
        let by_type = match b.pattern {
            PatternType::Prefixed => &mut self.prefixed,
            _ => &mut self.literal,
        };
        by_type.entry(b.resource_type).or_default()
    }

    fn add(&mut self, b: &AclBinding) {
        let entry = self.map(b).entry(b.name.clone()).or_default();
        let new_name = entry.is_empty();
        entry.push(b.clone());
        if new_name && b.pattern == PatternType::Prefixed {
            *self
                .prefix_lengths
                .entry(b.resource_type)
                .or_default()
                .entry(b.name.len())
                .or_default() += 1;
        }
    }

    fn remove(&mut self, b: &AclBinding) {
        let map = self.map(b);
        let Some(entry) = map.get_mut(b.name.as_str()) else {
            return;
        };
        entry.retain(|x| x != b);
        if !entry.is_empty() {
            return;
        }
        map.remove(b.name.as_str());
        if b.pattern == PatternType::Prefixed
            && let Some(lengths) = self.prefix_lengths.get_mut(&b.resource_type)
            && let Some(n) = lengths.get_mut(&b.name.len())
        {
            *n -= 1;
            if *n == 0 {
                lengths.remove(&b.name.len());
            }
        }
    }

    /// Every binding of `resource_type` that covers resource `name`.
    fn covering<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let literal = self.literal.get(&resource_type);
        let exact = literal.and_then(|m| m.get(name));
        let wildcard = literal
            .filter(|_| name != WILDCARD_RESOURCE)
            .and_then(|m| m.get(WILDCARD_RESOURCE));
        let prefixed = self.prefixed.get(&resource_type);
        let prefixes = self
            .prefix_lengths
            .get(&resource_type)
            .into_iter()
            .flat_map(|lengths| lengths.keys())
            .take_while(move |len| **len <= name.len())
            .filter_map(move |len| name.get(..*len))
            .filter_map(move |prefix| prefixed.and_then(|m| m.get(prefix)));
        exact
            .into_iter()
            .chain(wildcard)
            .chain(prefixes)
            .flat_map(|v| v.iter())
    }
}

/// What DescribeAcls and DeleteAcls select. `None` fields match anything; `Any` values
/// match anything of their kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclBindingFilter {
    /// `Any` or one type.
    pub resource_type: Option<ResourceType>,
    /// A name; `None` matches every name.
    pub name: Option<String>,
    /// `Any`, `Match`, `Literal` or `Prefixed`; `None` is `Any`.
    pub pattern: Option<PatternType>,
    /// A principal; `None` matches every principal.
    pub principal: Option<String>,
    /// A host; `None` matches every host.
    pub host: Option<String>,
    /// `Any` or one operation; `None` is `Any`.
    pub operation: Option<Operation>,
    /// `Any` or one permission; `None` is `Any`.
    pub permission: Option<Permission>,
}

impl AclBindingFilter {
    /// The filter that matches every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter::default()
    }

    /// Whether `binding` is selected.
    ///
    /// Principal, host, operation and permission match exactly (no wildcard expansion: a
    /// filter for `User:alice` does not select `User:*` bindings). The resource part
    /// follows the pattern type: LITERAL and PREFIXED select bindings with exactly that
    /// pattern type and name; ANY selects bindings with that name of either pattern
    /// type; MATCH selects every binding that would apply to a resource of that name:
    /// the literal name, the literal `*` wildcard, and every prefix of the name.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let type_ok = match self.resource_type {
            None | Some(ResourceType::Any) => true,
            Some(t) => t == binding.resource_type,
        };
        let op_ok = match self.operation {
            None | Some(Operation::Any) => true,
            Some(o) => o == binding.operation,
        };
        let perm_ok = match self.permission {
            None | Some(Permission::Any) => true,
            Some(p) => p == binding.permission,
        };
        type_ok
            && op_ok
            && perm_ok
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == binding.principal)
            && self.host.as_ref().is_none_or(|h| *h == binding.host)
            && self.pattern_matches(binding)
    }

    fn pattern_matches(&self, binding: &AclBinding) -> bool {
        let pattern = self.pattern.unwrap_or(PatternType::Any);
        let Some(name) = &self.name else {
            return match pattern {
                PatternType::Any | PatternType::Match => true,
                p => p == binding.pattern,
            };
        };
        match pattern {
            PatternType::Literal | PatternType::Prefixed => {
                pattern == binding.pattern && *name == binding.name
            }
            PatternType::Any => *name == binding.name,
            PatternType::Match => match binding.pattern {
                PatternType::Literal => binding.name == *name || binding.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(binding.name.as_str()),
                PatternType::Any | PatternType::Match => false,
            },
        }
    }
}

/// What the ACL bindings alone say about one request of an operation on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// An ALLOW binding applies (and no DENY does), or the principal is a super user.
    Allowed,
    /// A DENY binding applies, or bindings cover the resource and none allows.
    Denied,
    /// No binding covers the resource at all, for anyone: the answer is left to
    /// `allow_everyone_if_no_acl_found` and the other sources of decisions.
    NoBinding,
}

/// Whether `operation` on resources of `resource_type` is one that nothing but an explicit
/// grant opens: ALTER, ALTER_CONFIGS and CLUSTER_ACTION on the cluster (CreateAcls,
/// DeleteAcls, AlterUserScramCredentials, AlterClientQuotas, broker AlterConfigs,
/// WriteTxnMarkers, AddPartitionsToTxn v4+). For these `allow_everyone_if_no_acl_found`
/// never applies: with it Kafka would let every principal grant itself anything, fence
/// any producer and throttle everyone until somebody binds the cluster.
pub fn needs_explicit_grant(resource_type: ResourceType, operation: Operation) -> bool {
    resource_type == ResourceType::Cluster
        && matches!(
            operation,
            Operation::Alter | Operation::AlterConfigs | Operation::ClusterAction | Operation::All
        )
}

/// A set of bindings and the decision procedure over them.
///
/// Bindings are indexed by resource type and name, so a check visits only the bindings
/// that can cover its resource: the LITERAL ones on its name and on `*`, and the PREFIXED
/// ones on each prefix of its name that some binding uses (one lookup per distinct prefix
/// length). Its cost does not grow with bindings on other resources.
#[derive(Debug, Clone, Default)]
pub struct Acls {
    bindings: HashSet<AclBinding>,
    index: Index,
    super_users: HashSet<String>,
    allow_everyone_if_no_acl_found: bool,
}

impl Acls {
    /// An empty set. `super_users` are `Type:name` principals that may do anything
    /// (Kafka's `super.users`); `allow_everyone_if_no_acl_found` is Kafka's
    /// `allow.everyone.if.no.acl.found`: what happens on a resource no binding covers.
    pub fn new<I, S>(super_users: I, allow_everyone_if_no_acl_found: bool) -> Acls
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Acls {
            bindings: HashSet::new(),
            index: Index::default(),
            super_users: super_users.into_iter().map(Into::into).collect(),
            allow_everyone_if_no_acl_found,
        }
    }

    /// Adds a binding; `false` if it was already present.
    pub fn add(&mut self, binding: AclBinding) -> bool {
        if self.bindings.contains(&binding) {
            return false;
        }
        self.index.add(&binding);
        self.bindings.insert(binding)
    }

    /// Removes every binding `filter` selects and returns them (sorted).
    pub fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let removed = self.describe(filter);
        for b in &removed {
            self.bindings.remove(b);
            self.index.remove(b);
        }
        removed
    }

    /// The bindings `filter` selects (sorted).
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let mut out: Vec<AclBinding> = self
            .bindings
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Whether `binding` is present.
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.bindings.contains(binding)
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Whether `principal` is a super user.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }

    /// Whether `principal` (`Type:name`) connecting from `host` may perform `operation` on
    /// the resource `name` of type `resource_type`, the bindings and
    /// `allow_everyone_if_no_acl_found` alone deciding ([`Acls::decide`]; a resource no
    /// binding covers is open when the setting is on, except for the operations that
    /// [`needs_explicit_grant`]).
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        match self.decide(principal, host, operation, resource_type, name) {
            Decision::Allowed => true,
            Decision::Denied => false,
            Decision::NoBinding => self.open_without_binding(resource_type, operation),
        }
    }

    /// Whether a resource no binding covers is open for `operation` by
    /// `allow_everyone_if_no_acl_found` (never for the operations that
    /// [`needs_explicit_grant`]).
    pub fn open_without_binding(&self, resource_type: ResourceType, operation: Operation) -> bool {
        self.allow_everyone_if_no_acl_found && !needs_explicit_grant(resource_type, operation)
    }

    /// What the bindings say about `principal` from `host` performing `operation` on the
    /// resource `name` of type `resource_type`.
    ///
    /// In order: a super user is allowed; a DENY binding that covers the resource and
    /// applies to the principal and host, for this operation or ALL, refuses; with no
    /// binding covering the resource at all (for anyone), [`Decision::NoBinding`];
    /// otherwise an ALLOW binding for this operation, ALL, or an operation implying it,
    /// allows; anything else is refused. Filter-only values (`Any` type or operation) are
    /// never allowed except to super users.
    pub fn decide(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        if self.is_super_user(principal) {
            return Decision::Allowed;
        }
        if operation == Operation::Any || resource_type == ResourceType::Any {
            return Decision::Denied;
        }
        let mut any_binding = false;
        let mut allowed = false;
        for b in self.index.covering(resource_type, name) {
            debug_assert!(b.resource_type == resource_type && b.covers(name));
            any_binding = true;
            if !b.applies_to(principal, host) {
                continue;
            }
            match b.permission {
                Permission::Deny if b.operation.denies(operation) => return Decision::Denied,
                Permission::Allow if b.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        match (any_binding, allowed) {
            (false, _) => Decision::NoBinding,
            (true, true) => Decision::Allowed,
            (true, false) => Decision::Denied,
        }
    }

    /// Whether `principal` may perform `operation` on at least one resource of
    /// `resource_type` (Kafka's check "by resource type", used where any topic will do,
    /// as for InitProducerId without a transactional id), the bindings and
    /// `allow_everyone_if_no_acl_found` alone deciding ([`Acls::decide_any`]).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        match self.decide_any(principal, host, operation, resource_type) {
            Decision::Allowed => true,
            Decision::Denied => false,
            Decision::NoBinding => self.open_without_binding(resource_type, operation),
        }
    }

    /// What the bindings say about `principal` performing `operation` on at least one
    /// resource of `resource_type`.
    ///
    /// A super user may. A DENY on the literal `*` name refuses; an ALLOW on a literal
    /// name not itself denied (literally or by a denied prefix), or on a prefix not
    /// covered by a denied prefix, allows. Otherwise, when some name is left that no
    /// binding covers (no LITERAL `*` binding of the type for anyone), the answer is
    /// [`Decision::NoBinding`]; else it is refused. Only bindings for the operation itself
    /// or ALL count here (no implied operations), as in Kafka.
    pub fn decide_any(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> Decision {
        if self.is_super_user(principal) {
            return Decision::Allowed;
        }
        if operation == Operation::Any || resource_type == ResourceType::Any {
            return Decision::Denied;
        }
        let relevant: Vec<&AclBinding> = self
            .bindings
            .iter()
            .filter(|b| b.resource_type == resource_type)
            .collect();
        let some_name_uncovered = !relevant
            .iter()
            .any(|b| b.pattern == PatternType::Literal && b.name == WILDCARD_RESOURCE);
        if self.allow_everyone_if_no_acl_found
            && some_name_uncovered
            && !needs_explicit_grant(resource_type, operation)
        {
            return Decision::NoBinding;
        }
        let mine = |b: &&AclBinding| b.applies_to(principal, host);
        let denies: Vec<&AclBinding> = relevant
            .iter()
            .copied()
            .filter(mine)
            .filter(|b| b.permission == Permission::Deny && b.operation.denies(operation))
            .collect();
        if denies
            .iter()
            .any(|d| d.pattern == PatternType::Literal && d.name == WILDCARD_RESOURCE)
        {
            return Decision::Denied;
        }
        let denied = |pattern: PatternType, name: &str| {
            denies.iter().any(|d| match (d.pattern, pattern) {
                (PatternType::Prefixed, _) => name.starts_with(d.name.as_str()),
                (PatternType::Literal, PatternType::Literal) => d.name == name,
                _ => false,
            })
        };
        let allowed = relevant
            .iter()
            .copied()
            .filter(mine)
            .filter(|b| b.permission == Permission::Allow && b.operation.denies(operation))
            .any(|a| !denied(a.pattern, &a.name));
        if allowed {
            Decision::Allowed
        } else if some_name_uncovered {
            Decision::NoBinding
        } else {
            Decision::Denied
        }
    }
}
