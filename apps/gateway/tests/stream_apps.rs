//! Real stateful stream-processing programs from PyPI against the gateway binary.
//!
//! Each program runs its own documented stateful example (see the header of each script in
//! `tests/stream-apps/`): it creates its changelog topics with `cleanup.policy=compact`,
//! keeps its state in a local RocksDB store, is fed known input and must produce the right
//! counts; then it is stopped, its local state directory is deleted, and after a restart it
//! must restore that state from the changelog topics (the counts go on instead of starting
//! again). Every program runs on the embedded store and, with `IGGY_SERVER_BIN`, on Iggy
//! through the bridge (`<program>_on_iggy`).
//!
//! - quixstreams 3.28 (`quixstreams_counts.py`): a keyed running count in `State` and a
//!   tumbling-window count, each store with its own changelog topic.
//! - faust-streaming 0.15 (`faust_page_views.py`): the page-view counting agent, a
//!   `group_by` repartition topic and a table with its changelog topic.
//!
//! The programs live in their own venv, `.clients/venv-apps` (installed by
//! `scripts/install-clients.sh`, every package pinned in
//! `scripts/stream-apps-requirements.txt`). Without it a test prints `SKIPPED:`, unless
//! `KAFKA_CLIENTS_REQUIRED=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Backend, Client, run_script_on};

/// A whole scenario: two runs of the program, each bounded by `APP_PHASE_TIMEOUT` (60 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);

fn run(backend: Backend, name: &str, module: &'static str, script: &str) {
    run_script_on(
        backend,
        name,
        Client::PythonApps { module },
        &format!("tests/stream-apps/{script}"),
        &[],
        SCRIPT_TIMEOUT,
    );
}

#[test]
fn quixstreams() {
    run(
        Backend::Memory,
        "quixstreams",
        "quixstreams",
        "quixstreams_counts.py",
    );
}

#[test]
fn quixstreams_on_iggy() {
    run(
        Backend::Iggy,
        "quixstreams",
        "quixstreams",
        "quixstreams_counts.py",
    );
}

#[test]
fn faust_streaming() {
    run(
        Backend::Memory,
        "faust-streaming",
        "faust",
        "faust_page_views.py",
    );
}

#[test]
fn faust_streaming_on_iggy() {
    run(
        Backend::Iggy,
        "faust-streaming",
        "faust",
        "faust_page_views.py",
    );
}
