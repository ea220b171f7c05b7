//! What the broker knows about one connection: where it came in, who is on the other end,
//! and what that client has proven.
//!
//! A [`Session`] is created when a connection is accepted and lives as long as it. The
//! request pipeline's layers may change it (the client-info layer records the client id
//! and software; an authentication layer sets the principal); handlers see it read-only
//! through their context. Cloning is cheap (shared strings, and the SASL exchange in
//! progress behind an `Arc`), so a request that completes later keeps the session as it
//! was when the request started.

use kafka_sasl::{Exchange, Mechanism};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Kafka's security protocols: what a listener expects on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No authentication, no encryption.
    Plaintext,
    /// TLS, no SASL.
    Ssl,
    /// SASL, no encryption.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name for the protocol (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections must authenticate with SASL before other requests.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether connections are encrypted with TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The listener a connection came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The listener's name (Kafka's listener name, `PLAINTEXT` for the single listener).
    pub name: Arc<str>,
    /// What the listener expects.
    pub protocol: SecurityProtocol,
    /// The address clients of this listener are told to connect to (Metadata,
    /// FindCoordinator, DescribeCluster); `None` means the broker configuration's
    /// `advertised_host` and `advertised_port`.
    pub advertised: Option<Advertised>,
}

/// A listener's advertised address (Kafka's `advertised.listeners` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    /// Host name or IP address, as clients should use it.
    pub host: Arc<str>,
    /// Port.
    pub port: u16,
}

impl Listener {
    /// A listener named `name` expecting `protocol`, advertising the broker's address.
    pub fn new(name: &str, protocol: SecurityProtocol) -> Listener {
        Listener {
            name: Arc::from(name),
            protocol,
            advertised: None,
        }
    }

    /// The single plaintext listener of a gateway configured the simple way.
    pub fn plaintext() -> Listener {
        Listener::new("PLAINTEXT", SecurityProtocol::Plaintext)
    }

    /// The same listener advertising `host:port`.
    pub fn advertising(mut self, host: &str, port: u16) -> Listener {
        self.advertised = Some(Advertised {
            host: Arc::from(host),
            port,
        });
        self
    }

    /// The host and port to tell this listener's clients: its own advertised address, or
    /// `host` and `port` (the broker's) when it has none.
    pub fn advertised_or<'a>(&'a self, host: &'a str, port: u16) -> (&'a str, u16) {
        match &self.advertised {
            Some(a) => (&a.host, a.port),
            None => (host, port),
        }
    }
}

impl Default for Listener {
    fn default() -> Self {
        Listener::plaintext()
    }
}

/// Who is on the other end, as Kafka names it: a type and a name (`User:alice`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// Principal type; Kafka's is `User`.
    pub kind: Arc<str>,
    /// Principal name; `ANONYMOUS` until the client proves otherwise.
    pub name: Arc<str>,
}

impl Principal {
    /// Kafka's anonymous principal, `User:ANONYMOUS`.
    pub fn anonymous() -> Principal {
        Principal {
            kind: Arc::from("User"),
            name: Arc::from("ANONYMOUS"),
        }
    }

    /// A user principal, `User:<name>`.
    pub fn user(name: &str) -> Principal {
        Principal {
            kind: Arc::from("User"),
            name: Arc::from(name),
        }
    }

    /// Whether this is the anonymous principal.
    pub fn is_anonymous(&self) -> bool {
        &*self.kind == "User" && &*self.name == "ANONYMOUS"
    }
}

impl Default for Principal {
    fn default() -> Self {
        Principal::anonymous()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// What a connection has proven about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthState {
    /// Nothing to prove: the listener does not authenticate.
    #[default]
    NotRequired,
    /// The listener authenticates and the client has not (yet).
    Pending,
    /// Authenticated; `expires` is when the session must re-authenticate (KIP-368), if
    /// ever.
    Authenticated {
        /// The deadline for re-authentication.
        expires: Option<Instant>,
    },
}

/// The client library a connection uses, as it says in ApiVersions v3+.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSoftware {
    /// `ClientSoftwareName`, e.g. `librdkafka` or `apache-kafka-java`.
    pub name: Arc<str>,
    /// `ClientSoftwareVersion`.
    pub version: Arc<str>,
}

/// A SASL exchange under way on a connection: started by SaslHandshake, fed by
/// SaslAuthenticate (or raw frames after a v0 handshake), over once it succeeds or fails.
#[derive(Debug, Clone)]
pub struct SaslExchange {
    /// The mechanism's state.
    pub exchange: Exchange,
    /// Tokens come as raw size-prefixed frames (SaslHandshake v0), not SaslAuthenticate.
    pub raw: bool,
    /// A re-authentication (KIP-368) of an authenticated session: it must prove the same
    /// principal.
    pub reauthentication: bool,
}

/// The connection's SASL progress.
#[derive(Debug, Clone, Default)]
pub struct SaslState {
    /// The exchange in progress, between SaslHandshake and its last token.
    pub exchange: Option<Arc<SaslExchange>>,
    /// The mechanism of the latest successful authentication (re-authentication must use
    /// the same).
    pub mechanism: Option<Mechanism>,
}

/// One connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    /// A number that identifies the connection in logs while it is open.
    pub id: u64,
    /// The listener it came in on.
    pub listener: Listener,
    /// The client's address.
    pub peer: SocketAddr,
    /// Who the client is.
    pub principal: Principal,
    /// What it has proven.
    pub auth: AuthState,
    /// The client id of its latest request (empty when null).
    pub client_id: Arc<str>,
    /// The client library, once it said (ApiVersions v3+).
    pub software: Option<ClientSoftware>,
    /// When the connection was accepted.
    pub opened: Instant,
    /// SASL progress (only on SASL listeners).
    pub sasl: SaslState,
}

/// `addr` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, how a dual-stack `[::]`
/// listener sees an IPv4 client) turned into the IPv4 address it stands for, so that ACL
/// hosts, per-address caps, the SASL backoff, logs and metrics see one address per
/// client whichever listener it came in on. Any other address is returned unchanged.
pub fn canonical_peer(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

impl Session {
    /// A fresh session for a connection accepted on `listener` from `peer` (kept in its
    /// [canonical](canonical_peer) form).
    pub fn new(id: u64, listener: Listener, peer: SocketAddr) -> Session {
        let peer = canonical_peer(peer);
        let auth = if listener.protocol.uses_sasl() {
            AuthState::Pending
        } else {
            AuthState::NotRequired
        };
        Session {
            id,
            listener,
            peer,
            principal: Principal::anonymous(),
            auth,
            client_id: Arc::from(""),
            software: None,
            opened: Instant::now(),
            sasl: SaslState::default(),
        }
    }

    /// Whether the connection may send requests other than ApiVersions and SASL ones.
    pub fn is_authenticated(&self) -> bool {
        matches!(
            self.auth,
            AuthState::NotRequired | AuthState::Authenticated { .. }
        )
    }

    /// Whether an authenticated session is past its KIP-368 deadline at `now`: it may
    /// only re-authenticate.
    pub fn is_expired(&self, now: Instant) -> bool {
        matches!(self.auth, AuthState::Authenticated { expires: Some(t) } if now >= t)
    }

    /// Whether the next frames are raw SASL tokens (after a SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        self.sasl.exchange.as_ref().is_some_and(|e| e.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 5000))
    }

    #[test]
    fn ipv4_mapped_peers_are_kept_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:4000".parse().unwrap();
        assert_eq!(canonical_peer(mapped), "192.0.2.7:4000".parse().unwrap());
        let s = Session::new(1, Listener::plaintext(), mapped);
        assert_eq!(s.peer.ip().to_string(), "192.0.2.7");
        for unchanged in [
            "[::1]:4000",
            "[2001:db8::1]:4000",
            "192.0.2.7:4000",
            "[::192.0.2.7]:1",
        ] {
            let a: SocketAddr = unchanged.parse().unwrap();
            assert_eq!(canonical_peer(a), a, "{unchanged}");
        }
    }

    #[test]
    fn a_plaintext_session_is_anonymous_and_needs_no_authentication() {
        let s = Session::new(1, Listener::plaintext(), peer());
        assert!(s.principal.is_anonymous());
        assert_eq!(s.principal.to_string(), "User:ANONYMOUS");
        assert_eq!(s.auth, AuthState::NotRequired);
        assert!(s.is_authenticated());
        assert_eq!(&*s.client_id, "");
        assert!(s.software.is_none());
    }

    #[test]
    fn a_sasl_listener_starts_unauthenticated() {
        for protocol in [SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl] {
            let listener = Listener::new("EXTERNAL", protocol);
            let s = Session::new(2, listener, peer());
            assert_eq!(s.auth, AuthState::Pending);
            assert!(!s.is_authenticated());
        }
        let mut s = Session::new(
            3,
            Listener::new("EXTERNAL", SecurityProtocol::SaslSsl),
            peer(),
        );
        s.auth = AuthState::Authenticated { expires: None };
        s.principal = Principal::user("alice");
        assert!(s.is_authenticated());
        assert_eq!(s.principal.to_string(), "User:alice");
    }

    #[test]
    fn a_listener_advertises_its_own_address_or_the_brokers() {
        let plain = Listener::plaintext();
        assert_eq!(plain.advertised_or("broker", 9093), ("broker", 9093));
        let ssl = Listener::new("SSL", SecurityProtocol::Ssl).advertising("tls.example", 9094);
        assert_eq!(ssl.advertised_or("broker", 9093), ("tls.example", 9094));
    }

    #[test]
    fn a_session_expires_at_its_deadline_only_when_it_has_one() {
        let listener = Listener::new("SASL", SecurityProtocol::SaslPlaintext);
        let mut s = Session::new(4, listener, peer());
        let now = Instant::now();
        assert!(!s.is_expired(now), "pending is not expired");
        s.auth = AuthState::Authenticated { expires: None };
        assert!(!s.is_expired(now + std::time::Duration::from_secs(3600)));
        let deadline = now + std::time::Duration::from_secs(1);
        s.auth = AuthState::Authenticated {
            expires: Some(deadline),
        };
        assert!(!s.is_expired(now));
        assert!(s.is_expired(deadline));
        assert!(!s.expects_raw_token());
    }

    #[test]
    fn protocol_names_are_kafkas() {
        let names: Vec<_> = [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .iter()
        .map(|p| (p.name(), p.uses_sasl(), p.uses_tls()))
        .collect();
        assert_eq!(
            names,
            [
                ("PLAINTEXT", false, false),
                ("SSL", false, true),
                ("SASL_PLAINTEXT", true, false),
                ("SASL_SSL", true, true)
            ]
        );
    }
}
