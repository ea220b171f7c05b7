//! Authorization in the broker: Kafka's model from [`kafka_authz`] (bindings, the
//! decision, ACL stores, the [`Authorizer`] seam), re-exported here, and [`api`]: which
//! operation on which resource each served API needs.

pub mod api;

#[cfg(test)]
mod tests;

pub use kafka_authz::*;
