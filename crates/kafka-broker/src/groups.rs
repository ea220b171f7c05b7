//! The driver around the sans-IO group coordinator ([`kafka_groups::Coordinator`]).
//!
//! One task owns the coordinator. Handlers send it commands over a bounded channel; the
//! task feeds them in with the current time, sleeps until the coordinator's next deadline
//! (session expiries, rebalance timeouts, the initial rebalance delay) and routes every
//! answer the coordinator releases back to the waiting handler. JoinGroup and SyncGroup
//! answers may come much later than their requests: the handler simply awaits them.

use kafka_groups::{
    Coordinator, GroupConfig, Heartbeat, JoinGroup, LeaveGroup, Millis, RequestId, Response,
    SyncGroup,
};
use std::collections::HashMap;
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
}

/// The coordinator task has stopped (shutdown).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unavailable;

impl Groups {
    /// Starts the coordinator task on the current runtime.
    pub(crate) fn spawn(config: GroupConfig) -> Groups {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(run(Coordinator::new(config), rx));
        Groups { tx }
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
