//! `kafka-bench`: a load generator for Kafka-protocol brokers.
//!
//! It drives the broker at `--bootstrap` through librdkafka (the `rdkafka` crate, linked
//! dynamically to the system library), not through this project's own codec, so the
//! numbers are what a real client sees and the same load can be pointed at any broker.
//!
//! Subcommands:
//! - `produce`: N concurrent producers, fixed-size records, by count or by duration,
//!   optionally rate-limited; records/s, MB/s and produce latency percentiles.
//! - `consume`: reads a topic up to the high watermarks taken at start; records/s, MB/s.
//! - `idle-connections`: N raw TCP connections that each exchange one ApiVersions v0 and
//!   then stay open; the broker's RSS before, while held and after.
//! - `auth`: N workers opening short connections that each authenticate (SASL PLAIN,
//!   SCRAM-SHA-256 or SCRAM-SHA-512, over TCP or TLS) and close; authentications per
//!   second and latency percentiles. Its own minimal client, no librdkafka.
//! - `blast`: produce with pre-encoded Produce requests over raw connections, several
//!   in flight on each, so the client costs next to no CPU and the broker sets the pace.
//! - `relay`: a TCP relay that only moves bytes between its clients and an upstream
//!   server; its own CPU per GB is the floor for any process in the gateway's place.
//! - `iggy-produce` / `iggy-consume` (cargo feature `iggy-native`): the same work through
//!   the Iggy SDK, as a native baseline for the gateway.
//!
//! Every Kafka subcommand takes `--security-protocol` (plaintext, ssl, sasl_plaintext,
//! sasl_ssl), `--sasl-mechanism`, `--sasl-username`, `--sasl-password` (or the
//! `KAFKA_BENCH_SASL_USERNAME` / `KAFKA_BENCH_SASL_PASSWORD` environment variables) and
//! `--ssl-ca-location`, handed to librdkafka under its own property names.
//!
//! With `--gateway-pid` the run samples that process's `/proc` counters (RSS, peak RSS,
//! CPU time). Every run also reports its own CPU time (`client cpu used`, the client
//! library's threads included), so a run on shared cores shows what the load itself
//! took. Progress goes to stderr once a second, the summary table to stdout and, with
//! `--json FILE`, a machine-readable result to FILE.
//!
//! Every loop is bounded: by a record count, a duration and an overall `--timeout`.
//!
//! `produce` and `consume` need the cargo feature `librdkafka` (the system library is
//! linked dynamically); without it they exit with a message saying how to build them.

// Without librdkafka the load commands are not compiled, which leaves their helpers unused.
#![cfg_attr(not(feature = "librdkafka"), allow(dead_code))]

mod auth;
#[cfg(feature = "librdkafka")]
mod blast;
mod cli;
#[cfg(feature = "librdkafka")]
mod consume;
mod idle;
#[cfg(feature = "iggy-native")]
mod iggy_native;
mod payload;
mod procstat;
#[cfg(feature = "librdkafka")]
mod produce;
mod relay;
mod report;
mod sasl_client;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kafka-bench: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            #[cfg(feature = "librdkafka")]
            cli::Command::Produce(args) => produce::run(args).await,
            #[cfg(feature = "librdkafka")]
            cli::Command::Consume(args) => consume::run(args).await,
            #[cfg(not(feature = "librdkafka"))]
            cli::Command::Produce(_) | cli::Command::Consume(_) | cli::Command::Blast(_) => Err(
                "this kafka-bench was built without librdkafka: build it with \
                 `cargo build -p kafka-bench --features librdkafka` (needs librdkafka-dev)"
                    .into(),
            ),
            cli::Command::IdleConnections(args) => idle::run(args).await,
            cli::Command::Auth(args) => auth::run(args).await,
            cli::Command::Relay(args) => relay::run(args).await,
            #[cfg(feature = "librdkafka")]
            cli::Command::Blast(args) => blast::run(args).await,
            #[cfg(feature = "iggy-native")]
            cli::Command::IggyProduce(args) => iggy_native::produce(args).await,
            #[cfg(feature = "iggy-native")]
            cli::Command::IggyConsume(args) => iggy_native::consume(args).await,
        }
    });
    match result {
        Ok(report) => {
            let code = i32::from(!report.ok());
            if let Err(e) = report.emit() {
                eprintln!("kafka-bench: {e}");
                std::process::exit(2);
            }
            std::process::exit(code);
        }
        Err(e) => {
            eprintln!("kafka-bench: {e}");
            std::process::exit(2);
        }
    }
}
