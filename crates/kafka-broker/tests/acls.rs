//! ACL management under abuse, over real TCP against the in-process server: a CreateAcls
//! flood up to the store's bound, oversized names and filters, requests over the entry
//! cap, and every enum code a client can send. Nothing panics, the store never passes
//! its bound, and the connection keeps answering where Kafka would answer. Over SASL:
//! only principals with ALTER (DESCRIBE) on the cluster manage (list) bindings, and a
//! change decides the next request at once.

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
    // Authorization forced on a plaintext listener, its anonymous clients super users:
    // these tests are about the ACL APIs' own answers, not about who may call them.
    let mut config = BrokerConfig {
        limits: Limits {
            max_entries_per_request: MAX_ENTRIES,
            ..Limits::default()
        },
        ..BrokerConfig::default()
    };
    config.authorization.enabled = Some(true);
    config.sasl.super_users = vec!["User:ANONYMOUS".into()];
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

mod sasl {
    use super::*;
    use kafka_broker::config::SaslSettings;
    use kafka_broker::session::{Listener, SecurityProtocol};
    use kafka_sasl::{Authenticator, SaslConfig, UsersFile};
    use test_support::sasl_client::{AuthOutcome, Flow, SaslClient};

    const USERS: &[(&str, &str)] = &[("alice", "a-pw"), ("admin", "admin-pw")];

    async fn start() -> std::net::SocketAddr {
        start_with(Arc::new(MemoryAclStore::new()), Duration::from_secs(10)).await
    }

    async fn start_with(acls: Arc<MemoryAclStore>, refresh: Duration) -> std::net::SocketAddr {
        let users = Arc::new(UsersFile::in_memory().with_plain_iterations(4096));
        for (user, password) in USERS {
            users.set_password(user, password).unwrap();
        }
        let authenticator = Authenticator::new(SaslConfig::default(), Some(users), None, None);
        let mut config = BrokerConfig {
            sasl: SaslSettings {
                super_users: vec!["User:admin".into()],
                ..SaslSettings::default()
            },
            ..BrokerConfig::default()
        };
        config.authorization.allow_everyone_if_no_acl_found = false;
        config.authorization.acl_refresh_interval = refresh;
        let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
        let stores = Stores {
            log: store.clone(),
            offsets: store,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Server::new(config, stores)
            .listener(Listener::new("SASL", SecurityProtocol::SaslPlaintext))
            .authenticator(Arc::new(authenticator))
            .acl_store(acls);
        tokio::spawn(server.serve(listener, std::future::pending()));
        addr
    }

    async fn login(addr: std::net::SocketAddr, user: &str) -> SaslClient<TcpStream> {
        let socket = TcpStream::connect(addr).await.unwrap();
        let mut c = SaslClient::new(socket).with_timeout(Duration::from_secs(10));
        let password = USERS.iter().find(|(u, _)| *u == user).unwrap().1;
        let outcome = c
            .plain(Flow::Authenticate(2), user, password)
            .await
            .unwrap();
        assert!(
            matches!(outcome, AuthOutcome::Authenticated { .. }),
            "{outcome:?}"
        );
        c
    }

    async fn call(c: &mut SaslClient<TcpStream>, body: RequestBody) -> ResponseBody {
        c.request(3, body).await.unwrap().expect("an answer")
    }

    fn cluster_alter_for(principal: &str) -> AclCreation {
        AclCreation {
            resource_type: 4,
            resource_name: ByteString::from_static("kafka-cluster"),
            resource_pattern_type: 3,
            principal: ByteString::from(principal),
            host: ByteString::from_static("*"),
            operation: 7,
            permission_type: 3,
            ..AclCreation::default()
        }
    }

    #[tokio::test]
    async fn only_principals_allowed_on_the_cluster_manage_acls_and_changes_apply_at_once() {
        let addr = start().await;
        let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
        let mut alice = login(addr, "alice").await;
        let mut admin = login(addr, "admin").await;

        // Alice has no ALTER (nor DESCRIBE) on the cluster: every entry is refused and
        // nothing is stored.
        let answer = call(
            &mut alice,
            creates(vec![
                creation("t", "User:alice", "*"),
                creation("u", "User:alice", "*"),
            ]),
        )
        .await;
        assert_eq!(codes(&answer), vec![denied, denied]);
        let delete = DeleteAclsRequest {
            filters: vec![any_names(), any_names()],
            ..DeleteAclsRequest::default()
        };
        let ResponseBody::DeleteAcls(d) = call(&mut alice, delete.clone().into()).await else {
            panic!("not DeleteAcls")
        };
        assert!(
            d.filter_results
                .iter()
                .all(|f| f.error_code == denied && f.matching_acls.is_empty())
        );
        assert_eq!(d.filter_results.len(), 2);
        let ResponseBody::DescribeAcls(r) = call(&mut alice, describe_all()).await else {
            panic!("not DescribeAcls")
        };
        assert_eq!(r.error_code, denied);
        assert!(r.resources.is_empty());
        assert_eq!(described(&call(&mut admin, describe_all()).await), 0);

        // The super user grants her ALTER on the cluster: her very next CreateAcls passes.
        let granted = call(&mut admin, creates(vec![cluster_alter_for("User:alice")])).await;
        assert_eq!(codes(&granted), vec![0]);
        let answer = call(&mut alice, creates(vec![creation("t", "User:alice", "*")])).await;
        assert_eq!(codes(&answer), vec![0]);
        // ALTER implies DESCRIBE: she may list now.
        assert_eq!(described(&call(&mut alice, describe_all()).await), 2);

        // Revoked: refused again at once.
        let ResponseBody::DeleteAcls(d) = call(
            &mut admin,
            DeleteAclsRequest {
                filters: vec![DeleteAclsFilter {
                    resource_type_filter: 4,
                    pattern_type_filter: 1,
                    operation: 1,
                    permission_type: 1,
                    ..any_names()
                }],
                ..DeleteAclsRequest::default()
            }
            .into(),
        )
        .await
        else {
            panic!("not DeleteAcls")
        };
        assert_eq!(d.filter_results[0].matching_acls.len(), 1);
        let answer = call(&mut alice, creates(vec![creation("v", "User:alice", "*")])).await;
        assert_eq!(codes(&answer), vec![denied]);
        assert_eq!(described(&call(&mut admin, describe_all()).await), 1);
    }

    #[tokio::test]
    async fn changes_made_elsewhere_apply_after_the_refresh_interval() {
        use kafka_authz::store::AclStore;
        use kafka_authz::{AclBinding, Operation, PatternType, Permission, ResourceType};
        let store = Arc::new(MemoryAclStore::new());
        let addr = start_with(store.clone(), Duration::from_millis(50)).await;
        let mut alice = login(addr, "alice").await;
        let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
        let answer = call(&mut alice, creates(vec![creation("t", "User:alice", "*")])).await;
        assert_eq!(codes(&answer), vec![denied]);
        // Another gateway sharing the store grants alice ALTER on the cluster.
        store
            .add(vec![AclBinding {
                resource_type: ResourceType::Cluster,
                name: "kafka-cluster".into(),
                pattern: PatternType::Literal,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: Operation::Alter,
                permission: Permission::Allow,
            }])
            .await
            .unwrap();
        // Taken up by a periodic refresh: retried until it is, for at most 10 s.
        let mut tries = 0;
        loop {
            tries += 1;
            let answer = call(&mut alice, creates(vec![creation("t", "User:alice", "*")])).await;
            if codes(&answer) == vec![0] {
                break;
            }
            assert_eq!(codes(&answer), vec![denied]);
            assert!(tries < 200, "the grant was never taken up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
