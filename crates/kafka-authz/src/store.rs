//! Where ACL bindings live: the [`AclStore`] seam (the Iggy-backed store implements it
//! with the bridge), the in-memory [`MemoryAclStore`] of the embedded store, and the JSON
//! file it may be loaded from at start.
//!
//! The file is a JSON object with one array, `bindings`; each entry names Kafka's values
//! by their names (case-insensitive):
//!
//! ```json
//! { "bindings": [
//!   { "resource_type": "TOPIC", "name": "orders-", "pattern": "PREFIXED",
//!     "principal": "User:alice", "host": "*", "operation": "READ",
//!     "permission": "ALLOW" }
//! ] }
//! ```
//!
//! `pattern` defaults to `LITERAL`, `host` to `*` and `permission` to `ALLOW`. Every
//! entry is validated ([`super::AclBinding::validate`]); one bad entry refuses the whole
//! file, naming its index.

use super::{
    AclBinding, AclBindingFilter, Acls, InvalidBinding, Operation, PatternType, Permission,
    ResourceType,
};
use async_trait::async_trait;
use serde::Deserialize;
use std::path::Path;
use tokio::sync::RwLock;

/// What went wrong: loading or changing ACL bindings, or asking a permission source.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// The ACL file could not be read.
    #[error("cannot read the ACL file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The ACL file is not the expected JSON.
    #[error("the ACL file {path} is not valid: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (never the file's content).
        reason: String,
    },
    /// An entry is not a storable binding.
    #[error("ACL binding {index}: {reason}")]
    Invalid {
        /// Its index in the file or request.
        index: usize,
        /// Why.
        reason: InvalidBinding,
    },
    /// Adding would exceed the store's bound on bindings.
    #[error("the ACL store holds at most {max} bindings")]
    Full {
        /// The bound.
        max: usize,
    },
    /// The backend failed (the Iggy-backed store).
    #[error("ACL store backend failed: {0}")]
    Backend(String),
    /// A permission source cannot answer now (Iggy unreachable and nothing cached).
    #[error("permission source unavailable: {0}")]
    Unavailable(String),
    /// Answering would cost a permission source more lookups than one request may.
    #[error("{0}")]
    TooBroad(String),
}

/// A durable set of ACL bindings.
#[async_trait]
pub trait AclStore: Send + Sync + std::fmt::Debug {
    /// The bindings `filter` selects.
    async fn list(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError>;

    /// Adds bindings (already present ones are kept once). All are validated first;
    /// nothing is added when one is invalid.
    async fn add(&self, bindings: Vec<AclBinding>) -> Result<(), AuthzError>;

    /// Deletes the bindings `filter` selects and returns them.
    async fn delete(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError>;

    /// A snapshot of every binding, for the authorizer.
    async fn snapshot(&self) -> Result<Vec<AclBinding>, AuthzError> {
        self.list(&AclBindingFilter::any()).await
    }
}

/// The default bound on the bindings the in-memory store holds.
pub const DEFAULT_MAX_ACL_BINDINGS: usize = 100_000;

/// The embedded store's bindings: in memory, lost at exit, optionally loaded from a file
/// at start. Holds at most a bounded number of bindings ([`DEFAULT_MAX_ACL_BINDINGS`]
/// unless [`MemoryAclStore::with_max`] says otherwise), so CreateAcls cannot grow memory
/// without bound.
#[derive(Debug)]
pub struct MemoryAclStore {
    acls: RwLock<Acls>,
    max: usize,
}

impl Default for MemoryAclStore {
    fn default() -> Self {
        MemoryAclStore {
            acls: RwLock::new(Acls::default()),
            max: DEFAULT_MAX_ACL_BINDINGS,
        }
    }
}

impl MemoryAclStore {
    /// An empty store.
    pub fn new() -> MemoryAclStore {
        MemoryAclStore::default()
    }

    /// The same store holding at most `max` bindings.
    pub fn with_max(mut self, max: usize) -> MemoryAclStore {
        self.max = max;
        self
    }

    /// A store holding `bindings` (validated).
    pub fn with_bindings(bindings: Vec<AclBinding>) -> Result<MemoryAclStore, AuthzError> {
        let mut acls = Acls::default();
        for (index, b) in bindings.into_iter().enumerate() {
            b.validate()
                .map_err(|reason| AuthzError::Invalid { index, reason })?;
            acls.add(b);
        }
        Ok(MemoryAclStore {
            acls: RwLock::new(acls),
            max: DEFAULT_MAX_ACL_BINDINGS,
        })
    }

    /// A store loaded from the JSON file at `path` (format in the module docs).
    pub fn load(path: &Path) -> Result<MemoryAclStore, AuthzError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthzError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let bindings = parse_bindings(&text).map_err(|e| match e {
            AuthzError::Parse { reason, .. } => AuthzError::Parse {
                path: path.display().to_string(),
                reason,
            },
            other => other,
        })?;
        MemoryAclStore::with_bindings(bindings)
    }
}

#[async_trait]
impl AclStore for MemoryAclStore {
    async fn list(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError> {
        Ok(self.acls.read().await.describe(filter))
    }

    async fn add(&self, bindings: Vec<AclBinding>) -> Result<(), AuthzError> {
        for (index, b) in bindings.iter().enumerate() {
            b.validate()
                .map_err(|reason| AuthzError::Invalid { index, reason })?;
        }
        let mut acls = self.acls.write().await;
        let new = bindings
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .filter(|b| !acls.contains(b))
            .count();
        if acls.len() + new > self.max {
            return Err(AuthzError::Full { max: self.max });
        }
        for b in bindings {
            acls.add(b);
        }
        Ok(())
    }

    async fn delete(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError> {
        Ok(self.acls.write().await.remove_matching(filter))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    bindings: Vec<FileBinding>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBinding {
    resource_type: String,
    name: String,
    #[serde(default)]
    pattern: Option<String>,
    principal: String,
    #[serde(default)]
    host: Option<String>,
    operation: String,
    #[serde(default)]
    permission: Option<String>,
}

/// Parses the JSON ACL file format (module docs). Names are Kafka's, case-insensitive.
pub fn parse_bindings(text: &str) -> Result<Vec<AclBinding>, AuthzError> {
    let parse = |reason: String| AuthzError::Parse {
        path: String::new(),
        reason,
    };
    let file: FileFormat = serde_json::from_str(text).map_err(|e| parse(e.to_string()))?;
    file.bindings
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let bad = |what: &str, v: &str| parse(format!("binding {i}: unknown {what} {v:?}"));
            let resource_type = ResourceType::from_name(&b.resource_type)
                .ok_or_else(|| bad("resource type", &b.resource_type))?;
            let pattern = match &b.pattern {
                None => PatternType::Literal,
                Some(p) => PatternType::from_name(p).ok_or_else(|| bad("pattern type", p))?,
            };
            let operation =
                Operation::from_name(&b.operation).ok_or_else(|| bad("operation", &b.operation))?;
            let permission = match &b.permission {
                None => Permission::Allow,
                Some(p) => Permission::from_name(p).ok_or_else(|| bad("permission", p))?,
            };
            Ok(AclBinding {
                resource_type,
                name: b.name,
                pattern,
                principal: b.principal,
                host: b.host.unwrap_or_else(|| super::WILDCARD_HOST.to_owned()),
                operation,
                permission,
            })
        })
        .collect()
}
