//! A sans-IO codec for the Apache Kafka wire protocol.
//!
//! No sockets, no async runtime: bytes in, typed messages out, and back.
//!
//! ```text
//! bytes --frame::split_frame--> frame --api::decode_request--> RequestFrame
//!                                                               (header + RequestBody)
//! ResponseBody --api::encode_response--> EncodedFrame (segments for a vectored write)
//! ```
//!
//! - [`frame`]: size-prefixed framing with a caller-given maximum.
//! - [`api`]: request/response headers, version checks, whole-frame encode and decode.
//! - [`limits`]: what one decode may allocate ([`DecodeLimits`]) and the bound a broker
//!   reserves before decoding ([`decode_memory_bound`]).
//! - [`messages`]: every supported message at every supported version, generated from
//!   Kafka's JSON message specs by `kafka-codegen` (`tools/kafka-codegen`).
//! - [`wire`]: the primitives (cursor readers with `nom`-shaped wrappers, and the
//!   segmenting [`Encoder`]).
//! - [`ErrorCode`], [`ApiKey`]: the protocol's error codes and API keys.
//!
//! Decoding is zero-copy for payloads: record data, SASL tokens and group member
//! metadata/assignments are [`bytes::Bytes`] slices of the frame, and strings are
//! [`bytestring::ByteString`]s over it. Untrusted lengths are checked against the bytes
//! actually present before anything is allocated: an array's count against the bytes
//! left at the element's exact minimum size for the version, less the bytes already
//! pledged to elements allocated but not yet decoded. A version outside the supported
//! table is an error value ([`ProtocolError::UnsupportedVersion`]), never a panic.

#![forbid(unsafe_code)]

pub mod api;
pub mod error;
pub mod error_code;
pub mod frame;
pub mod limits;
#[rustfmt::skip]
mod generated;
pub mod types;
pub mod wire;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

pub use api::{
    EncodedFrame, HeaderPrefix, RequestFrame, decode_memory_bound, decode_request,
    decode_request_with, decode_response, encode_request, encode_response,
};
pub use error::ProtocolError;
pub use error_code::ErrorCode;
pub use generated::{ApiKey, RequestBody, ResponseBody};
pub use limits::DecodeLimits;
pub use types::{RawTaggedField, RecordSet, Uuid, VersionRange};
pub use wire::{Decode, Encode, Encoder, Message, Request};

/// Re-exported so users can build string fields without naming the dependency.
pub use bytestring::ByteString;

/// Every generated message module (one per spec file: `messages::produce_request`, ...).
pub mod messages {
    pub use crate::generated::*;
}
