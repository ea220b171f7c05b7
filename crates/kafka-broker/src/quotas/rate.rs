//! A rate over a sliding window of samples, and the throttle time for a rate over its
//! bound.
//!
//! The window is `samples` consecutive slots of `slot_ms` each (Kafka's
//! `quota.window.num` and `quota.window.size.seconds`). A value is added to the newest
//! slot; when the newest slot is older than `slot_ms`, the oldest slot is reused for the
//! new period. Slots that ended more than the whole window ago count for nothing.
//!
//! The rate is the sum of the live slots divided by the time they cover. That time is
//! measured from the start of the oldest live slot, and is never taken as less than
//! `samples - 1` slots: a client that just started does not get a rate computed over a
//! few milliseconds (which would make its first request look enormous), which matches
//! how Kafka's sampled rate behaves.
//!
//! Throttle time: with an observed rate `r` over a bound `q`, measured over a window of
//! `w` ms, the client has to stay silent for `(r - q) / q * w` ms for the rate over the
//! window to come back down to the bound. The result is capped at the whole window, so
//! one huge request cannot mute a connection for longer than the window the quota is
//! measured over.

/// The start of a slot that has not been used yet.
const UNUSED: u64 = u64::MAX;

/// A sampled rate; all times are milliseconds on one monotonic clock.
#[derive(Debug, Clone)]
pub(crate) struct Rate {
    /// Each slot: when it started and what was added during it.
    slots: Box<[(u64, f64)]>,
    /// The newest slot.
    current: usize,
}

/// The window a rate is measured over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Number of slots (Kafka's `quota.window.num`), at least 2.
    pub(crate) samples: usize,
    /// Length of one slot in ms (Kafka's `quota.window.size.seconds`, in ms), at least 1.
    pub(crate) slot_ms: u64,
}

impl Window {
    /// The whole window in ms.
    pub(crate) fn total_ms(self) -> u64 {
        self.slot_ms.saturating_mul(self.samples as u64)
    }
}

impl Rate {
    /// An empty rate whose first slot starts at `now`.
    pub(crate) fn new(window: Window, now: u64) -> Rate {
        // Slots not used yet are marked with a start of `UNUSED`.
        let mut slots = vec![(UNUSED, 0.0f64); window.samples.max(2)].into_boxed_slice();
        slots[0].0 = now;
        Rate { slots, current: 0 }
    }

    /// Adds `value` at `now`.
    pub(crate) fn record(&mut self, window: Window, now: u64, value: f64) {
        self.advance(window, now);
        self.slots[self.current].1 += value;
    }

    /// Takes back `value` added earlier (a throttled Fetch whose data is not sent).
    pub(crate) fn unrecord(&mut self, window: Window, now: u64, value: f64) {
        self.advance(window, now);
        let slot = &mut self.slots[self.current].1;
        *slot = (*slot - value).max(0.0);
    }

    /// Moves to a fresh slot when the newest one has run its length.
    fn advance(&mut self, window: Window, now: u64) {
        let start = self.slots[self.current].0;
        if now >= start.saturating_add(window.slot_ms) {
            self.current = (self.current + 1) % self.slots.len();
            self.slots[self.current] = (now, 0.0);
        }
    }

    /// The rate per second at `now`, and the time in ms it is measured over.
    pub(crate) fn measure(&self, window: Window, now: u64) -> (f64, u64) {
        let mut total = 0.0;
        let mut oldest = now;
        for &(start, value) in self.slots.iter() {
            // A slot that started a whole window ago or more no longer counts.
            if start == UNUSED || now.saturating_sub(start) >= window.total_ms() {
                continue;
            }
            total += value;
            oldest = oldest.min(start);
        }
        let mut elapsed = now.saturating_sub(oldest);
        let full = elapsed / window.slot_ms.max(1);
        let min_full = (window.samples.max(2) - 1) as u64;
        if full < min_full {
            elapsed += (min_full - full) * window.slot_ms;
        }
        (total * 1000.0 / elapsed.max(1) as f64, elapsed)
    }

    /// Milliseconds to stay silent for the rate to come back to `bound`, 0 when within.
    pub(crate) fn throttle_ms(&self, window: Window, now: u64, bound: f64) -> u64 {
        let (rate, over_ms) = self.measure(window, now);
        throttle_ms(rate, bound, over_ms, window.total_ms())
    }

    /// When the last value was added (the newest slot's start).
    pub(crate) fn last_active(&self) -> u64 {
        self.slots[self.current].0
    }
}

/// `(observed - bound) / bound * window_ms`, rounded, 0 when within the bound, at most
/// `cap_ms`.
pub(crate) fn throttle_ms(observed: f64, bound: f64, window_ms: u64, cap_ms: u64) -> u64 {
    // NaN compares false either way: no throttle.
    let within = bound.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        || observed.partial_cmp(&bound) != Some(std::cmp::Ordering::Greater);
    if within {
        return 0;
    }
    let ms = ((observed - bound) / bound * window_ms as f64).round();
    if ms.is_finite() {
        (ms as u64).min(cap_ms)
    } else {
        cap_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window {
        samples: 11,
        slot_ms: 1000,
    };

    #[test]
    fn a_new_rate_is_measured_over_at_least_all_but_one_slot() {
        let mut r = Rate::new(W, 10_000);
        r.record(W, 10_000, 5_000.0);
        let (rate, over) = r.measure(W, 10_000);
        assert_eq!(over, 10_000);
        assert!((rate - 500.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn values_spread_over_the_window_give_their_average() {
        let mut r = Rate::new(W, 0);
        for s in 0..11u64 {
            r.record(W, s * 1000, 100.0);
        }
        // 1100 over 10 s of elapsed slots plus the current one's start: 10 000 ms.
        let (rate, over) = r.measure(W, 10_000);
        assert_eq!(over, 10_000);
        assert!((rate - 110.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn old_slots_stop_counting() {
        let mut r = Rate::new(W, 0);
        r.record(W, 0, 1_000_000.0);
        assert!(r.measure(W, 1).0 > 0.0);
        // Long after the window, the burst is forgotten.
        let (rate, _) = r.measure(W, 30_000);
        assert_eq!(rate, 0.0);
        r.record(W, 30_000, 10.0);
        assert!((r.measure(W, 30_000).0 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn slots_are_reused_in_turn() {
        let mut r = Rate::new(W, 0);
        for s in 0..40u64 {
            r.record(W, s * 1000, 1.0);
        }
        // Only the last 11 slots hold values; the window spans 10 s.
        let (rate, over) = r.measure(W, 39_000);
        assert_eq!(over, 10_000);
        assert!((rate - 1.1).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn unrecord_takes_back_a_value() {
        let mut r = Rate::new(W, 0);
        r.record(W, 0, 300.0);
        r.unrecord(W, 0, 200.0);
        assert!((r.measure(W, 0).0 - 10.0).abs() < 1e-9);
        r.unrecord(W, 0, 1_000.0);
        assert_eq!(r.measure(W, 0).0, 0.0);
    }

    #[test]
    fn throttle_is_the_silence_that_brings_the_rate_back_to_the_bound() {
        assert_eq!(throttle_ms(100.0, 100.0, 10_000, 11_000), 0);
        assert_eq!(throttle_ms(50.0, 100.0, 10_000, 11_000), 0);
        // Twice the bound over 10 s: 10 s of silence halves it.
        assert_eq!(throttle_ms(200.0, 100.0, 10_000, 11_000), 10_000);
        assert_eq!(throttle_ms(150.0, 100.0, 10_000, 11_000), 5_000);
        // Capped at the window.
        assert_eq!(throttle_ms(1e12, 100.0, 10_000, 11_000), 11_000);
        // No bound, no throttle.
        assert_eq!(throttle_ms(1e12, 0.0, 10_000, 11_000), 0);
        assert_eq!(throttle_ms(f64::NAN, 10.0, 10_000, 11_000), 0);
    }

    #[test]
    fn a_rate_further_over_its_bound_waits_longer() {
        let mut a = Rate::new(W, 0);
        let mut b = Rate::new(W, 0);
        a.record(W, 0, 15_000.0);
        b.record(W, 0, 12_000.0);
        let (wa, wb) = (a.throttle_ms(W, 0, 1_000.0), b.throttle_ms(W, 0, 1_000.0));
        assert_eq!((wa, wb), (5_000, 2_000));
        assert_eq!(a.throttle_ms(W, 0, 2_000.0), 0);
    }
}
