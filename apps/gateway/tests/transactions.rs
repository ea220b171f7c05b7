//! Kafka transactions with real clients against the gateway binary.
//!
//! The scripts live in `tests/clients/txn/` (see the header of each for what it checks):
//! - `confluent_txn.py` (confluent-kafka 2.16.1), `JavaTxn.java` (kafka-clients 3.9.1) and
//!   `kafkajs_txn.js` (kafkajs 2.2.4): commit and abort seen through read_committed and
//!   read_uncommitted readers, a consume-transform-produce loop that commits its input
//!   offsets inside its transactions (one batch aborted and redone: the output holds each
//!   input once), and zombie fencing (two producers with one transactional id: the older one
//!   is fenced and none of its records become visible);
//! - `txn_workload.py`: the Jepsen-style workload (transactional producers committing and
//!   aborting at random, read_committed readers, a checker for aborted, missing, repeated
//!   and reordered records).
//!
//! Every script runs on the embedded store and, with `IGGY_SERVER_BIN`, on Iggy through the
//! bridge (`*_on_iggy`). The workload also runs through restarts (Iggy only, since the
//! embedded store keeps nothing over a restart of its process): the gateway killed and
//! started again on the same port mid-run, and the Iggy server restarted under a running
//! gateway. The restart tests start the script with `RESTART_READY_FILE` and
//! `RESTART_DONE_FILE`, wait for the first, restart, then create the second.
//!
//! Clients that are not installed are skipped with a `SKIPPED:` line, unless
//! `KAFKA_CLIENTS_REQUIRED=1` (see `support/mod.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};
use support::{
    Backend, Background, Client, Gateway, IggyServer, bridge_env, iggy_server_bin, require,
    run_against, scratch_dir, topic_prefix,
};

/// Per script; the client scripts take 10 to 40 s against a healthy gateway.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);
/// Group joins without the initial rebalance delay: the scripts join several groups.
const GATEWAY_ENV: &[(&str, &str)] = &[("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")];
const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const WORKLOAD: &str = "tests/clients/txn/txn_workload.py";

fn run(backend: Backend, name: &str, client: Client, script: &str, env: &[(&str, &str)]) {
    if !require(name, client) {
        return;
    }
    let Some(gateway) = Gateway::start_on(backend, name, GATEWAY_ENV) else {
        return;
    };
    run_against(
        &gateway,
        name,
        client,
        &format!("tests/clients/txn/{script}"),
        env,
        &topic_prefix(name),
        SCRIPT_TIMEOUT,
    );
}

/// One test per script and backend.
macro_rules! scripts {
    ($($memory:ident, $iggy:ident: $name:expr, $client:expr, $script:expr;)*) => {
        $(
            #[test]
            fn $memory() {
                run(Backend::Memory, $name, $client, $script, &[]);
            }

            #[test]
            fn $iggy() {
                run(Backend::Iggy, $name, $client, $script, &[]);
            }
        )*
    };
}

scripts! {
    confluent_kafka_transactions, confluent_kafka_transactions_on_iggy: "confluent-kafka transactions", CONFLUENT, "confluent_txn.py";
    java_transactions, java_transactions_on_iggy: "java kafka-clients transactions", Client::Java, "JavaTxn.java";
    kafkajs_transactions, kafkajs_transactions_on_iggy: "kafkajs transactions", Client::Node, "kafkajs_txn.js";
    workload, workload_on_iggy: "transaction workload", CONFLUENT, "txn_workload.py";
}

/// What is restarted in the middle of the workload.
enum Restart {
    /// The gateway process, killed and started again on the same address and Iggy.
    Gateway,
    /// The Iggy server under a gateway that keeps running.
    Iggy,
}

/// The workload with a restart in the middle: the script writes `ready` once every producer
/// is half done and goes on producing; the test restarts, then writes `done`; the producers
/// finish with at least five transactions each after it, and the checker runs on all of it.
fn workload_through(restart: Restart, name: &str) {
    if !require(name, CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let mut iggy = IggyServer::start(&bin);
    let start_gateway = |iggy: &IggyServer, addr: Option<String>| {
        let bridge = bridge_env(iggy);
        let mut env: Vec<(&str, &str)> = bridge.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(GATEWAY_ENV);
        if let Some(addr) = &addr {
            env.push(("IGGY_KAFKA_BIND_ADDR", addr.as_str()));
        }
        Gateway::start(&env)
    };
    let mut gateway = start_gateway(&iggy, None);
    let addr = gateway.addr.to_string();
    let dir = scratch_dir("txn-workload");
    let ready = dir.join("ready");
    let done = dir.join("done");
    let prefix = topic_prefix(name);
    let (ready_s, done_s) = (
        ready.to_string_lossy().to_string(),
        done.to_string_lossy().to_string(),
    );
    let env = [
        ("TOPIC_PREFIX", prefix.as_str()),
        ("RESTART_READY_FILE", ready_s.as_str()),
        ("RESTART_DONE_FILE", done_s.as_str()),
        ("RUN_TIMEOUT", "150"),
    ];
    let started = Instant::now();
    let mut script = Background::spawn((CONFLUENT, WORKLOAD), &addr, &env, dir.join("client.log"));
    let deadline = Instant::now() + Duration::from_secs(90);
    while !ready.exists() {
        if let Some(status) = script.exit_status() {
            panic!(
                "{name}: the workload exited ({status}) before asking for the restart\n{}\n{}",
                script.output(60),
                gateway.output(80)
            );
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the workload did not ask for the restart within 90 s\n{}\n{}",
            script.output(60),
            gateway.output(80)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    match restart {
        Restart::Gateway => {
            drop(gateway);
            gateway = start_gateway(&iggy, Some(addr.clone()));
        }
        Restart::Iggy => iggy.restart(),
    }
    std::fs::write(&done, "done\n").expect("write the restart-done file");
    let status = script.wait(Duration::from_secs(200));
    let output = script.output(400);
    println!(
        "--- {WORKLOAD} ({name}) in {:.1?} ---\n{output}",
        started.elapsed()
    );
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!(
            "{name}: the workload failed ({s})\n{}\n{}",
            script.output(40),
            gateway.output(120)
        ),
        None => panic!(
            "{name}: the workload did not finish within 200 s\n{}\n{}",
            script.output(40),
            gateway.output(120)
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn workload_through_a_gateway_restart_on_iggy() {
    workload_through(Restart::Gateway, "transaction workload, gateway restart");
}

#[test]
fn workload_through_an_iggy_restart() {
    workload_through(Restart::Iggy, "transaction workload, iggy restart");
}
