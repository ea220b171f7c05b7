//! Deadlines of every group and member in one ordered set, so `poll_timeout` is the first
//! entry and `handle_timeout` walks only what is due.
//!
//! Each deadline lives twice: in the entity that owns it (a `slot`, `Option<Millis>`) and
//! here, keyed by owner. [`Timers::set`] is the only way to change a slot, which keeps the two
//! in step: re-arming removes the old entry, so a member that heartbeats every 3 s holds one
//! entry, not one per heartbeat.

use std::collections::BTreeSet;

use crate::types::Millis;

/// What a deadline is for. Ordered so that simultaneous deadlines fire in a fixed order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// The group's PreparingRebalance deadline: the rebalance timeout, or the initial delay.
    Join,
    /// The group's deadline for every member to send SyncGroup after a rebalance.
    Sync,
    /// A member's session (or, for a member still in its first JoinGroup, the new-member
    /// join timeout).
    Session(String),
    /// A KIP-394 member id handed out with `MEMBER_ID_REQUIRED` and not used yet.
    Pending(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TimerKey {
    pub(crate) group: String,
    pub(crate) kind: TimerKind,
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    set: BTreeSet<(Millis, TimerKey)>,
}

impl Timers {
    /// Points `slot` (owned by `group`/`kind`) at `at`, replacing any earlier deadline.
    pub(crate) fn set(
        &mut self,
        slot: &mut Option<Millis>,
        group: &str,
        kind: TimerKind,
        at: Option<Millis>,
    ) {
        if *slot == at {
            return;
        }
        let key = TimerKey {
            group: group.to_owned(),
            kind,
        };
        if let Some(old) = slot.take() {
            self.set.remove(&(old, key.clone()));
        }
        if let Some(at) = at {
            self.set.insert((at, key));
        }
        *slot = at;
    }

    pub(crate) fn first(&self) -> Option<Millis> {
        self.set.first().map(|(at, _)| *at)
    }

    /// Everything due at `now`, as of this call. Firing may arm new deadlines at `now`; they
    /// wait for the next `handle_timeout`, so one call always terminates.
    pub(crate) fn due(&self, now: Millis) -> Vec<(Millis, TimerKey)> {
        self.set
            .iter()
            .take_while(|(at, _)| *at <= now)
            .cloned()
            .collect()
    }

    /// Removes one entry; `false` if an earlier firing already disarmed it.
    pub(crate) fn remove(&mut self, entry: &(Millis, TimerKey)) -> bool {
        self.set.remove(entry)
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &(Millis, TimerKey)> {
        self.set.iter()
    }
}
