//! The client-info layer: keeps the session's client id and client software current.
//!
//! The client id comes from every request header (clients send the same one on a
//! connection; the latest wins). The client software name and version come from
//! ApiVersions v3+ (KIP-511), which clients send first on each connection.

use super::{Layer, Request, Verdict};
use crate::session::{ClientSoftware, Session};
use async_trait::async_trait;
use kafka_protocol::RequestBody;
use std::sync::Arc;

/// Records who the client says it is.
#[derive(Debug, Default)]
pub struct ClientInfo;

#[async_trait]
impl Layer for ClientInfo {
    fn name(&self) -> &'static str {
        "client-info"
    }

    async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
        let id = request.client_id.as_deref().unwrap_or_default();
        if *session.client_id != *id {
            session.client_id = Arc::from(id);
        }
        if let RequestBody::ApiVersions(r) = &request.body
            && request.version >= 3
        {
            let name = &*r.client_software_name;
            let version = &*r.client_software_version;
            let changed = session
                .software
                .as_ref()
                .is_none_or(|s| *s.name != *name || *s.version != *version);
            if changed && !name.is_empty() {
                session.software = Some(ClientSoftware {
                    name: Arc::from(name),
                    version: Arc::from(version),
                });
            }
        }
        Verdict::Pass
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Notes;
    use crate::session::Listener;
    use kafka_protocol::ApiKey;
    use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
    use std::time::Instant;

    fn request(version: i16, client_id: Option<&str>, software: (&str, &str)) -> Request {
        Request {
            api: ApiKey::ApiVersions,
            version,
            correlation_id: 1,
            client_id: client_id.map(Into::into),
            body: ApiVersionsRequest {
                client_software_name: software.0.into(),
                client_software_version: software.1.into(),
                ..ApiVersionsRequest::default()
            }
            .into(),
            frame_len: 10,
            received: Instant::now(),
            notes: Notes::default(),
        }
    }

    #[tokio::test]
    async fn records_client_id_and_software_from_api_versions_v3() {
        let mut s = Session::new(1, Listener::plaintext(), "127.0.0.1:9".parse().unwrap());
        let layer = ClientInfo;
        let mut r = request(3, Some("app-1"), ("librdkafka", "2.16.0"));
        assert!(matches!(
            layer.on_request(&mut s, &mut r).await,
            Verdict::Pass
        ));
        assert_eq!(&*s.client_id, "app-1");
        let sw = s.software.clone().unwrap();
        assert_eq!((&*sw.name, &*sw.version), ("librdkafka", "2.16.0"));

        // Older versions carry no software fields: what was recorded stays.
        let mut r = request(2, None, ("", ""));
        layer.on_request(&mut s, &mut r).await;
        assert_eq!(&*s.client_id, "");
        assert_eq!(&*s.software.clone().unwrap().name, "librdkafka");
    }

    #[tokio::test]
    async fn ignores_software_fields_below_v3() {
        let mut s = Session::new(1, Listener::plaintext(), "127.0.0.1:9".parse().unwrap());
        let mut r = request(2, Some("x"), ("should-not", "appear"));
        ClientInfo.on_request(&mut s, &mut r).await;
        assert!(s.software.is_none());
        assert_eq!(&*s.client_id, "x");
    }
}
