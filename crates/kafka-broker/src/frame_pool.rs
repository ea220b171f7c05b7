//! Read buffers kept for large request frames.
//!
//! A large request (a Produce of a few hundred KiB or more) lives in its read buffer until
//! it has been handled: its batches are slices of that buffer. Allocating a new buffer for
//! each such frame makes the kernel hand out fresh pages whenever the allocator has given
//! the pages of the previous ones back in the meantime, and jemalloc does so steadily when
//! many connections send frames of varying sizes (eight producers on one partition: about
//! a third of the bytes read landed on pages faulted in for the read, one fault per 4 KiB).
//!
//! The pool keeps the buffers frames give back, up to `limits.frame_pool_bytes` of them
//! idle, and lends them to later frames of the same size class. A frame read into a lent
//! buffer becomes [`Bytes`] whose owner ([`PooledFrame`]) gives the buffer back when the
//! last slice of the frame is dropped, on whatever thread that happens.
//!
//! Memory: idle buffers are resident and outside the request budget, at most
//! `frame_pool_bytes` of them (0 keeps none, and every frame gets a buffer of its own as
//! before). A buffer is lent only once the frame's lease covers the whole frame, and only
//! if its capacity is at most twice the frame (new buffers are the frame rounded up to
//! its size class, under a quarter more), so a lent buffer holds at most the frame's size
//! beyond its lease, as a doubling `Vec` would. Frames under [`POOLED_FRAME_MIN`] are not
//! pooled.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Smallest frame (size prefix included) read into a pooled buffer.
pub(crate) const POOLED_FRAME_MIN: usize = 64 * 1024;

/// Buffers given back by frames, by capacity.
#[derive(Debug)]
pub(crate) struct FramePool {
    max_idle_bytes: usize,
    idle: Mutex<Idle>,
}

#[derive(Debug, Default)]
struct Idle {
    /// Idle buffers by size class (their capacity), each empty.
    by_class: BTreeMap<usize, Vec<Vec<u8>>>,
    /// Sum of the idle buffers' capacities.
    bytes: usize,
}

/// The capacity of the buffer lent for a frame of `len` bytes: `len` rounded up to an
/// eighth of the power of two at or above it, so eight classes per doubling and at most
/// a quarter more than `len`.
pub(crate) fn size_class(len: usize) -> usize {
    let unit = (len.max(8).next_power_of_two() / 8).max(1);
    len.div_ceil(unit).saturating_mul(unit)
}

impl FramePool {
    /// A pool keeping at most `max_idle_bytes` of idle buffers.
    pub(crate) fn new(max_idle_bytes: usize) -> Arc<Self> {
        Arc::new(FramePool {
            max_idle_bytes,
            idle: Mutex::new(Idle::default()),
        })
    }

    /// Whether frames of `len` bytes are read into pooled buffers.
    pub(crate) fn pools(&self, len: usize) -> bool {
        self.max_idle_bytes > 0 && len >= POOLED_FRAME_MIN && size_class(len) <= self.max_idle_bytes
    }

    /// An empty buffer with room for `len` bytes: an idle one of its size class, or a new
    /// one of that class's capacity. Its memory goes back to the pool when the returned
    /// buffer (or the frame made of it) is dropped.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> PooledBuf {
        let class = size_class(len);
        let reused = {
            let mut idle = self.lock();
            // The smallest idle buffer that fits, if it is at most twice the frame.
            let fit = idle
                .by_class
                .range_mut(class..=len.saturating_mul(2))
                .find_map(|(_, buffers)| buffers.pop());
            if let Some(b) = &fit {
                idle.bytes -= b.capacity();
            }
            fit
        };
        PooledBuf {
            buf: reused.unwrap_or_else(|| Vec::with_capacity(class)),
            pool: Arc::clone(self),
        }
    }

    /// Bytes held by idle buffers.
    #[cfg(test)]
    pub(crate) fn idle_bytes(&self) -> usize {
        self.lock().bytes
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        let capacity = buf.capacity();
        // A buffer whose capacity is not its class's (never the case for what `take`
        // hands out, unless it grew) is dropped rather than filed under the wrong class.
        if capacity == 0 || size_class(capacity) != capacity {
            return;
        }
        buf.clear();
        let mut idle = self.lock();
        if idle.bytes + capacity > self.max_idle_bytes {
            return;
        }
        idle.bytes += capacity;
        idle.by_class.entry(capacity).or_default().push(buf);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The idle lists stay consistent across a panic elsewhere (each update is a
        // push or a pop with its byte count), so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A buffer lent by a [`FramePool`], given back when dropped.
#[derive(Debug)]
pub(crate) struct PooledBuf {
    buf: Vec<u8>,
    pool: Arc<FramePool>,
}

impl PooledBuf {
    /// The buffer, to read into. Reads must stay within its capacity (a grown buffer is
    /// not kept when given back).
    pub(crate) fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The bytes read, as `Bytes` that give the buffer back once every slice of them is
    /// dropped.
    pub(crate) fn freeze(self) -> Bytes {
        Bytes::from_owner(PooledFrame(self))
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// The owner of a frame read into a pooled buffer.
#[derive(Debug)]
pub(crate) struct PooledFrame(PooledBuf);

impl AsRef<[u8]> for PooledFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        for len in [
            1,
            7,
            8,
            9,
            100,
            65_536,
            65_537,
            70_000,
            130_000,
            1_000_100,
            1 << 20,
        ] {
            let class = size_class(len);
            assert!(class >= len, "{len} -> {class}");
            assert!(class - len <= len / 4 + 1, "{len} -> {class}");
            assert_eq!(size_class(class), class, "a class is its own class");
        }
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class(1_000_100), 1 << 20);
        assert_eq!(size_class(65_537), 65_536 + 16_384);
    }

    #[test]
    fn a_dropped_frame_gives_its_buffer_to_the_next_frame_of_its_class() {
        let pool = FramePool::new(4 << 20);
        let mut a = pool.take(100_000);
        a.vec().extend_from_slice(&[7; 100_000]);
        let ptr = a.vec().as_ptr();
        let frame = a.freeze();
        let slice = frame.slice(4..10);
        drop(frame);
        assert_eq!(pool.idle_bytes(), 0, "a slice still holds the buffer");
        assert_eq!(&slice[..], &[7; 6]);
        drop(slice);
        assert_eq!(pool.idle_bytes(), size_class(100_000));
        let mut b = pool.take(99_000);
        assert_eq!(b.vec().as_ptr(), ptr, "same class, same buffer");
        assert!(b.vec().is_empty());
        assert_eq!(pool.idle_bytes(), 0);
        let mut c = pool.take(300_000);
        assert_ne!(c.vec().as_ptr(), ptr, "another class, another buffer");
        assert!(c.vec().capacity() >= 300_000);
    }

    #[test]
    fn idle_buffers_stay_within_the_bound() {
        let pool = FramePool::new(300_000);
        let lent: Vec<_> = (0..4).map(|_| pool.take(100_000)).collect();
        drop(lent);
        // Three of 114_688 bytes would be over 300_000.
        assert_eq!(pool.idle_bytes(), 2 * size_class(100_000));
        assert!(pool.pools(100_000));
        assert!(!pool.pools(POOLED_FRAME_MIN - 1));
        assert!(!pool.pools(400_000), "larger than the whole pool");
        assert!(!FramePool::new(0).pools(100_000));
    }

    #[test]
    fn a_grown_buffer_is_not_kept() {
        let pool = FramePool::new(4 << 20);
        let mut a = pool.take(100_000);
        a.vec().resize(500_000, 0);
        drop(a);
        assert_eq!(pool.idle_bytes(), 0);
    }
}
