//! The delay a peer waits after failed authentications: it doubles with each rejection, from
//! an initial delay up to a maximum, and is forgotten after a quiet period. The table of
//! peers is bounded; when full, the entry idle longest is dropped.
//!
//! A peer's entry remembers the delay it got last and when it last failed. The next failure
//! within the quiet period (twice the maximum delay) doubles the delay; after a longer quiet
//! spell the peer starts again from the initial delay. A success forgets the peer at once.
//!
//! Two maps keep every operation logarithmic: one by address, one by last failure time, so
//! expired entries are dropped from the oldest end and, when the table is full, the peer idle
//! longest is evicted without a scan.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last: Instant,
}

/// Per-peer failure delays.
#[derive(Debug)]
pub struct FailureBackoff {
    initial: Duration,
    max: Duration,
    max_peers: usize,
    peers: HashMap<IpAddr, Entry>,
    by_time: BTreeSet<(Instant, IpAddr)>,
}

impl FailureBackoff {
    /// Delays from `initial` doubling to `max`, for at most `max_peers` peers at once
    /// (at least one).
    pub fn new(initial: Duration, max: Duration, max_peers: usize) -> FailureBackoff {
        FailureBackoff {
            initial,
            max: max.max(initial),
            max_peers: max_peers.max(1),
            peers: HashMap::new(),
            by_time: BTreeSet::new(),
        }
    }

    /// How long a peer must stay quiet for its delay to be forgotten: twice the maximum.
    pub fn quiet_period(&self) -> Duration {
        self.max.saturating_mul(2)
    }

    /// How many peers are remembered.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is remembered.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Records a rejection of `peer` at `now`; returns how long to delay the answer.
    pub fn failed(&mut self, peer: IpAddr, now: Instant) -> Duration {
        self.expire(now);
        let delay = match self.peers.get(&peer) {
            Some(entry) => {
                self.by_time.remove(&(entry.last, peer));
                entry.delay.saturating_mul(2).min(self.max)
            }
            None => {
                while self.peers.len() >= self.max_peers {
                    let Some((_, oldest)) = self.by_time.pop_first() else {
                        break;
                    };
                    self.peers.remove(&oldest);
                }
                self.initial
            }
        };
        // A clock that went backwards must not leave an entry older than one already in the
        // table: keep the time-ordered set consistent with the map either way.
        self.peers.insert(peer, Entry { delay, last: now });
        self.by_time.insert((now, peer));
        delay
    }

    /// The delay `peer` would get now without recording anything (zero when not remembered).
    pub fn current(&self, peer: IpAddr, now: Instant) -> Duration {
        match self.peers.get(&peer) {
            Some(entry) if now.saturating_duration_since(entry.last) <= self.quiet_period() => {
                entry.delay
            }
            _ => Duration::ZERO,
        }
    }

    /// Records a success of `peer`: its delay is forgotten.
    pub fn succeeded(&mut self, peer: IpAddr) {
        if let Some(entry) = self.peers.remove(&peer) {
            self.by_time.remove(&(entry.last, peer));
        }
    }

    /// Drops every peer quiet for longer than the quiet period.
    fn expire(&mut self, now: Instant) {
        let quiet = self.quiet_period();
        while let Some(&(last, peer)) = self.by_time.first() {
            if now.saturating_duration_since(last) <= quiet {
                break;
            }
            self.by_time.pop_first();
            self.peers.remove(&peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn backoff(max_peers: usize) -> FailureBackoff {
        FailureBackoff::new(
            Duration::from_millis(500),
            Duration::from_secs(30),
            max_peers,
        )
    }

    #[test]
    fn delay_doubles_up_to_the_maximum() {
        let mut b = backoff(10);
        let t = Instant::now();
        let delays: Vec<u64> = (0..10)
            .map(|i| b.failed(ip(1), t + Duration::from_secs(i)).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            vec![
                500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000
            ]
        );
        assert_eq!(b.failed(ip(2), t).as_millis(), 500, "peers are independent");
    }

    #[test]
    fn success_forgets_the_peer() {
        let mut b = backoff(10);
        let t = Instant::now();
        b.failed(ip(1), t);
        b.failed(ip(1), t);
        b.succeeded(ip(1));
        assert!(b.is_empty());
        assert_eq!(b.failed(ip(1), t).as_millis(), 500);
    }

    #[test]
    fn quiet_period_of_twice_the_maximum_forgets() {
        let mut b = backoff(10);
        let t = Instant::now();
        b.failed(ip(1), t);
        assert_eq!(
            b.failed(ip(1), t + Duration::from_secs(60)).as_millis(),
            1000
        );
        assert_eq!(
            b.current(ip(1), t + Duration::from_secs(121)),
            Duration::ZERO
        );
        assert_eq!(
            b.failed(ip(1), t + Duration::from_secs(121)).as_millis(),
            500
        );
    }

    #[test]
    fn full_table_evicts_the_longest_idle_peer() {
        let mut b = backoff(3);
        let t = Instant::now();
        for n in 1..=3 {
            b.failed(ip(n), t + Duration::from_secs(u64::from(n)));
        }
        b.failed(ip(1), t + Duration::from_secs(4)); // ip 2 is now idle longest
        b.failed(ip(4), t + Duration::from_secs(5));
        assert_eq!(b.len(), 3);
        let now = t + Duration::from_secs(6);
        assert_eq!(b.current(ip(2), now), Duration::ZERO);
        assert_eq!(b.current(ip(1), now).as_millis(), 1000);
        assert_eq!(b.current(ip(3), now).as_millis(), 500);
    }

    #[test]
    fn table_never_exceeds_its_bound() {
        let mut b = backoff(16);
        let t = Instant::now();
        for n in 0..=255u8 {
            b.failed(ip(n), t);
            assert!(b.len() <= 16);
            assert_eq!(b.len(), b.by_time.len());
        }
    }
}
