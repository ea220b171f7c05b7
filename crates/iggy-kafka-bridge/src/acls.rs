//! Kafka ACL bindings kept in Iggy: [`IggyAclStore`] implements
//! [`kafka_authz::store::AclStore`] on the meta stream's `acls` log (record format and
//! snapshots in `crate::meta`), so bindings made with CreateAcls survive a gateway
//! restart. Get one from [`crate::IggyBridge::acl_store`].
//!
//! Reads are answered from the bridge's in-memory view of the log, loaded at connect
//! and kept current with what other gateways write (read again every
//! `meta_refresh_interval`); changes are written to Iggy first and applied to the view
//! once read back from the log. The store
//! holds at most a bounded number of bindings; an addition past the bound is refused
//! whole with [`AuthzError::Full`].

use crate::IggyBridge;
use async_trait::async_trait;
use kafka_authz::store::AclStore;
use kafka_authz::{AclBinding, AclBindingFilter, AuthzError};

/// The ACL bindings of one bridge's meta stream.
#[derive(Debug)]
pub struct IggyAclStore {
    bridge: IggyBridge,
    max: usize,
}

impl IggyAclStore {
    /// The store of `bridge`'s meta stream, holding at most `max` bindings.
    pub fn new(bridge: IggyBridge, max: usize) -> IggyAclStore {
        IggyAclStore { bridge, max }
    }

    /// The bound on bindings.
    pub fn max(&self) -> usize {
        self.max
    }
}

fn backend(e: kafka_store::StoreError) -> AuthzError {
    AuthzError::Backend(e.to_string())
}

#[async_trait]
impl AclStore for IggyAclStore {
    async fn list(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError> {
        self.bridge.meta().acls(filter).map_err(backend)
    }

    async fn add(&self, bindings: Vec<AclBinding>) -> Result<(), AuthzError> {
        for (index, b) in bindings.iter().enumerate() {
            b.validate()
                .map_err(|reason| AuthzError::Invalid { index, reason })?;
        }
        let added = self
            .bridge
            .meta()
            .add_acls(self.bridge.meta_session(), bindings, self.max)
            .await
            .map_err(backend)?;
        if added {
            Ok(())
        } else {
            Err(AuthzError::Full { max: self.max })
        }
    }

    async fn delete(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>, AuthzError> {
        self.bridge
            .meta()
            .delete_acls(self.bridge.meta_session(), filter)
            .await
            .map_err(backend)
    }
}
