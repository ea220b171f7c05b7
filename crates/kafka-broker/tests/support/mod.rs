//! What the transaction suites share: a gateway on a memory store served over real TCP,
//! and a raw Kafka client that sends one request and reads its answer.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Server, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub fn bs(s: &str) -> ByteString {
    ByteString::from(s.to_string())
}

/// A memory store holding topic `topic` with `partitions` partitions.
pub async fn store_with(topic: &str, partitions: i32) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: topic.into(),
                partitions,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    store
}

/// A running gateway; [`Gateway::stop`] shuts it down.
pub struct Gateway {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// A gateway with `config` on `store` (log and offsets), on a random loopback port.
    pub async fn start(store: Arc<MemoryStore>, config: BrokerConfig) -> Gateway {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let server = Server::new(
            config,
            Stores {
                log: store.clone(),
                offsets: store,
            },
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            let _ = server
                .serve(tcp, async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Gateway {
            addr,
            stop: Some(stop),
            done,
        }
    }

    pub async fn client(&self) -> Client {
        Client {
            socket: TcpStream::connect(self.addr).await.unwrap(),
            correlation: 0,
        }
    }

    pub async fn stop(mut self) {
        drop(self.stop.take());
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.done).await;
    }
}

/// One connection speaking raw Kafka requests.
pub struct Client {
    socket: TcpStream,
    correlation: i32,
}

impl Client {
    /// Sends `body` as `key` at `version` and returns the decoded answer.
    pub async fn call(&mut self, key: ApiKey, version: i16, body: RequestBody) -> ResponseBody {
        self.correlation += 1;
        let header = RequestHeader {
            request_api_key: key.as_i16(),
            request_api_version: version,
            correlation_id: self.correlation,
            client_id: Some(bs("txn-test")),
            ..Default::default()
        };
        self.socket
            .write_all(&encode_request(&header, &body).unwrap())
            .await
            .unwrap();
        let len = usize::try_from(self.socket.read_u32().await.unwrap()).unwrap();
        let mut raw = vec![0u8; len];
        self.socket.read_exact(&mut raw).await.unwrap();
        decode_response(key, version, &raw.into()).unwrap().1
    }
}
