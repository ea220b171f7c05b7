//! Signal handling: the first SIGINT or SIGTERM starts a graceful shutdown, a second one
//! ends the process at once.
//!
//! The second signal matters when draining takes long (the drain timeout can be minutes):
//! an operator pressing Ctrl-C twice, or an orchestrator escalating, expects the process
//! to go now rather than after the drain.

use std::future::Future;
use std::io;
use tokio::sync::oneshot;
use tracing::{info, warn};

/// Exit code after a second signal cut a graceful shutdown short (128 + SIGINT, as shells
/// report an interrupted program).
pub const EXIT_FORCED: i32 = 130;

/// Installs the handlers and returns a future that resolves on the first signal. Must be
/// called inside the runtime, before the gateway announces it is listening, so that a
/// signal sent right after the announcement is already handled gracefully.
pub fn install() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut signals = Signals::new()?;
    let (first_tx, first_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let first = signals.next().await;
        info!(
            signal = first,
            "shutting down gracefully; send the signal again to exit at once"
        );
        let _ = first_tx.send(());
        let second = signals.next().await;
        warn!(
            signal = second,
            "second signal: exiting without waiting for connections to drain"
        );
        std::process::exit(EXIT_FORCED);
    });
    Ok(async move {
        // An error means the signal task is gone, which only happens when the runtime is
        // shutting down: stopping is right then too.
        let _ = first_rx.await;
    })
}

#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        // `recv` yields `None` only once the runtime's signal driver is gone; that is no
        // signal, so such a branch is disabled rather than taken as a second Ctrl-C.
        tokio::select! {
            Some(()) = self.interrupt.recv() => "SIGINT",
            Some(()) = self.terminate.recv() => "SIGTERM",
            else => std::future::pending::<&'static str>().await,
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> io::Result<Self> {
        Ok(Signals)
    }

    async fn next(&mut self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            // Without a working handler the process can only be killed; never resolve.
            Err(_) => std::future::pending().await,
        }
    }
}
