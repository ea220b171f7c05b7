//! Fuzz target: splits arbitrary bytes into size-prefixed request frames and decodes
//! each one as a whole request (header and body).
//!
//! ```text
//! input: ([size i32 BE][size bytes])*  — whatever follows the last whole frame is ignored
//! ```
//!
//! Invariant checked on every frame that decodes: re-encoding the request with
//! `encode_request` succeeds and the result decodes to an equal request (up to the order
//! of unknown tagged fields, see `common::canonical_debug`).

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
        assert_eq!(
            canonical_debug(&again),
            canonical_debug(&req),
            "request changed through re-encode"
        );
    }
});
