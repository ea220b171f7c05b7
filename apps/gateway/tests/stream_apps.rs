//! Real stateful stream-processing programs from PyPI against the gateway binary.
//!
//! Each program runs its own documented stateful example (see the header of each script in
//! `tests/stream-apps/`): it creates its changelog topics with `cleanup.policy=compact`,
//! keeps its state in a local RocksDB store, is fed known input and must produce the right
//! counts; then it is stopped, its local state directory is deleted, and after a restart it
//! must restore that state from the changelog topics (the counts go on instead of starting
//! again). Every program runs on the embedded store and, with `IGGY_SERVER_BIN`, on Iggy
//! through the bridge (`<program>_on_iggy`). On the embedded store the scripts first wait
//! for the gateway's cleaner to compact a changelog, so that the restart restores from a
//! log with offset gaps.
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
use support::{Backend, Client, Gateway, run_against, topic_prefix};

/// A whole scenario: two runs of the program, each bounded by `APP_PHASE_TIMEOUT` (60 s),
/// and the wait for compaction between them.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);

/// On the embedded store the cleaner runs every half second (Kafka's
/// `log.cleaner.backoff.ms`), so that the changelogs are compacted before the restart.
const MEMORY_GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "500")];

/// Seconds the scripts wait, on the embedded store, for a changelog to show offset gaps
/// before the restart (`COMPACTION_WAIT`, see `tests/stream-apps/changelog.py`).
const COMPACTION_WAIT_S: &str = "20";

/// Whether no compaction within that time fails the test (`COMPACTION_REQUIRED`): the
/// embedded store's cleaner must have compacted the changelog before the restart, so the
/// restore reads a compacted changelog.
const COMPACTION_REQUIRED: bool = true;

/// Settings for the gateway or a script.
type Env = &'static [(&'static str, &'static str)];

fn run(backend: Backend, name: &str, module: &'static str, script: &str) {
    let client = Client::PythonApps { module };
    if !support::require(name, client) {
        return;
    }
    let (gateway_env, script_env): (Env, Vec<(&str, &str)>) = match backend {
        Backend::Memory => (
            MEMORY_GATEWAY_ENV,
            vec![
                ("COMPACTION_WAIT", COMPACTION_WAIT_S),
                (
                    "COMPACTION_REQUIRED",
                    if COMPACTION_REQUIRED { "1" } else { "0" },
                ),
            ],
        ),
        // No wait on Iggy: the bridge's compaction and its timing have suites of their own;
        // the restart reads whatever the bridge serves.
        Backend::Iggy => (&[], Vec::new()),
    };
    let Some(gateway) = Gateway::start_on(backend, name, gateway_env) else {
        return;
    };
    run_against(
        &gateway,
        name,
        client,
        &format!("tests/stream-apps/{script}"),
        &script_env,
        &topic_prefix(name),
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

/// quixstreams in exactly-once mode (`quixstreams_eos.py`): a transaction per checkpoint,
/// the app killed with SIGKILL mid-way and restarted; its output counts are exact.
#[test]
fn quixstreams_exactly_once_through_a_crash() {
    run(
        Backend::Memory,
        "quixstreams exactly-once",
        "quixstreams",
        "quixstreams_eos.py",
    );
}

#[test]
fn quixstreams_exactly_once_through_a_crash_on_iggy() {
    run(
        Backend::Iggy,
        "quixstreams exactly-once",
        "quixstreams",
        "quixstreams_eos.py",
    );
}
