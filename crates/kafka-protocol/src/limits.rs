//! Bounds on what decoding one message may allocate.
//!
//! Decoded messages own little memory of their own: strings and byte fields are slices of
//! the frame, and the only allocations are the vectors that hold list elements (and the
//! unknown tagged fields of flexible versions). Those are bounded twice:
//!
//! - by the frame: an array's count is admitted only if the bytes left, less the bytes
//!   pledged to elements already allocated but not decoded yet, can hold that many
//!   elements at the element's exact minimum wire size at the message's version; the
//!   admitted elements are pledged in turn (see [`crate::wire::Cx`]). So every element
//!   slot is paid for by that many bytes of the frame that no other slot uses, nested
//!   lists included;
//! - by [`DecodeLimits`]: every list entry of the message counts against `max_entries`,
//!   and every list's bytes against `max_heap_bytes`, before it is allocated.
//!
//! [`decode_memory_bound`](crate::api::decode_memory_bound) turns both into a number a
//! broker can reserve before it decodes a request: for each list type the message can
//! hold at its version, elements cost `size_of` bytes in memory and at least `min_len`
//! bytes on the wire, so a frame of `L` bytes can make at most about
//! `max(size_of / min_len) * L` bytes of lists, and the entry budget at most
//! `max(size_of) * max_entries`.

/// Default for [`DecodeLimits::max_entries`]: Kafka clients put at most tens of thousands
/// of partitions in one Fetch, OffsetCommit or ListOffsets.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// What decoding one message may use, over the whole message (header and body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// List entries (array elements of every list, nested ones included, and unknown
    /// tagged fields) one message may hold. Default [`DEFAULT_MAX_ENTRIES`].
    pub max_entries: usize,
    /// Bytes of list storage (entries times their in-memory size) one message may
    /// allocate. Default `usize::MAX`: only the frame size and `max_entries` bound it.
    /// A caller that reserves less than the worst case for a frame sets this to what it
    /// reserved, and a request that would need more fails instead of overrunning.
    pub max_heap_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_entries: DEFAULT_MAX_ENTRIES,
            max_heap_bytes: usize::MAX,
        }
    }
}

/// Heap bytes a decode may take beyond its lists: the one shared-buffer header that
/// `bytes` allocates the first time a frame built from a `Vec` is sliced, with room for
/// allocator rounding.
pub const DECODE_OVERHEAD_BYTES: usize = 256;
