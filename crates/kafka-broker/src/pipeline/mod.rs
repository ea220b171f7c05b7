//! The request pipeline: the one place every request passes through on its way to its
//! handler, and every response on its way back.
//!
//! ```text
//! frame -> decode (version firewall) -> layer 1 .. layer n -> handler
//!                                       layer 1 .. layer n <- response (or no response)
//! ```
//!
//! A [`Layer`] sees each request before its handler, with the connection's [`Session`]
//! (which it may change: record who the client is, what it has proven). It passes the
//! request on, answers it itself, or closes the connection. Once the request is complete
//! (answered now, or later for a Produce whose appends wait for the store), every layer
//! that saw it sees the outcome, innermost first. Layers are shared by all connections;
//! what a layer needs to carry from a request to its response goes in the request's
//! [`Notes`].
//!
//! The layers the broker always runs: [`client_info`] (client id and software into the
//! session), [`authentication`] (SASL, with an authenticator), the quota layer, the
//! authorization layer (when authorization is on: [`authorization`]) and, when metrics
//! are on, [`crate::metrics`]'s layer. Embedders add their own with
//! [`crate::server::Server::layer`].

pub mod authentication;
pub(crate) mod authorization;
pub mod client_info;
pub(crate) mod quotas;

use crate::session::Session;
use async_trait::async_trait;
use bytestring::ByteString;
use kafka_protocol::{ApiKey, RequestBody, ResponseBody};
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// A decoded request on its way to its handler.
#[derive(Debug)]
pub struct Request {
    /// Which API.
    pub api: ApiKey,
    /// The negotiated version (within the advertised range).
    pub version: i16,
    /// The client's correlation id.
    pub correlation_id: i32,
    /// The header's client id.
    pub client_id: Option<ByteString>,
    /// The typed body.
    pub body: RequestBody,
    /// Frame size in bytes, size prefix included.
    pub frame_len: usize,
    /// When the whole frame had been read.
    pub received: Instant,
    /// What layers carry to the response.
    pub notes: Notes,
}

impl Request {
    /// The body for the handler, and what stays of the request for the way back.
    pub(crate) fn split(self) -> (RequestInfo, RequestBody) {
        let info = RequestInfo {
            api: self.api,
            version: self.version,
            correlation_id: self.correlation_id,
            frame_len: self.frame_len,
            received: self.received,
            notes: self.notes,
        };
        (info, self.body)
    }
}

/// A request after its body went to the handler: what layers see with its outcome.
#[derive(Debug)]
pub struct RequestInfo {
    /// Which API.
    pub api: ApiKey,
    /// The negotiated version.
    pub version: i16,
    /// The client's correlation id.
    pub correlation_id: i32,
    /// Frame size in bytes, size prefix included.
    pub frame_len: usize,
    /// When the whole frame had been read.
    pub received: Instant,
    /// What layers attached to the request.
    pub notes: Notes,
}

/// Values layers attach to a request for its response, one per type.
#[derive(Default)]
pub struct Notes(Vec<Box<dyn Any + Send + Sync>>);

impl Notes {
    /// Attaches `value`, replacing an earlier value of the same type.
    pub fn put<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.retain(|v| !v.is::<T>());
        self.0.push(Box::new(value));
    }

    /// The attached value of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.iter().find_map(|v| v.downcast_ref::<T>())
    }
}

impl fmt::Debug for Notes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Notes({})", self.0.len())
    }
}

/// What a layer decides about a request.
#[derive(Debug)]
pub enum Verdict {
    /// Hand it to the next layer (the handler after the last).
    Pass,
    /// Answer with this body instead of the handler; it must be the request's API.
    Answer(ResponseBody),
    /// Close the connection without answering.
    Close(&'static str),
    /// Answer with this body, then close the connection once it is written (a failed
    /// authentication: the client learns why before the connection goes).
    AnswerThenClose(ResponseBody, &'static str),
}

/// How a request ended, as layers see it on the way back.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The response body, also when none is sent (Produce with acks=0); `None` when the
    /// connection is closed instead.
    pub body: Option<&'a ResponseBody>,
    /// Bytes written for the response (header included); 0 when nothing is sent.
    pub sent_bytes: usize,
    /// Whether the connection closes instead of answering.
    pub closed: bool,
    /// The layer that answered or closed in place of the handler.
    pub by_layer: Option<&'static str>,
}

/// One concern every request passes through (metrics, authentication, quotas, ...).
#[async_trait]
pub trait Layer: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// A connection was accepted.
    fn on_connect(&self, _session: &Session) {}

    /// A request on its way in. The session may be changed; the request's notes may be
    /// added to.
    async fn on_request(&self, _session: &mut Session, _request: &mut Request) -> Verdict {
        Verdict::Pass
    }

    /// The response body on its way out, before it is encoded: a layer may change it
    /// (the quota layer sets `throttle_time_ms`, or replaces a throttled Fetch's data
    /// with an empty answer). It must stay a response of the request's API. Not called
    /// when the connection closes instead of answering; called for a response that is not
    /// sent (Produce with acks=0).
    fn on_reply(&self, _session: &Session, _request: &RequestInfo, _body: &mut ResponseBody) {}

    /// The request's outcome on its way out.
    fn on_response(&self, _session: &Session, _request: &RequestInfo, _done: &Completion<'_>) {}

    /// A frame that never became a request: an API or version this gateway does not
    /// serve, or bytes that do not decode. `api` is `None` for an unknown API.
    fn on_rejected(
        &self,
        _session: &Session,
        _api: Option<ApiKey>,
        _version: i16,
        _reason: &'static str,
    ) {
    }

    /// The connection closed.
    fn on_disconnect(&self, _session: &Session) {}
}

/// The layers, outermost first.
#[derive(Debug, Clone, Default)]
pub struct Pipeline {
    layers: Vec<Arc<dyn Layer>>,
}

impl Pipeline {
    /// A pipeline of `layers`, outermost first.
    pub fn new(layers: Vec<Arc<dyn Layer>>) -> Pipeline {
        Pipeline { layers }
    }

    /// Adds an innermost layer.
    pub fn push(&mut self, layer: Arc<dyn Layer>) {
        self.layers.push(layer);
    }

    /// The layers' names, outermost first.
    pub fn names(&self) -> Vec<&'static str> {
        self.layers.iter().map(|l| l.name()).collect()
    }

    pub(crate) fn connected(&self, session: &Session) {
        for layer in &self.layers {
            layer.on_connect(session);
        }
    }

    pub(crate) fn disconnected(&self, session: &Session) {
        for layer in self.layers.iter().rev() {
            layer.on_disconnect(session);
        }
    }

    pub(crate) fn rejected(
        &self,
        session: &Session,
        api: Option<ApiKey>,
        version: i16,
        reason: &'static str,
    ) {
        for layer in &self.layers {
            layer.on_rejected(session, api, version, reason);
        }
    }

    /// Runs the request through the layers. Returns how many layers saw it and, when one
    /// of them did not pass it on, that layer's name and verdict.
    pub(crate) async fn inbound(
        &self,
        session: &mut Session,
        request: &mut Request,
    ) -> (usize, Option<(&'static str, Verdict)>) {
        for (i, layer) in self.layers.iter().enumerate() {
            match layer.on_request(session, request).await {
                Verdict::Pass => {}
                stop => return (i + 1, Some((layer.name(), stop))),
            }
        }
        (self.layers.len(), None)
    }

    /// Lets the first `seen` layers change the response body, innermost first.
    pub(crate) fn reply(
        &self,
        seen: usize,
        session: &Session,
        request: &RequestInfo,
        body: &mut ResponseBody,
    ) {
        for layer in self.layers[..seen.min(self.layers.len())].iter().rev() {
            layer.on_reply(session, request, body);
        }
    }

    /// Shows the outcome to the first `seen` layers, innermost first.
    pub(crate) fn outbound(
        &self,
        seen: usize,
        session: &Session,
        request: &RequestInfo,
        done: &Completion<'_>,
    ) {
        for layer in self.layers[..seen.min(self.layers.len())].iter().rev() {
            layer.on_response(session, request, done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Listener;
    use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Recorder {
        name: &'static str,
        answer: bool,
        close: bool,
        log: Arc<Mutex<Vec<String>>>,
    }

    #[async_trait]
    impl Layer for Recorder {
        fn name(&self) -> &'static str {
            self.name
        }
        fn on_connect(&self, _: &Session) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{} connect", self.name));
        }
        async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
            self.log.lock().unwrap().push(format!("{} in", self.name));
            session.client_id = Arc::from(self.name);
            request.notes.put(self.name);
            if self.close {
                Verdict::Close("test")
            } else if self.answer {
                Verdict::Answer(ApiVersionsResponse::default().into())
            } else {
                Verdict::Pass
            }
        }
        fn on_response(&self, _: &Session, r: &RequestInfo, done: &Completion<'_>) {
            self.log.lock().unwrap().push(format!(
                "{} out {:?} closed={} by={:?}",
                self.name,
                r.notes.get::<&'static str>(),
                done.closed,
                done.by_layer
            ));
        }
        fn on_disconnect(&self, _: &Session) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{} disconnect", self.name));
        }
    }

    fn request() -> Request {
        Request {
            api: ApiKey::ApiVersions,
            version: 3,
            correlation_id: 7,
            client_id: None,
            body: kafka_protocol::messages::api_versions_request::ApiVersionsRequest::default()
                .into(),
            frame_len: 20,
            received: Instant::now(),
            notes: Notes::default(),
        }
    }

    fn session() -> Session {
        Session::new(1, Listener::plaintext(), "127.0.0.1:1".parse().unwrap())
    }

    fn pipeline(layers: [(&'static str, bool, bool); 3]) -> (Pipeline, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let layers = layers
            .into_iter()
            .map(|(name, answer, close)| {
                Arc::new(Recorder {
                    name,
                    answer,
                    close,
                    log: log.clone(),
                }) as Arc<dyn Layer>
            })
            .collect();
        (Pipeline::new(layers), log)
    }

    #[tokio::test]
    async fn every_layer_sees_a_passed_request_in_order_and_its_outcome_in_reverse() {
        let (p, log) = pipeline([
            ("a", false, false),
            ("b", false, false),
            ("c", false, false),
        ]);
        let mut s = session();
        let mut r = request();
        p.connected(&s);
        let (seen, stop) = p.inbound(&mut s, &mut r).await;
        assert_eq!(seen, 3);
        assert!(stop.is_none());
        // The innermost layer's change to the session stays.
        assert_eq!(&*s.client_id, "c");
        let (info, _) = r.split();
        let done = Completion {
            body: None,
            sent_bytes: 0,
            closed: false,
            by_layer: None,
        };
        p.outbound(seen, &s, &info, &done);
        p.disconnected(&s);
        // Notes keep one value per type: the last put wins.
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a connect",
                "b connect",
                "c connect",
                "a in",
                "b in",
                "c in",
                "c out Some(\"c\") closed=false by=None",
                "b out Some(\"c\") closed=false by=None",
                "a out Some(\"c\") closed=false by=None",
                "c disconnect",
                "b disconnect",
                "a disconnect",
            ]
        );
    }

    #[tokio::test]
    async fn a_layer_that_answers_stops_the_request_and_only_outer_layers_see_the_outcome() {
        let (p, log) = pipeline([("a", false, false), ("b", true, false), ("c", false, false)]);
        let mut s = session();
        let mut r = request();
        let (seen, stop) = p.inbound(&mut s, &mut r).await;
        assert_eq!(seen, 2);
        let Some(("b", Verdict::Answer(ResponseBody::ApiVersions(_)))) = stop else {
            panic!("expected b's answer, got {stop:?}");
        };
        p.outbound(
            seen,
            &s,
            &r.split().0,
            &Completion {
                body: None,
                sent_bytes: 10,
                closed: false,
                by_layer: Some("b"),
            },
        );
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a in",
                "b in",
                "b out Some(\"b\") closed=false by=Some(\"b\")",
                "a out Some(\"b\") closed=false by=Some(\"b\")"
            ]
        );
    }

    #[tokio::test]
    async fn a_layer_can_close_the_connection() {
        let (p, log) = pipeline([("a", false, true), ("b", false, false), ("c", false, false)]);
        let mut s = session();
        let mut r = request();
        let (seen, stop) = p.inbound(&mut s, &mut r).await;
        assert_eq!(seen, 1);
        assert!(matches!(stop, Some(("a", Verdict::Close("test")))));
        assert_eq!(*log.lock().unwrap(), ["a in"]);
    }

    #[test]
    fn notes_hold_one_value_per_type() {
        let mut n = Notes::default();
        n.put(1u32);
        n.put("x");
        n.put(2u32);
        assert_eq!(n.get::<u32>(), Some(&2));
        assert_eq!(n.get::<&str>(), Some(&"x"));
        assert_eq!(n.get::<i64>(), None);
    }
}
