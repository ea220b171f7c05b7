//! Restarts with the Iggy bridge: a gateway restarted between produce and consume loses
//! nothing, and a consumer group resumes from its last commit, because records, topic
//! settings and committed offsets all live in Iggy.
//!
//! Needs `IGGY_SERVER_BIN` (an `iggy-server` binary) and confluent-kafka from
//! `scripts/install-clients.sh`; prints `SKIPPED:` without them (a missing client fails
//! when `KAFKA_CLIENTS_REQUIRED=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Client, Gateway, IggyServer, bridge_env, iggy_server_bin, require, run_against};

const CONFLUENT: Client = Client::Python {
    module: "confluent_kafka",
};
const SCRIPT: &str = "tests/clients/restarts/gateway_restart.py";
const TIMEOUT: Duration = Duration::from_secs(120);

fn gateway_on(iggy: &IggyServer) -> Gateway {
    let env = bridge_env(iggy);
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0"));
    Gateway::start(&all)
}

#[test]
fn gateway_restart_between_produce_and_consume_loses_nothing() {
    let name = "gateway restart";
    if !require("confluent-kafka", CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let prefix = support::topic_prefix("restart");
    {
        let first = gateway_on(&iggy);
        run_against(
            &first,
            name,
            CONFLUENT,
            SCRIPT,
            &[("PHASE", "produce")],
            &prefix,
            TIMEOUT,
        );
        // `first` is killed here: nothing of the group or the records survives in it.
    }
    let second = gateway_on(&iggy);
    run_against(
        &second,
        name,
        CONFLUENT,
        SCRIPT,
        &[("PHASE", "consume")],
        &prefix,
        TIMEOUT,
    );
}

#[test]
fn iggy_restart_under_a_producer_and_a_consumer_loses_no_acknowledged_record() {
    let name = "iggy restart";
    if !require("confluent-kafka", CONFLUENT) {
        return;
    }
    let Some(bin) = iggy_server_bin(name) else {
        return;
    };
    let mut iggy = IggyServer::start(&bin);
    let gateway = gateway_on(&iggy);
    let prefix = support::topic_prefix("iggy-restart");
    let dir = support::scratch_dir("acks");
    let acks = dir.join("acked.txt");
    let acks = acks.to_string_lossy().to_string();
    let script = "tests/clients/restarts/iggy_restart.py";
    std::thread::scope(|s| {
        let run = s.spawn(|| {
            let env = [
                ("PHASE", "run"),
                ("ACK_FILE", acks.as_str()),
                ("RUN_SECS", "12"),
            ];
            run_against(&gateway, name, CONFLUENT, script, &env, &prefix, TIMEOUT);
        });
        // Restart while both clients are busy.
        std::thread::sleep(Duration::from_secs(4));
        iggy.restart();
        if let Err(panic) = run.join() {
            std::panic::resume_unwind(panic);
        }
    });
    let env = [("PHASE", "verify"), ("ACK_FILE", acks.as_str())];
    run_against(&gateway, name, CONFLUENT, script, &env, &prefix, TIMEOUT);
}
