//! Inputs found by the protocol fuzz targets (`fuzz/fuzz_targets/`), kept as tests.
//!
//! The invariant the targets check: a request that decodes re-encodes, and the re-encoded
//! frame decodes to an equal request.

use bytes::Bytes;
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::{RawTaggedField, RequestBody, decode_request, encode_request};

fn unhex(s: &str) -> Bytes {
    Bytes::from(hex::decode(s).unwrap_or_else(|e| panic!("bad hex: {e}")))
}

fn unknown_tags(body: &RequestBody) -> Vec<u32> {
    let RequestBody::Heartbeat(HeartbeatRequest {
        unknown_tagged_fields,
        ..
    }) = body
    else {
        panic!("not a Heartbeat request: {body:?}");
    };
    unknown_tagged_fields
        .iter()
        .map(|f: &RawTaggedField| f.tag)
        .collect()
}

/// Heartbeat v4 (flexible) whose body carries unknown tagged fields out of order:
/// tag 5 then tag 3.
///
/// ```text
/// 000c 0004 00000008 ffff 00      header v2: key 12, v4, correlation 8, null client, no tags
/// 0267 00000001 026d 00           group "g", generation 1, member "m", null instance id
/// 02 0500 0300                    2 tagged fields: tag 5 (empty), tag 3 (empty)
/// ```
const OUT_OF_ORDER_TAGS: &str = "000c000400000008ffff00026700000001026d000205000300";

/// The frame the `request_frames` target reported (size prefix included): Heartbeat v4
/// whose body's unknown tags arrive as 6, 6, 0, 0, 4, 4.
const FUZZ_ARTIFACT: &str = "00000092000c000400000008001c6669787404040404040404040404040404040404060606060606\
    06060606060606060606060606060606060606060606060606060606060606060606060606060606\
    060606060606060606060606060606060606067a0606062f06060606060606060606060606060606\
    06060606049100000000000000040404040404040404040404042d360000";

#[test]
fn out_of_order_or_repeated_tags_are_refused() {
    for (name, frame) in [
        ("hand-made", unhex(OUT_OF_ORDER_TAGS)),
        ("fuzz artifact", unhex(FUZZ_ARTIFACT).slice(4..)),
    ] {
        let err = decode_request(&frame).expect_err(name);
        assert!(
            matches!(err, kafka_protocol::ProtocolError::InvalidValue { .. }),
            "{name}: {err:?}"
        );
    }
    // The same request with its tags in order decodes and round-trips.
    let ordered = unhex("000c000400000008ffff00026700000001026d000203000500");
    let req = decode_request(&ordered).expect("ordered tags decode");
    assert_eq!(unknown_tags(&req.body), vec![3, 5]);
    let again = encode_request(&req.header, &req.body).expect("re-encodes");
    assert_eq!(&again[4..], &ordered[..]);
}

/// The invariant itself: whatever decodes re-encodes to something that decodes equal.
#[test]
fn out_of_order_unknown_tags_are_rejected_or_round_trip() {
    for frame in [unhex(OUT_OF_ORDER_TAGS), unhex(FUZZ_ARTIFACT).slice(4..)] {
        let Ok(req) = decode_request(&frame) else {
            continue;
        };
        let once = encode_request(&req.header, &req.body).expect("re-encodes");
        let again = decode_request(&once.slice(4..)).expect("re-decodes");
        assert_eq!(again, req);
    }
}
