//! Iggy failures -> [`StoreError`], in one table, and the bridge's own error type.
//!
//! The broker turns a [`StoreError`] into the Kafka error code (see
//! `StoreError::error_code`), so this table decides what a Kafka client is told:
//!
//! ```text
//! Iggy error                                        read / admin      write (send)
//! ------------------------------------------------- ----------------- -----------------
//! Stream/Topic/Partition/Segment/Resource not found UnknownTopicOrPartition
//! TopicNameAlreadyExists, StreamNameAlreadyExists   TopicAlreadyExists
//! Unauthorized (permission)                         Unauthorized
//! InvalidCredentials/Username/Password              Internal (operator must fix the
//!                                                   bridge account; not the client's ACL)
//! Unauthenticated (session lost, SDK re-logs in)    Unavailable
//! AlreadyAuthenticated (two sign-ins of one         Unavailable       Unavailable (the
//!   session racing on a reconnect)                                    request never left)
//! CannotEstablishConnection, NotConnected           Unavailable       Unavailable
//! Disconnected, ConnectionClosed, TcpError,         Unavailable       Timeout (the write
//!   StaleClient, EmptyResponse, WebSocket error                        may have landed)
//! TransientNotAccepted                              Unavailable       Unavailable
//! TransientNotCommitted                             Timeout           Timeout
//! TaskTimeout, BackgroundSendTimeout, bridge's      Unavailable       Timeout
//!   own call timeout
//! TooManyPartitions, InvalidPartitionsCount         InvalidPartitions
//! InvalidTopicSize                                  InvalidConfig
//! TooManyStreams/Topics/Messages, *LimitReached,    LimitReached
//!   TooBigUserHeaders, TooBigMessagePayload
//! anything else                                     Internal (with the Iggy code)
//! ```

use iggy::prelude::IggyError;
use kafka_store::StoreError;

/// What kind of call failed; decides whether a lost connection means "maybe written".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Reads and lookups: never change state, safe to retry.
    Read,
    /// Topic administration.
    Admin,
    /// Sends (appends, offset commits, metadata records): a broken connection after
    /// the request left leaves the outcome unknown.
    Write,
}

/// Maps an Iggy error to the store error the broker answers with. `topic` and
/// `partition` name what the call was about, for "not found".
pub fn map_iggy_error(err: &IggyError, op: Op, topic: &str, partition: i32) -> StoreError {
    use IggyError as E;
    let text = || format!("iggy error {}: {err}", err.as_code());
    match err {
        E::StreamIdNotFound(..)
        | E::StreamNameNotFound(..)
        | E::TopicIdNotFound(..)
        | E::TopicNameNotFound(..)
        | E::PartitionNotFound(..)
        | E::NoPartitions(..)
        | E::SegmentNotFound
        | E::ResourceNotFound(..) => StoreError::UnknownTopicOrPartition {
            topic: topic.to_owned(),
            partition,
        },
        E::TopicNameAlreadyExists(..) | E::StreamNameAlreadyExists(..) => {
            StoreError::TopicAlreadyExists(topic.to_owned())
        }
        E::Unauthorized => StoreError::Unauthorized(text()),
        E::InvalidCredentials | E::InvalidUsername | E::InvalidPassword => StoreError::Internal(
            format!("the bridge's Iggy credentials were refused: {}", text()),
        ),
        // A sign-in on a reconnect that another sign-in of the same session beat: raised
        // in the SDK's connect, before the request is sent again.
        E::Unauthenticated
        | E::AlreadyAuthenticated
        | E::CannotEstablishConnection
        | E::NotConnected
        | E::TransientNotAccepted => StoreError::Unavailable(text()),
        E::Disconnected
        | E::ConnectionClosed
        | E::TcpError
        | E::StaleClient
        | E::EmptyResponse
        | E::WebSocketConnectionError
        | E::CannotSendMessagesDueToClientDisconnection => match op {
            Op::Write => StoreError::Timeout(text()),
            Op::Read | Op::Admin => StoreError::Unavailable(text()),
        },
        E::TransientNotCommitted => StoreError::Timeout(text()),
        E::TaskTimeout | E::BackgroundSendTimeout => timeout(op, &text()),
        E::TooManyPartitions | E::InvalidPartitionsCount => StoreError::InvalidPartitions(text()),
        E::InvalidTopicSize(..) => StoreError::InvalidConfig(text()),
        E::TooManyStreams
        | E::TooManyTopics
        | E::TooManyMessages
        | E::UsersLimitReached
        | E::TooBigUserHeaders
        | E::TooBigMessagePayload => StoreError::LimitReached(text()),
        _ => StoreError::Internal(text()),
    }
}

/// The error for a call the bridge gave up waiting for.
pub fn timeout(op: Op, what: &str) -> StoreError {
    match op {
        Op::Write | Op::Admin => StoreError::Timeout(what.to_owned()),
        Op::Read => StoreError::Unavailable(what.to_owned()),
    }
}

/// Why [`crate::IggyBridge::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The configuration is invalid.
    #[error("invalid bridge configuration: {0}")]
    Config(String),
    /// The topic map file could not be read or parsed.
    #[error("topic map {path}: {reason}")]
    TopicMap {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Iggy could not be reached within the configured retries.
    #[error("cannot reach Iggy at {address} after {attempts} attempts: {last}")]
    Unreachable {
        /// The server address.
        address: String,
        /// Connection attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Iggy refused the credentials.
    #[error("Iggy refused the credentials of user {username}: {reason}")]
    Credentials {
        /// The user.
        username: String,
        /// Iggy's answer.
        reason: String,
    },
    /// Setting up the bridge's own streams and topics, or loading its metadata, failed.
    #[error("bridge setup failed: {0}")]
    Setup(String),
}

impl From<StoreError> for BridgeError {
    fn from(e: StoreError) -> Self {
        BridgeError::Setup(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy::prelude::Identifier;

    #[test]
    fn the_table() {
        let id = Identifier::numeric(1).unwrap();
        type Case = (IggyError, Op, fn(&StoreError) -> bool);
        let cases: Vec<Case> = vec![
            (
                IggyError::TopicNameNotFound("t".into(), "s".into()),
                Op::Read,
                |e| matches!(e, StoreError::UnknownTopicOrPartition { .. }),
            ),
            (
                IggyError::TopicNameAlreadyExists("t".into(), id.clone()),
                Op::Admin,
                |e| matches!(e, StoreError::TopicAlreadyExists(_)),
            ),
            (IggyError::Unauthorized, Op::Read, |e| {
                matches!(e, StoreError::Unauthorized(_))
            }),
            (IggyError::InvalidCredentials, Op::Read, |e| {
                matches!(e, StoreError::Internal(_))
            }),
            (IggyError::Disconnected, Op::Read, |e| {
                matches!(e, StoreError::Unavailable(_))
            }),
            (IggyError::Disconnected, Op::Write, |e| {
                matches!(e, StoreError::Timeout(_))
            }),
            (IggyError::CannotEstablishConnection, Op::Write, |e| {
                matches!(e, StoreError::Unavailable(_))
            }),
            (IggyError::AlreadyAuthenticated, Op::Write, |e| {
                matches!(e, StoreError::Unavailable(_))
            }),
            (IggyError::TransientNotCommitted, Op::Write, |e| {
                matches!(e, StoreError::Timeout(_))
            }),
            (IggyError::TooManyPartitions, Op::Admin, |e| {
                matches!(e, StoreError::InvalidPartitions(_))
            }),
            (IggyError::TooManyTopics, Op::Admin, |e| {
                matches!(e, StoreError::LimitReached(_))
            }),
            (IggyError::InvalidFormat, Op::Read, |e| {
                matches!(e, StoreError::Internal(_))
            }),
        ];
        for (err, op, ok) in cases {
            let mapped = map_iggy_error(&err, op, "t", 0);
            assert!(ok(&mapped), "{err:?} ({op:?}) -> {mapped:?}");
        }
        assert!(matches!(timeout(Op::Write, "x"), StoreError::Timeout(_)));
        assert!(matches!(timeout(Op::Read, "x"), StoreError::Unavailable(_)));
    }
}
