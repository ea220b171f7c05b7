//! Log lines carry the connection's span (id, peer, listener, client id, principal) and
//! the request's (API, version, correlation id), so handlers and layers need not repeat
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use bytes::Bytes;
use kafka_broker::pipeline::{Layer, Request, Verdict};
use kafka_broker::session::Session;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::{BrokerConfig, Server, Stores};
use kafka_protocol::api::encode_request;
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, RequestBody};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Logs one line per request from inside the pipeline.
#[derive(Debug)]
struct Logs;

#[async_trait]
impl Layer for Logs {
    fn name(&self) -> &'static str {
        "logs"
    }
    async fn on_request(&self, _: &mut Session, _: &mut Request) -> Verdict {
        tracing::info!("layer saw a request");
        Verdict::Pass
    }
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn frame(correlation_id: i32, version: i16, body: RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id,
        client_id: Some(ByteString::from_static("span-test-client")),
        ..Default::default()
    };
    encode_request(&header, &body).unwrap()
}

async fn exchange(socket: &mut TcpStream, frame: Bytes) {
    socket.write_all(&frame).await.unwrap();
    let size = tokio::time::timeout(Duration::from_secs(5), socket.read_i32())
        .await
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; usize::try_from(size).unwrap()];
    socket.read_exact(&mut buf).await.unwrap();
}

// One thread: the server's tasks log into this test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn log_lines_carry_the_connection_and_request_spans() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(
        BrokerConfig::default(),
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
    .layer(Arc::new(Logs));
    tokio::spawn(server.serve(listener, std::future::pending()));

    let mut c = TcpStream::connect(addr).await.unwrap();
    let local = c.local_addr().unwrap();
    exchange(&mut c, frame(1, 3, ApiVersionsRequest::default().into())).await;
    exchange(&mut c, frame(2, 12, MetadataRequest::default().into())).await;

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("layer saw a request"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let conn = format!("connection{{id=1 peer={local} listener=PLAINTEXT");
    assert!(lines[0].contains(&conn), "{}", lines[0]);
    assert!(
        lines[0].contains("request{api=\"ApiVersions\" version=3 correlation_id=1}"),
        "{}",
        lines[0]
    );
    // The client id, known from the first request on, is on the connection's span.
    assert!(
        lines[1].contains("client_id=span-test-client"),
        "{}",
        lines[1]
    );
    assert!(
        lines[1].contains("principal=User:ANONYMOUS"),
        "{}",
        lines[1]
    );
    assert!(
        lines[1].contains("request{api=\"Metadata\" version=12 correlation_id=2}"),
        "{}",
        lines[1]
    );
}
