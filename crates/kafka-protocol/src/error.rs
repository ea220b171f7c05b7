//! The one error type of this crate.
//!
//! Every variant says where (`field`, a `Struct.field` path, or the message name), what was
//! expected and what was found, so a broker can log a precise line and pick the right
//! reaction: answer `UNSUPPORTED_VERSION`, close the connection, or reply with an error code.

/// A decoding or encoding failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The input ended inside a value.
    #[error("truncated input at {field}: needed {needed} more bytes, {remaining} left")]
    Truncated {
        field: &'static str,
        needed: usize,
        remaining: usize,
    },
    /// A length prefix is negative (and not the null marker) or larger than the input.
    #[error("invalid length at {field}: {found} (at most {max} possible)")]
    InvalidLength {
        field: &'static str,
        found: i64,
        max: usize,
    },
    /// An array claims more elements than the remaining bytes could hold.
    #[error(
        "array at {field} claims {found} elements, the remaining {remaining} bytes hold at most {max}"
    )]
    ArrayTooLong {
        field: &'static str,
        found: u64,
        remaining: usize,
        max: usize,
    },
    /// A decode limit of the message ([`crate::DecodeLimits`]) would be passed: too many
    /// list entries in the whole message, or too many bytes of list storage. The request
    /// is over what the receiver accepts; a broker closes the connection.
    #[error("decoding {field} would pass the message's {limit} ({requested} requested)")]
    DecodeLimitExceeded {
        field: &'static str,
        limit: &'static str,
        requested: usize,
    },
    /// A string is not UTF-8.
    #[error("invalid UTF-8 in {field}")]
    InvalidUtf8 { field: &'static str },
    /// Null where the version does not allow it.
    #[error("null value in {field}, which is not nullable at this version")]
    UnexpectedNull { field: &'static str },
    /// An unsigned varint longer than 5 bytes (or a varlong longer than 10).
    #[error("malformed varint at {field}")]
    InvalidVarint { field: &'static str },
    /// A boolean byte other than 0 or 1 is accepted as Kafka does; this flags other
    /// single-byte enumerations (e.g. a nullable struct marker) outside their domain.
    #[error("invalid value at {field}: expected {expected}, found {found}")]
    InvalidValue {
        field: &'static str,
        expected: &'static str,
        found: i64,
    },
    /// Bytes left over after a whole message was decoded.
    #[error("{remaining} trailing bytes after {message}")]
    TrailingBytes {
        message: &'static str,
        remaining: usize,
    },
    /// The API key is not one this crate has messages for.
    #[error("unknown API key {api_key}")]
    UnknownApiKey { api_key: i16 },
    /// The version is outside what this crate supports for the key.
    #[error("unsupported version {version} of API key {api_key} (supported {min}-{max})")]
    UnsupportedVersion {
        api_key: i16,
        version: i16,
        min: i16,
        max: i16,
    },
    /// Encoding: a field holds a non-default value the version cannot carry.
    #[error("{field} cannot be encoded at version {version}")]
    FieldNotInVersion { field: &'static str, version: i16 },
    /// Encoding: a value is too long for its length prefix.
    #[error("{field} is too long to encode: {len} bytes, at most {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// Framing: the size prefix is negative.
    #[error("negative frame size {size}")]
    NegativeFrameSize { size: i32 },
    /// Framing: the size prefix exceeds the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    FrameTooLarge { size: usize, max: usize },
}

impl<I> nom::error::ParseError<I> for ProtocolError {
    fn from_error_kind(_input: I, _kind: nom::error::ErrorKind) -> Self {
        ProtocolError::InvalidValue {
            field: "input",
            expected: "a parsable value",
            found: 0,
        }
    }

    fn append(_input: I, _kind: nom::error::ErrorKind, other: Self) -> Self {
        other
    }
}

impl From<nom::Err<ProtocolError>> for ProtocolError {
    fn from(e: nom::Err<ProtocolError>) -> Self {
        match e {
            nom::Err::Error(e) | nom::Err::Failure(e) => e,
            // Parsers here are all `complete`; an Incomplete would be a bug, reported as a
            // truncation rather than a panic.
            nom::Err::Incomplete(_) => ProtocolError::Truncated {
                field: "input",
                needed: 1,
                remaining: 0,
            },
        }
    }
}
