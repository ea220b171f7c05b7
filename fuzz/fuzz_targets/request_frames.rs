//! Fuzz target: splits arbitrary bytes into size-prefixed request frames and decodes
//! each one as a whole request (header and body).
//!
//! ```text
//! input: ([size i32 BE][size bytes])*  — whatever follows the last whole frame is ignored
//! ```
//!
//! Invariant checked on every frame that decodes: re-encoding the request with
//! `encode_request` succeeds and the result decodes to an equal header and body (up to
//! the order of unknown tagged fields, see `common::canonical_debug`). Bytes after the
//! body are tolerated on decode and not re-encoded, so they are not compared.

#![no_main]

use bytes::BytesMut;
use kafka_protocol::frame::{Framed, split_frame};
use kafka_protocol::{decode_request, encode_request};
use libfuzzer_sys::fuzz_target;

mod common;
use common::canonical_debug;

/// Largest frame accepted; inputs are capped well below this by `-max_len`.
const MAX_FRAME: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    loop {
        let frame = match split_frame(&mut buf, MAX_FRAME) {
            Framed::Frame(frame) => frame,
            Framed::NeedMore { .. } | Framed::TooLarge { .. } | Framed::Negative { .. } => break,
        };
        let Ok(req) = decode_request(&frame) else {
            continue;
        };
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
    }
});
