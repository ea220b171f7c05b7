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
//! idle, and lends them to later frames: an idle buffer as soon as a frame's size is known
//! ([`FramePool::take_early`]; the frame is then read into it as its bytes arrive, with
//! no move of a growing buffer), else an idle or a new one once the frame's lease covers
//! the whole frame ([`FramePool::take`]; what arrived so far is copied into it, as the
//! growing buffer's last move would have). A frame read into a lent buffer becomes
//! [`Bytes`] whose owner ([`PooledFrame`]) gives the buffer back when the last slice of the
//! frame is dropped, on whatever thread that happens.
//!
//! Memory: idle buffers are resident and outside the request budget, at most
//! `frame_pool_bytes` of them (0 keeps none, and every frame gets a buffer of its own as
//! before). A buffer lent before the frame's lease covers it still counts against that
//! bound until it does, so what slow senders hold ahead of their leases is within the
//! bound too, and such a buffer is never a new allocation (fresh memory ahead of a lease
//! may be pages the allocator holds resident, outside any count). A buffer is lent only
//! if its capacity is at most twice the frame (new buffers are the frame rounded up to
//! its size class, under a quarter more), so once covered it holds at most the frame's
//! size beyond its lease, as a doubling `Vec` would. Frames under [`POOLED_FRAME_MIN`] are
//! not pooled. Buffers left idle for `limits.frame_pool_idle` are freed
//! ([`FramePool::release_idle`], called by the server on a timer), so the memory kept after
//! a burst of large requests goes back to the allocator once the burst is over.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// Idle buffers by size class (their capacity), each empty, with when it was given
    /// back: the oldest first, lent from the back (the most recently used, likeliest to
    /// be resident).
    by_class: BTreeMap<usize, VecDeque<(Instant, Vec<u8>)>>,
    /// Sum of the idle buffers' capacities.
    bytes: usize,
    /// Sum of the capacities of buffers lent to frames their lease does not cover yet.
    early: usize,
}

impl Idle {
    /// The smallest idle buffer of at least `len` and at most twice it, counted as lent
    /// early or not.
    fn pop_fit(&mut self, len: usize, early: bool) -> Option<Vec<u8>> {
        let buf = self
            .by_class
            .range_mut(size_class(len)..=len.saturating_mul(2))
            .find_map(|(_, buffers)| buffers.pop_back())?
            .1;
        self.bytes -= buf.capacity();
        if early {
            self.early += buf.capacity();
        }
        Some(buf)
    }
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

    /// An empty buffer with room for `len` bytes, for a frame whose lease covers it
    /// whole: an idle one (the smallest at least `len` and at most twice it), or a new one
    /// of `len`'s size class. Its memory goes back to the pool when the returned buffer
    /// (or the frame made of it) is dropped.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> PooledBuf {
        let reused = self.lock().pop_fit(len, false);
        PooledBuf {
            buf: reused.unwrap_or_else(|| Vec::with_capacity(size_class(len))),
            pool: Arc::clone(self),
            early: 0,
        }
    }

    /// An idle buffer for a frame of `len` bytes whose lease does not cover it yet, if
    /// one fits; never a new one (fresh memory ahead of the lease could be pages the
    /// allocator already holds resident). Until [`PooledBuf::covered`], its capacity is
    /// counted as if it were still idle, so idle and early-lent buffers together stay
    /// within the pool's bound whatever slow senders hold.
    pub(crate) fn take_early(self: &Arc<Self>, len: usize) -> Option<PooledBuf> {
        let buf = self.lock().pop_fit(len, true)?;
        Some(PooledBuf {
            early: buf.capacity(),
            buf,
            pool: Arc::clone(self),
        })
    }

    /// Bytes held by idle buffers, and by buffers lent ahead of their frame's lease.
    pub(crate) fn bytes(&self) -> (usize, usize) {
        let idle = self.lock();
        (idle.bytes, idle.early)
    }

    /// Files `buf` as idle if it fits the bound; `early` is what it was counted as lent
    /// early.
    fn give_back(&self, mut buf: Vec<u8>, early: usize) {
        let capacity = buf.capacity();
        let mut idle = self.lock();
        idle.early = idle.early.saturating_sub(early);
        // A buffer whose capacity is not its class's (never the case for what `take`
        // hands out, unless it grew) is dropped rather than filed under the wrong class.
        if capacity == 0
            || size_class(capacity) != capacity
            || idle.bytes + idle.early + capacity > self.max_idle_bytes
        {
            return;
        }
        buf.clear();
        idle.bytes += capacity;
        idle.by_class
            .entry(capacity)
            .or_default()
            .push_back((Instant::now(), buf));
    }

    /// Frees the idle buffers given back before `before`; returns the bytes freed.
    pub(crate) fn release_idle(&self, before: Instant) -> usize {
        let mut freed = Vec::new();
        let mut idle = self.lock();
        idle.by_class.retain(|_, buffers| {
            while let Some((_, buf)) = buffers.pop_front_if(|(at, _)| *at < before) {
                freed.push(buf);
            }
            !buffers.is_empty()
        });
        let bytes = freed.iter().map(Vec::capacity).sum();
        idle.bytes -= bytes;
        drop(idle);
        // Freed outside the lock.
        drop(freed);
        bytes
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
    /// Bytes counted as lent before the frame's lease covered it (0 once covered, or
    /// when lent to a covered frame).
    early: usize,
}

impl PooledBuf {
    /// The frame's lease now covers it whole: the buffer no longer counts against the
    /// pool's bound.
    pub(crate) fn covered(&mut self) {
        let early = std::mem::take(&mut self.early);
        if early > 0 {
            let mut idle = self.pool.lock();
            idle.early = idle.early.saturating_sub(early);
        }
    }

    /// The buffer's capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

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
        self.pool.give_back(
            std::mem::take(&mut self.buf),
            std::mem::take(&mut self.early),
        );
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
        assert_eq!(pool.bytes(), (0, 0), "a slice still holds the buffer");
        assert_eq!(&slice[..], &[7; 6]);
        drop(slice);
        assert_eq!(pool.bytes(), (size_class(100_000), 0));
        let mut b = pool.take(99_000);
        assert_eq!(b.vec().as_ptr(), ptr, "same class, same buffer");
        assert!(b.vec().is_empty());
        assert_eq!(pool.bytes(), (0, 0));
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
        assert_eq!(pool.bytes(), (2 * size_class(100_000), 0));
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
        assert_eq!(pool.bytes(), (0, 0));
    }

    #[test]
    fn buffers_lent_early_count_against_the_bound_until_covered() {
        let class = size_class(100_000);
        let pool = FramePool::new(3 * class);
        assert!(
            pool.take_early(100_000).is_none(),
            "never a new buffer early"
        );
        drop((pool.take(100_000), pool.take(100_000), pool.take(100_000)));
        assert_eq!(pool.bytes(), (3 * class, 0));
        // Two slow senders hold two idle buffers early.
        let slow_a = pool.take_early(100_000).unwrap();
        let slow_b = pool.take_early(90_000).unwrap();
        assert_eq!(pool.bytes(), (class, 2 * class));
        // A frame covered whole takes the last one and a new one; given back, only one
        // fits beside the two still lent early.
        drop((pool.take(100_000), pool.take(100_000)));
        assert_eq!(pool.bytes(), (class, 2 * class));
        assert!(pool.take_early(300_000).is_none(), "no buffer of that size");
        assert!(pool.take_early(50_000).is_none(), "over twice the frame");
        // Covered: no longer counted, so a buffer given back now is kept.
        let mut covered = slow_a;
        covered.covered();
        assert_eq!(pool.bytes(), (class, class));
        drop(pool.take(100_000));
        assert_eq!(pool.bytes(), (class, class), "taken and given back");
        drop(covered);
        assert_eq!(pool.bytes(), (2 * class, class));
        drop(slow_b);
        assert_eq!(pool.bytes(), (3 * class, 0));
    }

    #[test]
    fn buffers_idle_since_before_the_cutoff_are_freed() {
        let (small, large) = (size_class(100_000), size_class(300_000));
        let pool = FramePool::new(8 << 20);
        drop((pool.take(100_000), pool.take(300_000)));
        let cutoff = Instant::now();
        drop(pool.take(100_000));
        assert_eq!(pool.bytes().0, small + large, "one of each, reused");
        // The buffer just given back was idle before `cutoff` too: it is the one taken
        // and given back again, so it now counts from then.
        assert_eq!(pool.release_idle(cutoff), large);
        assert_eq!(pool.bytes(), (small, 0));
        assert_eq!(pool.release_idle(cutoff), 0, "nothing idle that long");
        // The oldest go first; a class with nothing left is removed.
        drop((pool.take(100_000), pool.take(100_000)));
        let later = Instant::now();
        assert_eq!(pool.bytes().0, 2 * small);
        assert_eq!(pool.release_idle(later), 2 * small);
        assert_eq!(pool.bytes(), (0, 0));
        assert!(pool.lock().by_class.is_empty());
        // Buffers lent early are not idle: not freed, still counted until given back.
        drop(pool.take(100_000));
        let early = pool.take_early(100_000).unwrap();
        assert_eq!(pool.release_idle(Instant::now()), 0);
        assert_eq!(pool.bytes(), (0, small));
        drop(early);
        assert_eq!(pool.bytes(), (small, 0));
    }
}
