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
//! re-encode and decode to an equal header and body (up to the order of unknown tagged
//! fields, see `common::canonical_debug`); bytes after the body are tolerated on decode
//! and not re-encoded, so they are not compared.

#![no_main]

use kafka_protocol::{decode_request, encode_request};
use libfuzzer_sys::fuzz_target;

mod common;
use common::{canonical_debug, pick, request_frame};

fuzz_target!(|data: &[u8]| {
    let [key, version, body @ ..] = data else {
        return;
    };
    let Some((api, v)) = pick(*key, *version) else {
        return;
    };
    let frame = request_frame(api, v, body);
    let Ok(req) = decode_request(&frame) else {
        return;
    };
    assert_eq!(req.body.api_key(), api);
    assert_eq!(req.api_version(), v);
    let encoded = encode_request(&req.header, &req.body)
        .unwrap_or_else(|e| panic!("decoded request does not re-encode: {e}: {req:?}"));
    let again = decode_request(&encoded.slice(4..))
        .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}: {req:?}"));
    // Bytes after the body are tolerated and counted, not kept: the re-encoded frame
    // has none, and the header and body must come back equal.
    assert_eq!(
        again.trailing_bytes, 0,
        "re-encoded request has trailing bytes"
    );
    assert_eq!(
        canonical_debug(&(&again.header, &again.body)),
        canonical_debug(&(&req.header, &req.body)),
        "request changed through re-encode"
    );
});
