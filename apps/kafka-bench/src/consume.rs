//! `consume`: read a topic up to the high watermarks taken at start.
//!
//! The watermarks of every partition are read first; the run is complete when every
//! partition has been read up to its high watermark. Records at or past it (written during
//! the run) are not counted. Without `--group` the partitions are assigned round-robin to
//! the consumers (`assign`, no group protocol, nothing committed); with `--group` the
//! consumers subscribe as members of that group and the broker's group coordinator
//! spreads the partitions, so join and rebalance time is part of the measurement.
//!
//! The consumers are librdkafka `BaseConsumer`s polled on their own threads: the poll
//! loop is the whole job, so an async wrapper would only add hand-offs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

use crate::cli::{Common, ConsumeArgs};
use crate::produce::topic_partitions;
use crate::report::{Counters, Report, proc_rows, rates};

/// How long one poll call may block; the loop re-checks its deadline in between.
const POLL: Duration = Duration::from_millis(100);

/// Read progress of one partition: `[low, high)` to read, `next` the offset after the
/// highest one read so far (by any consumer).
#[derive(Debug)]
struct PartitionState {
    id: i32,
    low: i64,
    high: i64,
    next: AtomicI64,
}

impl PartitionState {
    fn done(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.high
    }
}

pub async fn run(args: ConsumeArgs) -> Result<Report, String> {
    if args.consumers == 0 {
        return Err("--consumers must be positive".into());
    }
    args.common.security.check()?;
    let deadline = Instant::now() + Duration::from_secs(args.common.timeout);
    let ids = topic_partitions(&args.common, &args.topic, Duration::from_secs(10)).await?;
    let parts = {
        let (common, topic) = (args.common.clone(), args.topic.clone());
        tokio::task::spawn_blocking(move || watermarks(&common, &topic, &ids))
            .await
            .map_err(|e| format!("watermark task: {e}"))??
    };
    let parts = Arc::new(parts);
    let expected: i64 = parts.iter().map(|p| p.high - p.low).sum();

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = crate::report::spawn_progress(
        "consume",
        counters.clone(),
        args.common.gateway_pid,
        stop.clone(),
    );
    let start = Instant::now();
    let duplicates = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for i in 0..args.consumers {
        let (args, parts, counters, duplicates) = (
            args.clone(),
            parts.clone(),
            counters.clone(),
            duplicates.clone(),
        );
        threads.push(tokio::task::spawn_blocking(move || {
            consumer_loop(i, &args, &parts, &counters, &duplicates, deadline)
        }));
    }
    let mut failures = Vec::new();
    for t in threads {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(format!("consumer thread: {e}")),
        }
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();
    if let Some(e) = failures.first() {
        return Err(e.clone());
    }

    let records = counters.records.load(Ordering::Relaxed);
    let bytes = counters.bytes.load(Ordering::Relaxed);
    let duplicates = duplicates.load(Ordering::Relaxed);
    let unique: i64 = parts
        .iter()
        .map(|p| p.next.load(Ordering::Relaxed).min(p.high) - p.low)
        .sum();
    let complete = parts.iter().all(PartitionState::done);
    let (rps, mbps) = rates(records, bytes, elapsed);
    let mut rows = vec![
        ("bootstrap".into(), args.common.bootstrap.clone()),
        ("client".into(), crate::report::client_version()),
        ("security".into(), args.common.security.describe()),
        (
            "topic".into(),
            format!("{} ({} partitions)", args.topic, parts.len()),
        ),
        (
            "mode".into(),
            match &args.group {
                Some(g) => format!("{} consumers in group {g}", args.consumers),
                None => format!("{} consumers, assigned partitions", args.consumers),
            } + &format!(", {}", args.isolation.as_config()),
        ),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        (
            "records read".into(),
            format!("{records} of {expected} expected"),
        ),
        ("records read twice".into(), duplicates.to_string()),
        ("complete".into(), complete.to_string()),
        ("records/s".into(), format!("{rps:.0}")),
        ("MB/s (keys+values)".into(), format!("{mbps:.2}")),
    ];
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "consume",
        "bootstrap": args.common.bootstrap,
        "client": crate::report::client_version(),
        "security": args.common.security.describe(),
        "topic": args.topic,
        "partitions": parts.len(),
        "consumers": args.consumers,
        "group": args.group,
        "isolation": args.isolation.as_config(),
        "expected": expected,
        "records": records,
        "unique_records": unique,
        "duplicates": duplicates,
        "bytes": bytes,
        "complete": complete,
        "elapsed_secs": elapsed.as_secs_f64(),
        "records_per_sec": rps,
        "mb_per_sec": mbps,
        "watermarks": parts.iter().map(|p| json!({"partition": p.id, "low": p.low, "high": p.high})).collect::<Vec<_>>(),
        "broker": measured.broker,
        "client_cpu_secs": measured.client_cpu_secs,
    });
    Ok(Report {
        title: "kafka-bench consume".into(),
        rows,
        json,
        json_path: args.common.json.clone(),
        success: complete,
    })
}

fn watermarks(common: &Common, topic: &str, ids: &[i32]) -> Result<Vec<PartitionState>, String> {
    let client: BaseConsumer = common
        .client_config()
        .create()
        .map_err(|e| format!("watermark client: {e}"))?;
    ids.iter()
        .map(|&id| {
            let (low, high) = client
                .fetch_watermarks(topic, id, Duration::from_secs(10))
                .map_err(|e| format!("watermarks of {topic}/{id}: {e}"))?;
            Ok(PartitionState {
                id,
                low,
                high,
                next: AtomicI64::new(low),
            })
        })
        .collect()
}

fn consumer_loop(
    index: usize,
    args: &ConsumeArgs,
    parts: &[PartitionState],
    counters: &Counters,
    duplicates: &AtomicU64,
    deadline: Instant,
) -> Result<(), String> {
    let mut config = args.common.client_config();
    config
        .set("client.id", format!("kafka-bench-consumer-{index}"))
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", args.isolation.as_config())
        .set("enable.partition.eof", "false");
    match &args.group {
        Some(g) => {
            config
                .set("group.id", g)
                .set("enable.auto.commit", "true")
                .set("session.timeout.ms", "10000");
        }
        None => {
            // librdkafka wants a group id for any consumer; nothing is joined or
            // committed in assign mode, so a throwaway one is fine.
            config
                .set(
                    "group.id",
                    format!("kafka-bench-assign-{}", std::process::id()),
                )
                .set("enable.auto.commit", "false");
        }
    }
    for (k, v) in &args.common.rdkafka {
        config.set(k, v);
    }
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| format!("consumer {index}: {e}"))?;
    let mine: Vec<&PartitionState> = match &args.group {
        Some(_) => {
            consumer
                .subscribe(&[&args.topic])
                .map_err(|e| format!("subscribe: {e}"))?;
            parts.iter().collect()
        }
        None => {
            let mine: Vec<&PartitionState> = parts
                .iter()
                .enumerate()
                .filter(|(i, p)| i % args.consumers == index && p.high > p.low)
                .map(|(_, p)| p)
                .collect();
            if mine.is_empty() {
                return Ok(());
            }
            let mut tpl = TopicPartitionList::new();
            for p in &mine {
                tpl.add_partition_offset(&args.topic, p.id, Offset::Offset(p.low))
                    .map_err(|e| format!("assignment: {e}"))?;
            }
            consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
            mine
        }
    };
    // Group members stop when every partition is done, whoever read it; assigned
    // consumers when their own partitions are.
    while !mine.iter().all(|p| p.done()) {
        if Instant::now() >= deadline {
            return Ok(());
        }
        let Some(msg) = consumer.poll(POLL) else {
            // Nothing to read: transaction markers and (read_committed) aborted records
            // are never delivered, so a partition whose last offsets are such is done
            // when the consumer's position has passed them.
            if let Ok(positions) = consumer.position() {
                for e in positions.elements() {
                    if let (Offset::Offset(at), Some(p)) =
                        (e.offset(), parts.iter().find(|p| p.id == e.partition()))
                    {
                        p.next.fetch_max(at.min(p.high), Ordering::Relaxed);
                    }
                }
            }
            continue;
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                counters.error();
                eprintln!("kafka-bench: consumer {index}: {e}");
                continue;
            }
        };
        let Some(p) = parts.iter().find(|p| p.id == msg.partition()) else {
            continue;
        };
        let offset = msg.offset();
        if offset >= p.high {
            continue;
        }
        let before = p.next.fetch_max(offset + 1, Ordering::Relaxed);
        if before > offset {
            duplicates.fetch_add(1, Ordering::Relaxed);
        }
        let size = msg.payload_len() + msg.key().map_or(0, <[u8]>::len);
        counters.add(1, size as u64);
    }
    if args.group.is_some() {
        // Leave the group now rather than at session timeout, so the next run starts
        // clean; bounded by librdkafka's own close timeout.
        consumer.unsubscribe();
    }
    Ok(())
}
