//! Buffers kept for reuse: the read buffers of large request frames, and the bodies of
//! the sends a store makes of them.
//!
//! A large request (a Produce of a few hundred KiB or more) lives in its read buffer until
//! it has been handled, and a store that sends its records on (the Iggy bridge) writes
//! them into a body of about the same size. Allocating a new buffer for each makes the
//! kernel hand out fresh pages whenever the allocator has given the pages of the
//! previous ones back in the meantime, and jemalloc does so steadily when many
//! connections send frames of varying sizes (eight producers on one partition: about a
//! third of the bytes read landed on pages faulted in for the read, one fault per 4 KiB).
//!
//! The pool keeps the buffers given back, up to its bound of them idle, and lends them
//! again: [`BufferPool::take`] lends an idle buffer that fits, or a new one;
//! [`BufferPool::take_early`] lends only an idle one, for a frame whose bytes are still
//! arriving (see below). A buffer becomes [`Bytes`] whose owner gives it back when the
//! last slice is dropped, on whatever thread that happens ([`PooledBuf::freeze`]); a
//! buffer used as a plain `Vec` comes back with [`BufferPool::give`].
//!
//! Memory: idle buffers are resident and outside any request budget, at most the pool's
//! bound of them (0 keeps none, and every buffer is a new allocation). A buffer lent
//! before the frame's lease covers it still counts against that bound until it does
//! ([`PooledBuf::covered`]), so what slow senders hold ahead of their leases is within
//! the bound too, and such a buffer is never a new allocation (fresh memory ahead of a
//! lease may be pages the allocator holds resident, outside any count). A buffer is lent
//! only if its capacity is at most twice what was asked (new buffers are the size asked
//! rounded up to its size class, under a quarter more), so a lent buffer holds at most
//! the asked size beyond it, as a doubling `Vec` would. Sizes under the pool's minimum
//! are not pooled.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Buffers given back, by capacity.
#[derive(Debug)]
pub struct BufferPool {
    max_idle_bytes: usize,
    min_len: usize,
    idle: Mutex<Idle>,
}

#[derive(Debug, Default)]
struct Idle {
    /// Idle buffers by size class (their capacity), each empty.
    by_class: BTreeMap<usize, Vec<Vec<u8>>>,
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
            .find_map(|(_, buffers)| buffers.pop())?;
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
pub fn size_class(len: usize) -> usize {
    let unit = (len.max(8).next_power_of_two() / 8).max(1);
    len.div_ceil(unit).saturating_mul(unit)
}

impl BufferPool {
    /// A pool keeping at most `max_idle_bytes` of idle buffers, for sizes of at least
    /// `min_len`.
    pub fn new(max_idle_bytes: usize, min_len: usize) -> Arc<Self> {
        Arc::new(BufferPool {
            max_idle_bytes,
            min_len,
            idle: Mutex::new(Idle::default()),
        })
    }

    /// Whether buffers for `len` bytes are pooled.
    pub fn pools(&self, len: usize) -> bool {
        self.max_idle_bytes > 0 && len >= self.min_len && size_class(len) <= self.max_idle_bytes
    }

    /// An empty buffer with room for `len` bytes: an idle one (the smallest at least `len`
    /// and at most twice it), or a new one of `len`'s size class. Its memory goes back to
    /// the pool when the returned buffer (or the `Bytes` made of it) is dropped.
    pub fn take(self: &Arc<Self>, len: usize) -> PooledBuf {
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
    pub fn take_early(self: &Arc<Self>, len: usize) -> Option<PooledBuf> {
        let buf = self.lock().pop_fit(len, true)?;
        Some(PooledBuf {
            early: buf.capacity(),
            buf,
            pool: Arc::clone(self),
        })
    }

    /// Bytes held by idle buffers, and by buffers lent ahead of their frame's lease.
    pub fn bytes(&self) -> (usize, usize) {
        let idle = self.lock();
        (idle.bytes, idle.early)
    }

    /// An empty buffer with room for `len` bytes, as [`BufferPool::take`], to be used as
    /// a plain `Vec` and given back with [`BufferPool::give`] (or adopted again with
    /// [`BufferPool::adopt`]); when `len` is not pooled, a new `Vec` of that capacity.
    pub fn take_vec(self: &Arc<Self>, len: usize) -> Vec<u8> {
        if !self.pools(len) {
            return Vec::with_capacity(len);
        }
        let mut lent = self.take(len);
        std::mem::take(&mut lent.buf)
    }

    /// `buf` as a buffer of this pool: given back when dropped, like one it lent.
    pub fn adopt(self: &Arc<Self>, buf: Vec<u8>) -> PooledBuf {
        PooledBuf {
            buf,
            pool: Arc::clone(self),
            early: 0,
        }
    }

    /// Files `buf` as idle if it fits the bound (its contents are dropped).
    pub fn give(&self, buf: Vec<u8>) {
        self.give_back(buf, 0);
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
            || capacity < self.min_len
            || size_class(capacity) != capacity
            || idle.bytes + idle.early + capacity > self.max_idle_bytes
        {
            return;
        }
        buf.clear();
        idle.bytes += capacity;
        idle.by_class.entry(capacity).or_default().push(buf);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The idle lists stay consistent across a panic elsewhere (each update is a
        // push or a pop with its byte count), so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A buffer lent by a [`BufferPool`], given back when dropped.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
    /// Bytes counted as lent before the frame's lease covered it (0 once covered, or
    /// when lent to a covered frame).
    early: usize,
}

impl PooledBuf {
    /// The frame's lease now covers it whole: the buffer no longer counts against the
    /// pool's bound.
    pub fn covered(&mut self) {
        let early = std::mem::take(&mut self.early);
        if early > 0 {
            let mut idle = self.pool.lock();
            idle.early = idle.early.saturating_sub(early);
        }
    }

    /// The buffer's capacity.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The buffer, to write into. Writes should stay within its capacity (a grown buffer
    /// is not kept when given back).
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written, as `Bytes` that give the buffer back once every slice of them
    /// is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(Owner(self))
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

/// The owner of `Bytes` made of a pooled buffer.
#[derive(Debug)]
struct Owner(PooledBuf);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        &self.0.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: usize = 64 * 1024;

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
        let pool = BufferPool::new(4 << 20, MIN);
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
        let pool = BufferPool::new(300_000, MIN);
        let lent: Vec<_> = (0..4).map(|_| pool.take(100_000)).collect();
        drop(lent);
        // Three of 114_688 bytes would be over 300_000.
        assert_eq!(pool.bytes(), (2 * size_class(100_000), 0));
        assert!(pool.pools(100_000));
        assert!(!pool.pools(MIN - 1));
        assert!(!pool.pools(400_000), "larger than the whole pool");
        assert!(!BufferPool::new(0, MIN).pools(100_000));
    }

    #[test]
    fn a_buffer_used_as_a_vec_comes_back_whole() {
        let pool = BufferPool::new(4 << 20, MIN);
        let mut v = pool.take_vec(200_000);
        assert_eq!(v.capacity(), size_class(200_000));
        v.extend_from_slice(&[1; 150_000]);
        let ptr = v.as_ptr();
        // Adopted, frozen and sliced: back once the last slice goes.
        let body = pool.adopt(v).freeze().slice(100..);
        assert_eq!(pool.bytes(), (0, 0));
        drop(body);
        assert_eq!(pool.bytes(), (size_class(200_000), 0));
        let v = pool.take_vec(190_000);
        assert_eq!(v.as_ptr(), ptr, "the same buffer, lent again");
        assert!(v.is_empty());
        pool.give(v);
        assert_eq!(pool.bytes(), (size_class(200_000), 0));
        // Under the pool's minimum: a plain buffer, not kept.
        let small = pool.take_vec(1000);
        assert_eq!(small.capacity(), 1000);
        pool.give(small);
        assert_eq!(pool.bytes(), (size_class(200_000), 0));
    }

    #[test]
    fn a_grown_buffer_is_not_kept() {
        let pool = BufferPool::new(4 << 20, MIN);
        let mut a = pool.take(100_000);
        a.vec().resize(500_000, 0);
        drop(a);
        assert_eq!(pool.bytes(), (0, 0));
    }

    #[test]
    fn buffers_lent_early_count_against_the_bound_until_covered() {
        let class = size_class(100_000);
        let pool = BufferPool::new(3 * class, MIN);
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
}
