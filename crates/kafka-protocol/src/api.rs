//! Whole requests and responses: header plus body, with version checks.
//!
//! ```text
//! request header v0   api_key i16 | api_version i16 | correlation_id i32
//! request header v1   v0 | client_id (int16-length nullable string)
//! request header v2   v1 | tagged fields
//! response header v0  correlation_id i32
//! response header v1  v0 | tagged fields
//! ```
//!
//! A request uses header v2 when its API version is flexible, else v1. A response uses
//! header v1 when flexible, except ApiVersions, whose response header is always v0 so that
//! a client can read it before it knows which versions the broker speaks.

use crate::error::ProtocolError;
use crate::generated::request_header::RequestHeader;
use crate::generated::response_header::ResponseHeader;
use crate::generated::{ApiKey, RequestBody, ResponseBody};
use crate::limits::DecodeLimits;
use crate::wire::{Cx, Encode, Encoder, rd};
use bytes::Bytes;

/// Request header version for an API version.
pub fn request_header_version(api_key: ApiKey, api_version: i16) -> i16 {
    match api_key.flexible_from() {
        Some(f) if api_version >= f => 2,
        _ => 1,
    }
}

/// Response header version for an API version.
pub fn response_header_version(api_key: ApiKey, api_version: i16) -> i16 {
    if api_key == ApiKey::ApiVersions {
        return 0;
    }
    match api_key.flexible_from() {
        Some(f) if api_version >= f => 1,
        _ => 0,
    }
}

/// The fixed start of every request header, readable whatever the API and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    /// Raw API key.
    pub api_key: i16,
    /// Requested API version.
    pub api_version: i16,
    /// Correlation id to echo in the response.
    pub correlation_id: i32,
}

impl HeaderPrefix {
    /// Reads the first eight bytes of a request frame.
    #[inline]
    pub fn peek(frame: &[u8]) -> Result<HeaderPrefix, ProtocolError> {
        let i = &mut &frame[..];
        let api_key = rd::i16(i, "RequestHeader.request_api_key")?;
        let api_version = rd::i16(i, "RequestHeader.request_api_version")?;
        let correlation_id = rd::i32(i, "RequestHeader.correlation_id")?;
        Ok(HeaderPrefix {
            api_key,
            api_version,
            correlation_id,
        })
    }

    /// The version check every request goes through: a known key at a supported version.
    #[inline]
    pub fn check(&self) -> Result<ApiKey, ProtocolError> {
        let key = ApiKey::from_i16(self.api_key);
        let Some(range) = key.versions() else {
            return Err(ProtocolError::UnknownApiKey {
                api_key: self.api_key,
            });
        };
        if !range.contains(self.api_version) {
            return Err(ProtocolError::UnsupportedVersion {
                api_key: self.api_key,
                version: self.api_version,
                min: range.min,
                max: range.max,
            });
        }
        Ok(key)
    }
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFrame {
    /// The header, with the API key and version.
    pub header: RequestHeader,
    /// The typed body.
    pub body: RequestBody,
    /// Bytes after the body that no field of this version covers. Kafka brokers ignore
    /// them, and some clients send them (librdkafka 2.16 with Metadata v13), so they are
    /// tolerated and only counted here.
    pub trailing_bytes: usize,
}

impl RequestFrame {
    /// The API version of the request.
    pub fn api_version(&self) -> i16 {
        self.header.request_api_version
    }
}

/// Decodes a request frame (without its size prefix). Byte payloads in the body are
/// slices of `frame`. Bytes after the body are tolerated, as Kafka does, and counted in
/// [`RequestFrame::trailing_bytes`].
///
/// Decodes with the default [`DecodeLimits`]; see [`decode_request_with`].
pub fn decode_request(frame: &Bytes) -> Result<RequestFrame, ProtocolError> {
    decode_request_with(frame, &DecodeLimits::default())
}

/// [`decode_request`] within `limits`: a request holding more list entries than
/// `limits.max_entries` (header and body together), or lists of more bytes than
/// `limits.max_heap_bytes`, fails with [`ProtocolError::DecodeLimitExceeded`] before the
/// list that would pass the limit is allocated. The heap the decode takes is at most
/// [`decode_memory_bound`] for the frame's key, version and length.
pub fn decode_request_with(
    frame: &Bytes,
    limits: &DecodeLimits,
) -> Result<RequestFrame, ProtocolError> {
    let prefix = HeaderPrefix::peek(frame)?;
    let key = prefix.check()?;
    let cx = Cx::with_limits(frame, limits);
    let hv = request_header_version(key, prefix.api_version);
    let mut rest = &frame[..];
    // Decoded in place: the body can be large, and is written once rather than moved out
    // through each layer.
    let mut out = RequestFrame {
        header: RequestHeader::default(),
        body: RequestBody::default_for(key)?,
        trailing_bytes: 0,
    };
    out.header.read_into(&mut rest, &cx, hv)?;
    out.body.read_into(prefix.api_version, &mut rest, &cx)?;
    out.trailing_bytes = rest.len();
    Ok(out)
}

/// An upper bound on the heap bytes [`decode_request_with`] can allocate for a request
/// frame of `frame_len` bytes (without its size prefix) of `api_key` at `version`, under
/// `limits`, for whatever those bytes hold. A broker reserves this much from its memory
/// budget after reading the header and before decoding the body.
///
/// Each list type `t` the request (header included) can hold at `version` has elements of
/// `size_t` bytes in memory and at least `min_t` bytes on the wire (exact, per version).
/// Every element slot the decoder allocates is paid for by `min_t` bytes of the frame
/// that no other slot uses (see [`Cx`]), except that the elements being decoded (at most
/// one per list type on the way down, no message being recursive) give their pledge back
/// as they start: so the slots take at most `max_t(size_t / min_t)` times
/// `frame_len + sum_t(min_t)` bytes, and at most `max_t(size_t) * max_entries` by the
/// entry budget. The bound is the smaller of the two, capped by `max_heap_bytes`, plus
/// [`DECODE_OVERHEAD_BYTES`](crate::limits::DECODE_OVERHEAD_BYTES). An unknown key or
/// unsupported version decodes nothing and gets the overhead alone.
pub fn decode_memory_bound(
    api_key: ApiKey,
    version: i16,
    frame_len: usize,
    limits: &DecodeLimits,
) -> usize {
    let overhead = crate::limits::DECODE_OVERHEAD_BYTES;
    if check_version(api_key, version).is_err() {
        return overhead;
    }
    let hv = request_header_version(api_key, version);
    let mut in_flight = 0usize;
    let mut largest = 0usize;
    let mut first = |size: usize, min: usize| {
        in_flight = in_flight.saturating_add(min.max(1));
        largest = largest.max(size);
    };
    RequestHeader::lists(hv, &mut first);
    RequestBody::lists_of(api_key, version, &mut first);
    let payable = frame_len.saturating_add(in_flight);
    let mut by_frame = 0usize;
    let mut second = |size: usize, min: usize| {
        by_frame = by_frame.max(size.saturating_mul(payable).div_ceil(min.max(1)));
    };
    RequestHeader::lists(hv, &mut second);
    RequestBody::lists_of(api_key, version, &mut second);
    let by_entries = largest.saturating_mul(limits.max_entries);
    by_frame
        .min(by_entries)
        .min(limits.max_heap_bytes)
        .saturating_add(overhead)
}

fn check_version(key: ApiKey, version: i16) -> Result<(), ProtocolError> {
    HeaderPrefix {
        api_key: key.as_i16(),
        api_version: version,
        correlation_id: 0,
    }
    .check()
    .map(|_| ())
}

/// Encodes a request frame, size prefix included. The header's key must match the body.
pub fn encode_request(header: &RequestHeader, body: &RequestBody) -> Result<Bytes, ProtocolError> {
    let key = body.api_key();
    let version = header.request_api_version;
    check_version(key, version)?;
    if header.request_api_key != key.as_i16() {
        return Err(ProtocolError::InvalidValue {
            field: "RequestHeader.request_api_key",
            expected: key.name(),
            found: i64::from(header.request_api_key),
        });
    }
    let mut e = Encoder::new();
    e.put_i32(0);
    header.encode(&mut e, request_header_version(key, version))?;
    body.encode_body(&mut e, version)?;
    let mut out = e.into_bytes().to_vec();
    let size = frame_size(out.len() - 4)?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Bytes::from(out))
}

fn frame_size(len: usize) -> Result<i32, ProtocolError> {
    i32::try_from(len).map_err(|_| ProtocolError::TooLong {
        field: "frame",
        len,
        max: i32::MAX as usize,
    })
}

/// An encoded response: segments to write in order, size prefix first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame {
    /// The segments; large record payloads are shared with the store, not copied.
    pub segments: Vec<Bytes>,
}

impl EncodedFrame {
    /// Total bytes on the wire.
    pub fn len(&self) -> usize {
        self.segments.iter().map(Bytes::len).sum()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All segments joined (copies).
    pub fn to_bytes(&self) -> Bytes {
        let mut v = Vec::with_capacity(self.len());
        for s in &self.segments {
            v.extend_from_slice(s);
        }
        Bytes::from(v)
    }
}

/// Encodes a response frame, size prefix included, for `api_version` of the body's API.
pub fn encode_response(
    correlation_id: i32,
    api_version: i16,
    body: &ResponseBody,
) -> Result<EncodedFrame, ProtocolError> {
    let key = body.api_key();
    check_version(key, api_version)?;
    let header = ResponseHeader {
        correlation_id,
        ..ResponseHeader::default()
    };
    encode_response_with_header(&header, key, api_version, body)
}

/// Like [`encode_response`] but with a caller-built header (tagged fields, tests).
pub fn encode_response_with_header(
    header: &ResponseHeader,
    key: ApiKey,
    api_version: i16,
    body: &ResponseBody,
) -> Result<EncodedFrame, ProtocolError> {
    let mut e = Encoder::with_capacity(256);
    header.encode(&mut e, response_header_version(key, api_version))?;
    body.encode_body(&mut e, api_version)?;
    let size = frame_size(e.len())?;
    let mut segments = e.into_segments();
    let prefix = Bytes::copy_from_slice(&size.to_be_bytes());
    let single = segments.len() == 1;
    match segments.first_mut() {
        // Small responses are one segment: prepend in place of a second segment.
        Some(first) if single => {
            let mut joined = Vec::with_capacity(4 + first.len());
            joined.extend_from_slice(&prefix);
            joined.extend_from_slice(first);
            *first = Bytes::from(joined);
        }
        _ => segments.insert(0, prefix),
    }
    Ok(EncodedFrame { segments })
}

/// Encodes the body-only ApiVersions v0 shape used to answer an ApiVersions request at a
/// version this crate does not know: the client reads it at v0 and retries lower.
pub fn encode_api_versions_fallback(
    correlation_id: i32,
    body: &crate::generated::api_versions_response::ApiVersionsResponse,
) -> Result<EncodedFrame, ProtocolError> {
    encode_response(correlation_id, 0, &ResponseBody::ApiVersions(body.clone()))
}

/// Decodes a response frame (without size prefix) of `api_key` at `api_version`.
pub fn decode_response(
    api_key: ApiKey,
    api_version: i16,
    frame: &Bytes,
) -> Result<(ResponseHeader, ResponseBody), ProtocolError> {
    check_version(api_key, api_version)?;
    // Responses come from a broker the caller chose to talk to: only the frame bounds
    // their lists, not the entry budget meant for requests from unknown clients.
    let cx = Cx::with_limits(
        frame,
        &DecodeLimits {
            max_entries: usize::MAX,
            max_heap_bytes: usize::MAX,
        },
    );
    let mut rest = &frame[..];
    let header = ResponseHeader::read(
        &mut rest,
        &cx,
        response_header_version(api_key, api_version),
    )?;
    let mut body = ResponseBody::default_for(api_key)?;
    body.read_into(api_version, &mut rest, &cx)?;
    if !rest.is_empty() {
        return Err(ProtocolError::TrailingBytes {
            message: api_key.name(),
            remaining: rest.len(),
        });
    }
    Ok((header, body))
}
