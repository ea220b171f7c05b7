//! The Iggy connections: opening them (bounded retries over the configured addresses,
//! credentials refused at once, TLS as configured, watched for a lost node; see
//! `crate::connection`),
//! choosing one per call, closing them, and the `call_timeout` every SDK call runs
//! under.
//!
//! Appends have sessions of their own, which the SDK never reconnects (so it never
//! resends a send whose answer was lost; `crate::connection` says why): appends to one
//! partition always use the same one ([`IggyBridge::session_for`]), so their sends
//! reach Iggy in the order the partition's send queue made them. Every other call
//! takes the next of the shared sessions in turn.

use super::IggyBridge;
use crate::config::{BridgeConfig, IggyTopicRef};
use crate::connection::signed_in_request;
use crate::connection::{Reconnect, Watchers};
use crate::errors::{BridgeError, Op, map_iggy_error, timeout};
use crate::partition::PartitionId;
use bytes::Bytes;
use iggy::prelude::{Client, IggyClient, IggyError, SystemClient};
use iggy_binary_protocol::codes::SEND_MESSAGES_CODE;
use iggy_common::{SendMessagesResponse, decode_send_confirmations};
use kafka_store::{StoreError, StoreResult};
use std::sync::atomic::Ordering;

impl IggyBridge {
    /// Closes every session.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Relaxed);
        for client in self.inner.sessions.iter().chain(&self.inner.appends) {
            let _ = tokio::time::timeout(self.inner.config.call_timeout, client.shutdown()).await;
        }
    }

    pub(super) fn any_session(&self) -> &IggyClient {
        let n = self.inner.sessions.len();
        let i = self.inner.next_session.fetch_add(1, Ordering::Relaxed) % n.max(1);
        &self.inner.sessions[i.min(n.saturating_sub(1))]
    }

    /// The append session of one partition.
    pub(super) fn session_for(&self, target: &IggyTopicRef, partition: PartitionId) -> &IggyClient {
        let n = self.inner.appends.len().max(1);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in target.stream.bytes().chain(target.topic.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let i = (h ^ u64::from(partition.iggy())) as usize % n;
        &self.inner.appends[i.min(self.inner.appends.len().saturating_sub(1))]
    }

    pub(super) async fn call<T>(
        &self,
        op: Op,
        topic: &str,
        partition: i32,
        fut: impl Future<Output = Result<T, IggyError>>,
    ) -> StoreResult<T> {
        let limit = self.inner.config.call_timeout;
        let round_trip = async {
            match tokio::time::timeout(limit, fut).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) if lost_write(&e, op, &self.inner.config) => {
                    Err(StoreError::Timeout(format!(
                        "iggy error {}: {e} (the node was lost after the write left)",
                        e.as_code()
                    )))
                }
                Ok(Err(e)) => Err(map_iggy_error(&e, op, topic, partition)),
                Err(_) => Err(timeout(
                    op,
                    &format!("iggy call for {topic}/{partition}: no answer within {limit:?}"),
                )),
            }
        };
        self.inner.metrics.observe(op, round_trip).await
    }

    /// One round trip to the server (the readiness check).
    pub(super) async fn ping_server(&self) -> StoreResult<()> {
        self.call(Op::Read, "", -1, self.any_session().ping()).await
    }
}

/// Whether `e` leaves a write's outcome unknown although the SDK reports it as a
/// failure to connect: with several Iggy addresses the SDK tries one immediate
/// reconnect to the node it was using after the connection drops, and a node that is
/// gone turns a write that was already sent (and may have been replicated before the
/// node died) into `CannotEstablishConnection`. Such a write is then settled like a
/// timed-out one (the append path looks for it once Iggy answers), never reported as
/// not written.
fn lost_write(e: &IggyError, op: Op, config: &BridgeConfig) -> bool {
    matches!(op, Op::Write)
        && matches!(
            e,
            IggyError::CannotEstablishConnection | IggyError::NotConnected
        )
        && config.addresses().len() > 1
}

/// Sends a `SendMessages` request body written by the bridge
/// ([`crate::mapping::send_body`]) over `session`, as the SDK's `send_messages` sends
/// the one it encodes: refused unless the session is signed in, the same request code
/// and transport path (lockstep; on the append sessions no reconnect and no resend by
/// the SDK), the confirmations read
/// the same lenient way (a committed write whose answer cannot be read confirms
/// nothing rather than failing).
pub(super) async fn send_messages_raw(
    session: &IggyClient,
    body: Bytes,
) -> Result<SendMessagesResponse, IggyError> {
    let response = signed_in_request(session, SEND_MESSAGES_CODE, body).await?;
    Ok(
        decode_send_confirmations(&response).unwrap_or_else(|_| SendMessagesResponse {
            confirmations: Vec::new(),
        }),
    )
}

pub(super) async fn open_session(
    config: &BridgeConfig,
    watchers: &Watchers,
    reconnect: Reconnect,
) -> Result<IggyClient, BridgeError> {
    crate::connection::open_session(config, watchers, reconnect).await
}
