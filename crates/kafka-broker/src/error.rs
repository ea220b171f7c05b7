//! The broker layer's error type.

/// Failures that stop the broker or refuse its configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The listener failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The quota store could not read or keep client quotas.
    #[error("quota store: {0}")]
    QuotaStore(String),
    /// A certificate, key or CA file of the TLS listeners cannot be used.
    #[error("TLS: {0}")]
    Tls(String),
}
