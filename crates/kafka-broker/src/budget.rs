//! Request and response memory: how much a connection may buffer, and when it must wait.
//!
//! # Request bytes
//!
//! Every frame being read holds a [`Lease`] on the broker-wide [`RequestBudget`]
//! (`Limits::max_buffered_request_bytes`). A lease grows as the frame's bytes arrive,
//! never ahead of them by more than one read step, so a client that announces a large
//! frame and then goes quiet holds only what it sent plus one step, not the announced
//! size. The lease is given back when the request has been handled.
//!
//! The budget has two parts:
//!
//! - the small-request reserve (`small_request_reserve_bytes`), used only by frames of
//!   at most `small_request_bytes`: ApiVersions, Metadata, heartbeats and commits are
//!   answered while large uploads wait for memory;
//! - the rest, the large pool, shared by larger frames, with a cap per IP address
//!   (`max_buffered_request_bytes_per_ip`) and per connection
//!   (`max_buffered_request_bytes_per_connection`).
//!
//! Growing a frame piece by piece risks a deadlock the whole-frame reservation did not
//! have: several connections each holding part of a frame, all waiting for the rest.
//! The large pool avoids it the way a banker would: large frames are ordered by the time
//! they started, and a frame may take more only if, afterwards, every older frame can
//! still finish, counting on the memory of the frames older than it coming back once
//! they are handled (for the pool, for its IP and for its connection). The oldest frame
//! can therefore always finish, and when it is handled the next one becomes the oldest:
//! a frame waits at most for the frames that started before it, and each of those is
//! bounded by the read timeout. A quiet client that announced a large frame thus delays
//! the frames that started after it only while its own frame is within its read
//! deadline, and only by its announced size, never by the pool.
//!
//! [`Lease::grow_to`] is also the way to take more for a frame that is already whole
//! (the decoded form of a request can be larger than its frame): it waits under the same
//! rules and refuses, instead of waiting forever, an amount that can never be granted.
//!
//! # Response bytes
//!
//! An [`Outbox`] counts the encoded responses of one connection that wait for its
//! writer, and a broker-wide total. The processor starts no new request of a connection
//! while its outbox is over `max_queued_response_bytes_per_connection`, or while the
//! broker-wide total is over `max_queued_response_bytes` and the connection has anything
//! queued; a single response larger than the bound still goes out whole. A client that
//! never reads thus holds at most about one bound plus one response, until the write
//! timeout closes it.

use crate::config::Limits;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// The request memory of the whole broker.
#[derive(Debug)]
pub(crate) struct RequestBudget {
    total: usize,
    reserve: usize,
    pool: usize,
    small_frame: usize,
    per_ip: usize,
    per_connection: usize,
    state: Mutex<State>,
    /// Woken whenever small-request memory is given back.
    freed_small: Notify,
    /// Woken whenever large-pool memory is given back or a large frame ends.
    freed_large: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes of the small-request reserve held.
    small_used: usize,
    /// Bytes of the large pool held.
    large_used: usize,
    /// Large-pool bytes held per address and per connection.
    per_ip: HashMap<IpAddr, usize>,
    per_connection: HashMap<u64, usize>,
    /// Large frames by the order they started: what each holds and will want in all.
    frames: BTreeMap<u64, Entry>,
    next_seq: u64,
}

#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    connection: u64,
    held: usize,
    want: usize,
}

impl Entry {
    fn need(&self) -> usize {
        self.want.saturating_sub(self.held)
    }
}

/// Why a lease cannot grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{wanted} request bytes can never be granted (at most {most})")]
pub(crate) struct NeverGranted {
    pub(crate) wanted: usize,
    pub(crate) most: usize,
}

enum Try {
    Granted,
    Wait,
    Never(usize),
}

impl RequestBudget {
    pub(crate) fn new(limits: &Limits) -> RequestBudget {
        let one_frame = limits.max_frame_size.saturating_add(4);
        let total = limits.max_buffered_request_bytes;
        let reserve = limits.small_request_reserve_bytes.min(total);
        let pool = total - reserve;
        RequestBudget {
            total,
            reserve,
            pool,
            small_frame: limits.small_request_bytes,
            per_ip: limits
                .max_buffered_request_bytes_per_ip
                .max(one_frame)
                .min(pool),
            per_connection: limits
                .max_buffered_request_bytes_per_connection
                .max(one_frame)
                .min(pool),
            state: Mutex::new(State::default()),
            freed_small: Notify::new(),
            freed_large: Notify::new(),
        }
    }

    /// The whole budget.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Bytes held now over all connections.
    pub(crate) fn in_use(&self) -> usize {
        let s = self.lock();
        s.small_used + s.large_used
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only counters changed in short critical sections without
        // panicking code, so a poisoned lock still holds consistent numbers.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lease, holding nothing yet, for a frame of `frame_bytes` (size prefix included)
    /// read by connection `connection` from `ip`.
    pub(crate) fn lease(
        self: &Arc<Self>,
        ip: IpAddr,
        connection: u64,
        frame_bytes: usize,
    ) -> Lease {
        let seq = if frame_bytes <= self.small_frame {
            None
        } else {
            let mut s = self.lock();
            let seq = s.next_seq;
            s.next_seq += 1;
            s.frames.insert(
                seq,
                Entry {
                    ip,
                    connection,
                    held: 0,
                    want: frame_bytes,
                },
            );
            Some(seq)
        };
        Lease {
            budget: self.clone(),
            ip,
            connection,
            seq,
            held: 0,
        }
    }

    fn try_grow(&self, lease: &mut Lease, target: usize) -> Try {
        if target <= lease.held {
            return Try::Granted;
        }
        let extra = target - lease.held;
        let mut s = self.lock();
        let Some(seq) = lease.seq else {
            if target > self.reserve {
                return Try::Never(self.reserve);
            }
            if s.small_used + extra > self.reserve {
                return Try::Wait;
            }
            s.small_used += extra;
            lease.held = target;
            return Try::Granted;
        };
        let most = self.pool.min(self.per_ip).min(self.per_connection);
        if target > most {
            return Try::Never(most);
        }
        if let Some(e) = s.frames.get_mut(&seq) {
            e.want = e.want.max(target);
        }
        let ip_used = s.per_ip.get(&lease.ip).copied().unwrap_or(0);
        let conn_used = s
            .per_connection
            .get(&lease.connection)
            .copied()
            .unwrap_or(0);
        if s.large_used + extra > self.pool
            || ip_used + extra > self.per_ip
            || conn_used + extra > self.per_connection
        {
            return Try::Wait;
        }
        // Every older frame must still be able to finish once the frames older than it
        // are handled, in the pool, in its address's share and in its connection's.
        let free = self.pool - s.large_used - extra;
        let free_ip = self.per_ip - ip_used - extra;
        let free_conn = self.per_connection - conn_used - extra;
        let (mut back, mut back_ip, mut back_conn) = (0usize, 0usize, 0usize);
        for e in s.frames.range(..seq).map(|(_, e)| e) {
            let need = e.need();
            if need > free + back {
                return Try::Wait;
            }
            back += e.held;
            if e.ip == lease.ip {
                if need > free_ip + back_ip {
                    return Try::Wait;
                }
                back_ip += e.held;
            }
            if e.connection == lease.connection {
                if need > free_conn + back_conn {
                    return Try::Wait;
                }
                back_conn += e.held;
            }
        }
        s.large_used += extra;
        *s.per_ip.entry(lease.ip).or_default() += extra;
        *s.per_connection.entry(lease.connection).or_default() += extra;
        if let Some(e) = s.frames.get_mut(&seq) {
            e.held = target;
        }
        lease.held = target;
        Try::Granted
    }

    fn release(&self, lease: &Lease) {
        let mut s = self.lock();
        match lease.seq {
            None => s.small_used -= lease.held.min(s.small_used),
            Some(seq) => {
                s.frames.remove(&seq);
                s.large_used -= lease.held.min(s.large_used);
                shrink(&mut s.per_ip, lease.ip, lease.held);
                shrink(&mut s.per_connection, lease.connection, lease.held);
            }
        }
        drop(s);
        match lease.seq {
            None => self.freed_small.notify_waiters(),
            Some(_) => self.freed_large.notify_waiters(),
        }
    }
}

fn shrink<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K, by: usize) {
    if let Some(v) = map.get_mut(&key) {
        *v = v.saturating_sub(by);
        if *v == 0 {
            map.remove(&key);
        }
    }
}

/// Request memory held for one frame; given back on drop.
#[derive(Debug)]
pub(crate) struct Lease {
    budget: Arc<RequestBudget>,
    ip: IpAddr,
    connection: u64,
    /// The frame's place in the large pool's order; `None` for a small frame.
    seq: Option<u64>,
    held: usize,
}

impl Lease {
    /// Bytes held.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Waits until the lease holds at least `target` bytes. Fails at once when `target`
    /// is more than this kind of frame may ever hold (the reserve for a small frame; the
    /// pool, address or connection share for a large one).
    ///
    /// This is also the call for "N more bytes for this frame": `grow_to(held() + n)`.
    pub(crate) async fn grow_to(&mut self, target: usize) -> Result<(), NeverGranted> {
        let budget = self.budget.clone();
        loop {
            let freed = match self.seq {
                None => budget.freed_small.notified(),
                Some(_) => budget.freed_large.notified(),
            };
            tokio::pin!(freed);
            freed.as_mut().enable();
            match budget.try_grow(self, target) {
                Try::Granted => return Ok(()),
                Try::Never(most) => {
                    return Err(NeverGranted {
                        wanted: target,
                        most,
                    });
                }
                Try::Wait => freed.await,
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.budget.release(self);
    }
}

/// Encoded response bytes waiting for writers, over all connections.
#[derive(Debug)]
pub(crate) struct ResponseBudget {
    queued: AtomicUsize,
    bound: usize,
    per_connection: usize,
}

impl ResponseBudget {
    pub(crate) fn new(limits: &Limits) -> ResponseBudget {
        ResponseBudget {
            queued: AtomicUsize::new(0),
            bound: limits.max_queued_response_bytes,
            per_connection: limits.max_queued_response_bytes_per_connection,
        }
    }

    /// Response bytes queued now over all connections.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

/// One connection's queued responses.
#[derive(Debug)]
pub(crate) struct Outbox {
    broker: Arc<ResponseBudget>,
    queued: AtomicUsize,
    /// The writer has stopped: nothing will drain any more, so nothing waits for it.
    closed: AtomicBool,
    /// Woken whenever the writer has sent a response, and when it stops.
    drained: Notify,
    /// The last response queued is followed by a close: the writer lingers after it.
    linger: AtomicBool,
}

impl Outbox {
    pub(crate) fn new(broker: Arc<ResponseBudget>) -> Outbox {
        Outbox {
            broker,
            queued: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            drained: Notify::new(),
            linger: AtomicBool::new(false),
        }
    }

    /// The response just pushed is the last: the connection closes after it.
    pub(crate) fn close_after_last(&self) {
        self.linger.store(true, Ordering::Release);
    }

    /// Whether the writer should linger before closing (see [`Outbox::close_after_last`]).
    pub(crate) fn lingers(&self) -> bool {
        self.linger.load(Ordering::Acquire)
    }

    /// A response of `bytes` is handed to the writer.
    pub(crate) fn push(&self, bytes: usize) {
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        self.broker.queued.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The writer has sent (or dropped) a response of `bytes`.
    pub(crate) fn sent(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.broker.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.drained.notify_waiters();
    }

    /// The writer has stopped.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Whether a new request may be started: this connection is within its bound, and
    /// either the broker is within its bound or this connection has nothing queued.
    /// Always once the writer has stopped (the request then finds the connection closed).
    pub(crate) fn has_room(&self) -> bool {
        let mine = self.queued.load(Ordering::Acquire);
        mine == 0
            || self.closed.load(Ordering::Acquire)
            || (mine <= self.broker.per_connection
                && self.broker.queued.load(Ordering::Acquire) <= self.broker.bound)
    }

    /// Waits until [`Outbox::has_room`].
    pub(crate) async fn room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.has_room() {
                return;
            }
            drained.await;
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // Responses never written (the connection closed) leave the broker-wide count.
        let left = *self.queued.get_mut();
        self.broker.queued.fetch_sub(left, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn limits(total: usize, reserve: usize, per_ip: usize, per_conn: usize) -> Limits {
        Limits {
            max_frame_size: 1024,
            max_buffered_request_bytes: total,
            small_request_reserve_bytes: reserve,
            small_request_bytes: 100,
            max_buffered_request_bytes_per_ip: per_ip,
            max_buffered_request_bytes_per_connection: per_conn,
            ..Limits::default()
        }
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn now(lease: &mut Lease, target: usize) -> bool {
        let budget = lease.budget.clone();
        matches!(budget.try_grow(lease, target), Try::Granted)
    }

    #[test]
    fn small_frames_use_only_the_reserve() {
        let b = Arc::new(RequestBudget::new(&limits(10_000, 150, 10_000, 10_000)));
        let mut a = b.lease(ip(1), 1, 100);
        let mut c = b.lease(ip(1), 2, 100);
        assert!(now(&mut a, 100));
        assert!(!now(&mut c, 100), "the reserve is 150 bytes");
        assert!(now(&mut c, 50));
        // Large frames cannot take the reserve, and small ones never touch the pool.
        let mut big = b.lease(ip(2), 3, 2000);
        assert!(now(&mut big, 2000));
        assert_eq!(b.in_use(), 2150);
        drop(a);
        assert!(now(&mut c, 100));
        drop((c, big));
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn an_announced_size_holds_nothing_until_bytes_are_granted() {
        let b = Arc::new(RequestBudget::new(&limits(4000, 100, 4000, 4000)));
        let quiet: Vec<Lease> = (0..50).map(|i| b.lease(ip(1), i, 1028)).collect();
        assert_eq!(b.in_use(), 0);
        let mut honest = b.lease(ip(2), 99, 1028);
        // The oldest quiet frame may still finish, so the rest of the pool is free.
        assert!(now(&mut honest, 1028));
        drop(quiet);
    }

    #[test]
    fn newer_frames_leave_room_for_older_ones_to_finish() {
        let b = Arc::new(RequestBudget::new(&limits(3100, 100, 3000, 3000)));
        let mut old = b.lease(ip(1), 1, 1000);
        let mut mid = b.lease(ip(2), 2, 1000);
        let mut new = b.lease(ip(3), 3, 1000);
        assert!(now(&mut old, 500));
        assert!(now(&mut mid, 900));
        // 1400 of 3000 held; old needs 500 more, mid 100: new may take up to 1000,
        // since free after it (600) covers old, and old's 1000 coming back covers mid.
        assert!(now(&mut new, 1000));
        let mut newest = b.lease(ip(4), 4, 1000);
        assert!(!now(&mut newest, 200), "old could no longer finish");
        assert!(now(&mut newest, 100));
        // The oldest can always finish; the next one does once the oldest is handled.
        assert!(now(&mut old, 1000));
        assert!(!now(&mut mid, 1000), "the pool is full");
        drop(old);
        assert!(now(&mut mid, 1000));
        assert!(now(&mut newest, 600));
    }

    #[test]
    fn one_address_and_one_connection_get_a_share() {
        let b = Arc::new(RequestBudget::new(&limits(10_100, 100, 2000, 1500)));
        let mut a = b.lease(ip(1), 1, 1028);
        let mut c = b.lease(ip(1), 2, 1028);
        assert!(now(&mut a, 1028));
        assert!(!now(&mut c, 1000), "the address's share is 2000");
        assert!(now(&mut c, 972));
        let mut d = b.lease(ip(2), 3, 1028);
        assert!(now(&mut d, 1028), "another address has its own share");
        let mut e = b.lease(ip(2), 3, 1028);
        assert!(!now(&mut e, 500), "the connection's share is 1500");
    }

    #[test]
    fn more_than_a_share_is_refused_not_waited_for() {
        let b = Arc::new(RequestBudget::new(&limits(10_100, 100, 2000, 1500)));
        let mut a = b.lease(ip(1), 1, 1028);
        let err = futures_util::FutureExt::now_or_never(a.grow_to(1501));
        assert_eq!(
            err,
            Some(Err(NeverGranted {
                wanted: 1501,
                most: 1500
            }))
        );
        let mut s = b.lease(ip(1), 1, 10);
        let err = futures_util::FutureExt::now_or_never(s.grow_to(101));
        assert!(matches!(err, Some(Err(_))));
    }

    #[tokio::test]
    async fn a_waiting_lease_is_granted_when_memory_comes_back() {
        let b = Arc::new(RequestBudget::new(&limits(2156, 100, 4000, 4000)));
        let mut a = b.lease(ip(1), 1, 1028);
        let mut c = b.lease(ip(2), 2, 1028);
        assert!(now(&mut a, 1028));
        assert!(now(&mut c, 1028));
        let mut d = b.lease(ip(3), 3, 1028);
        let waiter = tokio::spawn(async move { d.grow_to(1028).await.map(|()| d.held()) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        assert_eq!(waiter.await.ok(), Some(Ok(1028)));
    }

    #[test]
    fn outbox_counts_and_mutes() {
        let l = Limits {
            max_queued_response_bytes_per_connection: 100,
            max_queued_response_bytes: 150,
            ..Limits::default()
        };
        let broker = Arc::new(ResponseBudget::new(&l));
        let one = Outbox::new(broker.clone());
        let two = Outbox::new(broker.clone());
        assert!(one.has_room());
        one.push(1000);
        assert!(!one.has_room(), "over its own bound");
        assert!(two.has_room(), "nothing queued: may always start");
        two.push(10);
        assert!(
            !two.has_room(),
            "broker over its bound and something queued"
        );
        one.sent(1000);
        assert!(one.has_room() && two.has_room());
        two.push(5);
        drop(two);
        assert_eq!(broker.queued(), 0);
    }
}

#[cfg(test)]
mod size {
    use super::*;

    #[test]
    fn per_connection_accounting_is_small() {
        // What the accounting adds to a connection: its outbox, the lease of the frame
        // being read (and of each request queued), and one table entry while a large
        // frame is in progress.
        let sizes = (
            std::mem::size_of::<Outbox>(),
            std::mem::size_of::<Lease>(),
            std::mem::size_of::<Entry>() + std::mem::size_of::<u64>(),
        );
        eprintln!("outbox, lease, frame entry: {sizes:?} bytes");
        assert!(sizes.0 <= 96 && sizes.1 <= 64 && sizes.2 <= 64, "{sizes:?}");
    }
}
