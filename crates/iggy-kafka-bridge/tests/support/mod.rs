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

/// Bridge settings for `server`: short polls so that waiting reads re-read quickly, and
/// a short metadata refresh (generations left behind go after ten of them).
pub fn config(server: &Server) -> BridgeConfig {
    BridgeConfig {
        address: server.address.clone(),
        call_timeout: Duration::from_secs(20),
        sessions: 2,
        poll_interval: Duration::from_millis(20),
        meta_refresh_interval: Duration::from_millis(200),
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

/// The generations of metadata log `base` in meta stream `meta`, sorted by name, with
/// their message counts.
pub async fn generations(
    client: &iggy::prelude::IggyClient,
    meta: &str,
    base: &str,
) -> Vec<(String, u64)> {
    use iggy::prelude::{Identifier, TopicClient};
    let prefix = format!("{base}.");
    let mut found: Vec<(String, u64)> = client
        .get_topics(&Identifier::named(meta).unwrap())
        .await
        .unwrap()
        .into_iter()
        .filter(|t| {
            t.name == base
                || t.name
                    .strip_prefix(&prefix)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|t| (t.name, t.messages_count))
        .collect();
    found.sort();
    found
}

/// Waits (up to 30 s) until log `base` is down to one generation, as a bridge's refresh
/// deletes the ones left behind after their grace, and returns it.
pub async fn settled_generation(
    client: &iggy::prelude::IggyClient,
    meta: &str,
    base: &str,
) -> (String, u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut found = generations(client, meta, base).await;
        if found.len() == 1 {
            return found.remove(0);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{base} kept several generations: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Appends `payloads` as they are to partition 0 of topic `topic` of stream `stream`, as
/// a native Iggy client (logs as an earlier version or another party wrote them).
pub async fn send_raw(
    client: &iggy::prelude::IggyClient,
    stream: &str,
    topic: &str,
    payloads: Vec<Vec<u8>>,
) {
    use iggy::prelude::{Identifier, IggyMessage, MessageClient, Partitioning};
    let mut messages: Vec<IggyMessage> = payloads
        .into_iter()
        .map(|p| {
            IggyMessage::builder()
                .payload(bytes::Bytes::from(p))
                .build()
                .unwrap()
        })
        .collect();
    client
        .send_messages(
            &Identifier::named(stream).unwrap(),
            &Identifier::named(topic).unwrap(),
            &Partitioning::partition_id(0),
            &mut messages,
        )
        .await
        .unwrap();
}
