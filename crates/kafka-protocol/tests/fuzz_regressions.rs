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
fn out_of_order_unknown_tags_reencode_sorted_and_stable() {
    for (name, frame) in [
        ("hand-made", unhex(OUT_OF_ORDER_TAGS)),
        ("fuzz artifact", unhex(FUZZ_ARTIFACT).slice(4..)),
    ] {
        let req = decode_request(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        let once = encode_request(&req.header, &req.body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = decode_request(&once.slice(4..)).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The encoder writes tags in ascending order, as the protocol requires...
        let tags = unknown_tags(&again.body);
        assert!(tags.is_sorted(), "{name}: {tags:?}");
        // ...and from there the round trip is a fixed point.
        let twice =
            encode_request(&again.header, &again.body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(once, twice, "{name}");
    }
}

/// The invariant itself. It fails while the decoders accept tagged fields out of order
/// (or repeated): the decoded request keeps the wire order, the re-encoded one is sorted.
/// The tagged-field loops are generated (`tools/kafka-codegen`); once they reject a tag
/// that is not greater than the previous one, `decode_request` returns an error here and
/// this test passes.
#[test]
#[ignore = "decoders accept out-of-order tagged fields; the fix belongs in tools/kafka-codegen"]
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
