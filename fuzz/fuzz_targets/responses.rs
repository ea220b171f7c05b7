//! Fuzz target: decodes arbitrary bytes as a response frame of a fuzz-chosen API and
//! version, as a client of this crate would.
//!
//! ```text
//! input: [key u8][version u8][frame bytes (response header + body)...]
//!   key:     a wire API key; a key without messages picks ApiKey::ALL[key % len]
//!   version: used as is when supported, else min + version % (max - min + 1)
//! ```
//!
//! A response that decodes must re-encode (with its own header) and decode to an equal
//! header and body (up to the order of unknown tagged fields, see
//! `common::canonical_debug`).

#![no_main]

use bytes::Bytes;
use kafka_protocol::api::encode_response_with_header;
use kafka_protocol::decode_response;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{canonical_debug, pick};

fuzz_target!(|data: &[u8]| {
    let [key, version, rest @ ..] = data else {
        return;
    };
    let Some((api, v)) = pick(*key, *version) else {
        return;
    };
    let frame = Bytes::copy_from_slice(rest);
    let Ok((header, body)) = decode_response(api, v, &frame) else {
        return;
    };
    assert_eq!(body.api_key(), api);
    let encoded = encode_response_with_header(&header, api, v, &body)
        .unwrap_or_else(|e| panic!("decoded response does not re-encode: {e}: {body:?}"))
        .to_bytes();
    let (header2, body2) = decode_response(api, v, &encoded.slice(4..))
        .unwrap_or_else(|e| panic!("re-encoded response does not decode: {e}: {body:?}"));
    assert_eq!(
        canonical_debug(&(header2, body2)),
        canonical_debug(&(header, body)),
        "response changed through re-encode"
    );
});
