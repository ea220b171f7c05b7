//! Failover of three gateways on one Iggy under real clients.
//!
//! Load: an idempotent confluent-kafka producer (acks=all) sends numbered records to every
//! partition of a topic, and a two-member consumer group (two processes, manual commits
//! after processing) reads them; every acknowledgement, read and accepted commit is logged
//! with its time (`tests/clients/failover/`). All clients are bootstrapped with the three
//! gateways.
//!
//! The gateway that coordinates the group (and leads some partitions) then fails:
//! - killed with SIGKILL, then started again at its address and node id;
//! - paused with SIGSTOP until the others dropped it from their view (its lease has lapsed
//!   by then), then resumed with SIGCONT: it must not act on the ownership it lost. It
//!   stops with exit code 1 (the gateway's promise for a lapsed lease) and is started
//!   again, as its supervisor would.
//!
//! Each run checks that leadership left the failed gateway (Metadata of the others), that
//! the producer and the group resume on every partition the failed gateway led, that the
//! restarted gateway rejoins (three brokers everywhere, its partitions back), and at the
//! end that every acknowledged record is in the log exactly once, no record twice, the
//! group read every acknowledged record, no member read below an offset already committed,
//! and the stored commits are the last accepted ones. Times from the failure to the first
//! acknowledged produce, read and commit are printed as `MEASURED:` lines (never asserted).
//!
//! Settings for exploring (the defaults are what the tests run with):
//! `FAILOVER_PAUSE_MS` makes the pause longer than until the others dropped the gateway
//! plus one second (to see how long clients wait for a gateway that holds their
//! requests); `FAILOVER_RATE` is the producer's records a second (300);
//! `FAILOVER_SESSION_TIMEOUT_MS` the members' `session.timeout.ms` (10000);
//! `FAILOVER_GATEWAY_TIMINGS=<session ms>/<heartbeat ms>` the gateways' (5000/500).
//!
//! Needs `IGGY_SERVER_BIN` and confluent-kafka (`scripts/install-clients.sh`); prints
//! `SKIPPED:` without them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::failover::{coordinator, create_topic, leaders, restart, signal};
use support::trio::{Trio, broker_ids, metadata, until};
use support::{Background, Client, IggyServer, iggy_server_bin, require, run_against_all};

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const PARTITIONS: i32 = 6;
/// The gateways' lease timings: longer than the trio's default (3000 ms), because on a
/// busy 2-core machine a healthy gateway's heartbeats were seen unacknowledged for 2.7 s,
/// and a gateway that loses its lease stops (as designed), which these tests do not
/// expect of the gateways that stay.
const SESSION_TIMEOUT_MS: u64 = 5000;
const HEARTBEAT_INTERVAL_MS: u64 = 500;

/// The gateways' session timeout and heartbeat interval: [`SESSION_TIMEOUT_MS`] and
/// [`HEARTBEAT_INTERVAL_MS`], or `FAILOVER_GATEWAY_TIMINGS=<session ms>/<heartbeat ms>`.
fn lease_timings() -> (u64, u64) {
    let Ok(set) = std::env::var("FAILOVER_GATEWAY_TIMINGS") else {
        return (SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS);
    };
    let parsed = set
        .split_once('/')
        .and_then(|(s, h)| Some((s.parse().ok()?, h.parse().ok()?)));
    parsed
        .unwrap_or_else(|| panic!("FAILOVER_GATEWAY_TIMINGS={set:?}: <session ms>/<heartbeat ms>"))
}
/// How long the clients get to resume after a failure or a restart (generous: a wait,
/// not a measurement).
const RESUME_TIMEOUT_SECS: &str = "120";
/// How long the load runs undisturbed once it has reached a new state (warmed up,
/// resumed after the failure, after the restart), so each phase has records and commits.
const STEADY: Duration = Duration::from_secs(4);

/// How the coordinator gateway fails.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Failure {
    Kill,
    Pause,
}

fn wall_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn join(items: impl IntoIterator<Item = impl ToString>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn addr(trio: &Trio, node: i32) -> SocketAddr {
    trio.gateways[index(node)].addr
}

fn bootstrap(trio: &Trio) -> String {
    join(trio.gateways.iter().map(|g| g.addr))
}

fn index(node: i32) -> usize {
    usize::try_from(node - 1).unwrap()
}

/// The load: one producer and two group members, and their event files.
struct Load {
    dir: PathBuf,
    producer: Background,
    members: Vec<Background>,
    env: Vec<(&'static str, String)>,
}

impl Load {
    fn start(bootstrap: &str, topic: &str, group: &str) -> Load {
        let dir = support::scratch_dir("failover");
        let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let partitions = PARTITIONS.to_string();
        let producer = Background::spawn(
            (CONFLUENT, "tests/clients/failover/producer.py"),
            bootstrap,
            &[
                ("TOPIC", topic),
                ("PARTITIONS", &partitions),
                ("EVENTS", &path("producer.events")),
                ("STOP", &path("producer.stop")),
            ],
            dir.join("producer.log"),
        );
        let members = ["member-a", "member-b"]
            .iter()
            .map(|name| {
                Background::spawn(
                    (CONFLUENT, "tests/clients/failover/consumer.py"),
                    bootstrap,
                    &[
                        ("TOPIC", topic),
                        ("GROUP", group),
                        ("NAME", name),
                        ("EVENTS", &path(&format!("{name}.events"))),
                        ("STOP", &path("members.stop")),
                    ],
                    dir.join(format!("{name}.log")),
                )
            })
            .collect();
        let env = vec![
            ("TOPIC", topic.to_owned()),
            ("PARTITIONS", partitions),
            ("GROUP", group.to_owned()),
            ("PRODUCER_EVENTS", path("producer.events")),
            (
                "MEMBER_EVENTS",
                format!("{},{}", path("member-a.events"), path("member-b.events")),
            ),
            ("MEMBERS_STOP", path("members.stop")),
        ];
        Load {
            dir,
            producer,
            members,
            env,
        }
    }

    /// The clients' output, for a failure message.
    fn output(&self) -> String {
        let mut out = format!("--- producer ---\n{}", self.producer.output(30));
        for (i, m) in self.members.iter().enumerate() {
            out.push_str(&format!("\n--- member {i} ---\n{}", m.output(30)));
        }
        out
    }

    /// Runs `check.py` in `phase` with `extra` settings; panics with every log if it fails.
    fn check(&self, trio: &Trio, name: &str, phase: &str, extra: &[(&str, String)]) {
        let mut env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.push(("PHASE", phase));
        env.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        let started = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_against_all(
                &trio.refs(),
                name,
                CONFLUENT,
                "tests/clients/failover/check.py",
                &env,
                "",
                Duration::from_secs(300),
            );
        }));
        if let Err(e) = result {
            eprintln!(
                "{name}: check {phase} failed after {:?}; clients:\n{}",
                started.elapsed(),
                self.output()
            );
            std::panic::resume_unwind(e);
        }
    }

    /// Waits until records sent after `since_ms` were acknowledged, read and committed on
    /// every partition in `parts` (and, with `every_member`, each member had a commit
    /// accepted); prints the times. Panics if a client exited meanwhile.
    fn progress(
        &mut self,
        trio: &Trio,
        label: &str,
        since_ms: u64,
        parts: &[i32],
        every_member: bool,
    ) {
        let output = self.output();
        for c in std::iter::once(&mut self.producer).chain(&mut self.members) {
            if let Some(status) = c.exit_status() {
                panic!("{label}: a client exited early ({status}):\n{output}");
            }
        }
        self.check(
            trio,
            label,
            "progress",
            &[
                ("SINCE_MS", since_ms.to_string()),
                ("PARTS", join(parts)),
                ("LABEL", label.to_owned()),
                ("TIMEOUT", RESUME_TIMEOUT_SECS.to_owned()),
                (
                    "ALL_MEMBERS",
                    if every_member { "1" } else { "0" }.to_owned(),
                ),
            ],
        );
    }

    fn stop_producer(&mut self) {
        std::fs::write(self.dir.join("producer.stop"), b"").unwrap();
        let status = self.producer.wait(Duration::from_secs(300));
        assert!(
            status.is_some_and(|s| s.success()),
            "the producer did not stop cleanly ({status:?}):\n{}",
            self.output()
        );
    }

    fn members_exited(&mut self) {
        let output = self.output();
        for m in &mut self.members {
            let status = m.wait(Duration::from_secs(60));
            assert!(
                status.is_some_and(|s| s.success()),
                "a member did not close cleanly ({status:?}):\n{output}"
            );
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The event files are the evidence of what went wrong.
            eprintln!("client event files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Every gateway of `nodes` lists exactly `nodes` in Metadata and none of `topic`'s
/// partitions is led outside them. Panics with its log if one of them has exited.
fn settled(trio: &mut Trio, topic: &str, nodes: &[i32]) -> bool {
    for n in nodes {
        if let Some(status) = trio.gateways[index(*n)].exit_status() {
            let logs: Vec<String> = trio
                .gateways
                .iter()
                .enumerate()
                .map(|(i, g)| format!("=== gateway {} ===\n{}", i + 1, g.output(60)))
                .collect();
            panic!(
                "gateway {n} exited ({status}) unexpectedly\n{}",
                logs.join("\n")
            );
        }
    }
    nodes.iter().all(|n| {
        let m = metadata(addr(trio, *n), topic);
        broker_ids(&m) == nodes
            && m.topics[0]
                .partitions
                .iter()
                .all(|p| nodes.contains(&p.leader_id))
    })
}

fn ms_since(start: Instant) -> u128 {
    start.elapsed().as_millis()
}

/// The scenarios run one at a time: each starts an Iggy server, three gateways and four
/// client processes, and their timings mean more on a quiet machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(failure: Failure) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = match failure {
        Failure::Kill => "failover after SIGKILL",
        Failure::Pause => "failover after SIGSTOP",
    };
    if !require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let (session_ms, heartbeat_ms) = lease_timings();
    let session = session_ms.to_string();
    let heartbeat = heartbeat_ms.to_string();
    let timings = [
        ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", session.as_str()),
        (
            "IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS",
            heartbeat.as_str(),
        ),
    ];
    let mut trio = Trio::start(IggyServer::start(&bin), &timings);
    trio.wait_live();
    let prefix = support::topic_prefix(name);
    let topic = format!("{prefix}-topic");
    create_topic(addr(&trio, 1), &topic, PARTITIONS);
    until(Duration::from_secs(15), "the leaders agreed", || {
        let first = leaders(addr(&trio, 1), &topic);
        (2..=3).all(|n| leaders(addr(&trio, n), &topic) == first)
    });
    let placed = leaders(addr(&trio, 1), &topic);

    // A group whose coordinator also leads partitions of the topic.
    let (group, victim) = (0..100)
        .map(|i| format!("{prefix}-group-{i}"))
        .find_map(|g| {
            let c = coordinator(addr(&trio, 1), &g)?;
            placed.contains(&c).then_some((g, c))
        })
        .expect("a group coordinated by a partition leader");
    let victim_parts: Vec<i32> = (0..PARTITIONS)
        .filter(|p| placed[usize::try_from(*p).unwrap()] == victim)
        .collect();
    let survivors: Vec<i32> = (1..=3).filter(|n| *n != victim).collect();
    eprintln!(
        "{name}: leaders {placed:?}; gateway {victim} coordinates {group} and leads {victim_parts:?}"
    );

    let mut load = Load::start(&bootstrap(&trio), &topic, &group);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    load.progress(&trio, "warm-up", wall_ms(), &all, true);
    std::thread::sleep(STEADY);

    // The failure.
    let failed_at = wall_ms();
    let failed = Instant::now();
    let label = match failure {
        Failure::Kill => {
            let killed = &mut trio.gateways[index(victim)];
            signal(killed, "KILL");
            until(
                Duration::from_secs(10),
                "the killed gateway exiting",
                || !killed.is_running(),
            );
            format!("after SIGKILL of gateway {victim}")
        }
        Failure::Pause => {
            signal(&trio.gateways[index(victim)], "STOP");
            format!("after SIGSTOP of gateway {victim}")
        }
    };
    until(
        Duration::from_millis(session_ms * 5),
        "leadership leaving the failed gateway",
        || settled(&mut trio, &topic, &survivors),
    );
    let moved = ms_since(failed);
    let after = leaders(addr(&trio, survivors[0]), &topic);
    for (p, (before, now)) in placed.iter().zip(&after).enumerate() {
        if *before == victim {
            assert_ne!(*now, victim, "partition {p}");
        } else {
            assert_eq!(
                before, now,
                "partition {p}: only the failed gateway's moved"
            );
        }
    }
    let new_coordinator = coordinator(addr(&trio, survivors[0]), &group);
    assert!(
        new_coordinator.is_some_and(|c| c != victim),
        "{new_coordinator:?}"
    );
    eprintln!(
        "MEASURED: {label}: gone from the others' Metadata, its partitions led by {after:?}, after {moved} ms (session timeout {session_ms} ms)"
    );

    if failure == Failure::Pause {
        // Past its lease by now (the others keep a silent gateway a full session timeout;
        // its lease ends one heartbeat interval earlier). Resumed, it must stop serving as
        // an owner and exit with 1.
        std::thread::sleep(Duration::from_millis(1000));
        if let Some(longer) = std::env::var("FAILOVER_PAUSE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
        {
            std::thread::sleep(longer.saturating_sub(failed.elapsed()));
        }
        let paused = &mut trio.gateways[index(victim)];
        signal(paused, "CONT");
        let resumed = Instant::now();
        until(
            Duration::from_secs(30),
            "the resumed gateway exiting",
            || !paused.is_running(),
        );
        let status = paused.exit_status().expect("exited");
        let out = paused.output(40);
        assert_eq!(status.code(), Some(1), "{out}");
        assert!(
            out.contains("lost its lease") && out.contains("no heartbeat reached Iggy"),
            "the reason is logged: {out}"
        );
        eprintln!(
            "MEASURED: {label}: paused {} ms; after SIGCONT it stopped (exit code 1) within {} ms",
            resumed.duration_since(failed).as_millis(),
            ms_since(resumed)
        );
    }
    load.progress(&trio, &label, failed_at, &victim_parts, false);
    std::thread::sleep(STEADY);

    // Started again (a supervisor's restart): it rejoins and takes its partitions back.
    let restarted_at = wall_ms();
    let restarted = Instant::now();
    restart(&mut trio, victim, &timings);
    until(
        Duration::from_secs(30),
        "the restarted gateway rejoining",
        || {
            settled(&mut trio, &topic, &[1, 2, 3])
                && (1..=3).all(|n| leaders(addr(&trio, n), &topic) == placed)
        },
    );
    eprintln!(
        "MEASURED: gateway {victim} restarted: listed by all three and leading {victim_parts:?} again {} ms after its start",
        ms_since(restarted)
    );
    let label = format!("after gateway {victim} rejoined");
    load.progress(&trio, &label, restarted_at, &all, false);
    std::thread::sleep(STEADY);

    load.stop_producer();
    load.check(&trio, name, "verify", &[]);
    load.members_exited();
}

#[test]
fn sigkill_of_the_coordinator_loses_and_doubles_nothing() {
    run(Failure::Kill);
}

#[test]
fn sigstop_past_the_lease_acts_on_no_stale_ownership() {
    run(Failure::Pause);
}

/// The transaction workload (`tests/clients/txn/txn_workload.py`) bootstrapped with all
/// three gateways; once every producer is half done, the gateway that coordinates the
/// first producer's transactional id is killed (SIGKILL), the others take over its
/// partitions and transaction ids, and it is started again while the producers go on.
/// The workload's checker then finds no aborted record, every committed one exactly once,
/// in order per partition and producer.
#[test]
fn transaction_workload_through_a_coordinator_sigkill() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = "transaction workload failover";
    if !require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let (session_ms, heartbeat_ms) = lease_timings();
    let session = session_ms.to_string();
    let heartbeat = heartbeat_ms.to_string();
    let timings = [
        ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", session.as_str()),
        (
            "IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS",
            heartbeat.as_str(),
        ),
    ];
    let mut trio = Trio::start(IggyServer::start(&bin), &timings);
    trio.wait_live();
    let prefix = support::topic_prefix(name);
    let topic = format!("{prefix}-workload");
    // The script's first transactional id; ids and groups share the coordinator shards.
    let victim = coordinator(addr(&trio, 1), &format!("{prefix}-wl-0"))
        .expect("a coordinator for the first transactional id");
    let survivors: Vec<i32> = (1..=3).filter(|n| *n != victim).collect();
    let dir = support::scratch_dir("txn-failover");
    let (ready, done) = (dir.join("ready"), dir.join("done"));
    let (ready_s, done_s) = (
        ready.to_string_lossy().to_string(),
        done.to_string_lossy().to_string(),
    );
    let env = [
        ("TOPIC_PREFIX", prefix.as_str()),
        ("RESTART_READY_FILE", ready_s.as_str()),
        ("RESTART_DONE_FILE", done_s.as_str()),
        ("RUN_TIMEOUT", "170"),
    ];
    let mut script = Background::spawn(
        (CONFLUENT, "tests/clients/txn/txn_workload.py"),
        &bootstrap(&trio),
        &env,
        dir.join("client.log"),
    );
    until(Duration::from_secs(90), "the workload half done", || {
        assert!(
            script.exit_status().is_none(),
            "the workload exited early\n{}",
            script.output(60)
        );
        ready.exists()
    });
    let killed = &mut trio.gateways[index(victim)];
    signal(killed, "KILL");
    until(
        Duration::from_secs(10),
        "the killed gateway exiting",
        || !killed.is_running(),
    );
    let failed = Instant::now();
    until(
        Duration::from_millis(session_ms * 5),
        "leadership leaving the failed gateway",
        || settled(&mut trio, &topic, &survivors),
    );
    eprintln!(
        "MEASURED: {name}: gateway {victim} (coordinator of {prefix}-wl-0) gone from the others' Metadata after {} ms",
        ms_since(failed)
    );
    std::thread::sleep(STEADY);
    restart(&mut trio, victim, &timings);
    std::fs::write(&done, "done\n").expect("write the restart-done file");
    let status = script.wait(Duration::from_secs(220));
    println!("--- txn_workload.py ({name}) ---\n{}", script.output(400));
    let logs = || {
        trio.gateways
            .iter()
            .map(|g| format!("=== gateway on {} ===\n{}", g.addr, g.output(60)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!(
            "{name}: the workload failed ({s})\n{}\n{}",
            script.output(40),
            logs()
        ),
        None => panic!(
            "{name}: the workload did not finish within 220 s\n{}\n{}",
            script.output(40),
            logs()
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
