//! An append whose reply is lost with its connection is never sent again behind the
//! caller's back: between the bridge and a real Iggy server sits a TCP proxy that,
//! when armed, lets one `SendMessages` request (recognised by a marker in its record)
//! reach Iggy, waits for Iggy's answer, and then drops both connections without passing
//! the answer on. Iggy has stored the record; the bridge cannot know. A transport that
//! reconnects and replays the request by itself stores it twice and reports one
//! success; the bridge must leave one copy and either settle the append (find its
//! messages by id once Iggy answers again, and name their offset) or report its outcome
//! unknown (`StoreError::Timeout`, which makes the broker look for the batch in the log
//! before it takes a retry, see `kafka-broker`'s `producers` module).
//!
//! The same thing happens when Iggy restarts under a producer (the request is in Iggy's
//! journal, the connection closes before the answer): the gateway's `restarts.rs`
//! found a record stored twice that way.
//!
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::{Bytes, BytesMut};
use iggy_kafka_bridge::IggyBridge;
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};
use kafka_store::{LogStore, StoreError, ValidBatch};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the bridge may take to answer again after the cut.
const RECOVERY: Duration = Duration::from_secs(30);

/// A TCP proxy to `upstream` that can lose one reply (see the module docs).
struct CutProxy {
    address: String,
    /// The marker whose request loses its reply; taken when it is seen.
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    /// Connections cut so far.
    cuts: Arc<AtomicUsize>,
}

impl CutProxy {
    async fn start(upstream: String) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let armed: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pump(client, server, a.clone(), c.clone()));
            }
        });
        CutProxy {
            address,
            armed,
            cuts,
        }
    }

    fn arm(&self, marker: &[u8]) {
        *self.armed.lock().unwrap() = Some(marker.to_vec());
    }
}

/// Carries bytes both ways; cuts the connection after the armed marker's request got
/// its answer from the server.
async fn pump(
    mut client: TcpStream,
    mut server: TcpStream,
    armed: Arc<Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
) {
    let mut up = vec![0u8; 64 * 1024];
    let mut down = vec![0u8; 64 * 1024];
    // The end of the previous client chunk, for a marker split between two reads.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            read = client.read(&mut up) => {
                let Ok(n) = read else { return };
                if n == 0 || server.write_all(&up[..n]).await.is_err() {
                    return;
                }
                let mut seen = std::mem::take(&mut tail);
                seen.extend_from_slice(&up[..n]);
                let hit = {
                    let mut armed = armed.lock().unwrap();
                    let found = armed
                        .as_ref()
                        .is_some_and(|m| seen.windows(m.len()).any(|w| w == m.as_slice()));
                    if found {
                        *armed = None;
                    }
                    found
                };
                if hit {
                    // The request is in; wait for the server's answer and drop it
                    // with both connections.
                    let _ = tokio::time::timeout(
                        Duration::from_secs(10),
                        server.read(&mut down),
                    )
                    .await;
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                let keep = seen.len().min(256);
                tail = seen[seen.len() - keep..].to_vec();
            }
            read = server.read(&mut down) => {
                let Ok(n) = read else { return };
                if n == 0 || client.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One plain (non-idempotent) record with `value`.
fn batch(value: &str) -> Vec<ValidBatch> {
    let records = [NewRecord {
        value: Some(Bytes::from(value.to_owned())),
        ..NewRecord::default()
    }];
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    kafka_store::suite::valid(vec![out.freeze()]).unwrap()
}

/// Every record value of partition 0 of `topic`, in offset order.
async fn values(bridge: &IggyBridge, topic: &str) -> Vec<String> {
    let high = bridge.watermarks(topic, 0).await.unwrap().high_watermark;
    let mut out = Vec::new();
    let mut offset = 0i64;
    while offset < high {
        let read = bridge.read(topic, 0, offset, 1 << 20).await.unwrap();
        assert!(!read.batches.is_empty(), "nothing at {offset} below {high}");
        let before = offset;
        for bytes in &read.batches {
            let batch = RecordBatch::decode(bytes, &DecodeLimits::default()).unwrap();
            for record in batch.records().unwrap() {
                let record = record.unwrap();
                if record.offset >= offset {
                    let value = record.value.unwrap_or_default();
                    out.push(String::from_utf8_lossy(&value).into_owned());
                    offset = record.offset + 1;
                }
            }
        }
        assert!(
            offset > before,
            "a read at {before} below {high} made no progress"
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_reply_is_lost_is_not_sent_twice() {
    let Some(bin) = support::server_bin("an_append_whose_reply_is_lost_is_not_sent_twice") else {
        return;
    };
    let server = support::Server::start(&bin);
    let proxy = CutProxy::start(server.address.clone()).await;
    let config = iggy_kafka_bridge::BridgeConfig {
        address: proxy.address.clone(),
        call_timeout: Duration::from_secs(10),
        ..support::config(&server)
    };
    let bridge = IggyBridge::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()));
    let topic = format!("lost-reply-{}", support::run_id());
    support::create(&bridge, &topic, 1).await;
    bridge.append(&topic, 0, batch("before"), 0).await.unwrap();

    let marker = format!("lost-reply-marker-{}", support::run_id());
    proxy.arm(marker.as_bytes());
    let outcome = bridge.append(&topic, 0, batch(&marker), 0).await;
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the proxy did not see the marked request (outcome {outcome:?})"
    );
    // Either settled (the bridge found the send's messages once Iggy answered again:
    // the offset of the one copy) or unknown (the caller must look before it retries);
    // never "not written".
    let settled_at = match &outcome {
        Ok(appended) => Some(appended.base_offset),
        Err(StoreError::Timeout(_)) => None,
        Err(other) => panic!(
            "an append whose answer was lost must end settled or unknown (Timeout), not \
             {other:?}"
        ),
    };

    // The bridge answers again once its connection is back.
    let start = Instant::now();
    loop {
        match bridge.append(&topic, 0, batch("after"), 0).await {
            Ok(_) => break,
            Err(e) if start.elapsed() < RECOVERY => {
                eprintln!("after the cut: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no append within {RECOVERY:?} after the cut: {e}"),
        }
    }
    let stored = values(&bridge, &topic).await;
    let copies = stored.iter().filter(|v| **v == marker).count();
    assert_eq!(
        copies, 1,
        "Iggy stored the record whose answer was lost {copies} times: {stored:?}"
    );
    if let Some(offset) = settled_at {
        let at = usize::try_from(offset).unwrap();
        assert_eq!(
            stored.get(at),
            Some(&marker),
            "the settled append names offset {offset}, which does not hold it: {stored:?}"
        );
    }
    assert_eq!(stored.first().map(String::as_str), Some("before"));
    assert_eq!(stored.last().map(String::as_str), Some("after"));
    bridge.close().await;
}
