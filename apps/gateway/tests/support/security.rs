//! Harness for the real-client security suites (`tests/clients/security/`): a gateway with
//! a `SASL_SSL` listener and an `SSL` listener that requires client certificates, and
//! everything a client needs to authenticate to it.
//!
//! [`SecureSetup::new`] makes, in a scratch directory:
//! - a throw-away CA, a server certificate for `127.0.0.1` and a client certificate with
//!   `CN=alice` (`test_support::certs`), the client's key and certificate also as one PEM
//!   file (the Java client's `ssl.keystore.type=PEM`);
//! - a users file written by the gateway's own `users set-password` CLI: `admin` (a super
//!   user through `IGGY_KAFKA_SUPER_USERS`), `alice` and `bob`; SCRAM credentials for the
//!   clients without an admin API come from `users set-scram` ([`SecureSetup::seed_scram`]);
//! - an ES256 key pair (ring), its public key as a JWKS file, and [`Jwt::mint`] for signed
//!   tokens with `sub`, `iss`, `aud`, `iat` and `exp`;
//! - on request, a loopback OAuth token endpoint ([`TokenEndpoint`]) that answers
//!   client-credentials POSTs with a freshly minted token, for the Java client's
//!   `sasl.oauthbearer.token.endpoint.url`.
//!
//! [`SecureSetup::start`] then starts the gateway on two fixed free loopback ports
//! (`IGGY_KAFKA_LISTENERS=SASL_SSL://...,SSL://...`) and waits until both accept; the
//! suites get the addresses, files and credentials in their environment
//! ([`SecureGateway::script_env`]). [`SecureSetup::start_on`] with `Backend::Iggy` puts a
//! fresh Iggy server behind the gateway instead of the users file: PLAIN then logs into
//! Iggy (the user `alice` is made there with the Iggy SDK) and Iggy's root user is the super
//! user; `bob` and `carol` get Iggy users too (the client certificate's principal is
//! `alice`, its CN), since with the bridge each principal is held to its Iggy user's
//! permissions. Secrets here are test values, made per run.

use super::{
    Backend, Gateway, IggyServer, STARTUP_TIMEOUT, bridge_env, iggy_server_bin, scratch_dir, unique,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use test_support::certs::TestCa;
use test_support::free_port;

/// The super user (PLAIN): creates topics and SCRAM credentials.
pub const ADMIN_USER: &str = "admin";
/// A PLAIN user that is not a super user; also the client certificate's CN.
pub const PLAIN_USER: &str = "alice";
/// The user whose SCRAM credentials the suites create (and use).
pub const SCRAM_USER: &str = "bob";
/// The `sub` of the OAUTHBEARER tokens.
pub const OAUTH_SUBJECT: &str = "carol";
/// The `iss` of the tokens, and the issuer the gateway expects.
pub const OAUTH_ISSUER: &str = "https://issuer.test.invalid";
/// The `aud` of the tokens, and the audience the gateway expects.
pub const OAUTH_AUDIENCE: &str = "iggy-gateway-kafka";
/// The JWKS key id of the signing key.
const KEY_ID: &str = "security-suite-key";

/// A per-run secret of printable characters (`what` keeps them apart in logs of failures).
fn secret(what: &str) -> String {
    let mut bytes = [0u8; 12];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut bytes)
        .unwrap_or_else(|_| panic!("system randomness"));
    format!("{what}-{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The ES256 signing key and its JWKS.
pub struct Jwt {
    key: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Jwt {
    pub fn new() -> Jwt {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap_or_else(|e| panic!("generate an ES256 key: {e}"));
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap_or_else(|e| panic!("load the ES256 key: {e}"));
        Jwt { key, rng }
    }

    /// `{"keys":[...]}` with the public key (an uncompressed P-256 point: 0x04, x, y).
    pub fn jwks(&self) -> String {
        let point = self.key.public_key().as_ref();
        assert_eq!(point.len(), 65, "uncompressed P-256 point");
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": KEY_ID,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]})
        .to_string()
    }

    /// A signed JWT for `sub`, valid for `lifetime` from now.
    pub fn mint(&self, sub: &str, lifetime: Duration) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": KEY_ID});
        let claims = serde_json::json!({
            "sub": sub, "iss": OAUTH_ISSUER, "aud": OAUTH_AUDIENCE,
            "iat": now, "exp": now + lifetime.as_secs(), "scope": "kafka",
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .unwrap_or_else(|e| panic!("sign a JWT: {e}"));
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

impl Default for Jwt {
    fn default() -> Self {
        Jwt::new()
    }
}

/// A loopback HTTP endpoint answering OAuth client-credentials token requests (any POST
/// whose form body has `grant_type=client_credentials`) with a fresh token for
/// [`OAUTH_SUBJECT`]; anything else gets 400. Stops on drop.
pub struct TokenEndpoint {
    pub url: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl TokenEndpoint {
    pub fn start(jwt: Arc<Jwt>) -> TokenEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the token endpoint");
        let addr = listener.local_addr().expect("token endpoint address");
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let (stop2, served2) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                if answer(&mut conn, &jwt) {
                    served2.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        TokenEndpoint {
            url: format!("http://{addr}/oauth2/token"),
            addr,
            stop,
            served,
            thread: Some(thread),
        }
    }

    /// How many tokens it has handed out.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one HTTP request; `true` when it handed out a token.
fn answer(conn: &mut TcpStream, jwt: &Jwt) -> bool {
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return false,
    });
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return false;
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {
                if let Some((name, value)) = line.split_once(':')
                    && name.trim().eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
    }
    let mut body = vec![0u8; length.min(64 * 1024)];
    if reader.read_exact(&mut body).is_err() {
        return false;
    }
    let body = String::from_utf8_lossy(&body);
    let ok = request_line.starts_with("POST ")
        && body
            .split('&')
            .any(|kv| kv == "grant_type=client_credentials");
    let (status, json) = if ok {
        let token = jwt.mint(OAUTH_SUBJECT, Duration::from_secs(3600));
        (
            "200 OK",
            serde_json::json!({"access_token": token, "token_type": "bearer", "expires_in": 3600})
                .to_string(),
        )
    } else {
        (
            "400 Bad Request",
            serde_json::json!({"error": "unsupported_grant_type"}).to_string(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
        json.len()
    );
    conn.write_all(response.as_bytes()).is_ok() && ok
}

/// Files and credentials of one secured gateway, made before it starts.
pub struct SecureSetup {
    pub dir: PathBuf,
    pub ca_file: PathBuf,
    pub server_cert_file: PathBuf,
    pub server_key_file: PathBuf,
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    /// The client's key and certificate in one PEM file.
    pub client_keystore_file: PathBuf,
    pub users_file: PathBuf,
    pub jwks_file: PathBuf,
    pub jwt: Arc<Jwt>,
    pub admin_password: String,
    pub plain_password: String,
    pub scram_password: String,
}

/// Runs the gateway binary's `users` CLI with `args`, `stdin` as its input; panics with
/// its output unless it succeeds.
fn users_cli(args: &[&str], stdin: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iggy-gateway-kafka"))
        .arg("users")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the gateway's users CLI");
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.as_bytes())
            .expect("write the password to the users CLI");
    }
    let out = child.wait_with_output().expect("wait for the users CLI");
    assert!(
        out.status.success(),
        "iggy-gateway-kafka users {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SecureSetup {
    pub fn new() -> SecureSetup {
        let dir = scratch_dir("security");
        let ca = TestCa::default();
        let tls = ca.write_server_files(&dir);
        let client = ca.client_cert(PLAIN_USER);
        let (client_cert_file, client_key_file) = client.write(&dir, "client");
        let client_keystore_file = dir.join("client-keystore.pem");
        fs::write(
            &client_keystore_file,
            format!("{}{}", client.key_pem, client.cert_pem),
        )
        .expect("write the client keystore");
        let jwt = Arc::new(Jwt::new());
        let jwks_file = dir.join("jwks.json");
        fs::write(&jwks_file, jwt.jwks()).expect("write the JWKS file");
        let setup = SecureSetup {
            users_file: dir.join("users.json"),
            ca_file: tls.ca,
            server_cert_file: tls.cert,
            server_key_file: tls.key,
            client_cert_file,
            client_key_file,
            client_keystore_file,
            jwks_file,
            jwt,
            admin_password: secret("admin"),
            plain_password: secret("alice"),
            scram_password: secret("bob"),
            dir,
        };
        for (user, password) in [
            (ADMIN_USER, &setup.admin_password),
            (PLAIN_USER, &setup.plain_password),
            (SCRAM_USER, &setup.scram_password),
        ] {
            setup.set_password(user, password);
        }
        setup
    }

    fn file_arg(&self) -> String {
        self.users_file.display().to_string()
    }

    /// `users set-password --file <users file> <user>`, the password on stdin.
    pub fn set_password(&self, user: &str, password: &str) {
        users_cli(
            &["set-password", "--file", &self.file_arg(), user],
            &format!("{password}\n"),
        );
    }

    /// SCRAM-SHA-256 and SCRAM-SHA-512 credentials for [`SCRAM_USER`] through
    /// `users set-scram`, for the suites whose client has no AlterUserScramCredentials.
    pub fn seed_scram(&self) {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            users_cli(
                &[
                    "set-scram",
                    "--file",
                    &self.file_arg(),
                    "--mechanism",
                    mechanism,
                    SCRAM_USER,
                ],
                &format!("{}\n", self.scram_password),
            );
        }
    }

    /// The gateway settings for a `SASL_SSL` listener on `sasl_port` and an `SSL` listener
    /// (client certificates required) on `ssl_port`.
    /// Bridged (`Backend::Iggy`), PLAIN goes to Iggy's users: no users file, and Iggy's
    /// root user is the super user.
    pub fn gateway_env(
        &self,
        backend: Backend,
        sasl_port: u16,
        ssl_port: u16,
    ) -> Vec<(&'static str, String)> {
        let path = |p: &Path| p.display().to_string();
        let mut env = vec![
            (
                "IGGY_KAFKA_LISTENERS",
                format!("SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}"),
            ),
            ("IGGY_KAFKA_TLS_CERT_FILE", path(&self.server_cert_file)),
            ("IGGY_KAFKA_TLS_KEY_FILE", path(&self.server_key_file)),
            ("IGGY_KAFKA_TLS_CLIENT_CA_FILE", path(&self.ca_file)),
            (
                "IGGY_KAFKA_SASL_OAUTHBEARER_JWKS_FILE",
                path(&self.jwks_file),
            ),
            ("IGGY_KAFKA_SASL_OAUTHBEARER_ISSUER", OAUTH_ISSUER.into()),
            (
                "IGGY_KAFKA_SASL_OAUTHBEARER_AUDIENCE",
                OAUTH_AUDIENCE.into(),
            ),
            // kcat has no admin API: its first produce creates the topic
            ("IGGY_KAFKA_AUTO_CREATE_TOPICS_PARTITIONS", "3".into()),
            // These suites are about authentication: every principal they prove may use
            // topics and groups no binding names (the cluster's management stays with the
            // super user whatever this says; authz_clients.rs is about authorization).
            ("IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true".into()),
        ];
        match backend {
            Backend::Memory => {
                env.push(("IGGY_KAFKA_SASL_USERS_FILE", path(&self.users_file)));
                env.push(("IGGY_KAFKA_SUPER_USERS", format!("User:{ADMIN_USER}")));
            }
            Backend::Iggy => {
                env.push((
                    "IGGY_KAFKA_SUPER_USERS",
                    format!("User:{}", test_support::IGGY_USER),
                ));
            }
        }
        env
    }

    /// Starts the gateway with these files, `extra` settings on top (a bridged gateway's,
    /// say), and waits until both listeners accept.
    pub fn start(self, backend: Backend, extra: &[(&str, &str)]) -> SecureGateway {
        let (sasl_port, ssl_port) = (free_port(), free_port());
        let settings = self.gateway_env(backend, sasl_port, ssl_port);
        let mut env: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(extra);
        let mut gateway = Gateway::spawn(&env, false);
        let sasl_addr = SocketAddr::from(([127, 0, 0, 1], sasl_port));
        let ssl_addr = SocketAddr::from(([127, 0, 0, 1], ssl_port));
        for addr in [sasl_addr, ssl_addr] {
            gateway.wait_for(STARTUP_TIMEOUT, &format!("accept on {addr}"), |_| {
                TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
            });
        }
        gateway.addr = sasl_addr;
        SecureGateway {
            gateway,
            ssl_addr,
            backend,
            setup: self,
            token_endpoint: None,
        }
    }
}

impl SecureSetup {
    /// [`SecureSetup::start`] on `backend`: with [`Backend::Iggy`] a fresh Iggy server
    /// behind the bridge (PLAIN then goes to Iggy's users); `None` when `IGGY_SERVER_BIN`
    /// is not set (the reason is printed).
    pub fn start_on(self, backend: Backend, name: &str) -> Option<SecureGateway> {
        match backend {
            Backend::Memory => Some(self.start(backend, &[])),
            Backend::Iggy => {
                let bin = iggy_server_bin(name)?;
                let iggy = IggyServer::start(&bin);
                self.create_iggy_users(&iggy.address);
                let bridge = bridge_env(&iggy);
                let env: Vec<(&str, &str)> = bridge.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut secure = self.start(backend, &env);
                secure.gateway.iggy = Some(iggy);
                Some(secure)
            }
        }
    }
}

impl SecureSetup {
    /// The Iggy users a bridged gateway's principals need, in the server at `address`:
    /// [`PLAIN_USER`] with its password (PLAIN logs into Iggy), and, since with
    /// authorization on every principal is judged by the Iggy user of its name too,
    /// [`SCRAM_USER`] and [`OAUTH_SUBJECT`] (they never log in to Iggy, so their password
    /// is never used).
    pub fn create_iggy_users(&self, address: &str) {
        create_iggy_user(address, PLAIN_USER, &self.plain_password);
        for user in [SCRAM_USER, OAUTH_SUBJECT] {
            create_iggy_user(address, user, &format!("{user}-unused-{}", unique()));
        }
    }

    /// What the security suites read from their environment, for gateways on `backend`
    /// whose SSL listeners are `ssl_bootstrap` (`BOOTSTRAP` and `TOPIC_PREFIX` come from
    /// `run_against`). Bridged, the admin is Iggy's root user.
    pub fn script_env(&self, backend: Backend, ssl_bootstrap: &str) -> Vec<(&'static str, String)> {
        let path = |p: &Path| p.display().to_string();
        let (admin_user, admin_password) = match backend {
            Backend::Memory => (ADMIN_USER, self.admin_password.clone()),
            Backend::Iggy => (test_support::IGGY_USER, test_support::IGGY_PASSWORD.into()),
        };
        vec![
            ("SSL_BOOTSTRAP", ssl_bootstrap.to_owned()),
            ("CA_FILE", path(&self.ca_file)),
            ("CLIENT_CERT_FILE", path(&self.client_cert_file)),
            ("CLIENT_KEY_FILE", path(&self.client_key_file)),
            ("CLIENT_KEYSTORE_FILE", path(&self.client_keystore_file)),
            ("ADMIN_USER", admin_user.into()),
            ("ADMIN_PASSWORD", admin_password),
            ("PLAIN_USER", PLAIN_USER.into()),
            ("PLAIN_PASSWORD", self.plain_password.clone()),
            ("SCRAM_USER", SCRAM_USER.into()),
            ("SCRAM_PASSWORD", self.scram_password.clone()),
            (
                "OAUTH_TOKEN",
                self.jwt.mint(OAUTH_SUBJECT, Duration::from_secs(3600)),
            ),
        ]
    }
}

/// A runtime for one block of Iggy SDK calls from a synchronous test.
pub fn iggy_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the Iggy SDK")
}

/// An Iggy SDK client signed in to the server at `address` as its root user.
pub async fn iggy_root(address: &str) -> iggy::prelude::IggyClient {
    use iggy::prelude::{Client, IggyClient, UserClient};
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(address.to_owned())
        .build()
        .expect("an Iggy client");
    client.connect().await.expect("connect to Iggy");
    client
        .login_user(test_support::IGGY_USER, test_support::IGGY_PASSWORD)
        .await
        .expect("log into Iggy as root");
    client
}

/// Creates `user` in the Iggy server at `address` (logged in as its root user), allowed to
/// manage and use streams and topics.
pub fn create_iggy_user(address: &str, user: &str, password: &str) {
    use iggy::prelude::{GlobalPermissions, Permissions, UserClient, UserStatus};
    iggy_runtime().block_on(async {
        let client = iggy_root(address).await;
        let permissions = Permissions {
            global: GlobalPermissions {
                manage_streams: true,
                read_streams: true,
                manage_topics: true,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        };
        client
            .create_user(user, password, UserStatus::Active, Some(permissions))
            .await
            .unwrap_or_else(|e| panic!("create the Iggy user {user}: {e}"));
    });
}

impl Default for SecureSetup {
    fn default() -> Self {
        SecureSetup::new()
    }
}

/// A running gateway with a `SASL_SSL` listener (`gateway.addr`) and an `SSL` listener.
pub struct SecureGateway {
    pub gateway: Gateway,
    pub ssl_addr: SocketAddr,
    pub backend: Backend,
    pub setup: SecureSetup,
    pub token_endpoint: Option<TokenEndpoint>,
}

impl SecureGateway {
    /// Serves tokens on loopback for the Java client (see [`TokenEndpoint`]).
    pub fn with_token_endpoint(mut self) -> SecureGateway {
        self.token_endpoint = Some(TokenEndpoint::start(self.setup.jwt.clone()));
        self
    }

    /// What the security suites read from their environment (see
    /// [`SecureSetup::script_env`]), with the token endpoint when there is one.
    pub fn script_env(&self) -> Vec<(&'static str, String)> {
        let mut env = self
            .setup
            .script_env(self.backend, &self.ssl_addr.to_string());
        if let Some(t) = &self.token_endpoint {
            env.push(("OAUTH_TOKEN_ENDPOINT", t.url.clone()));
        }
        env
    }
}

impl Drop for SecureSetup {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
