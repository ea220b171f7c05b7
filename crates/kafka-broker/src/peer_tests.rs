//! The inter-gateway client against in-process gateways: plain, SASL PLAIN and SCRAM,
//! TLS; timeouts, and a new connection after the other gateway restarts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::config::BrokerConfig;
use crate::server::{BoundListener, Server, Stores};
use crate::session::{Listener, SecurityProtocol};
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::tls::{TlsAcceptor, TlsSettings};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_sasl::{Authenticator, SaslConfig, ScramCredential, ScramCredentialStore, UsersFile};
use kafka_store::cluster::{ManualMembership, Member, MemberListener};
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const PASSWORD: &str = "peer-secret-9f3";

fn stores() -> Stores {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    Stores {
        log: store.clone(),
        offsets: store,
    }
}

/// A gateway serving `listener` on `addr` (any port when 0) until the sender drops.
async fn serve(
    addr: SocketAddr,
    listener: Listener,
    tls: Option<TlsAcceptor>,
) -> (SocketAddr, oneshot::Sender<()>) {
    let tcp = TcpListener::bind(addr).await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let users = Arc::new(UsersFile::in_memory().with_plain_iterations(4096));
    users.set_password("gw", PASSWORD).unwrap();
    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let c = ScramCredential::from_password(m, PASSWORD, 4096).unwrap();
        users.upsert("gw", c).await.unwrap();
    }
    let authenticator = Authenticator::new(
        SaslConfig::default(),
        Some(users.clone()),
        Some(users),
        None,
    );
    let mut bound = BoundListener::new(tcp, listener);
    if let Some(tls) = tls {
        bound = bound.with_tls(tls);
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let server =
        Server::new(BrokerConfig::default(), stores()).authenticator(Arc::new(authenticator));
    tokio::spawn(server.serve_listeners(vec![bound], async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

fn member(node_id: i32, epoch: u64, name: &str, addr: SocketAddr) -> Member {
    Member {
        node_id,
        epoch,
        listeners: vec![MemberListener {
            name: name.into(),
            host: addr.ip().to_string(),
            port: addr.port(),
        }],
    }
}

/// A client of node 2 at `addr`, this gateway being node 1.
fn client(config: InterGatewayConfig, addr: SocketAddr) -> (PeerClient, Arc<ManualMembership>) {
    let me = member(1, 1, &config.listener, "127.0.0.1:1".parse().unwrap());
    let membership = Arc::new(ManualMembership::new(
        me.clone(),
        vec![me, member(2, 1, &config.listener, addr)],
    ));
    let c = PeerClient::new(config);
    c.follow(membership.clone());
    (c, membership)
}

fn metadata() -> RequestBody {
    MetadataRequest {
        topics: Some(Vec::new()),
        ..Default::default()
    }
    .into()
}

const WAIT: Duration = Duration::from_secs(10);

async fn round_trip(c: &PeerClient) {
    let got = c.call(2, metadata(), WAIT).await.unwrap();
    let ResponseBody::Metadata(m) = got else {
        panic!("not Metadata: {got:?}")
    };
    assert!(m.brokers.iter().any(|b| b.node_id == 0 || b.node_id >= 0));
    let got = c
        .call(2, ApiVersionsRequest::default().into(), WAIT)
        .await
        .unwrap();
    let ResponseBody::ApiVersions(v) = got else {
        panic!("not ApiVersions")
    };
    assert_eq!(v.error_code, 0);
    assert!(
        v.api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::WriteTxnMarkers.as_i16())
    );
}

fn sasl_config(mechanism: &str, password: &str) -> InterGatewayConfig {
    InterGatewayConfig {
        listener: "SASL".into(),
        sasl_mechanism: Some(mechanism.into()),
        username: Some("gw".into()),
        password: Some(password.into()),
        // These tests speak plaintext on loopback on purpose.
        allow_plain_without_tls: true,
        ..InterGatewayConfig::default()
    }
}

#[tokio::test]
async fn plain_round_trip_and_negotiated_versions() {
    let (addr, _stop) = serve("127.0.0.1:0".parse().unwrap(), Listener::default(), None).await;
    let (c, _m) = client(InterGatewayConfig::default(), addr);
    round_trip(&c).await;
    // WriteTxnMarkers: both sides serve 1 only.
    assert_eq!(
        negotiate(ApiKey::WriteTxnMarkers, Some(VersionRange::new(1, 2))),
        Some(1)
    );
    assert_eq!(
        negotiate(ApiKey::WriteTxnMarkers, Some(VersionRange::new(2, 2))),
        None
    );
    // An unknown node has no address.
    assert!(matches!(
        c.call(7, metadata(), WAIT).await,
        Err(PeerError::NoAddress(7))
    ));
}

#[tokio::test]
async fn sasl_plain_and_scram_log_in() {
    let sasl = Listener::new("SASL", SecurityProtocol::SaslPlaintext);
    let (addr, _stop) = serve("127.0.0.1:0".parse().unwrap(), sasl, None).await;
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let (c, _m) = client(sasl_config(mechanism, PASSWORD), addr);
        round_trip(&c).await;
        let (wrong, _m) = client(sasl_config(mechanism, "not-the-password"), addr);
        let err = wrong.call(2, metadata(), WAIT).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, PeerError::Transport(_)),
            "{mechanism}: {text}"
        );
        assert!(!text.contains("not-the-password"), "{mechanism}: {text}");
    }
    // Without credentials the gateway refuses the requests: no answer.
    let (anonymous, _m) = client(
        InterGatewayConfig {
            listener: "SASL".into(),
            ..InterGatewayConfig::default()
        },
        addr,
    );
    assert!(anonymous.call(2, metadata(), WAIT).await.is_err());
}

#[tokio::test]
async fn plain_in_clear_is_refused_unless_allowed() {
    let sasl = Listener::new("SASL", SecurityProtocol::SaslPlaintext);
    let (addr, _stop) = serve("127.0.0.1:0".parse().unwrap(), sasl, None).await;
    let (c, _m) = client(
        InterGatewayConfig {
            allow_plain_without_tls: false,
            ..sasl_config("PLAIN", PASSWORD)
        },
        addr,
    );
    let err = c.call(2, metadata(), WAIT).await.unwrap_err().to_string();
    assert!(err.contains("in clear"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
}

#[test]
fn a_peer_asking_for_more_scram_iterations_than_allowed_is_refused() {
    let nonce = "clientnonce0123456789";
    let first_bare = format!("n=gw,r={nonce}");
    let server_first = |iterations: u32| format!("r={nonce}server,s=c2FsdHNhbHQ=,i={iterations}");
    for (iterations, ok) in [
        (4096, true),
        (16384, true),
        (16385, false),
        (1_000_000, false),
        (4095, false),
    ] {
        let got = scram_final(
            ScramMechanism::Sha256,
            PASSWORD,
            nonce,
            &first_bare,
            server_first(iterations).as_bytes(),
            16384,
        );
        assert_eq!(got.is_ok(), ok, "{iterations}");
    }
}

#[tokio::test]
async fn tls_checks_the_gateway_certificate() {
    let ca = test_support::certs::TestCa::default();
    let dir = test_support::scratch_dir("peer-tls");
    let files = ca.write_server_files(&dir);
    let tls = TlsAcceptor::new(TlsSettings::new(&files.cert, &files.key)).unwrap();
    let ssl = Listener::new("SSL", SecurityProtocol::Ssl);
    let (addr, _stop) = serve("127.0.0.1:0".parse().unwrap(), ssl, Some(tls)).await;
    let config = InterGatewayConfig {
        listener: "SSL".into(),
        tls_ca_file: Some(files.ca.clone()),
        tls_server_name: Some("localhost".into()),
        ..InterGatewayConfig::default()
    };
    let (c, _m) = client(config.clone(), addr);
    round_trip(&c).await;
    // Another CA: the handshake fails.
    let other = test_support::certs::TestCa::new("someone else");
    let other_ca = dir.join("other.crt");
    std::fs::write(&other_ca, other.cert_pem()).unwrap();
    let (c, _m) = client(
        InterGatewayConfig {
            tls_ca_file: Some(other_ca),
            ..config
        },
        addr,
    );
    let err = c.call(2, metadata(), WAIT).await.unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_silent_gateway_times_out_and_a_busy_one_refuses_more_callers() {
    // Accepts and never answers.
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((s, _)) = tcp.accept().await {
            kept.push(s);
        }
    });
    let (c, _m) = client(
        InterGatewayConfig {
            max_pending_calls: 1,
            ..InterGatewayConfig::default()
        },
        addr,
    );
    let c = Arc::new(c);
    let slow = {
        let c = Arc::clone(&c);
        tokio::spawn(async move { c.call(2, metadata(), Duration::from_millis(300)).await })
    };
    // The first caller holds the only place until it times out: another is refused
    // at once.
    let peer = c.peer(2);
    while peer.pending.available_permits() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let refused = c.call(2, metadata(), Duration::from_secs(5)).await;
    assert!(
        matches!(&refused, Err(PeerError::Transport(t)) if t.contains("waiting")),
        "{refused:?}"
    );
    assert!(matches!(slow.await.unwrap(), Err(PeerError::Timeout)));
    held.abort();
}

#[tokio::test]
async fn a_restarted_gateway_gets_a_new_connection() {
    let (addr, stop) = serve("127.0.0.1:0".parse().unwrap(), Listener::default(), None).await;
    let (c, membership) = client(InterGatewayConfig::default(), addr);
    round_trip(&c).await;
    drop(stop);
    // Down: calls fail, and nothing waits past the timeout.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut failed = false;
    for _ in 0..20 {
        if c.call(2, metadata(), Duration::from_secs(2)).await.is_err() {
            failed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(failed, "calls kept succeeding after the gateway stopped");
    // Back on the same port: the failed connection was dropped, a new one is opened.
    let (_, _stop) = serve(addr, Listener::default(), None).await;
    round_trip(&c).await;
    // A new epoch of the member (a restart the membership saw) also replaces it.
    let me = member(1, 1, "PLAINTEXT", "127.0.0.1:1".parse().unwrap());
    membership.set_members(vec![me, member(2, 2, "PLAINTEXT", addr)]);
    round_trip(&c).await;
}
