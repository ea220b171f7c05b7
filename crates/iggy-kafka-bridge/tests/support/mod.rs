//! The bridge's integration tests on a real Iggy server: the server comes from the
//! shared `test-support` crate (started from `IGGY_SERVER_BIN`, stopped and removed on
//! drop); this adds a bridge configured for it.

#![allow(dead_code)]

use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_store::{LogStore, NewTopic, TopicConfig};
use std::path::PathBuf;
use std::time::Duration;

#[allow(unused_imports)] // Not every test uses every item.
pub use test_support::{
    IGGY_PASSWORD as PASSWORD, IGGY_USER as USER, IggyServer as Server, run_id,
};

/// The server binary; `None` (after printing the `SKIPPED:` line) only when
/// `IGGY_SERVER_BIN` is unset or empty.
pub fn server_bin(what: &str) -> Option<PathBuf> {
    test_support::iggy_server_bin(what)
}

/// Bridge settings for `server`: short polls so that waiting reads re-read quickly.
pub fn config(server: &Server) -> BridgeConfig {
    BridgeConfig {
        address: server.address.clone(),
        call_timeout: Duration::from_secs(20),
        sessions: 2,
        poll_interval: Duration::from_millis(20),
        ..BridgeConfig::new(USER, PASSWORD)
    }
}

/// A bridge connected to `server`; panics with the server's log when it cannot connect.
pub async fn bridge(server: &Server) -> IggyBridge {
    IggyBridge::connect(config(server))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

/// A native Iggy client signed in to `server` as the bridge's user.
pub async fn native_client(server: &Server) -> iggy::prelude::IggyClient {
    use iggy::prelude::{AutoLogin, Client, Credentials, IggyClient};
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(server.address.clone())
        .with_auto_sign_in(AutoLogin::Enabled(Credentials::UsernamePassword(
            USER.into(),
            secrecy::SecretString::from(PASSWORD.to_owned()),
        )))
        .build()
        .unwrap_or_else(|e| panic!("native client: {e}"));
    client
        .connect()
        .await
        .unwrap_or_else(|e| panic!("native connect: {e}; server log:\n{}", server.log_tail()));
    client
}

/// Creates topic `name` with `partitions` partitions and no time retention.
pub async fn create(bridge: &impl LogStore, name: &str, partitions: i32) {
    bridge
        .create_topic(
            NewTopic {
                name: name.into(),
                partitions,
                config: TopicConfig {
                    retention_ms: -1,
                    ..TopicConfig::default()
                },
            },
            false,
        )
        .await
        .unwrap();
}
