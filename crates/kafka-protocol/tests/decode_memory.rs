//! The heap a request decode takes is bounded by its frame, for every request API and
//! every version this crate decodes.
//!
//! This binary installs a counting global allocator (for this test binary only) that
//! records, per thread and only while a decode runs, the live bytes and their peak. Each
//! case decodes one adversarial frame and checks two things:
//!
//! - the peak is at most [`decode_memory_bound`] for the frame's key, version and length
//!   under the limits used (the default ones, and a small entry budget);
//! - the peak is at most `MAX_BYTES_PER_FRAME_BYTE * frame_len + MAX_FIXED_BYTES`,
//!   constants stated here and in `docs/limits.md`, whatever the limits.
//!
//! The frames: the request's smallest body followed by filler bytes (zeros make minimal
//! elements in classic versions, ones in compact versions), with an array count forged at
//! every offset of the body and of the first filler bytes (so nested counts inside the
//! first element are hit too), as a classic int32 and as a compact uvarint, declaring the
//! most elements the remaining bytes could hold at 1, 2, 3, 4, 8, 16 and 33 bytes each,
//! and `i32::MAX`; then random keys, versions, offsets, counts and filler under proptest,
//! and random bodies. A decoder that admitted counts at a smaller minimum element size
//! than the real one would allocate more than the frame can pay for and fail here.

// The counting allocator below is the only unsafe code of the crate's targets.
#![allow(unsafe_code)]

use bytes::Bytes;
use kafka_protocol::api::request_header_version;
use kafka_protocol::limits::DECODE_OVERHEAD_BYTES;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{
    ApiKey, ByteString, DecodeLimits, Encode, Encoder, RequestBody, decode_memory_bound,
    decode_request_with, encode_request,
};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// No request decode allocates more than this many bytes per frame byte, plus
/// [`MAX_FIXED_BYTES`]. The largest ratio of any list element's in-memory size to its
/// minimum wire size, over every request and version, is checked against it below.
const MAX_BYTES_PER_FRAME_BYTE: usize = 40;

/// The frame-independent part: [`DECODE_OVERHEAD_BYTES`] and the slots of the elements
/// being decoded (their pledges are given back as they start), checked below.
const MAX_FIXED_BYTES: usize = 4096;

// ----- counting allocator -------------------------------------------------------------

struct Counting;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    // `try_with`: thread-locals may be gone while a thread shuts down.
    let _ = ACTIVE.try_with(|a| {
        if a.get() {
            let live = LIVE.with(|l| {
                let n = l.get() + size;
                l.set(n);
                n
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

fn on_dealloc(size: usize) {
    let _ = ACTIVE.try_with(|a| {
        if a.get() {
            LIVE.with(|l| l.set(l.get().saturating_sub(size)));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the bookkeeping
// only touches const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_dealloc(layout.size());
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_alloc(new_size);
        on_dealloc(layout.size());
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Decodes `frame` under `limits` and returns the peak live heap bytes of the decode
/// (the decoded request included).
fn peak_of_decode(frame: &Bytes, limits: &DecodeLimits) -> usize {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ACTIVE.with(|a| a.set(true));
    let decoded = decode_request_with(frame, limits);
    ACTIVE.with(|a| a.set(false));
    drop(decoded);
    PEAK.with(Cell::get)
}

// ----- frames -------------------------------------------------------------------------

/// Every (key, version) pair this crate decodes.
fn all_versions() -> Vec<(ApiKey, i16)> {
    let mut out = Vec::new();
    for &key in ApiKey::ALL {
        let Some(range) = key.versions() else {
            continue;
        };
        for v in range.min..=range.max {
            out.push((key, v));
        }
    }
    out
}

/// The encoded header and smallest body of `key` at `version` (without size prefix).
fn header_and_body(key: ApiKey, version: i16) -> (Vec<u8>, Vec<u8>) {
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 7,
        client_id: Some(ByteString::from_static("m")),
        ..RequestHeader::default()
    };
    let mut e = Encoder::new();
    header
        .encode(&mut e, request_header_version(key, version))
        .unwrap_or_else(|e| panic!("header of {key:?} v{version}: {e}"));
    let head = e.into_bytes().to_vec();
    let body = RequestBody::default_for(key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
    let frame = encode_request(&header, &body)
        .unwrap_or_else(|e| panic!("default {key:?} v{version}: {e}"));
    let body = frame[4 + head.len()..].to_vec();
    (head, body)
}

fn uvarint(mut v: u32, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A frame of `len` bytes: header, then `body` followed by `filler`, with `count` written
/// over the body at `at` (classic int32 or compact uvarint of `count + 1`).
fn forged_frame(
    head: &[u8],
    body: &[u8],
    len: usize,
    filler: u8,
    at: usize,
    count: u32,
    compact: bool,
) -> Bytes {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(head);
    f.extend_from_slice(body);
    f.resize(len.max(f.len()), filler);
    let mut c = Vec::new();
    if compact {
        uvarint(count.saturating_add(1), &mut c);
    } else {
        c.extend_from_slice(&count.min(i32::MAX as u32).to_be_bytes());
    }
    let at = head.len() + at;
    if at + c.len() <= f.len() {
        f[at..at + c.len()].copy_from_slice(&c);
    }
    Bytes::from(f)
}

/// Decodes `frame` of `key`/`version` under the default limits and a small entry budget
/// and checks the peak against both bounds; returns the largest peak per frame byte seen.
fn check(key: ApiKey, version: i16, frame: &Bytes) -> f64 {
    let len = frame.len();
    let absolute = MAX_BYTES_PER_FRAME_BYTE * len + MAX_FIXED_BYTES;
    let mut worst: f64 = 0.0;
    for limits in [
        DecodeLimits::default(),
        DecodeLimits {
            max_entries: 64,
            ..DecodeLimits::default()
        },
        DecodeLimits {
            max_heap_bytes: 2 * len,
            ..DecodeLimits::default()
        },
    ] {
        let peak = peak_of_decode(frame, &limits);
        let bound = decode_memory_bound(key, version, len, &limits);
        assert!(
            peak <= bound,
            "{key:?} v{version}: decoding {len} bytes took {peak} heap bytes, over the bound \
             {bound} (limits {limits:?}); frame {:02x?}",
            &frame[..len.min(96)]
        );
        assert!(
            peak <= absolute,
            "{key:?} v{version}: decoding {len} bytes took {peak} heap bytes, over \
             {MAX_BYTES_PER_FRAME_BYTE} x frame + {MAX_FIXED_BYTES} = {absolute}"
        );
        worst = worst.max(peak.saturating_sub(DECODE_OVERHEAD_BYTES) as f64 / len as f64);
    }
    worst
}

#[test]
fn the_stated_constants_cover_every_list_of_every_request() {
    let mut worst = (0usize, 1usize, ApiKey::Unknown(-1), 0i16);
    let mut fixed = (0usize, ApiKey::Unknown(-1), 0i16);
    for (key, v) in all_versions() {
        let mut in_flight = 0;
        let mut visit = |size: usize, min: usize| {
            if size * worst.1 > worst.0 * min {
                worst = (size, min, key, v);
            }
            in_flight += min;
        };
        RequestHeader::lists(request_header_version(key, v), &mut visit);
        RequestBody::lists_of(key, v, &mut visit);
        let f = MAX_BYTES_PER_FRAME_BYTE * in_flight + DECODE_OVERHEAD_BYTES;
        if f > fixed.0 {
            fixed = (f, key, v);
        }
    }
    let (size, min, key, v) = worst;
    eprintln!(
        "largest ratio: {key:?} v{v}, {size} bytes per {min}; largest fixed part: {:?} v{} {}",
        fixed.1, fixed.2, fixed.0
    );
    assert!(
        size <= MAX_BYTES_PER_FRAME_BYTE * min,
        "{key:?} v{v} has list elements of {size} bytes in memory and {min} on the wire"
    );
    assert!(
        fixed.0 <= MAX_FIXED_BYTES,
        "{:?} v{}: elements in flight may take {} bytes",
        fixed.1,
        fixed.2,
        fixed.0
    );
}

#[test]
fn forged_counts_at_every_offset_of_every_request_version() {
    let mut worst: f64 = 0.0;
    let mut cases = 0usize;
    for (key, v) in all_versions() {
        let (head, body) = header_and_body(key, v);
        let flexible = key.flexible_from().is_some_and(|f| v >= f);
        for len in [
            head.len() + body.len() + 600,
            head.len() + body.len() + 4000,
        ] {
            for at in 0..body.len() + 24 {
                let rem = len.saturating_sub(head.len() + at + 4) as u32;
                for divisor in [1, 2, 3, 4, 8, 16, 33, 0] {
                    let count = rem.checked_div(divisor).unwrap_or(i32::MAX as u32);
                    for filler in [0u8, 1] {
                        for compact in [false, true] {
                            if compact && !flexible {
                                continue;
                            }
                            let frame = forged_frame(&head, &body, len, filler, at, count, compact);
                            worst = worst.max(check(key, v, &frame));
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{cases} forged frames, largest heap per frame byte {worst:.2}");
    assert!(cases > 10_000, "only {cases} cases");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_counts_and_filler(
        pick in any::<prop::sample::Index>(),
        at in 0usize..96,
        count in prop_oneof![any::<u32>(), 0u32..4096],
        compact in any::<bool>(),
        filler in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 1..64),
        extra in 0usize..3000,
    ) {
        let all = all_versions();
        let (key, v) = all[pick.index(all.len())];
        let (head, body) = header_and_body(key, v);
        let len = head.len() + body.len() + extra;
        let mut frame = forged_frame(&head, &body, len, 0, at, count, compact).to_vec();
        // Repeat the random filler pattern over everything after the smallest body, except
        // the forged count itself.
        let start = head.len() + body.len();
        let forged = head.len() + at..head.len() + at + 5;
        for (n, b) in frame.iter_mut().enumerate().skip(start) {
            if !forged.contains(&n) {
                *b = filler[n % filler.len()];
            }
        }
        check(key, v, &Bytes::from(frame));
    }

    #[test]
    fn random_bodies(
        pick in any::<prop::sample::Index>(),
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let all = all_versions();
        let (key, v) = all[pick.index(all.len())];
        let (head, _) = header_and_body(key, v);
        let mut frame = head;
        frame.extend_from_slice(&body);
        check(key, v, &Bytes::from(frame));
    }
}

#[test]
fn bounds_for_common_frames() {
    let limits = DecodeLimits::default();
    let mib = 1 << 20;
    let produce = decode_memory_bound(ApiKey::Produce, 9, mib, &limits);
    let leave = decode_memory_bound(ApiKey::LeaveGroup, 3, 100_000_000, &limits);
    eprintln!("bound: Produce v9 1 MiB {produce}, LeaveGroup v3 100 MB {leave}");
    // The LeaveGroup of the report (100 MB, 100 million members) is held to the entry
    // budget, far below its frame.
    assert!(leave < 100_000_000 / 4, "{leave}");
}

/// The reported attack, scaled down: a LeaveGroup v3 whose members count the frame could
/// hold (4 bytes a member) but that passes the entry budget is refused before the list is
/// allocated, with the distinct over-limit error.
#[test]
fn leave_group_with_a_million_members_is_refused_before_allocating() {
    let (head, body) = header_and_body(ApiKey::LeaveGroup, 3);
    let members = 1_000_000u32;
    // group_id (empty), then the members count, then minimal members (all zeros).
    let len = head.len() + body.len() + 4 * members as usize;
    let at = body.len() - 4;
    let frame = forged_frame(&head, &body, len, 0, at, members, false);
    let limits = DecodeLimits::default();
    let peak = peak_of_decode(&frame, &limits);
    assert!(peak <= DECODE_OVERHEAD_BYTES, "{peak} bytes allocated");
    match decode_request_with(&frame, &limits) {
        Err(kafka_protocol::ProtocolError::DecodeLimitExceeded {
            limit, requested, ..
        }) => {
            assert_eq!(limit, "max_entries");
            assert_eq!(requested, members as usize);
        }
        other => panic!("expected DecodeLimitExceeded, got {other:?}"),
    }
    // Within a larger budget the same frame decodes, and takes what the bound says.
    let roomy = DecodeLimits {
        max_entries: 2_000_000,
        ..DecodeLimits::default()
    };
    let peak = peak_of_decode(&frame, &roomy);
    let bound = decode_memory_bound(ApiKey::LeaveGroup, 3, frame.len(), &roomy);
    assert!(peak <= bound, "{peak} > {bound}");
    assert!(decode_request_with(&frame, &roomy).is_ok());
}
