//! Fuzz target: decodes arbitrary bytes as the body of a fuzz-chosen request, behind a
//! valid request header, so mutations are spent on the body rather than on the header's
//! version check.
//!
//! ```text
//! input: [key u8][version u8][body bytes...]
//!   key:     a wire API key; a key without messages picks ApiKey::ALL[key % len]
//!   version: used as is when supported, else min + version % (max - min + 1)
//! ```
//!
//! The header (key, version, correlation id, client id, and an empty tagged section when
//! the version is flexible) is written in front of the body. A request that decodes must
//! re-encode and decode to an equal value (up to the order of unknown tagged fields, see
//! `common::canonical_debug`).

#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::api::request_header_version;
use kafka_protocol::{ApiKey, decode_request, encode_request};
use libfuzzer_sys::fuzz_target;

mod common;
use common::canonical_debug;

fn pick(key: u8, version: u8) -> Option<(ApiKey, i16)> {
    let mut api = ApiKey::from_i16(i16::from(key));
    if api.versions().is_none() {
        api = ApiKey::ALL[usize::from(key) % ApiKey::ALL.len()];
    }
    let range = api.versions()?;
    let v = i16::from(version);
    if range.contains(v) {
        return Some((api, v));
    }
    let span = range.max - range.min + 1;
    Some((api, range.min + v % span))
}

fuzz_target!(|data: &[u8]| {
    let [key, version, body @ ..] = data else {
        return;
    };
    let Some((api, v)) = pick(*key, *version) else {
        return;
    };
    let mut frame = BytesMut::with_capacity(32 + body.len());
    frame.put_i16(api.as_i16());
    frame.put_i16(v);
    frame.put_i32(0x0102_0304);
    frame.put_i16(4);
    frame.put_slice(b"fuzz");
    if request_header_version(api, v) >= 2 {
        frame.put_u8(0);
    }
    frame.put_slice(body);
    let frame: Bytes = frame.freeze();
    let Ok(req) = decode_request(&frame) else {
        return;
    };
    assert_eq!(req.body.api_key(), api);
    assert_eq!(req.api_version(), v);
    let encoded = encode_request(&req.header, &req.body)
        .unwrap_or_else(|e| panic!("decoded request does not re-encode: {e}: {req:?}"));
    let again = decode_request(&encoded.slice(4..))
        .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}: {req:?}"));
    assert_eq!(
        canonical_debug(&again),
        canonical_debug(&req),
        "request changed through re-encode"
    );
});
