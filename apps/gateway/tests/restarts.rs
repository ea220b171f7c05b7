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
