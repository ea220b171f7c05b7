//! The encoding machinery every generated message uses: primitive readers ([`rd`], with
//! `nom`-shaped wrappers in [`de`]), the segmenting [`Encoder`], and the
//! [`Decode`]/[`Encode`]/[`Message`] traits.

pub mod de;
pub mod en;
pub mod rd;

pub use de::{Cx, R};
pub use en::{Encoder, TaggedWriter};

use crate::error::ProtocolError;
use crate::generated::ApiKey;
use crate::types::VersionRange;
use bytes::Bytes;

/// Decodes a value at a version from a slice of the frame held by `cx`.
pub trait Decode: Sized {
    /// Parses one value; the caller has checked that `version` is supported.
    fn decode<'a>(i: &'a [u8], cx: &Cx<'_>, version: i16) -> R<'a, Self>;
}

/// Encodes a value at a version.
pub trait Encode {
    /// Writes the value; fails when it holds something the version cannot carry.
    fn encode(&self, e: &mut Encoder, version: i16) -> Result<(), ProtocolError>;
}

/// A top-level message (request, response, header or embedded data structure).
pub trait Message: Decode + Encode + Default {
    /// The spec's name, e.g. `ProduceRequest`.
    const NAME: &'static str;
    /// Versions this crate handles.
    const VERSIONS: VersionRange;
    /// First flexible version, if any.
    const FLEXIBLE_FROM: Option<i16>;

    /// Decodes a whole buffer at `version`: the version must be in range and every byte
    /// must be consumed.
    fn decode_from(buf: &Bytes, version: i16) -> Result<Self, ProtocolError> {
        if !Self::VERSIONS.contains(version) {
            return Err(ProtocolError::UnsupportedVersion {
                api_key: -1,
                version,
                min: Self::VERSIONS.min,
                max: Self::VERSIONS.max,
            });
        }
        let cx = Cx::new(buf);
        let (rest, v) = Self::decode(buf, &cx, version)?;
        if !rest.is_empty() {
            return Err(ProtocolError::TrailingBytes {
                message: Self::NAME,
                remaining: rest.len(),
            });
        }
        Ok(v)
    }

    /// Encodes at `version` into one contiguous buffer.
    fn encode_to_bytes(&self, version: i16) -> Result<Bytes, ProtocolError> {
        if !Self::VERSIONS.contains(version) {
            return Err(ProtocolError::UnsupportedVersion {
                api_key: -1,
                version,
                min: Self::VERSIONS.min,
                max: Self::VERSIONS.max,
            });
        }
        let mut e = Encoder::new();
        self.encode(&mut e, version)?;
        Ok(e.into_bytes())
    }
}

/// A request message, linked to its API key and response type.
pub trait Request: Message {
    /// The API key.
    const API_KEY: ApiKey;
    /// The matching response message.
    type Response: Message;
}

/// What generated code imports.
pub mod prelude {
    pub use super::de;
    pub use super::rd::{self, Res};
    pub use super::{Cx, Decode, Encode, Encoder, Message, R, Request, TaggedWriter};
    pub use crate::error::ProtocolError;
    pub use crate::types::{RawTaggedField, RecordSet, Uuid, VersionRange};
    pub use bytes::Bytes;
    pub use bytestring::ByteString;
}
