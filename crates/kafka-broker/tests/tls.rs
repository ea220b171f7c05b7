//! SSL listeners over real TCP with a rustls client: TLS 1.2 and 1.3, several listeners
//! each advertising its own address, clients that never complete a handshake,
//! certificate reload, and client certificates mapped to the session's principal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use bytes::Bytes;
use kafka_broker::pipeline::{Layer, Request, Verdict};
use kafka_broker::session::{Listener, SecurityProtocol, Session};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::tls::{Reload, TlsAcceptor, TlsSettings};
use kafka_broker::{BoundListener, BrokerConfig, Server, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, RequestBody, ResponseBody};
use kafka_sasl::{Authenticator, PrincipalMapper, SaslConfig, UsersFile};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::certs::{CertPair, TestCa, TlsFiles};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Records the principal of every request it sees.
#[derive(Debug, Default)]
struct Principals {
    seen: Mutex<Vec<String>>,
}

#[async_trait]
impl Layer for Principals {
    fn name(&self) -> &'static str {
        "principals"
    }

    async fn on_request(&self, session: &mut Session, _request: &mut Request) -> Verdict {
        self.seen
            .lock()
            .unwrap()
            .push(format!("{} {}", session.listener.name, session.principal));
        Verdict::Pass
    }
}

struct Gateway {
    addrs: Vec<SocketAddr>,
    principals: Arc<Principals>,
}

/// Serves each `(listener, tls)` on its own loopback port.
async fn start(listeners: Vec<(Listener, Option<TlsAcceptor>)>) -> Gateway {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let mut bound = Vec::new();
    let mut addrs = Vec::new();
    for (listener, tls) in listeners {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(tcp.local_addr().unwrap());
        let mut b = BoundListener::new(tcp, listener);
        if let Some(tls) = tls {
            b = b.with_tls(tls);
        }
        bound.push(b);
    }
    let principals = Arc::new(Principals::default());
    // SASL listeners need an authenticator; nobody logs in here.
    let users: Arc<UsersFile> = Arc::new(UsersFile::in_memory());
    let authenticator = Authenticator::new(SaslConfig::default(), Some(users), None, None);
    let server = Server::new(
        BrokerConfig::default(),
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
    .authenticator(Arc::new(authenticator))
    .layer(principals.clone());
    tokio::spawn(server.serve_listeners(bound, std::future::pending()));
    Gateway { addrs, principals }
}

fn settings(files: &TlsFiles) -> TlsSettings {
    let mut s = TlsSettings::new(&files.cert, &files.key);
    s.handshake_timeout = Duration::from_millis(800);
    s.reload_interval = Duration::from_millis(100);
    s
}

fn ssl(advertised: (&str, u16)) -> Listener {
    Listener::new("SSL", SecurityProtocol::Ssl).advertising(advertised.0, advertised.1)
}

/// One SSL listener advertising `advertised`, with a server certificate from `ca`
/// (settings changed by `configure`); its scratch directory goes with it.
struct SslGateway {
    dir: std::path::PathBuf,
    files: TlsFiles,
    tls: TlsAcceptor,
    gw: Gateway,
}

impl Drop for SslGateway {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn ssl_gateway(
    what: &str,
    ca: &TestCa,
    advertised: (&str, u16),
    configure: impl FnOnce(&mut TlsSettings, &TlsFiles),
) -> SslGateway {
    let dir = test_support::scratch_dir(what);
    let files = ca.write_server_files(&dir);
    let mut s = settings(&files);
    configure(&mut s, &files);
    let tls = TlsAcceptor::new(s).unwrap();
    let gw = start(vec![(ssl(advertised), Some(tls.clone()))]).await;
    SslGateway {
        dir,
        files,
        tls,
        gw,
    }
}

fn client_config(
    ca: &TestCa,
    version: &'static rustls::SupportedProtocolVersion,
    client: Option<&CertPair>,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca.cert_der().to_vec()))
        .unwrap();
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(pair) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(pair.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.key_der.clone())),
            )
            .unwrap(),
    };
    Arc::new(config)
}

async fn tls_connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    // As Kafka clients do; without it a TLS 1.2 handshake waits for delayed ACKs.
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    tokio::time::timeout(
        Duration::from_secs(10),
        TlsConnector::from(config).connect(name, tcp),
    )
    .await
    .expect("handshake in time")
}

fn frame(correlation_id: i32, version: i16, body: RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id,
        client_id: Some(ByteString::from_static("tls-test")),
        ..Default::default()
    };
    encode_request(&header, &body).unwrap()
}

/// One request and its response; `Err` when the connection fails or closes instead.
async fn call<S: AsyncRead + AsyncWrite + Unpin + ?Sized>(
    socket: &mut S,
    version: i16,
    body: RequestBody,
) -> std::io::Result<ResponseBody> {
    let key = body.api_key();
    socket.write_all(&frame(7, version, body)).await?;
    socket.flush().await?;
    let read = async {
        let size = socket.read_i32().await?;
        let mut buf = vec![0u8; usize::try_from(size).unwrap()];
        socket.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(Bytes::from(buf))
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("response or close in time")?;
    Ok(decode_response(key, version, &raw).unwrap().1)
}

/// The broker address a Metadata v12 response names.
async fn metadata_broker<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut S,
) -> std::io::Result<(String, i32)> {
    match call(socket, 12, MetadataRequest::default().into()).await? {
        ResponseBody::Metadata(m) => {
            assert_eq!(m.brokers.len(), 1);
            Ok((m.brokers[0].host.to_string(), m.brokers[0].port))
        }
        other => panic!("not a metadata response: {other:?}"),
    }
}

/// Waits up to 5 s for `count` to reach `expected` (the server counts a failure right
/// after it closed the socket).
async fn counted(count: impl Fn() -> u64, expected: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while count() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(count(), expected);
}

/// Waits until the server closes `socket` (EOF or reset); panics after `limit`.
async fn closed_within<S: AsyncRead + Unpin>(socket: &mut S, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(limit, socket.read(&mut buf)).await {
            Err(_) => panic!("still open after {limit:?}"),
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn metadata_over_tls_1_2_and_1_3() {
    let ca = TestCa::default();
    let SslGateway { gw, .. } =
        &ssl_gateway("tls-versions", &ca, ("tls.example", 19094), |_, _| {}).await;

    for (version, expected) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let mut s = tls_connect(gw.addrs[0], client_config(&ca, version, None))
            .await
            .unwrap();
        assert_eq!(s.get_ref().1.protocol_version(), Some(expected));
        let broker = metadata_broker(&mut s).await.unwrap();
        assert_eq!(broker, ("tls.example".to_string(), 19094));
    }
    // No client CA: the session stays anonymous.
    let seen = gw.principals.seen.lock().unwrap().clone();
    assert_eq!(seen, ["SSL User:ANONYMOUS", "SSL User:ANONYMOUS"]);
}

#[tokio::test]
async fn each_listener_advertises_its_own_address() {
    let dir = test_support::scratch_dir("tls-listeners");
    let ca = TestCa::default();
    let files = ca.write_server_files(&dir);
    let tls = TlsAcceptor::new(settings(&files)).unwrap();
    let plain = Listener::plaintext().advertising("plain.example", 1111);
    let gw = start(vec![(plain, None), (ssl(("ssl.example", 2222)), Some(tls))]).await;

    let mut p = TcpStream::connect(gw.addrs[0]).await.unwrap();
    let config = client_config(&ca, &rustls::version::TLS13, None);
    let mut s = tls_connect(gw.addrs[1], config).await.unwrap();
    assert_eq!(
        metadata_broker(&mut p).await.unwrap(),
        ("plain.example".into(), 1111)
    );
    assert_eq!(
        metadata_broker(&mut s).await.unwrap(),
        ("ssl.example".into(), 2222)
    );

    let find = FindCoordinatorRequest {
        key: ByteString::from_static("g"),
        ..Default::default()
    };
    for (socket, expected) in [
        (&mut p as &mut dyn AsyncReadWrite, ("plain.example", 1111)),
        (&mut s as &mut dyn AsyncReadWrite, ("ssl.example", 2222)),
    ] {
        match call(socket, 3, find.clone().into()).await.unwrap() {
            ResponseBody::FindCoordinator(r) => {
                assert_eq!((&*r.host, r.port), (expected.0, expected.1));
            }
            other => panic!("{other:?}"),
        }
        let describe = DescribeClusterRequest {
            endpoint_type: 1,
            ..Default::default()
        };
        match call(socket, 1, describe.into()).await.unwrap() {
            ResponseBody::DescribeCluster(r) => {
                let b = &r.brokers[0];
                assert_eq!((&*b.host, b.port), (expected.0, expected.1));
            }
            other => panic!("{other:?}"),
        }
    }
    let seen = gw.principals.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|s| s.starts_with("PLAINTEXT ")), "{seen:?}");
    assert!(seen.iter().any(|s| s.starts_with("SSL ")), "{seen:?}");
    let _ = std::fs::remove_dir_all(dir);
}

trait AsyncReadWrite: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncReadWrite for T {}

#[tokio::test]
async fn a_plaintext_client_on_a_tls_port_is_closed_at_once() {
    let ca = TestCa::default();
    let SslGateway { gw, tls, .. } =
        &ssl_gateway("tls-plaintext", &ca, ("localhost", 9094), |_, _| {}).await;

    let mut socket = TcpStream::connect(gw.addrs[0]).await.unwrap();
    socket
        .write_all(&frame(1, 12, MetadataRequest::default().into()))
        .await
        .unwrap();
    // Recognised by its first byte: closed well before the handshake timeout.
    let took = closed_within(&mut socket, Duration::from_secs(5)).await;
    assert!(took < Duration::from_millis(800), "{took:?}");
    counted(|| tls.handshake_failures("not_tls"), 1).await;
    assert_eq!(tls.handshake_failures("timeout"), 0);
}

#[tokio::test]
async fn a_handshake_that_never_finishes_is_closed_at_the_timeout() {
    let ca = TestCa::default();
    let SslGateway { gw, tls, .. } =
        &ssl_gateway("tls-stall", &ca, ("localhost", 9094), |_, _| {}).await;

    // A handshake record announcing 512 bytes of ClientHello, of which 4 arrive.
    let mut socket = TcpStream::connect(gw.addrs[0]).await.unwrap();
    socket
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc])
        .await
        .unwrap();
    // And one that sends nothing at all.
    let mut silent = TcpStream::connect(gw.addrs[0]).await.unwrap();
    let took = closed_within(&mut socket, Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(700), "{took:?}");
    closed_within(&mut silent, Duration::from_secs(10)).await;
    counted(|| tls.handshake_failures("timeout"), 2).await;

    // The gateway still serves complete handshakes.
    let config = client_config(&ca, &rustls::version::TLS13, None);
    let mut s = tls_connect(gw.addrs[0], config).await.unwrap();
    metadata_broker(&mut s).await.unwrap();
}

/// Replaces the server certificate and key in `files` with `pair`.
fn install(files: &TlsFiles, pair: &CertPair) {
    write_atomic(&files.cert, &pair.cert_pem);
    write_atomic(&files.key, &pair.key_pem);
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_changed_certificate_is_used_by_new_connections_and_a_bad_one_is_ignored() {
    let old_ca = TestCa::new("old CA");
    let new_ca = TestCa::new("new CA");
    let SslGateway { gw, tls, files, .. } =
        &ssl_gateway("tls-reload", &old_ca, ("localhost", 9094), |_, _| {}).await;
    let addr = gw.addrs[0];
    let trusts_old = client_config(&old_ca, &rustls::version::TLS13, None);
    let trusts_new = client_config(&new_ca, &rustls::version::TLS13, None);

    let mut old = tls_connect(addr, trusts_old.clone()).await.unwrap();
    metadata_broker(&mut old).await.unwrap();
    assert!(tls_connect(addr, trusts_new.clone()).await.is_err());
    assert_eq!(tls.check_files(), Reload::Unchanged);

    install(files, &new_ca.server_cert());
    // The watcher may have loaded it already.
    assert_ne!(tls.check_files(), Reload::Rejected);
    let mut new = tls_connect(addr, trusts_new.clone()).await.unwrap();
    metadata_broker(&mut new).await.unwrap();
    assert!(tls_connect(addr, trusts_old.clone()).await.is_err());
    // The connection made before keeps its session.
    metadata_broker(&mut old).await.unwrap();

    // A key that does not go with the certificate, then a certificate that is no PEM:
    // both refused, the new certificate stays.
    write_atomic(&files.key, &old_ca.server_cert().key_pem);
    assert_eq!(tls.check_files(), Reload::Rejected);
    install(files, &new_ca.server_cert());
    write_atomic(&files.cert, "not a certificate");
    assert_eq!(tls.check_files(), Reload::Rejected);
    let mut again = tls_connect(addr, trusts_new.clone()).await.unwrap();
    metadata_broker(&mut again).await.unwrap();
    metadata_broker(&mut old).await.unwrap();
}

#[tokio::test]
async fn client_certificates_are_required_and_mapped_to_the_principal() {
    let ca = TestCa::default();
    let SslGateway { gw, tls, .. } =
        &ssl_gateway("tls-client-auth", &ca, ("localhost", 9094), |s, files| {
            s.client_ca_file = Some(files.ca.clone());
            s.principal_mapper = PrincipalMapper::common_name();
        })
        .await;
    assert!(tls.requires_client_certificates());
    let addr = gw.addrs[0];

    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let alice = ca.client_cert_with("alice", Some("eng"), Some("Example"));
        let mut s = tls_connect(addr, client_config(&ca, version, Some(&alice)))
            .await
            .unwrap();
        metadata_broker(&mut s).await.unwrap();
    }
    let seen = gw.principals.seen.lock().unwrap().clone();
    assert_eq!(seen, ["SSL User:alice", "SSL User:alice"]);

    // No certificate, or one from another CA: no request gets through.
    let stranger = TestCa::new("other CA").client_cert("mallory");
    for client in [None, Some(&stranger)] {
        let config = client_config(&ca, &rustls::version::TLS13, client);
        if let Ok(mut s) = tls_connect(addr, config).await {
            // TLS 1.3 clients finish before the server has checked their certificate;
            // the refusal arrives as an alert on the first read.
            assert!(metadata_broker(&mut s).await.is_err());
        }
    }
    counted(|| tls.handshake_failures("handshake"), 2).await;
    assert_eq!(gw.principals.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn sasl_ssl_listeners_never_ask_for_a_client_certificate() {
    let dir = test_support::scratch_dir("tls-sasl-ssl");
    let ca = TestCa::default();
    let files = ca.write_server_files(&dir);
    let mut s = settings(&files);
    s.client_ca_file = Some(files.ca.clone());
    let tls = TlsAcceptor::new(s).unwrap();
    let gw = start(vec![
        (ssl(("localhost", 9094)), Some(tls.clone())),
        (
            Listener::new("SASL_SSL", SecurityProtocol::SaslSsl),
            Some(tls.clone()),
        ),
    ])
    .await;
    let config = client_config(&ca, &rustls::version::TLS13, None);
    // The SSL listener refuses the certificate-less client ...
    if let Ok(mut s) = tls_connect(gw.addrs[0], config.clone()).await {
        assert!(metadata_broker(&mut s).await.is_err());
    }
    // ... the SASL_SSL one completes the handshake and answers what is allowed before
    // authentication.
    let mut s = tls_connect(gw.addrs[1], config).await.unwrap();
    match call(&mut s, 3, ApiVersionsRequest::default().into())
        .await
        .unwrap()
    {
        ResponseBody::ApiVersions(r) => assert_eq!(r.error_code, 0),
        other => panic!("{other:?}"),
    }
    counted(|| tls.handshake_failures("handshake"), 1).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Figures for docs/limits.md, not a check: the cost of a connection with a full TLS
/// handshake (no resumption) and of a Metadata round trip, TLS 1.3 and 1.2 against
/// plaintext, one client at a time. Run with
/// `cargo test --release -p kafka-broker --test tls -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement"]
async fn measure_handshakes_and_round_trips() {
    let ca = TestCa::default();
    let setup = ssl_gateway("tls-measure", &ca, ("localhost", 9094), |_, _| {}).await;
    let plain = start(vec![(Listener::plaintext(), None)]).await;
    let n = 500u32;
    for (label, version) in [
        ("TLS 1.3", &rustls::version::TLS13),
        ("TLS 1.2", &rustls::version::TLS12),
    ] {
        // Full handshakes every time: no session resumption.
        let mut config = (*client_config(&ca, version, None)).clone();
        config.resumption = rustls::client::Resumption::disabled();
        let config = Arc::new(config);
        let started = Instant::now();
        for _ in 0..n {
            let mut s = tls_connect(setup.gw.addrs[0], config.clone())
                .await
                .unwrap();
            metadata_broker(&mut s).await.unwrap();
        }
        let per_connection = started.elapsed() / n;
        let mut s = tls_connect(setup.gw.addrs[0], config).await.unwrap();
        let started = Instant::now();
        for _ in 0..n * 10 {
            metadata_broker(&mut s).await.unwrap();
        }
        let per_request = started.elapsed() / (n * 10);
        println!(
            "{label}: connect+handshake+Metadata {per_connection:?}, Metadata round trip {per_request:?}"
        );
    }
    let started = Instant::now();
    for _ in 0..n {
        let mut s = TcpStream::connect(plain.addrs[0]).await.unwrap();
        s.set_nodelay(true).unwrap();
        metadata_broker(&mut s).await.unwrap();
    }
    let per_connection = started.elapsed() / n;
    let mut s = TcpStream::connect(plain.addrs[0]).await.unwrap();
    s.set_nodelay(true).unwrap();
    let started = Instant::now();
    for _ in 0..n * 10 {
        metadata_broker(&mut s).await.unwrap();
    }
    let per_request = started.elapsed() / (n * 10);
    println!("plaintext: connect+Metadata {per_connection:?}, Metadata round trip {per_request:?}");
}
