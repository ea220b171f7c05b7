//! Building Iggy clients: the one place the bridge configures a connection to Iggy, so
//! every connection it makes (the sessions that carry data, the metadata log and polls,
//! and the short-lived connections that check SASL/PLAIN passwords) gets the same
//! addresses, TLS settings and socket options.
//!
//! With `tls_enabled` the SDK wraps the TCP stream in rustls before anything else is
//! sent, credentials included. The server certificate is checked against `tls_ca_file`
//! (or the SDK's built-in web roots) for the name `tls_domain` (or the address's host).
//! The CA file is read once here, at connect, so a missing or empty file is a clear
//! start-up error instead of a failed handshake later.
//!
//! ## Several Iggy nodes
//!
//! `address` may list the nodes of an Iggy cluster. Iggy replicates with Viewstamped
//! Replication: one node, the primary, takes the writes (message appends and offset
//! writes are never forwarded by a backup), the others follow, and when the primary
//! stops answering the backups elect a new one (a view change). The SDK already moves a
//! signed-in connection from a backup to the primary (it reads the cluster metadata
//! after login, and again when a node answers that it no longer leads); what it cannot
//! do is leave a node that is gone: it reconnects only to the address it last used.
//! So, with several addresses:
//!
//! - a connection is opened by trying the addresses in order, each round of them up to
//!   `connect_retries` times; the first node that signs the bridge in wins, and the SDK
//!   then moves the connection to the primary;
//! - the SDK's own reconnection is cut to one immediate attempt (no retries, no pause
//!   after an earlier connection), so a connection to a node that is gone turns
//!   `Disconnected` at once instead of after seconds of retrying a dead address;
//! - a watcher per signed-in connection ([`Watchers`]) looks at its state every
//!   [`WATCH_INTERVAL`]; seen `Disconnected` twice in a row, the connection's transport
//!   is replaced by a new one, connected and signed in to the next node that answers
//!   (the other nodes first, the lost one last), in rounds with doubling pauses from
//!   `retry_interval` up to [`MAX_FAILOVER_PAUSE_FACTOR`] times it, for as long as the
//!   bridge lives. Callers keep their `IggyClient`: only the transport inside it
//!   changes, so session affinity (one session per partition's appends) holds.
//!
//! A call that fails while this happens gets the usual retriable errors; a send whose
//! outcome is unknown is settled by the append path (it looks for the send's first
//! message id once Iggy answers again), so an idempotent producer's retry is not
//! written twice. With one address the SDK reconnects the shared sessions to it,
//! `connect_retries` times `retry_interval` apart, and the watcher revives a session
//! the SDK left `Disconnected`.
//!
//! ## Appends are never resent by the SDK
//!
//! When a connection drops while a request waits for its answer, the SDK reconnects,
//! signs in again and sends the same request once more. For a read that is harmless;
//! for a `SendMessages` whose answer alone was lost (Iggy stopped or restarted after
//! writing it, a network cut) it stores the messages twice and reports one success,
//! which no later check can undo. The sessions that carry appends
//! ([`Reconnect::Watcher`]) therefore have the SDK's reconnection switched off: the
//! lost answer surfaces as `Disconnected`, which the append path takes as an unknown
//! outcome and settles by the messages' ids, and the watcher reconnects the session
//! (to its one address, or to the next node that answers). `lost_replies.rs` in the
//! tests cuts a connection after Iggy answered a send and checks the record is stored
//! once.

use crate::config::BridgeConfig;
use crate::errors::BridgeError;
use bytes::Bytes;
use iggy::binary::BinaryTransport;
use iggy::prelude::{
    AutoLogin, Client, ClientWrapper, IggyClient, IggyDuration, IggyError, TcpClient,
    TcpClientConfig, TcpClientConfigBuilder, TcpClientReconnectionConfig,
};
use iggy_common::ClientState;
use iggy_common::locking::{IggyRwLock, IggyRwLockFn};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// One request over `session`'s transport, refused as the SDK refuses it unless the
/// session is signed in.
pub(crate) async fn signed_in_request(
    session: &IggyClient,
    code: u32,
    body: Bytes,
) -> Result<Bytes, IggyError> {
    let transport = session.client();
    let transport = transport.read().await;
    // Sessions are always TCP (`crate::connection::open_session`).
    let ClientWrapper::Tcp(tcp) = &*transport else {
        return Err(IggyError::InvalidCommand);
    };
    match tcp.get_state().await {
        ClientState::Authenticated => {}
        ClientState::Shutdown => return Err(IggyError::ClientShutdown),
        ClientState::Connected => return Err(IggyError::Unauthenticated),
        ClientState::Disconnected | ClientState::Connecting | ClientState::Authenticating => {
            return Err(IggyError::Disconnected);
        }
    }
    let answer = tcp.send_raw_with_response(code, body).await;
    if matches!(answer, Err(IggyError::Disconnected))
        && tcp.get_state().await != ClientState::Disconnected
    {
        // The SDK gave up on the connection (a write that failed, an empty answer, a
        // session Iggy no longer knows) without marking it: marked, the watcher
        // replaces it.
        let _ = tcp.disconnect().await;
    }
    answer
}

/// Longest wait for the diagnostic handshake of [`tls_failure`] (at most `call_timeout`).
const TLS_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a watcher looks at its connection's state (a lock and a read; no traffic).
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The pause between failover rounds doubles from `retry_interval` up to this many
/// times `retry_interval`.
pub const MAX_FAILOVER_PAUSE_FACTOR: u32 = 16;

/// Who reconnects a signed-in session after its connection drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reconnect {
    /// The SDK, which also sends the request that was waiting again: reads and
    /// administration (with several addresses, one immediate attempt; the watcher does
    /// the rest).
    Sdk,
    /// Only the watcher; the SDK never resends a request whose answer was lost: the
    /// sessions that carry appends (see the module docs).
    Watcher,
}

/// How a client signs in and reconnects.
#[derive(Clone)]
pub(crate) enum Login {
    /// Signs in on every (re)connect with these credentials, reconnecting up to
    /// `connect_retries` times: the bridge's own sessions.
    Auto { username: String, password: String },
    /// No sign-in and no reconnection: the caller logs in once (PLAIN checks).
    Manual,
}

/// The SDK settings of a transport to `address`; the SDK refuses an address it cannot
/// use.
fn transport_config(
    config: &BridgeConfig,
    address: &str,
    login: &Login,
    reconnect: Reconnect,
) -> Result<TcpClientConfig, IggyError> {
    let several = config.addresses().len() > 1;
    let reconnection = TcpClientReconnectionConfig {
        enabled: reconnect == Reconnect::Sdk,
        // Bounded: the SDK's default retries forever, which would hang a Kafka request
        // (the per-call timeout still caps each call). With several nodes the watcher
        // retries, over all of them, so the SDK gives up on a lost node at once.
        max_retries: Some(match login {
            Login::Auto { .. } if !several => config.connect_retries,
            Login::Auto { .. } | Login::Manual => 0,
        }),
        interval: IggyDuration::new(config.retry_interval),
        reestablish_after: if several {
            IggyDuration::new(Duration::ZERO)
        } else {
            TcpClientReconnectionConfig::default().reestablish_after
        },
    };
    let auto_login = match login {
        Login::Auto { username, password } => {
            AutoLogin::Enabled(iggy::prelude::Credentials::UsernamePassword(
                username.clone(),
                secrecy::SecretString::from(password.clone()),
            ))
        }
        Login::Manual => AutoLogin::Disabled,
    };
    // Without `tls_domain` and with several nodes the SDK takes the name from the
    // address it is connected to, which follows it to the primary.
    let tls_domain = match (&config.tls_domain, several) {
        (Some(domain), _) => domain.trim().to_owned(),
        (None, false) => config.tls_host(),
        (None, true) => String::new(),
    };
    let checked = TcpClientConfigBuilder::new()
        .with_server_address(address.to_owned())
        .build()?;
    Ok(TcpClientConfig {
        server_address: checked.server_address,
        tls_enabled: config.tls_enabled,
        tls_domain,
        tls_ca_file: config
            .tls_ca_file
            .as_ref()
            .filter(|_| config.tls_enabled)
            .map(|p| p.display().to_string()),
        tls_validate_certificate: true,
        auto_login,
        reconnection,
        nodelay: config.tcp_nodelay,
        ..checked
    })
}

/// A transport to `address`; not yet connected.
fn transport(
    config: &BridgeConfig,
    address: &str,
    login: &Login,
    reconnect: Reconnect,
) -> Result<TcpClient, BridgeError> {
    transport_config(config, address, login, reconnect)
        .and_then(|c| TcpClient::create(Arc::new(c)))
        .map_err(|e| BridgeError::Config(format!("iggy client: {e}")))
}

/// A client for `address`; not yet connected.
fn build_client_at(
    config: &BridgeConfig,
    address: &str,
    login: &Login,
    reconnect: Reconnect,
) -> Result<IggyClient, BridgeError> {
    let tcp = transport(config, address, login, reconnect)?;
    Ok(IggyClient::create(ClientWrapper::Tcp(tcp), None, None))
}

/// A connected client without sign-in (the PLAIN checks sign in themselves): the first
/// of the addresses that accepts a connection, each tried once. The last error when
/// none does.
pub(crate) async fn connect_manual(config: &BridgeConfig) -> Result<IggyClient, IggyError> {
    let mut last = IggyError::CannotEstablishConnection;
    for address in config.addresses() {
        let client = build_client_at(config, &address, &Login::Manual, Reconnect::Sdk)
            .map_err(|_| IggyError::InvalidConfiguration)?;
        match client.connect().await {
            Ok(()) => return Ok(client),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Opens a signed-in session: every address in order, the whole list up to
/// `connect_retries` times `retry_interval` apart; credentials Iggy refuses fail at
/// once. The session is then watched by `watchers` (reconnected when it is lost, to
/// another node first when there are several); `reconnect` says whether the SDK may
/// reconnect it too.
pub(crate) async fn open_session(
    config: &BridgeConfig,
    watchers: &Watchers,
    reconnect: Reconnect,
) -> Result<IggyClient, BridgeError> {
    let login = Login::Auto {
        username: config.username.clone(),
        password: config.password.clone(),
    };
    let addresses = config.addresses();
    let mut last = String::new();
    for attempt in 1..=config.connect_retries {
        for address in &addresses {
            let client = build_client_at(config, address, &login, reconnect)?;
            match tokio::time::timeout(config.call_timeout, client.connect()).await {
                Ok(Ok(())) => {
                    watchers.watch(&client, config, login, reconnect);
                    return Ok(client);
                }
                Ok(Err(
                    e @ (IggyError::InvalidCredentials
                    | IggyError::InvalidUsername
                    | IggyError::InvalidPassword
                    | IggyError::Unauthenticated
                    | IggyError::Unauthorized),
                )) => {
                    return Err(BridgeError::Credentials {
                        username: config.username.clone(),
                        reason: e.to_string(),
                    });
                }
                Ok(Err(e @ IggyError::CannotEstablishConnection)) => {
                    let failure = tls_failure(config, address).await;
                    last = format!("{e}{}", tls_hint(config, failure.as_deref()));
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no answer within {:?}", config.call_timeout),
            }
            tracing::warn!(attempt, address = %address, error = %last, "cannot connect to Iggy");
        }
        if attempt < config.connect_retries {
            tokio::time::sleep(config.retry_interval).await;
        }
    }
    Err(BridgeError::Unreachable {
        address: config.address.clone(),
        attempts: config.connect_retries,
        last,
    })
}

/// The watchers of one bridge's connections: they stop when this is dropped (with the
/// bridge).
pub(crate) struct Watchers {
    stop: watch::Sender<()>,
}

impl Default for Watchers {
    fn default() -> Self {
        Self {
            stop: watch::channel(()).0,
        }
    }
}

impl Watchers {
    /// Watches `client` until the bridge is dropped or the client is shut down.
    fn watch(
        &self,
        client: &IggyClient,
        config: &BridgeConfig,
        login: Login,
        reconnect: Reconnect,
    ) {
        let watcher = Watcher {
            transport: client.client(),
            config: config.clone(),
            login,
            reconnect,
            stop: self.stop.subscribe(),
        };
        tokio::spawn(watcher.run());
    }
}

/// Reconnects one connection when it is lost: to another node first when there are
/// several.
struct Watcher {
    transport: IggyRwLock<ClientWrapper>,
    config: BridgeConfig,
    login: Login,
    reconnect: Reconnect,
    stop: watch::Receiver<()>,
}

impl Watcher {
    async fn run(mut self) {
        let mut lost_before = false;
        loop {
            tokio::select! {
                // Changed or closed: either way the bridge is going.
                _ = self.stop.changed() => return,
                () = tokio::time::sleep(WATCH_INTERVAL) => {}
            }
            let state = match &*self.transport.read().await {
                ClientWrapper::Tcp(tcp) => tcp.get_state().await,
                // Only TCP transports are built here.
                _ => return,
            };
            match state {
                ClientState::Shutdown => return,
                // Twice in a row: a reconnect of the SDK's own (a move to the primary)
                // passes through `Disconnected` only for a moment.
                ClientState::Disconnected if lost_before => {
                    lost_before = false;
                    if !self.fail_over().await {
                        return;
                    }
                }
                ClientState::Disconnected => lost_before = true,
                _ => lost_before = false,
            }
        }
    }

    /// Connects a new transport to the next node that answers and puts it in place of
    /// the lost one. False when the bridge went away first.
    async fn fail_over(&mut self) -> bool {
        let lost = self
            .transport
            .read()
            .await
            .get_connection_info()
            .await
            .server_address;
        let order = failover_order(&self.config.addresses(), &lost);
        let mut pause = self.config.retry_interval;
        let max_pause = self.config.retry_interval * MAX_FAILOVER_PAUSE_FACTOR;
        let mut rounds = 0u64;
        loop {
            let mut last = String::new();
            for address in &order {
                let tcp = match transport(&self.config, address, &self.login, self.reconnect) {
                    Ok(tcp) => tcp,
                    Err(e) => {
                        last = e.to_string();
                        continue;
                    }
                };
                let connect = tokio::time::timeout(self.config.call_timeout, tcp.connect());
                match connect.await {
                    Ok(Ok(())) => {
                        let mut slot = self.transport.write().await;
                        *slot = ClientWrapper::Tcp(tcp);
                        let reached = slot.get_connection_info().await.server_address;
                        drop(slot);
                        if reached == lost {
                            tracing::info!(address = %lost, rounds, "reconnected to Iggy");
                        } else {
                            tracing::info!(
                                lost = %lost,
                                reached = %reached,
                                rounds,
                                "moved an Iggy connection to another node"
                            );
                        }
                        return true;
                    }
                    Ok(Err(e)) => last = e.to_string(),
                    Err(_) => last = format!("no answer within {:?}", self.config.call_timeout),
                }
            }
            rounds += 1;
            // One warning per outage; the rest at debug.
            if rounds == 1 {
                tracing::warn!(
                    lost = %lost,
                    error = %last,
                    "lost the Iggy node; no other node answers yet, retrying"
                );
            } else {
                tracing::debug!(rounds, error = %last, "no Iggy node answers yet");
            }
            tokio::select! {
                _ = self.stop.changed() => return false,
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(max_pause);
        }
    }
}

/// The order in which a connection lost at `lost` tries the nodes: those after it in
/// the list, then those before it, the lost one last (it may be back: a restart, a
/// short network cut). An address the list does not hold (the primary the SDK moved
/// to) counts as lost and is not tried: the list decides where the bridge connects.
pub(crate) fn failover_order(addresses: &[String], lost: &str) -> Vec<String> {
    match addresses.iter().position(|a| a == lost) {
        Some(i) => addresses[i + 1..]
            .iter()
            .chain(&addresses[..=i])
            .cloned()
            .collect(),
        None => addresses.to_vec(),
    }
}

/// Checks that `tls_ca_file`, when TLS is on and one is set, can be read and holds at
/// least one PEM certificate.
pub(crate) fn check_tls_files(config: &BridgeConfig) -> Result<(), BridgeError> {
    let (true, Some(path)) = (config.tls_enabled, &config.tls_ca_file) else {
        return Ok(());
    };
    let bad = |reason: String| {
        Err(BridgeError::Config(format!(
            "tls_ca_file {}: {reason}",
            path.display()
        )))
    };
    let certs = match CertificateDer::pem_file_iter(path) {
        Ok(certs) => certs,
        Err(e) => return bad(e.to_string()),
    };
    let mut count = 0usize;
    for cert in certs {
        if let Err(e) = cert {
            return bad(format!("not a PEM certificate: {e}"));
        }
        count += 1;
    }
    if count == 0 {
        return bad("holds no PEM certificate".into());
    }
    Ok(())
}

/// Why a TLS handshake with Iggy at `address` fails, found by attempting one with the
/// same CA file and name: the SDK reports any failed handshake only as "cannot establish connection".
/// `None` when TLS is off, no CA file is set, the TCP connection itself fails (that is
/// not a TLS matter) or the handshake succeeds. Bounded by `call_timeout` and
/// [`TLS_PROBE_TIMEOUT`].
pub(crate) async fn tls_failure(config: &BridgeConfig, address: &str) -> Option<String> {
    let (true, Some(path)) = (config.tls_enabled, &config.tls_ca_file) else {
        return None;
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).ok()? {
        roots.add(cert.ok()?).ok()?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(config.tls_host_for(address)).ok()?;
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(address).await.ok()?;
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
        connector
            .connect(name, tcp)
            .await
            .err()
            .map(|e| e.to_string())
    };
    let limit = config.call_timeout.min(TLS_PROBE_TIMEOUT);
    match tokio::time::timeout(limit, attempt).await {
        Ok(reason) => reason,
        // A server without TLS reads the ClientHello as the start of a request and waits
        // for the rest.
        Err(_) => Some(format!(
            "no TLS answer within {limit:?} (is TLS on for Iggy's TCP listener?)"
        )),
    }
}

/// A hint added to a connection failure with TLS on: the SDK reports a failed
/// handshake only as "cannot establish connection". `failure` is what
/// [`tls_failure`] found, if anything.
pub(crate) fn tls_hint(config: &BridgeConfig, failure: Option<&str>) -> String {
    if !config.tls_enabled {
        return String::new();
    }
    if let Some(reason) = failure {
        return format!(
            " (TLS handshake with Iggy failed: {reason}; expected a certificate for {:?} \
             issued by a CA in {})",
            config.tls_host(),
            config.tls_ca_file.as_ref().map_or_else(
                || "the built-in web roots".into(),
                |p| p.display().to_string()
            )
        );
    }
    let ca = match &config.tls_ca_file {
        Some(path) => format!("the CA in {}", path.display()),
        None => "the built-in web roots".to_owned(),
    };
    format!(
        " (TLS is on: Iggy must have TLS on its TCP listener, and its certificate must be \
         issued by {ca} for the name {:?})",
        config.tls_host()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(addresses: &[&str]) -> Vec<String> {
        addresses.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn a_lost_node_is_tried_last_after_the_ones_that_follow_it() {
        let all = list(&["a:1", "b:1", "c:1"]);
        assert_eq!(failover_order(&all, "a:1"), list(&["b:1", "c:1", "a:1"]));
        assert_eq!(failover_order(&all, "b:1"), list(&["c:1", "a:1", "b:1"]));
        assert_eq!(failover_order(&all, "c:1"), list(&["a:1", "b:1", "c:1"]));
        // A node the SDK moved to that the list does not name: the list, in order.
        assert_eq!(failover_order(&all, "d:1"), all);
        assert_eq!(failover_order(&list(&["a:1"]), "a:1"), list(&["a:1"]));
    }

    #[test]
    fn several_addresses_leave_reconnecting_to_the_watcher() {
        let auto = Login::Auto {
            username: "iggy".into(),
            password: "secret".into(),
        };
        let mut config = BridgeConfig::new("iggy", "secret");
        config.connect_retries = 7;
        let one = transport_config(&config, "127.0.0.1:8090", &auto, Reconnect::Sdk).unwrap();
        assert_eq!(one.reconnection.max_retries, Some(7));
        assert_eq!(
            one.reconnection.reestablish_after,
            TcpClientReconnectionConfig::default().reestablish_after
        );
        let manual =
            transport_config(&config, "127.0.0.1:8090", &Login::Manual, Reconnect::Sdk).unwrap();
        assert_eq!(manual.reconnection.max_retries, Some(0));
        assert!(matches!(manual.auto_login, AutoLogin::Disabled));

        config.address = "127.0.0.1:8090, 127.0.0.2:8090".into();
        config.validate().unwrap();
        let several = transport_config(&config, "127.0.0.2:8090", &auto, Reconnect::Sdk).unwrap();
        assert_eq!(several.server_address, "127.0.0.2:8090");
        assert_eq!(several.reconnection.max_retries, Some(0));
        assert!(several.reconnection.reestablish_after.is_zero());
        assert!(matches!(several.auto_login, AutoLogin::Enabled(_)));
        assert!(several.nodelay);
        assert!(several.reconnection.enabled);
        // Append sessions: the SDK never reconnects (so never resends), one address or
        // several.
        let appends =
            transport_config(&config, "127.0.0.2:8090", &auto, Reconnect::Watcher).unwrap();
        assert!(!appends.reconnection.enabled);
        config.address = "127.0.0.1:8090".into();
        let appends =
            transport_config(&config, "127.0.0.1:8090", &auto, Reconnect::Watcher).unwrap();
        assert!(!appends.reconnection.enabled);
        assert!(matches!(appends.auto_login, AutoLogin::Enabled(_)));
        config.address = "127.0.0.1:8090, 127.0.0.2:8090".into();
        // An address the SDK cannot use is refused when the transport is built.
        assert!(transport_config(&config, "no port", &auto, Reconnect::Sdk).is_err());
    }

    #[test]
    fn the_certificate_name_follows_the_node_unless_set() {
        let mut config = BridgeConfig::new("iggy", "secret");
        config.tls_enabled = true;
        let one =
            transport_config(&config, "127.0.0.1:8090", &Login::Manual, Reconnect::Sdk).unwrap();
        assert_eq!(one.tls_domain, "127.0.0.1");
        config.address = "127.0.0.1:8090,127.0.0.2:8090".into();
        // Empty: the SDK checks each node against the host it is connected to.
        let several =
            transport_config(&config, "127.0.0.2:8090", &Login::Manual, Reconnect::Sdk).unwrap();
        assert_eq!(several.tls_domain, "");
        assert_eq!(config.tls_host_for("127.0.0.2:8090"), "127.0.0.2");
        config.tls_domain = Some("iggy.example".into());
        let named =
            transport_config(&config, "127.0.0.2:8090", &Login::Manual, Reconnect::Sdk).unwrap();
        assert_eq!(named.tls_domain, "iggy.example");
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_refused() {
        let mut config = BridgeConfig::new("iggy", "secret");
        config.tls_ca_file = Some("/nonexistent/ca.pem".into());
        // Without TLS the file is not looked at (validate refuses the combination).
        check_tls_files(&config).unwrap();
        config.tls_enabled = true;
        let Err(BridgeError::Config(m)) = check_tls_files(&config) else {
            panic!("a missing file passed");
        };
        assert!(m.contains("/nonexistent/ca.pem"), "{m}");
        let dir = std::env::temp_dir().join(format!("bridge-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        config.tls_ca_file = Some(empty);
        let Err(BridgeError::Config(m)) = check_tls_files(&config) else {
            panic!("an empty file passed");
        };
        assert!(m.contains("no PEM certificate"), "{m}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_hint_names_the_ca_and_host_only_with_tls() {
        let mut config = BridgeConfig::new("iggy", "secret");
        assert!(tls_hint(&config, None).is_empty());
        config.tls_enabled = true;
        config.tls_ca_file = Some("ca.pem".into());
        for failure in [None, Some("invalid peer certificate: UnknownIssuer")] {
            let hint = tls_hint(&config, failure);
            assert!(
                hint.contains("ca.pem") && hint.contains("127.0.0.1"),
                "{hint}"
            );
            assert!(!hint.contains("secret"));
            assert_eq!(hint.contains("UnknownIssuer"), failure.is_some(), "{hint}");
        }
    }
}
