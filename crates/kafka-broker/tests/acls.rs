//! ACL management under abuse, over real TCP against the in-process server: a CreateAcls
//! flood up to the store's bound, oversized names and filters, requests over the entry
//! cap, and every enum code a client can send. Nothing panics, the store never passes
//! its bound, and the connection keeps answering where Kafka would answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use kafka_authz::store::MemoryAclStore;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::{BrokerConfig, Limits, Server, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::create_acls_request::{AclCreation, CreateAclsRequest};
use kafka_protocol::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use kafka_protocol::messages::describe_acls_request::DescribeAclsRequest;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_BINDINGS: usize = 500;
const MAX_ENTRIES: usize = 200;

async fn serve() -> std::net::SocketAddr {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = BrokerConfig {
        limits: Limits {
            max_entries_per_request: MAX_ENTRIES,
            ..Limits::default()
        },
        ..BrokerConfig::default()
    };
    let stores = Stores {
        log: store.clone(),
        offsets: store,
    };
    let server = Server::new(config, stores)
        .acl_store(Arc::new(MemoryAclStore::new().with_max(MAX_BINDINGS)));
    tokio::spawn(server.serve(listener, std::future::pending()));
    addr
}

struct Client {
    socket: TcpStream,
    next: i32,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> Client {
        Client {
            socket: TcpStream::connect(addr).await.unwrap(),
            next: 0,
        }
    }

    /// Sends one request; its response, or `None` when the connection was closed.
    async fn try_call(&mut self, version: i16, body: RequestBody) -> Option<ResponseBody> {
        self.next += 1;
        let key = body.api_key();
        let header = RequestHeader {
            request_api_key: key.as_i16(),
            request_api_version: version,
            correlation_id: self.next,
            client_id: Some(ByteString::from_static("acl-abuse")),
            ..Default::default()
        };
        let frame = encode_request(&header, &body).unwrap();
        if self.socket.write_all(&frame).await.is_err() {
            return None;
        }
        let read = async {
            let size = self.socket.read_i32().await.ok()?;
            let mut buf = vec![0; usize::try_from(size).ok()?];
            self.socket.read_exact(&mut buf).await.ok()?;
            Some(Bytes::from(buf))
        };
        let bytes = tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("no answer and no close within 20 s")?;
        let (h, body) = decode_response(key, version, &bytes).unwrap();
        assert_eq!(h.correlation_id, self.next);
        Some(body)
    }

    async fn call(&mut self, version: i16, body: RequestBody) -> ResponseBody {
        self.try_call(version, body)
            .await
            .expect("connection closed")
    }
}

fn creation(name: &str, principal: &str, host: &str) -> AclCreation {
    AclCreation {
        resource_type: 2,
        resource_name: ByteString::from(name),
        resource_pattern_type: 3,
        principal: ByteString::from(principal),
        host: ByteString::from(host),
        operation: 3,
        permission_type: 3,
        ..AclCreation::default()
    }
}

fn creates(creations: Vec<AclCreation>) -> RequestBody {
    CreateAclsRequest {
        creations,
        ..CreateAclsRequest::default()
    }
    .into()
}

fn describe_all() -> RequestBody {
    DescribeAclsRequest {
        resource_type_filter: 1,
        pattern_type_filter: 1,
        operation: 1,
        permission_type: 1,
        ..no_names()
    }
    .into()
}

/// A DescribeAcls request with no name, principal or host filter (the generated default
/// filters on empty strings).
fn no_names() -> DescribeAclsRequest {
    DescribeAclsRequest {
        resource_name_filter: None,
        principal_filter: None,
        host_filter: None,
        ..DescribeAclsRequest::default()
    }
}

/// A DeleteAcls filter with no name, principal or host filter.
fn any_names() -> DeleteAclsFilter {
    DeleteAclsFilter {
        resource_name_filter: None,
        principal_filter: None,
        host_filter: None,
        ..DeleteAclsFilter::default()
    }
}

fn described(body: &ResponseBody) -> usize {
    let ResponseBody::DescribeAcls(r) = body else {
        panic!("not DescribeAcls: {body:?}")
    };
    assert_eq!(r.error_code, 0, "{r:?}");
    r.resources.iter().map(|res| res.acls.len()).sum()
}

fn codes(body: &ResponseBody) -> Vec<i16> {
    let ResponseBody::CreateAcls(r) = body else {
        panic!("not CreateAcls: {body:?}")
    };
    r.results.iter().map(|x| x.error_code).collect()
}

#[tokio::test]
async fn a_create_flood_stops_at_the_store_bound() {
    let addr = serve().await;
    let mut client = Client::connect(addr).await;
    let full = ErrorCode::POLICY_VIOLATION.code();
    let mut accepted = 0usize;
    let mut refused = 0usize;
    // 7 requests of 100 distinct bindings: 700 asked, 500 fit.
    for round in 0..7 {
        let batch = (0..100)
            .map(|i| creation(&format!("t-{round}-{i}"), "User:flood", "*"))
            .collect();
        let answer = client.call(3, creates(batch)).await;
        for code in codes(&answer) {
            if code == 0 {
                accepted += 1;
            } else {
                assert_eq!(code, full);
                refused += 1;
            }
        }
    }
    assert_eq!(accepted, MAX_BINDINGS);
    assert_eq!(refused, 700 - MAX_BINDINGS);
    assert_eq!(
        described(&client.call(3, describe_all()).await),
        MAX_BINDINGS
    );
    // Deleting makes room again.
    let delete = DeleteAclsRequest {
        filters: vec![DeleteAclsFilter {
            resource_type_filter: 2,
            resource_name_filter: Some(ByteString::from_static("t-0-0")),
            pattern_type_filter: 3,
            operation: 1,
            permission_type: 1,
            ..any_names()
        }],
        ..DeleteAclsRequest::default()
    };
    let ResponseBody::DeleteAcls(d) = client.call(2, delete.into()).await else {
        panic!("not DeleteAcls")
    };
    assert_eq!(d.filter_results[0].matching_acls.len(), 1);
    let again = client
        .call(1, creates(vec![creation("late", "User:flood", "*")]))
        .await;
    assert_eq!(codes(&again), vec![0]);
}

#[tokio::test]
async fn oversized_fields_and_requests_are_refused_without_harm() {
    let addr = serve().await;
    let mut client = Client::connect(addr).await;
    let huge = "x".repeat(20_000);
    let answer = client
        .call(
            3,
            creates(vec![
                creation(&huge, "User:a", "*"),
                creation("t", &format!("User:{huge}"), "*"),
                creation("t", "User:a", &huge),
                creation("t", "User:a", "*"),
            ]),
        )
        .await;
    let invalid = ErrorCode::INVALID_REQUEST.code();
    assert_eq!(codes(&answer), vec![invalid, invalid, invalid, 0]);
    // A huge filter matches nothing and costs nothing.
    let describe = DescribeAclsRequest {
        resource_name_filter: Some(ByteString::from(huge.clone())),
        principal_filter: Some(ByteString::from(huge.clone())),
        ..match describe_all() {
            RequestBody::DescribeAcls(d) => d,
            _ => unreachable!(),
        }
    };
    assert_eq!(described(&client.call(3, describe.into()).await), 0);
    assert_eq!(described(&client.call(3, describe_all()).await), 1);

    // Over the entry cap: closed before anything is stored or deleted.
    let too_many = (0..=MAX_ENTRIES)
        .map(|i| creation(&format!("cap-{i}"), "User:a", "*"))
        .collect();
    assert!(client.try_call(3, creates(too_many)).await.is_none());
    let mut client = Client::connect(addr).await;
    let filters = vec![
        DeleteAclsFilter {
            resource_type_filter: 1,
            pattern_type_filter: 1,
            operation: 1,
            permission_type: 1,
            ..any_names()
        };
        MAX_ENTRIES + 1
    ];
    let delete = DeleteAclsRequest {
        filters,
        ..DeleteAclsRequest::default()
    };
    assert!(client.try_call(3, delete.into()).await.is_none());
    let mut client = Client::connect(addr).await;
    assert_eq!(described(&client.call(3, describe_all()).await), 1);
}

#[tokio::test]
async fn every_enum_code_is_answered() {
    let addr = serve().await;
    let mut client = Client::connect(addr).await;
    let valid_type = |c: i8| (2..=6).contains(&c);
    let mut stored = 0usize;
    // Every code in each field, the others valid.
    for field in 0..4 {
        let batch: Vec<AclCreation> = (i8::MIN..=i8::MAX)
            .step_by(3)
            .map(|code| {
                let mut c = creation(&format!("e-{field}-{code}"), "User:a", "*");
                match field {
                    0 => c.resource_type = code,
                    1 => c.resource_pattern_type = code,
                    2 => c.operation = code,
                    _ => c.permission_type = code,
                }
                if field == 0 && code == 4 {
                    c.resource_name = ByteString::from_static("kafka-cluster");
                }
                c
            })
            .collect();
        let expected: Vec<bool> = batch
            .iter()
            .map(|c| {
                valid_type(c.resource_type)
                    && (3..=4).contains(&c.resource_pattern_type)
                    && (2..=14).contains(&c.operation)
                    && (2..=3).contains(&c.permission_type)
                    && !(c.resource_type == 4 && c.resource_pattern_type != 3)
            })
            .collect();
        let answer = codes(&client.call(3, creates(batch)).await);
        for (ok, code) in expected.iter().zip(&answer) {
            if *ok {
                assert_eq!(*code, 0);
                stored += 1;
            } else {
                assert_eq!(*code, ErrorCode::INVALID_REQUEST.code());
            }
        }
    }
    assert!(stored > 0);
    // Describe and delete with every code: answered, never a closed connection.
    for code in (i8::MIN..=i8::MAX).step_by(5) {
        let describe = DescribeAclsRequest {
            resource_type_filter: code,
            pattern_type_filter: code,
            operation: 1,
            permission_type: 1,
            ..no_names()
        };
        let ResponseBody::DescribeAcls(r) = client.call(3, describe.into()).await else {
            panic!("not DescribeAcls")
        };
        let known = (1..=6).contains(&code) && (1..=4).contains(&code);
        assert_eq!(r.error_code == 0, known, "code {code}: {r:?}");
        let delete = DeleteAclsRequest {
            filters: vec![DeleteAclsFilter {
                resource_type_filter: 2,
                pattern_type_filter: 1,
                operation: code,
                permission_type: code,
                ..any_names()
            }],
            ..DeleteAclsRequest::default()
        };
        let ResponseBody::DeleteAcls(d) = client.call(3, delete.into()).await else {
            panic!("not DeleteAcls")
        };
        let known = (1..=3).contains(&code);
        assert_eq!(d.filter_results[0].error_code == 0, known, "code {code}");
    }
}
