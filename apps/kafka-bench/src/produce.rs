//! `produce`: N concurrent librdkafka producers writing fixed-size records.
//!
//! Each producer is its own `FutureProducer` (its own librdkafka instance, threads and
//! connections) and keeps at most `--max-in-flight` records between `send` and delivery
//! report. Latency is measured per record from just before the send call to the moment
//! the delivery report is observed; with `--acks all` that is the broker's full
//! acknowledgement. The producer task drains finished deliveries after every send, so the
//! observation delay is small; under a `--rate` the task is mostly idle and it is smaller
//! still, which is why the latency figure to quote is the rate-limited one.
//!
//! Every producer is created and connected before the clock starts: it fetches the
//! topic's metadata through its own connections first, so the first records do not wait
//! for the client's start-up. (librdkafka 2.x drops its bootstrap connection once it
//! has learned the brokers and holds back the next connection for up to about 50 ms; a
//! record sent in that window waits for it, against any broker.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use serde_json::json;

use crate::cli::{Common, ProduceArgs};
use crate::payload::Payloads;
use crate::report::{Counters, Latency, Report, latency_histogram, proc_rows, rates};

/// Time allowed for the records still in flight when a timed run stops sending.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// Sends between two voluntary yields, so producers sharing a runtime thread interleave.
const YIELD_EVERY: u64 = 256;
/// Longest wait for a transaction call (init, commit).
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// What one producer did.
#[derive(Debug)]
struct Outcome {
    acked: u64,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
    /// Transactions committed (transactional runs).
    commits: u64,
}

pub async fn run(args: ProduceArgs) -> Result<Report, String> {
    if args.producers == 0 || args.partitions <= 0 || args.max_in_flight == 0 {
        return Err("--producers, --partitions and --max-in-flight must be positive".into());
    }
    args.common.security.check()?;
    if args.transactional && args.txn_records == 0 {
        return Err("--txn-records must be positive".into());
    }
    if args.record_size > 100 << 20 {
        return Err("--record-size above 100 MiB is not a useful benchmark".into());
    }
    let hard_deadline = Instant::now() + Duration::from_secs(args.common.timeout);
    ensure_topic(&args.common, &args.topic, args.partitions).await?;
    let partitions = topic_partitions(&args.common, &args.topic, Duration::from_secs(10))
        .await?
        .len();
    let partitions = i32::try_from(partitions).map_err(|_| "too many partitions")?;

    let mut producers = Vec::with_capacity(args.producers);
    for id in 0..args.producers {
        producers.push(tokio::spawn(connected_producer(id, args.clone())));
    }
    let mut ready = Vec::with_capacity(args.producers);
    for p in producers {
        ready.push(p.await.map_err(|e| format!("producer set-up: {e}"))??);
    }

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = crate::report::spawn_progress(
        "produce",
        counters.clone(),
        args.common.gateway_pid,
        stop.clone(),
    );

    let start = Instant::now();
    let send_deadline = args
        .duration
        .map(|d| (start + Duration::from_secs(d)).min(hard_deadline))
        .unwrap_or(hard_deadline);
    let mut tasks = Vec::with_capacity(args.producers);
    for (id, producer) in ready.into_iter().enumerate() {
        // An even split; the first `records % producers` producers take one more.
        let quota = args.records.map(|r| {
            let n = args.producers as u64;
            r / n + u64::from((id as u64) < r % n)
        });
        let rate = args.rate.map(|r| r as f64 / args.producers as f64);
        let args = args.clone();
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            producer_task(
                id,
                producer,
                &args,
                partitions,
                quota,
                rate,
                send_deadline,
                hard_deadline,
                &counters,
            )
            .await
        }));
    }
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(o)) => outcomes.push(o),
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(format!("producer task: {e}")),
        }
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();
    if let Some(e) = failures.first() {
        return Err(e.clone());
    }

    let mut latency = latency_histogram()?;
    let (mut acked, mut bytes, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
    let mut commits = 0u64;
    for o in &outcomes {
        commits += o.commits;
        acked += o.acked;
        bytes += o.bytes;
        errors += o.errors;
        if first_error.is_none() {
            first_error.clone_from(&o.first_error);
        }
        latency
            .add(&o.latency)
            .map_err(|e| format!("merging histograms: {e}"))?;
    }
    let lat = Latency::from_histogram(&latency);
    let (rps, mbps) = rates(acked, bytes, elapsed);

    let mut rows = vec![
        ("bootstrap".into(), args.common.bootstrap.clone()),
        ("client".into(), crate::report::client_version()),
        ("security".into(), args.common.security.describe()),
        (
            "topic".into(),
            format!("{} ({partitions} partitions)", args.topic),
        ),
        (
            "load".into(),
            format!(
                "{} producers, {} B records, acks={}, codec={}, linger.ms={}, batch.size={}{}",
                args.producers,
                args.record_size,
                args.acks.as_config(),
                args.codec.as_config(),
                args.linger_ms,
                args.batch_size,
                args.rate
                    .map(|r| format!(", rate {r}/s"))
                    .unwrap_or_default()
            ),
        ),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        ("producer mode".into(), mode(&args)),
        ("records acked".into(), acked.to_string()),
        ("errors".into(), errors.to_string()),
        ("records/s".into(), format!("{rps:.0}")),
        ("MB/s (values)".into(), format!("{mbps:.2}")),
        lat.row("latency"),
    ];
    if args.transactional {
        rows.push(("transactions committed".into(), commits.to_string()));
    }
    if let Some(e) = &first_error {
        rows.push(("first error".into(), e.clone()));
    }
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "produce",
        "bootstrap": args.common.bootstrap,
        "client": crate::report::client_version(),
        "security": args.common.security.describe(),
        "topic": args.topic,
        "partitions": partitions,
        "producers": args.producers,
        "record_size": args.record_size,
        "acks": args.acks.as_config(),
        "codec": args.codec.as_config(),
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "rate": args.rate,
        "producer_mode": mode(&args),
        "txn_records": args.transactional.then_some(args.txn_records),
        "transactions_committed": commits,
        "records_requested": args.records,
        "duration_requested_secs": args.duration,
        "elapsed_secs": elapsed.as_secs_f64(),
        "records": acked,
        "bytes": bytes,
        "errors": errors,
        "first_error": first_error,
        "records_per_sec": rps,
        "mb_per_sec": mbps,
        "latency": lat,
        "broker": measured.broker,
        "client_cpu_secs": measured.client_cpu_secs,
    });
    let complete = args.records.is_none_or(|r| acked == r);
    Ok(Report {
        title: "kafka-bench produce".into(),
        rows,
        json,
        json_path: args.common.json.clone(),
        success: errors == 0 && complete,
    })
}

/// How the producers deliver: plain, idempotent, or transactional.
fn mode(args: &ProduceArgs) -> String {
    if args.transactional {
        format!(
            "transactional, {} records per transaction",
            args.txn_records
        )
    } else if args.idempotent {
        "idempotent".into()
    } else {
        "plain".into()
    }
}

/// Producer `id`, created with the run's settings and connected: it has fetched the
/// topic's metadata, so it holds a connection to the partitions' leader.
async fn connected_producer(id: usize, args: ProduceArgs) -> Result<FutureProducer, String> {
    let mut config = args.common.client_config();
    config
        .set("client.id", format!("kafka-bench-{id}"))
        .set("acks", args.acks.as_config())
        .set("compression.type", args.codec.as_config())
        .set("linger.ms", args.linger_ms.to_string())
        .set("batch.size", args.batch_size.to_string())
        // librdkafka's own queue must hold what the in-flight bound lets through
        .set(
            "queue.buffering.max.messages",
            args.max_in_flight.max(1000).to_string(),
        )
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", "30000");
    if args.idempotent || args.transactional {
        config.set("enable.idempotence", "true");
    }
    if args.transactional {
        // One id per producer and run, so runs never fence each other.
        config.set(
            "transactional.id",
            format!("kafka-bench-{}-{id}", std::process::id()),
        );
    }
    for (k, v) in &args.common.rdkafka {
        config.set(k, v);
    }
    let producer: FutureProducer = config.create().map_err(|e| format!("producer {id}: {e}"))?;
    if args.transactional {
        let p = producer.clone();
        tokio::task::spawn_blocking(move || {
            p.init_transactions(TXN_TIMEOUT)
                .and_then(|()| p.begin_transaction())
                .map_err(|e| format!("producer {id}: init_transactions: {e}"))
        })
        .await
        .map_err(|e| format!("producer {id} set-up: {e}"))??;
    }
    let warm = producer.clone();
    tokio::task::spawn_blocking(move || {
        warm.client()
            .fetch_metadata(Some(&args.topic), Duration::from_secs(10))
            .map(|_| ())
            .map_err(|e| format!("producer {id}: metadata for {}: {e}", args.topic))
    })
    .await
    .map_err(|e| format!("producer {id} set-up: {e}"))??;
    Ok(producer)
}

#[allow(clippy::too_many_arguments)]
async fn producer_task(
    id: usize,
    producer: FutureProducer,
    args: &ProduceArgs,
    partitions: i32,
    quota: Option<u64>,
    rate: Option<f64>,
    send_deadline: Instant,
    hard_deadline: Instant,
    counters: &Counters,
) -> Result<Outcome, String> {
    let payloads = Payloads::new(args.record_size, id as u64 + 1);
    let mut latency = latency_histogram()?;
    let mut inflight = FuturesUnordered::new();
    let mut out = Outcome {
        acked: 0,
        bytes: 0,
        errors: 0,
        first_error: None,
        latency: latency_histogram()?,
        commits: 0,
    };
    let record_bytes = args.record_size as u64;
    let mut on_done = |out: &mut Outcome, (t0, res): (Instant, Result<_, _>)| {
        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        let failed = match res {
            Ok(Ok(_)) => None,
            Ok(Err((e, _))) => Some(format!("{e}")),
            Err(_) => Some("delivery report dropped".to_string()),
        };
        match failed {
            None => {
                latency.saturating_record(us.max(1));
                out.acked += 1;
                out.bytes += record_bytes;
                counters.add(1, record_bytes);
            }
            Some(e) => {
                out.errors += 1;
                counters.error();
                out.first_error.get_or_insert(e);
            }
        }
    };
    let start = Instant::now();
    let mut sent = 0u64;
    // Records sent in the open transaction (transactional runs).
    let mut in_txn = 0u64;
    // Spread producers over the partitions so that one producer per partition is the
    // natural layout when the counts match.
    let mut partition = i32::try_from(id).unwrap_or(0) % partitions;
    loop {
        let now = Instant::now();
        if now >= hard_deadline {
            let left = inflight.len() as u64;
            out.errors += left;
            out.first_error
                .get_or_insert_with(|| format!("{left} records unacknowledged at --timeout"));
            break;
        }
        let want_more = quota.is_none_or(|q| sent < q) && now < send_deadline;
        if args.transactional && inflight.is_empty() && in_txn > 0 {
            // A transaction is full (or the run is over) and every record of it is
            // acknowledged: commit it, and begin the next if more is to come.
            if in_txn >= args.txn_records || !want_more {
                let p = producer.clone();
                let next = want_more;
                let committed = tokio::task::spawn_blocking(move || {
                    p.commit_transaction(TXN_TIMEOUT)?;
                    if next {
                        p.begin_transaction()?;
                    }
                    Ok::<(), KafkaError>(())
                })
                .await
                .map_err(|e| format!("producer {id}: commit task: {e}"))?;
                if let Err(e) = committed {
                    out.errors += in_txn;
                    counters.error();
                    out.first_error
                        .get_or_insert(format!("commit_transaction: {e}"));
                    break;
                }
                out.commits += 1;
                in_txn = 0;
                continue;
            }
        }
        if !want_more && inflight.is_empty() {
            break;
        }
        let txn_full = args.transactional && in_txn >= args.txn_records;
        if want_more && !txn_full && inflight.len() < args.max_in_flight {
            if let Some(r) = rate {
                let due = start + Duration::from_secs_f64(sent as f64 / r);
                if due > now {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due.into()) => {}
                        Some(done) = inflight.next() => on_done(&mut out, done),
                    }
                    continue;
                }
            }
            let record = FutureRecord::<(), [u8]>::to(&args.topic)
                .payload(payloads.get(sent))
                .partition(partition);
            let t0 = Instant::now();
            match producer.send_result(record) {
                Ok(delivery) => {
                    inflight.push(delivery.map(move |r| (t0, r)));
                    sent += 1;
                    in_txn += 1;
                    partition = (partition + 1) % partitions;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // librdkafka's queue is full: wait for a delivery (or a moment)
                    tokio::select! {
                        Some(done) = inflight.next() => on_done(&mut out, done),
                        _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                    }
                    continue;
                }
                Err((e, _)) => {
                    // Not retryable at this level: count it and stop this producer.
                    out.errors += 1;
                    counters.error();
                    out.first_error.get_or_insert(format!("send: {e}"));
                    break;
                }
            }
            while let Some(Some(done)) = inflight.next().now_or_never() {
                on_done(&mut out, done);
            }
            if sent.is_multiple_of(YIELD_EVERY) {
                tokio::task::yield_now().await;
            }
            continue;
        }
        // Nothing more to send now: wait for a delivery, bounded.
        let limit = if want_more {
            hard_deadline
        } else {
            (Instant::now() + DRAIN_LIMIT).min(hard_deadline)
        };
        tokio::select! {
            Some(done) = inflight.next() => on_done(&mut out, done),
            _ = tokio::time::sleep_until(limit.into()) => {
                let left = inflight.len() as u64;
                out.errors += left;
                out.first_error.get_or_insert_with(|| format!("{left} records unacknowledged after the drain limit"));
                break;
            }
        }
    }
    out.latency = latency;
    Ok(out)
}

/// Creates `topic` with `partitions` partitions unless it exists. A broker that
/// refuses CreateTopics for another reason gets a warning: it may still auto-create.
pub async fn ensure_topic(common: &Common, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = common
        .client_config()
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(10)))
        .operation_timeout(Some(Duration::from_secs(10)));
    let created = tokio::time::timeout(
        Duration::from_secs(20),
        admin.create_topics([&topic], &options),
    )
    .await
    .map_err(|_| format!("CreateTopics at {}: no answer in 20 s", common.bootstrap))?;
    match created {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((name, code)) => {
                        eprintln!("kafka-bench: warning: creating topic {name}: {code}");
                    }
                }
            }
        }
        Err(e) => eprintln!("kafka-bench: warning: CreateTopics failed: {e}"),
    }
    Ok(())
}

/// The partition ids of `topic`, from Metadata, retried until the topic is there with at
/// least one partition (a fresh topic may take a moment to appear) or `limit` passes.
pub async fn topic_partitions(
    common: &Common,
    topic: &str,
    limit: Duration,
) -> Result<Vec<i32>, String> {
    let (config, bootstrap, topic) = (
        common.client_config(),
        common.bootstrap.clone(),
        topic.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = config
            .create()
            .map_err(|e| format!("metadata client: {e}"))?;
        let deadline = Instant::now() + limit;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            match client.fetch_metadata(Some(&topic), Duration::from_secs(5)) {
                Ok(md) => {
                    if let Some(t) = md.topics().iter().find(|t| t.name() == topic) {
                        if t.error().is_none() && !t.partitions().is_empty() {
                            let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
                            ids.sort_unstable();
                            return Ok(ids);
                        }
                        last = format!("topic error {:?}", t.error());
                    } else {
                        last = "topic missing from metadata".into();
                    }
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("metadata for {topic} at {bootstrap}: {last}"))
    })
    .await
    .map_err(|e| format!("metadata task: {e}"))?
}
