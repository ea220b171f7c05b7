//! Fuzz target: the heap a request decode takes stays within `decode_memory_bound`.
//!
//! ```text
//! input: [key u8][version u8][limit u8][body bytes...]
//!   key, version: as in `request_header_and_body`
//!   limit:        0 = default limits, else max_entries = limit (a small entry budget)
//! ```
//!
//! A counting global allocator (this target only) records the live heap bytes and their
//! peak while the decode runs; the peak must not pass the bound the broker reserves, nor
//! `MAX_BYTES_PER_FRAME_BYTE` times the frame plus `MAX_FIXED_BYTES` (the constants of
//! `crates/kafka-protocol/tests/decode_memory.rs` and `docs/limits.md`).

#![no_main]

use bytes::Bytes;
use kafka_protocol::{DecodeLimits, decode_memory_bound, decode_request_with};
use libfuzzer_sys::fuzz_target;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const MAX_BYTES_PER_FRAME_BYTE: usize = 40;
const MAX_FIXED_BYTES: usize = 4096;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn on_alloc(size: usize) {
    if ACTIVE.load(Ordering::Relaxed) {
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn on_dealloc(size: usize) {
    if ACTIVE.load(Ordering::Relaxed) {
        let _ = LIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
            Some(l.saturating_sub(size))
        });
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_dealloc(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_alloc(new_size);
        on_dealloc(layout.size());
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

mod common;
use common::{pick, request_frame};

fuzz_target!(|data: &[u8]| {
    let [key, version, limit, body @ ..] = data else {
        return;
    };
    let Some((api, v)) = pick(*key, *version) else {
        return;
    };
    let mut limits = DecodeLimits::default();
    if *limit != 0 {
        limits.max_entries = usize::from(*limit);
    }
    // From a Vec: the first zero-copy slice then allocates the shared header, which
    // the bound must cover too.
    let frame = Bytes::from(request_frame(api, v, body).to_vec());
    let len = frame.len();
    let bound = decode_memory_bound(api, v, len, &limits);
    LIVE.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    ACTIVE.store(true, Ordering::Relaxed);
    let decoded = decode_request_with(&frame, &limits);
    ACTIVE.store(false, Ordering::Relaxed);
    drop(decoded);
    let peak = PEAK.load(Ordering::Relaxed);
    assert!(
        peak <= bound,
        "{api:?} v{v}: {len}-byte frame took {peak} heap bytes, bound {bound}"
    );
    assert!(
        peak <= MAX_BYTES_PER_FRAME_BYTE * len + MAX_FIXED_BYTES,
        "{api:?} v{v}: {len}-byte frame took {peak} heap bytes"
    );
});
