//! The driver around the sans-IO group coordinator ([`kafka_groups::Coordinator`]).
//!
//! One task owns the coordinator. Handlers send it commands over a bounded channel; the
//! task feeds them in with the current time, sleeps until the coordinator's next deadline
//! (session expiries, rebalance timeouts, the initial rebalance delay) and routes every
//! answer the coordinator releases back to the waiting handler. JoinGroup and SyncGroup
//! answers may come much later than their requests: the handler simply awaits them.
//!
//! Committed offsets are kept here too, in the sense of their lifetime: every group with
//! offsets has a last-activity time (its last commit, or the last sweep that found it with
//! members). A sweep, every quarter of the retention (at most every 10 minutes), deletes
//! the offsets of groups inactive for longer than `offsets_retention` (Kafka's
//! `offsets.retention.minutes`), and the number of such groups is capped
//! (`max_groups_with_offsets`): a commit for a group beyond it is refused. The sweep learns
//! of groups whose offsets were stored before a restart from the store itself, so they
//! start their retention when the gateway starts.

use crate::store::OffsetStore;
use kafka_groups::{
    Coordinator, GroupConfig, Heartbeat, JoinGroup, LeaveGroup, Millis, RequestId, Response,
    SyncGroup,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

type Query = Box<dyn FnOnce(&mut Coordinator, Millis) + Send>;

enum Command {
    Join(JoinGroup, oneshot::Sender<Response>),
    Sync(SyncGroup, oneshot::Sender<Response>),
    Heartbeat(Heartbeat, oneshot::Sender<Response>),
    Leave(LeaveGroup, oneshot::Sender<Response>),
    Query(Query),
}

/// Handle to the coordinator task; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Groups {
    tx: mpsc::Sender<Command>,
    offsets: Arc<OffsetGroups>,
}

/// How long committed offsets live and how many groups may have them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetRetention {
    /// Offsets of a group inactive this long are deleted.
    pub(crate) retention: Duration,
    /// Groups with committed offsets at most.
    pub(crate) max_groups: usize,
}

/// The groups that have committed offsets, each with its last activity (Unix ms).
#[derive(Debug)]
struct OffsetGroups {
    rules: OffsetRetention,
    active: Mutex<HashMap<String, i64>>,
}

impl OffsetGroups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        // The map holds plain values; a panic while it was held leaves nothing half-done.
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a commit for `group` at `now`; `false` if it would be one group too many.
    fn admit(&self, group: &str, now: i64) -> bool {
        let mut active = self.lock();
        if let Some(at) = active.get_mut(group) {
            *at = (*at).max(now);
            return true;
        }
        if active.len() >= self.rules.max_groups {
            return false;
        }
        active.insert(group.to_owned(), now);
        true
    }

    /// One pass of retention over `stored` (the groups the store has offsets for):
    /// refreshes groups with members, forgets groups without offsets and returns the
    /// groups whose offsets are due for deletion.
    fn due(&self, stored: Vec<String>, with_members: &HashSet<String>, now: i64) -> Vec<String> {
        let retention = i64::try_from(self.rules.retention.as_millis()).unwrap_or(i64::MAX);
        let mut active = self.lock();
        let stored: HashSet<String> = stored.into_iter().collect();
        active.retain(|g, _| stored.contains(g));
        let mut due = Vec::new();
        for g in stored {
            active.entry(g).or_insert(now);
        }
        for (g, at) in active.iter_mut() {
            if with_members.contains(g) {
                *at = (*at).max(now);
            } else if now.saturating_sub(*at) >= retention {
                due.push(g.clone());
            }
        }
        due
    }

    /// Forgets `group` if it is still inactive since before `cutoff`; `true` if forgotten
    /// (its offsets may then be deleted).
    fn forget_if_idle(&self, group: &str, cutoff: i64) -> bool {
        let mut active = self.lock();
        match active.get(group) {
            Some(at) if *at <= cutoff => {
                active.remove(group);
                true
            }
            _ => false,
        }
    }
}

/// The coordinator task has stopped (shutdown).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable;

impl Groups {
    /// Starts the coordinator task and the offset retention sweep on the current runtime.
    pub(crate) fn spawn(
        config: GroupConfig,
        rules: OffsetRetention,
        store: Arc<dyn OffsetStore>,
    ) -> Groups {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(run(Coordinator::new(config), rx));
        let offsets = Arc::new(OffsetGroups {
            rules,
            active: Mutex::new(HashMap::new()),
        });
        tokio::spawn(sweep_offsets(
            tx.downgrade(),
            Arc::downgrade(&offsets),
            store,
        ));
        Groups { tx, offsets }
    }

    /// Admits a commit for `group` at `now` (Unix ms) under `max_groups_with_offsets`
    /// and restarts its retention; `false`: refuse the commit.
    pub(crate) fn admit_commit(&self, group: &str, now: i64) -> bool {
        self.offsets.admit(group, now)
    }

    async fn call(
        &self,
        make: impl FnOnce(oneshot::Sender<Response>) -> Command,
    ) -> Result<Response, Unavailable> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }

    pub(crate) async fn join(&self, req: JoinGroup) -> Result<Response, Unavailable> {
        self.call(|tx| Command::Join(req, tx)).await
    }

    pub(crate) async fn sync(&self, req: SyncGroup) -> Result<Response, Unavailable> {
        self.call(|tx| Command::Sync(req, tx)).await
    }

    pub(crate) async fn heartbeat(&self, req: Heartbeat) -> Result<Response, Unavailable> {
        self.call(|tx| Command::Heartbeat(req, tx)).await
    }

    pub(crate) async fn leave(&self, req: LeaveGroup) -> Result<Response, Unavailable> {
        self.call(|tx| Command::Leave(req, tx)).await
    }

    /// Runs `f` on the coordinator (describe, list, delete, commit checks).
    pub(crate) async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Coordinator, Millis) -> R + Send + 'static,
    ) -> Result<R, Unavailable> {
        let (tx, rx) = oneshot::channel();
        let q: Query = Box::new(move |c, now| {
            let _ = tx.send(f(c, now));
        });
        self.tx
            .send(Command::Query(q))
            .await
            .map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }
}

async fn run(mut coordinator: Coordinator, mut rx: mpsc::Receiver<Command>) {
    let start = Instant::now();
    let now = || Millis::from_duration(start.elapsed());
    let mut next_id = 0u64;
    let mut waiting: HashMap<RequestId, oneshot::Sender<Response>> = HashMap::new();
    loop {
        let deadline = coordinator.poll_timeout().map(|m| start + m.as_duration());
        let command = tokio::select! {
            c = rx.recv() => match c {
                Some(c) => Some(c),
                None => return,
            },
            () = sleep_until(deadline) => None,
        };
        let t = now();
        match command {
            None => coordinator.handle_timeout(t),
            Some(Command::Query(q)) => q(&mut coordinator, t),
            Some(cmd) => {
                next_id += 1;
                let id = RequestId(next_id);
                match cmd {
                    Command::Join(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.join(t, id, r);
                    }
                    Command::Sync(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.sync(t, id, r);
                    }
                    Command::Heartbeat(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.heartbeat(t, id, r);
                    }
                    Command::Leave(r, tx) => {
                        waiting.insert(id, tx);
                        coordinator.leave(t, id, r);
                    }
                    Command::Query(_) => {}
                }
            }
        }
        while let Some((id, response)) = coordinator.poll_response() {
            if let Some(tx) = waiting.remove(&id) {
                // The connection may be gone; the coordinator state is what matters.
                let _ = tx.send(response);
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Deletes the offsets of groups inactive for longer than the retention, until the broker
/// is gone.
async fn sweep_offsets(
    tx: mpsc::WeakSender<Command>,
    offsets: Weak<OffsetGroups>,
    store: Arc<dyn OffsetStore>,
) {
    let Some(rules) = offsets.upgrade().map(|o| o.rules) else {
        return;
    };
    let every = (rules.retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (Some(tx), Some(offsets)) = (tx.upgrade(), offsets.upgrade()) else {
            return;
        };
        let groups = Groups {
            tx,
            offsets: Arc::clone(&offsets),
        };
        let Ok(stored) = store.groups().await else {
            continue;
        };
        let Ok(with_members) = groups
            .with(|c, _| {
                c.list(&[])
                    .into_iter()
                    .filter(|g| g.state != kafka_groups::GroupState::Empty)
                    .map(|g| g.group_id)
                    .collect::<HashSet<_>>()
            })
            .await
        else {
            return;
        };
        let now = crate::broker::now_ms();
        let due = offsets.due(stored, &with_members, now);
        let cutoff = now.saturating_sub(i64::try_from(rules.retention.as_millis()).unwrap_or(0));
        let mut expired = 0usize;
        for g in due {
            if offsets.forget_if_idle(&g, cutoff) && store.delete_group(&g).await.is_ok() {
                expired += 1;
            }
        }
        if expired > 0 {
            tracing::info!(groups = expired, "committed offsets expired");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(rules: OffsetRetention) -> OffsetGroups {
        OffsetGroups {
            rules,
            active: Mutex::new(HashMap::new()),
        }
    }

    const RULES: OffsetRetention = OffsetRetention {
        retention: Duration::from_millis(1000),
        max_groups: 2,
    };

    #[test]
    fn commits_beyond_the_group_cap_are_refused() {
        let g = groups(RULES);
        assert!(g.admit("a", 0));
        assert!(g.admit("b", 0));
        assert!(!g.admit("c", 0));
        assert!(g.admit("a", 5), "a group already counted may commit again");
    }

    #[test]
    fn idle_groups_expire_and_groups_with_members_do_not() {
        let g = groups(RULES);
        assert!(g.admit("idle", 0));
        assert!(g.admit("busy", 0));
        let stored = || vec!["idle".to_string(), "busy".to_string(), "old".to_string()];
        let members: HashSet<String> = ["busy".to_string()].into();
        // "old" is first seen now: its retention starts now.
        assert!(g.due(stored(), &members, 999).is_empty());
        let mut due = g.due(stored(), &members, 1000);
        due.sort();
        assert_eq!(due, vec!["idle".to_string()]);
        assert!(g.forget_if_idle("idle", 0));
        let stored = vec!["busy".to_string(), "old".to_string()];
        assert_eq!(
            g.due(stored, &HashSet::new(), 1999),
            vec!["old".to_string()]
        );
    }

    #[test]
    fn a_commit_after_the_sweep_decided_keeps_the_offsets() {
        let g = groups(RULES);
        assert!(g.admit("a", 0));
        assert_eq!(
            g.due(vec!["a".into()], &HashSet::new(), 1000),
            vec!["a".to_string()]
        );
        assert!(g.admit("a", 1001));
        assert!(!g.forget_if_idle("a", 0));
    }
}
