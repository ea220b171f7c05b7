//! The [`Authorizer`] seam: one source of authorization decisions.
//!
//! The gateway's pipeline asks every source it has and allows a request only where all
//! of them allow it: [`AclAuthorizer`] (Kafka ACL bindings from an
//! [`AclStore`](crate::store::AclStore)) always, and with the Iggy bridge a source that
//! answers from the principal's own Iggy permissions. A source that has no say about a
//! resource type (Iggy knows nothing of consumer groups or transactional ids) allows it
//! and leaves the decision to the others.
//!
//! Decisions are synchronous so the pipeline can also filter answers on their way back
//! (Metadata for all topics, ListGroups); what a source needs from the network it fetches
//! in [`Authorizer::prepare`], which the pipeline awaits before a request's checks.

use crate::store::AclStore;
use crate::{AclBinding, AclBindingFilter, Acls, AuthzError, Operation, ResourceType};
use async_trait::async_trait;
use std::fmt;
use std::sync::{Arc, RwLock};

/// Who is asking: the principal (`Type:name`, as in bindings) and the address it
/// connects from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    /// `User:alice`.
    pub principal: &'a str,
    /// The peer's IP address as text.
    pub host: &'a str,
}

/// One source of authorization decisions.
#[async_trait]
pub trait Authorizer: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// Makes sure the decisions for `principal` can be given without waiting (fetches
    /// what they need, such as the principal's Iggy permissions when they are due for a
    /// refresh). Awaited before each request's checks, so it must be cheap when nothing
    /// is due. An error refuses the request (the pipeline closes the connection).
    async fn prepare(&self, _principal: &str) -> Result<(), AuthzError> {
        Ok(())
    }

    /// Whether this source's permissions can grant access to resources of
    /// `resource_type` on their own, where no ACL binding covers the resource (the Iggy
    /// permissions do for topics and the cluster). A source that only restricts, or that
    /// has no say about the type, answers `false` (the default): there, a resource no
    /// binding covers is open only by `allow_everyone_if_no_acl_found`.
    fn grants(&self, _resource_type: ResourceType) -> bool {
        false
    }

    /// Whether `caller` may perform `operation` on the resource `name` of
    /// `resource_type`.
    fn authorize(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool;

    /// Whether `caller` may perform `operation` on at least one resource of
    /// `resource_type` (InitProducerId without a transactional id: WRITE on any topic).
    fn authorize_any(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool;

    /// The bindings this source derives from elsewhere and that Kafka's APIs cannot
    /// change (Iggy permissions shown as ALLOW bindings), those `filter` selects. None by
    /// default.
    async fn derived_bindings(
        &self,
        _filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, AuthzError> {
        Ok(Vec::new())
    }
}

/// The source backed by an ACL store: decisions from an in-memory snapshot of its
/// bindings, taken again by [`AclAuthorizer::reload`] (after every change made through
/// this gateway, and at an interval for changes made elsewhere).
///
/// Super users are not its concern: the pipeline lets them through before asking any
/// source, so the snapshot is built without them.
pub struct AclAuthorizer {
    store: Arc<dyn AclStore>,
    allow_everyone_if_no_acl_found: bool,
    acls: RwLock<Arc<Acls>>,
}

impl fmt::Debug for AclAuthorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclAuthorizer")
            .field("store", &self.store)
            .field(
                "allow_everyone_if_no_acl_found",
                &self.allow_everyone_if_no_acl_found,
            )
            .field("bindings", &self.acls().len())
            .finish()
    }
}

impl AclAuthorizer {
    /// A source over `store`, empty until [`AclAuthorizer::reload`] reads it.
    /// `allow_everyone_if_no_acl_found` is Kafka's `allow.everyone.if.no.acl.found`.
    pub fn new(store: Arc<dyn AclStore>, allow_everyone_if_no_acl_found: bool) -> AclAuthorizer {
        AclAuthorizer {
            store,
            allow_everyone_if_no_acl_found,
            acls: RwLock::new(Arc::new(Acls::new(
                Vec::<String>::new(),
                allow_everyone_if_no_acl_found,
            ))),
        }
    }

    /// The store bindings are kept in.
    pub fn store(&self) -> &Arc<dyn AclStore> {
        &self.store
    }

    /// Whether a resource no binding covers is allowed to everyone.
    pub fn allow_everyone_if_no_acl_found(&self) -> bool {
        self.allow_everyone_if_no_acl_found
    }

    /// Takes a new snapshot of the store's bindings for the decisions.
    pub async fn reload(&self) -> Result<(), AuthzError> {
        let bindings = self.store.snapshot().await?;
        let mut acls = Acls::new(Vec::<String>::new(), self.allow_everyone_if_no_acl_found);
        for b in bindings {
            acls.add(b);
        }
        let acls = Arc::new(acls);
        match self.acls.write() {
            Ok(mut g) => *g = acls,
            Err(poisoned) => *poisoned.into_inner() = acls,
        }
        Ok(())
    }

    /// The snapshot decisions are taken from.
    pub fn acls(&self) -> Arc<Acls> {
        match self.acls.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

#[async_trait]
impl Authorizer for AclAuthorizer {
    fn name(&self) -> &'static str {
        "acls"
    }

    fn authorize(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.acls().authorize(
            caller.principal,
            caller.host,
            operation,
            resource_type,
            name,
        )
    }

    fn authorize_any(
        &self,
        caller: &Caller<'_>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        self.acls()
            .authorize_any(caller.principal, caller.host, operation, resource_type)
    }
}
