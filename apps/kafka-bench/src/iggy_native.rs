//! `iggy-produce` / `iggy-consume`: the same work as `produce` / `consume`, through the
//! Iggy SDK straight to an Iggy server, as the native baseline the gateway is compared to.
//!
//! Same payloads (`payload::Payloads`), same record size; `--batch-size` bytes become
//! `batch_size / record_size` messages per `send_messages` call, the closest match to a
//! librdkafka batch. The SDK client answers one request at a time, so each producer has
//! one batch in flight (librdkafka pipelines several); use more producers for more
//! concurrency. Latency is per batch, weighted by the records in it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use iggy::prelude::{
    AutoLogin, Client, Consumer, Credentials, Identifier, IggyClient, IggyMessage, MessageClient,
    Partitioning, PollingStrategy, StreamClient, TopicClient, TopicCreateOptions,
};
use serde_json::json;

use crate::payload::Payloads;
use crate::report::{Counters, Latency, Report, latency_histogram, proc_rows, rates};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Args, Clone)]
pub struct IggyCommon {
    /// Iggy server TCP address, HOST:PORT.
    #[arg(long)]
    pub iggy_addr: String,
    #[arg(long, default_value = "iggy")]
    pub username: String,
    #[arg(long, default_value = "iggy")]
    pub password: String,
    /// Stream holding the topic (created when missing).
    #[arg(long, default_value = "kafka-bench")]
    pub stream: String,
    #[arg(long)]
    pub topic: String,
    /// Iggy server process to sample in /proc.
    #[arg(long)]
    pub gateway_pid: Option<u32>,
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Hard limit on the whole run in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

#[derive(Debug, Args, Clone)]
#[command(group(clap::ArgGroup::new("amount").required(true).args(["records", "duration"])))]
pub struct IggyProduceArgs {
    #[command(flatten)]
    pub common: IggyCommon,
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    #[arg(long)]
    pub records: Option<u64>,
    #[arg(long)]
    pub duration: Option<u64>,
    /// Bytes per `send_messages` call (at least one message).
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: u64,
    /// Total target rate in records per second over all producers (default: as fast as
    /// the server acknowledges). Each send starts when its first record is due, so with
    /// `--batch-size` at most one record's size every send carries one record.
    #[arg(long)]
    pub rate: Option<u64>,
}

#[derive(Debug, Args, Clone)]
pub struct IggyConsumeArgs {
    #[command(flatten)]
    pub common: IggyCommon,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Messages per poll.
    #[arg(long, default_value_t = 1000)]
    pub poll_count: u32,
}

async fn timed<T>(
    what: &str,
    f: impl Future<Output = Result<T, iggy::prelude::IggyError>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer in {CALL_TIMEOUT:?}")),
    }
}

async fn connect(c: &IggyCommon) -> Result<IggyClient, String> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(c.iggy_addr.clone())
        .with_auto_sign_in(AutoLogin::Enabled(Credentials::UsernamePassword(
            c.username.clone(),
            c.password.clone().into(),
        )))
        // bounded: the SDK's default would retry forever
        .with_reconnection_max_retries(Some(3))
        .build()
        .map_err(|e| format!("iggy client: {e}"))?;
    timed("connect", client.connect()).await?;
    Ok(client)
}

fn ids(c: &IggyCommon) -> Result<(Identifier, Identifier), String> {
    Ok((
        Identifier::named(&c.stream).map_err(|e| format!("stream name: {e}"))?,
        Identifier::named(&c.topic).map_err(|e| format!("topic name: {e}"))?,
    ))
}

/// Partition ids of the topic, creating stream and topic when missing.
async fn ensure_topic(
    client: &IggyClient,
    c: &IggyCommon,
    partitions: u32,
) -> Result<Vec<u32>, String> {
    let (s, t) = ids(c)?;
    if timed("get stream", client.get_stream(&s)).await?.is_none() {
        timed("create stream", client.create_stream(&c.stream)).await?;
    }
    if timed("get topic", client.get_topic(&s, &t))
        .await?
        .is_none()
    {
        let options = TopicCreateOptions {
            partitions_count: Some(partitions),
            ..TopicCreateOptions::default()
        };
        timed("create topic", client.create_topic(&s, &c.topic, &options)).await?;
    }
    let details = timed("get topic", client.get_topic(&s, &t))
        .await?
        .ok_or("topic vanished after creation")?;
    Ok(details.partitions.iter().map(|p| p.id).collect())
}

pub async fn produce(args: IggyProduceArgs) -> Result<Report, String> {
    if args.producers == 0 || args.partitions == 0 || args.record_size == 0 {
        return Err("--producers, --partitions and --record-size must be positive".into());
    }
    let hard_deadline = Instant::now() + Duration::from_secs(args.common.timeout);
    let admin = connect(&args.common).await?;
    let partitions = Arc::new(ensure_topic(&admin, &args.common, args.partitions).await?);
    if partitions.is_empty() {
        return Err("the topic has no partitions".into());
    }
    let per_batch = usize::try_from(args.batch_size)
        .unwrap_or(usize::MAX)
        .checked_div(args.record_size)
        .unwrap_or(1)
        .max(1);

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = crate::report::spawn_progress(
        "iggy-produce",
        counters.clone(),
        args.common.gateway_pid,
        stop.clone(),
    );
    let start = Instant::now();
    let send_deadline = args
        .duration
        .map(|d| (start + Duration::from_secs(d)).min(hard_deadline))
        .unwrap_or(hard_deadline);
    let mut tasks = Vec::new();
    for id in 0..args.producers {
        let quota = args.records.map(|r| {
            let n = args.producers as u64;
            r / n + u64::from((id as u64) < r % n)
        });
        let (args, counters, partitions) = (args.clone(), counters.clone(), partitions.clone());
        tasks.push(tokio::spawn(async move {
            let client = connect(&args.common).await?;
            let (s, t) = ids(&args.common)?;
            let payloads = Payloads::new(args.record_size, id as u64 + 1);
            let mut hist = latency_histogram()?;
            let (mut sent, mut errors, mut first_error) = (0u64, 0u64, None::<String>);
            let mut next_partition = id % partitions.len();
            let rate = args.rate.map(|r| r as f64 / args.producers as f64);
            while quota.is_none_or(|q| sent < q) && Instant::now() < send_deadline {
                let n = quota.map_or(per_batch as u64, |q| (q - sent).min(per_batch as u64));
                let mut batch = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let m = IggyMessage::builder()
                        .payload(Bytes::copy_from_slice(payloads.get(sent + i)))
                        .build()
                        .map_err(|e| format!("message: {e}"))?;
                    batch.push(m);
                }
                if let Some(r) = rate {
                    let due = start + Duration::from_secs_f64(sent as f64 / r);
                    if due >= send_deadline {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                }
                let p = Partitioning::partition_id(partitions[next_partition]);
                next_partition = (next_partition + 1) % partitions.len();
                let t0 = Instant::now();
                match timed("send", client.send_messages(&s, &t, &p, &mut batch)).await {
                    Ok(_) => {
                        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                        let _ = hist.record_n(us.max(1), n);
                        counters.add(n, n * args.record_size as u64);
                    }
                    Err(e) => {
                        errors += 1;
                        counters.error();
                        first_error.get_or_insert(e);
                        // A failed call counts once and stops this producer: retrying
                        // against a broken server would only measure the failure.
                        break;
                    }
                }
                sent += n;
            }
            Ok::<_, String>((sent, errors, first_error, hist))
        }));
    }
    let mut hist = latency_histogram()?;
    let (mut acked, mut errors, mut first_error) = (0u64, 0u64, None);
    for t in tasks {
        let (sent, e, fe, h) = t.await.map_err(|e| format!("producer task: {e}"))??;
        errors += e;
        acked += sent;
        if first_error.is_none() {
            first_error = fe;
        }
        hist.add(&h)
            .map_err(|e| format!("merging histograms: {e}"))?;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();
    let bytes = acked * args.record_size as u64;
    let (rps, mbps) = rates(acked, bytes, elapsed);
    let lat = Latency::from_histogram(&hist);
    let mut rows = vec![
        ("iggy".into(), args.common.iggy_addr.clone()),
        (
            "topic".into(),
            format!(
                "{}/{} ({} partitions)",
                args.common.stream,
                args.common.topic,
                partitions.len()
            ),
        ),
        (
            "load".into(),
            format!(
                "{} producers, {} B records, {per_batch} per send{}",
                args.producers,
                args.record_size,
                args.rate
                    .map(|r| format!(", rate {r}/s"))
                    .unwrap_or_default()
            ),
        ),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        ("records acked".into(), acked.to_string()),
        ("errors".into(), errors.to_string()),
        ("records/s".into(), format!("{rps:.0}")),
        ("MB/s (values)".into(), format!("{mbps:.2}")),
        lat.row("batch latency"),
    ];
    if let Some(e) = &first_error {
        rows.push(("first error".into(), e.clone()));
    }
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "iggy-produce",
        "iggy_addr": args.common.iggy_addr,
        "stream": args.common.stream,
        "topic": args.common.topic,
        "partitions": partitions.len(),
        "producers": args.producers,
        "record_size": args.record_size,
        "messages_per_send": per_batch,
        "rate": args.rate,
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
    Ok(Report {
        title: "kafka-bench iggy-produce".into(),
        rows,
        json,
        json_path: args.common.json.clone(),
        success: errors == 0 && args.records.is_none_or(|r| r == acked),
    })
}

pub async fn consume(args: IggyConsumeArgs) -> Result<Report, String> {
    if args.consumers == 0 {
        return Err("--consumers must be positive".into());
    }
    let deadline = Instant::now() + Duration::from_secs(args.common.timeout);
    let admin = connect(&args.common).await?;
    let (s, t) = ids(&args.common)?;
    let details = timed("get topic", admin.get_topic(&s, &t))
        .await?
        .ok_or_else(|| format!("no topic {}/{}", args.common.stream, args.common.topic))?;
    // (partition, messages to read) as of now: the end the run reads up to.
    let ends: Vec<(u32, u64)> = details
        .partitions
        .iter()
        .map(|p| (p.id, p.messages_count))
        .collect();
    let expected: u64 = ends.iter().map(|e| e.1).sum();
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = crate::report::spawn_progress(
        "iggy-consume",
        counters.clone(),
        args.common.gateway_pid,
        stop.clone(),
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.consumers {
        let mine: Vec<(u32, u64)> = ends
            .iter()
            .enumerate()
            .filter(|(k, _)| k % args.consumers == i)
            .map(|(_, e)| *e)
            .collect();
        let (args, counters) = (args.clone(), counters.clone());
        tasks.push(tokio::spawn(async move {
            let client = connect(&args.common).await?;
            let (s, t) = ids(&args.common)?;
            let consumer = Consumer::new(Identifier::numeric(1).map_err(|e| e.to_string())?);
            for (partition, count) in mine {
                let mut offset = 0u64;
                while offset < count && Instant::now() < deadline {
                    let polled = timed(
                        "poll",
                        client.poll_messages(
                            &s,
                            &t,
                            Some(partition),
                            &consumer,
                            &PollingStrategy::offset(offset),
                            args.poll_count,
                            false,
                        ),
                    )
                    .await?;
                    let Some(last) = polled.messages.last() else {
                        break;
                    };
                    let next = last.header.offset + 1;
                    let (mut n, mut b) = (0u64, 0u64);
                    for m in polled.messages.iter().filter(|m| m.header.offset < count) {
                        n += 1;
                        b += m.payload.len() as u64;
                    }
                    counters.add(n, b);
                    offset = next;
                }
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("consumer task: {e}"))??;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();
    let records = counters.records.load(Ordering::Relaxed);
    let bytes = counters.bytes.load(Ordering::Relaxed);
    let (rps, mbps) = rates(records, bytes, elapsed);
    let mut rows = vec![
        ("iggy".into(), args.common.iggy_addr.clone()),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        (
            "records read".into(),
            format!("{records} of {expected} expected"),
        ),
        ("records/s".into(), format!("{rps:.0}")),
        ("MB/s (payloads)".into(), format!("{mbps:.2}")),
    ];
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "iggy-consume",
        "iggy_addr": args.common.iggy_addr,
        "stream": args.common.stream,
        "topic": args.common.topic,
        "consumers": args.consumers,
        "expected": expected,
        "records": records,
        "bytes": bytes,
        "complete": records == expected,
        "elapsed_secs": elapsed.as_secs_f64(),
        "records_per_sec": rps,
        "mb_per_sec": mbps,
        "broker": measured.broker,
        "client_cpu_secs": measured.client_cpu_secs,
    });
    Ok(Report {
        title: "kafka-bench iggy-consume".into(),
        rows,
        json,
        json_path: args.common.json.clone(),
        success: records == expected,
    })
}
