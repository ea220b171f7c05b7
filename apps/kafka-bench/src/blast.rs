//! `blast`: a producer with next to no CPU of its own.
//!
//! librdkafka spends several CPU-seconds per GB producing (more with many producers, far
//! more with small records), so on a machine with few cores the client, not the broker,
//! often sets the pace of a `produce` run. `blast` encodes one Produce request per
//! partition once (a v2 record batch of `--batch-size` bytes of records, its CRC-32C,
//! Produce v3 with no transactional id) and then only writes those bytes, with a fresh
//! correlation id each time, over `--connections` raw TCP connections, up to
//! `--max-in-flight` requests unanswered on each (librdkafka's default is 5). A reader
//! per connection takes the answers in order and checks each: its correlation id, and
//! the partition's error code. What the client costs is a socket write per request and
//! a small read per answer, about what `relay` costs to move the same bytes.
//!
//! The same records are written over and over (same values, same timestamps), so the
//! topic's content says nothing; throughput, the broker's CPU (`--gateway-pid`) and the
//! answer latency do. The encoding is this tool's own (not the gateway's codec): a
//! mistake in either shows as errors, not as agreement.
//!
//! Plaintext only, no SASL: it measures the data path. It needs the cargo feature
//! `librdkafka` for creating the topic and reading its partitions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

use crate::auth::Reader;
use crate::cli::{Acks, BlastArgs, SecurityProtocol};
use crate::payload::Payloads;
use crate::produce::{ensure_topic, topic_partitions};
use crate::report::{
    Counters, Latency, Report, latency_histogram, proc_rows, rates, spawn_progress,
};

/// Longest wait for one answer.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);
/// Largest answer the reader accepts; a Produce v3 answer for one partition is ~50 B.
const MAX_ANSWER: usize = 1 << 20;
/// The broker's wait for `acks=all`, in the request.
const REQUEST_TIMEOUT_MS: i32 = 30_000;
const CLIENT_ID: &[u8] = b"kafka-bench-blast";
const PRODUCE_KEY: i16 = 0;
const PRODUCE_VERSION: i16 = 3;
/// Where the correlation id sits in a request: after its size, API key and version.
const CORRELATION_AT: usize = 8;

/// What one connection did.
#[derive(Debug)]
struct Outcome {
    acked: u64,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
}

pub async fn run(args: BlastArgs) -> Result<Report, String> {
    if args.connections == 0 || args.partitions <= 0 || args.max_in_flight == 0 {
        return Err("--connections, --partitions and --max-in-flight must be positive".into());
    }
    if args.record_size > 16 << 20 || args.batch_size > 64 << 20 {
        return Err("--record-size above 16 MiB or --batch-size above 64 MiB".into());
    }
    if args.acks == Acks::Zero {
        return Err("--acks 0 gets no answers to pace the requests on".into());
    }
    if args.common.security.security_protocol != SecurityProtocol::Plaintext {
        return Err("blast speaks plaintext only".into());
    }
    ensure_topic(&args.common, &args.topic, args.partitions).await?;
    let partitions = topic_partitions(&args.common, &args.topic, Duration::from_secs(10)).await?;
    let payloads = Payloads::new(args.record_size, 7);
    let records = records_per_batch(args.record_size, args.batch_size);
    let acks: i16 = if args.acks == Acks::All { -1 } else { 1 };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    let batch = record_batch(&payloads, records, now_ms);
    let requests: Arc<Vec<(i32, Vec<u8>)>> = Arc::new(
        partitions
            .iter()
            .map(|&p| produce_request(&args.topic, p, acks, &batch))
            .collect::<Result<_, _>>()?,
    );

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(
        "blast",
        counters.clone(),
        args.common.gateway_pid,
        stop.clone(),
    );
    let start = Instant::now();
    let send_until = start + Duration::from_secs(args.duration);
    let hard_deadline = start + Duration::from_secs(args.common.timeout);
    let mut tasks = Vec::with_capacity(args.connections);
    for id in 0..args.connections {
        let (requests, counters) = (requests.clone(), counters.clone());
        let (bootstrap, in_flight) = (args.common.bootstrap.clone(), args.max_in_flight);
        let idempotent = args.idempotent;
        let record_bytes = u64::try_from(args.record_size).unwrap_or(u64::MAX);
        tasks.push(tokio::spawn(async move {
            let run = connection(
                id,
                &bootstrap,
                &requests,
                idempotent,
                in_flight,
                records,
                record_bytes,
                send_until,
                &counters,
            );
            tokio::time::timeout_at(hard_deadline.into(), run)
                .await
                .map_err(|_| format!("connection {id}: --timeout reached"))?
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.map_err(|e| format!("connection task: {e}"))??);
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let measured = progress.await.unwrap_or_default();

    let mut latency = latency_histogram()?;
    let (mut acked, mut sent, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
    for o in &outcomes {
        acked += o.acked;
        sent += o.requests;
        errors += o.errors;
        if first_error.is_none() {
            first_error.clone_from(&o.first_error);
        }
        latency
            .add(&o.latency)
            .map_err(|e| format!("merging histograms: {e}"))?;
    }
    let bytes = acked.saturating_mul(u64::try_from(args.record_size).unwrap_or(0));
    let lat = Latency::from_histogram(&latency);
    let (rps, mbps) = rates(acked, bytes, elapsed);
    let mut rows = vec![
        ("bootstrap".into(), args.common.bootstrap.clone()),
        ("client".into(), "kafka-bench blast (Produce v3)".into()),
        (
            "topic".into(),
            format!("{} ({} partitions)", args.topic, partitions.len()),
        ),
        (
            "load".into(),
            format!(
                "{} connections, {} B records, {records} records a request, {} in flight \
                 each, acks={}{}",
                args.connections,
                args.record_size,
                args.max_in_flight,
                args.acks.as_config(),
                if args.idempotent { ", idempotent" } else { "" }
            ),
        ),
        ("elapsed".into(), format!("{:.2} s", elapsed.as_secs_f64())),
        ("requests answered".into(), sent.to_string()),
        ("records acked".into(), acked.to_string()),
        ("errors".into(), errors.to_string()),
        ("records/s".into(), format!("{rps:.0}")),
        ("MB/s (values)".into(), format!("{mbps:.2}")),
        lat.row("answer latency"),
    ];
    if let Some(e) = &first_error {
        rows.push(("first error".into(), e.clone()));
    }
    proc_rows(&mut rows, &measured);
    let json = json!({
        "mode": "blast",
        "bootstrap": args.common.bootstrap,
        "client": "kafka-bench blast",
        "topic": args.topic,
        "partitions": partitions.len(),
        "producers": args.connections,
        "record_size": args.record_size,
        "records_per_request": records,
        "max_in_flight": args.max_in_flight,
        "acks": args.acks.as_config(),
        "idempotent": args.idempotent,
        "duration_requested_secs": args.duration,
        "elapsed_secs": elapsed.as_secs_f64(),
        "requests": sent,
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
        title: "kafka-bench blast".into(),
        rows,
        json,
        json_path: args.common.json.clone(),
        success: errors == 0 && acked > 0,
    })
}

/// Records of `record_size` that fit in about `batch_size` bytes of batch, at least one.
fn records_per_batch(record_size: usize, batch_size: usize) -> usize {
    // A record's own bytes beside its value: length, attributes, deltas, key and value
    // lengths, header count.
    let per = record_size.saturating_add(16);
    (batch_size.saturating_sub(61) / per).max(1)
}

/// One connection: writes the partitions' requests in turn while `send_until` has not
/// passed, at most `in_flight` unanswered, and reads the answers as they come.
#[allow(clippy::too_many_arguments)]
async fn connection(
    id: usize,
    bootstrap: &str,
    requests: &[(i32, Vec<u8>)],
    idempotent: bool,
    in_flight: usize,
    records: usize,
    record_bytes: u64,
    send_until: Instant,
    counters: &Counters,
) -> Result<Outcome, String> {
    let stream = TcpStream::connect(bootstrap)
        .await
        .map_err(|e| format!("connection {id}: {bootstrap}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let mut stream = stream;
    let producer = if idempotent {
        Some(
            init_producer_id(&mut stream)
                .await
                .map_err(|e| format!("connection {id}: InitProducerId: {e}"))?,
        )
    } else {
        None
    };
    let (mut rd, mut wr) = stream.into_split();
    let slots = Semaphore::new(in_flight);
    // What was sent, in order; at most `in_flight` entries wait, the semaphore's bound.
    let (sent_tx, mut sent_rx) = mpsc::unbounded_channel::<(i32, i32, Instant)>();
    let records_u64 = u64::try_from(records).unwrap_or(u64::MAX);

    let writer = async {
        let mut requests: Vec<(i32, Vec<u8>)> = requests.to_vec();
        let mut correlation: i32 = 0;
        // Next sequence per partition, for an idempotent producer.
        let mut sequences = vec![0i32; requests.len()];
        let n = requests.len().max(1);
        let mut next = id % n;
        while Instant::now() < send_until {
            let permit = slots
                .acquire()
                .await
                .map_err(|_| format!("connection {id}: closed"))?;
            permit.forget();
            let (partition, request) = &mut requests[next];
            if let Some((producer_id, epoch)) = producer {
                let sequence = &mut sequences[next];
                stamp(request, producer_id, epoch, *sequence);
                *sequence = sequence.wrapping_add(i32::try_from(records).unwrap_or(i32::MAX));
            }
            next = (next + 1) % n;
            correlation = correlation.wrapping_add(1);
            request[CORRELATION_AT..CORRELATION_AT + 4].copy_from_slice(&correlation.to_be_bytes());
            if sent_tx
                .send((correlation, *partition, Instant::now()))
                .is_err()
            {
                return Err(format!("connection {id}: reader gone"));
            }
            wr.write_all(request)
                .await
                .map_err(|e| format!("connection {id}: write: {e}"))?;
        }
        // The reader ends once it has the answers to what was sent.
        drop(sent_tx);
        Ok::<_, String>(wr)
    };
    let read_all = async {
        let mut out = Outcome {
            acked: 0,
            requests: 0,
            errors: 0,
            first_error: None,
            latency: latency_histogram()?,
        };
        let mut buf = Vec::new();
        while let Some((correlation, partition, sent_at)) = sent_rx.recv().await {
            match tokio::time::timeout(ANSWER_LIMIT, read_answer(&mut rd, &mut buf)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("connection {id}: {e}")),
                Err(_) => {
                    return Err(format!(
                        "connection {id}: no answer to request {correlation} in {ANSWER_LIMIT:?}"
                    ));
                }
            }
            out.requests += 1;
            let waited = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
            let _ = out.latency.record(waited.max(1));
            match check_answer(&buf, correlation, partition) {
                Ok(()) => {
                    out.acked += records_u64;
                    counters.add(records_u64, records_u64.saturating_mul(record_bytes));
                }
                Err(e) => {
                    out.errors += 1;
                    counters.error();
                    if out.first_error.is_none() {
                        out.first_error = Some(e);
                    }
                }
            }
            slots.add_permits(1);
        }
        Ok::<_, String>(out)
    };
    let reader = async {
        let read = read_all.await;
        // A writer waiting for a slot the reader will not give back stops.
        slots.close();
        read
    };
    let (written, read) = tokio::join!(writer, reader);
    let out = read?;
    drop(written?);
    Ok(out)
}

/// Where the record batch starts in a request: after the size, the header (key,
/// version, correlation id, client id), transactional id, acks, timeout, topic count,
/// topic name, partition count, partition index and records length.
fn batch_at(request: &[u8]) -> Option<usize> {
    let client = 14 + CLIENT_ID.len();
    let name_len = usize::from(u16::from_be_bytes([
        *request.get(client + 12)?,
        *request.get(client + 13)?,
    ]));
    Some(client + 14 + name_len + 12)
}

/// Writes `producer_id`, `epoch` and `sequence` into the request's batch and its CRC.
fn stamp(request: &mut [u8], producer_id: i64, epoch: i16, sequence: i32) {
    let Some(at) = batch_at(request) else { return };
    let Some(batch) = request.get_mut(at..) else {
        return;
    };
    if batch.len() < 61 {
        return;
    }
    batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// InitProducerId v0 with no transactional id: the producer id and epoch to write with.
async fn init_producer_id(stream: &mut TcpStream) -> Result<(i64, i16), String> {
    let client_len = i16::try_from(CLIENT_ID.len()).unwrap_or(0);
    let mut r = Vec::new();
    r.extend_from_slice(&0i32.to_be_bytes());
    r.extend_from_slice(&22i16.to_be_bytes()); // InitProducerId
    r.extend_from_slice(&0i16.to_be_bytes()); // v0
    r.extend_from_slice(&(-7i32).to_be_bytes()); // correlation id
    r.extend_from_slice(&client_len.to_be_bytes());
    r.extend_from_slice(CLIENT_ID);
    r.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
    r.extend_from_slice(&60_000i32.to_be_bytes()); // transaction timeout
    let size = i32::try_from(r.len() - 4).unwrap_or(0);
    r[..4].copy_from_slice(&size.to_be_bytes());
    stream.write_all(&r).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    tokio::time::timeout(ANSWER_LIMIT, read_answer(stream, &mut buf))
        .await
        .map_err(|_| "no answer".to_string())??;
    let mut a = Reader(&buf);
    if a.i32()? != -7 {
        return Err("answer to another request".into());
    }
    let _throttle = a.i32()?;
    let code = a.i16()?;
    if code != 0 {
        return Err(format!("error code {code}"));
    }
    let producer_id = a.i64()?;
    Ok((producer_id, a.i16()?))
}

/// Reads one size-prefixed answer into `buf`.
async fn read_answer<R: AsyncReadExt + Unpin>(rd: &mut R, buf: &mut Vec<u8>) -> Result<(), String> {
    let mut size = [0u8; 4];
    rd.read_exact(&mut size)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let size = usize::try_from(i32::from_be_bytes(size)).map_err(|_| "negative answer size")?;
    if size > MAX_ANSWER {
        return Err(format!("answer of {size} bytes"));
    }
    buf.resize(size, 0);
    rd.read_exact(buf).await.map_err(|e| format!("read: {e}"))?;
    Ok(())
}

/// Checks a Produce v3 answer: `correlation`, one topic with `partition`, error code 0.
fn check_answer(answer: &[u8], correlation: i32, partition: i32) -> Result<(), String> {
    let mut r = Reader(answer);
    let got = r.i32()?;
    if got != correlation {
        return Err(format!(
            "answer for correlation id {got}, expected {correlation}"
        ));
    }
    if r.i32()? != 1 {
        return Err("answer without exactly one topic".into());
    }
    let name = usize::try_from(r.i16()?).map_err(|_| "null topic name")?;
    r.take(name)?;
    if r.i32()? != 1 {
        return Err("answer without exactly one partition".into());
    }
    let index = r.i32()?;
    let code = r.i16()?;
    if index != partition {
        return Err(format!(
            "answer for partition {index}, expected {partition}"
        ));
    }
    if code != 0 {
        return Err(format!("partition {partition}: error code {code}"));
    }
    Ok(())
}

/// Zigzag varint of `v`, as record fields are written.
fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A v2 record batch of `count` records (values from `payloads`, no keys, no headers)
/// at base offset 0, stamped `timestamp_ms`, its CRC-32C over attributes to the end.
fn record_batch(payloads: &Payloads, count: usize, timestamp_ms: i64) -> Vec<u8> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    for i in 0..count {
        record.clear();
        record.push(0); // attributes
        put_varint(&mut record, 0); // timestamp delta
        put_varint(&mut record, i64::try_from(i).unwrap_or(i64::MAX)); // offset delta
        put_varint(&mut record, -1); // no key
        let value = payloads.get(i as u64);
        put_varint(&mut record, i64::try_from(value.len()).unwrap_or(0));
        record.extend_from_slice(value);
        put_varint(&mut record, 0); // headers
        put_varint(&mut records, i64::try_from(record.len()).unwrap_or(0));
        records.extend_from_slice(&record);
    }
    let count = i32::try_from(count).unwrap_or(i32::MAX);
    let mut tail = Vec::with_capacity(records.len() + 40);
    tail.extend_from_slice(&0i16.to_be_bytes()); // attributes
    tail.extend_from_slice(&(count - 1).to_be_bytes()); // last offset delta
    tail.extend_from_slice(&timestamp_ms.to_be_bytes()); // base timestamp
    tail.extend_from_slice(&timestamp_ms.to_be_bytes()); // max timestamp
    tail.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    tail.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    tail.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    tail.extend_from_slice(&count.to_be_bytes());
    tail.extend_from_slice(&records);
    let crc = crc32c::crc32c(&tail);
    let mut batch = Vec::with_capacity(tail.len() + 21);
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
    // Length from the leader epoch on: epoch 4, magic 1, CRC 4, then the rest.
    let length = i32::try_from(tail.len() + 9).unwrap_or(i32::MAX);
    batch.extend_from_slice(&length.to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&crc.to_be_bytes());
    batch.extend_from_slice(&tail);
    batch
}

/// A whole Produce v3 request (size prefix included) of `batch` to `topic`/`partition`,
/// correlation id 0 (set before each send).
fn produce_request(
    topic: &str,
    partition: i32,
    acks: i16,
    batch: &[u8],
) -> Result<(i32, Vec<u8>), String> {
    let name_len = i16::try_from(topic.len()).map_err(|_| "topic name too long")?;
    let batch_len = i32::try_from(batch.len()).map_err(|_| "batch too large")?;
    let client_len = i16::try_from(CLIENT_ID.len()).unwrap_or(0);
    let mut r = Vec::with_capacity(batch.len() + topic.len() + 64);
    r.extend_from_slice(&0i32.to_be_bytes()); // size, set below
    r.extend_from_slice(&PRODUCE_KEY.to_be_bytes());
    r.extend_from_slice(&PRODUCE_VERSION.to_be_bytes());
    r.extend_from_slice(&0i32.to_be_bytes()); // correlation id
    r.extend_from_slice(&client_len.to_be_bytes());
    r.extend_from_slice(CLIENT_ID);
    r.extend_from_slice(&(-1i16).to_be_bytes()); // no transactional id
    r.extend_from_slice(&acks.to_be_bytes());
    r.extend_from_slice(&REQUEST_TIMEOUT_MS.to_be_bytes());
    r.extend_from_slice(&1i32.to_be_bytes()); // one topic
    r.extend_from_slice(&name_len.to_be_bytes());
    r.extend_from_slice(topic.as_bytes());
    r.extend_from_slice(&1i32.to_be_bytes()); // one partition
    r.extend_from_slice(&partition.to_be_bytes());
    r.extend_from_slice(&batch_len.to_be_bytes());
    r.extend_from_slice(batch);
    let size = i32::try_from(r.len() - 4).map_err(|_| "request too large")?;
    r[..4].copy_from_slice(&size.to_be_bytes());
    Ok((partition, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_zigzag() {
        let enc = |v| {
            let mut o = Vec::new();
            put_varint(&mut o, v);
            o
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(-1), [1]);
        assert_eq!(enc(1), [2]);
        assert_eq!(enc(64), [0x80, 1]);
        assert_eq!(enc(-65), [0x81, 1]);
    }

    #[test]
    fn a_batch_carries_its_length_count_and_checksum() {
        let payloads = Payloads::new(100, 1);
        let b = record_batch(&payloads, 3, 1_700_000_000_000);
        let length = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        assert_eq!(usize::try_from(length).unwrap(), b.len() - 12);
        assert_eq!(b[16], 2);
        let crc = u32::from_be_bytes([b[17], b[18], b[19], b[20]]);
        assert_eq!(crc, crc32c::crc32c(&b[21..]));
        assert_eq!(i32::from_be_bytes([b[57], b[58], b[59], b[60]]), 3);
        // Each record: its length (107, two bytes zigzagged), then attributes,
        // timestamp and offset deltas and key length (1 each), value length (2), the
        // value (100) and the header count (1).
        assert_eq!(b.len(), 61 + 3 * 109);
    }

    #[test]
    fn answers_are_checked_field_by_field() {
        let answer = |corr: i32, partition: i32, code: i16| {
            let mut a = Vec::new();
            a.extend_from_slice(&corr.to_be_bytes());
            a.extend_from_slice(&1i32.to_be_bytes());
            a.extend_from_slice(&1i16.to_be_bytes());
            a.push(b't');
            a.extend_from_slice(&1i32.to_be_bytes());
            a.extend_from_slice(&partition.to_be_bytes());
            a.extend_from_slice(&code.to_be_bytes());
            a.extend_from_slice(&5i64.to_be_bytes());
            a.extend_from_slice(&(-1i64).to_be_bytes());
            a.extend_from_slice(&0i32.to_be_bytes());
            a
        };
        assert!(check_answer(&answer(7, 2, 0), 7, 2).is_ok());
        assert!(check_answer(&answer(8, 2, 0), 7, 2).is_err());
        assert!(check_answer(&answer(7, 3, 0), 7, 2).is_err());
        assert!(check_answer(&answer(7, 2, 6), 7, 2).is_err());
        assert!(check_answer(&answer(7, 2, 0)[..10], 7, 2).is_err());
    }

    #[test]
    fn a_stamped_request_carries_the_producer_and_a_valid_checksum() {
        let payloads = Payloads::new(10, 1);
        let batch = record_batch(&payloads, 2, 0);
        let (_, mut request) = produce_request("topic", 3, -1, &batch).unwrap();
        let at = batch_at(&request).unwrap();
        assert_eq!(&request[at..], &batch[..]);
        stamp(&mut request, 42, 1, 7);
        let b = &request[at..];
        assert_eq!(i64::from_be_bytes(b[43..51].try_into().unwrap()), 42);
        assert_eq!(i16::from_be_bytes(b[51..53].try_into().unwrap()), 1);
        assert_eq!(i32::from_be_bytes(b[53..57].try_into().unwrap()), 7);
        let crc = u32::from_be_bytes(b[17..21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&b[21..]));
    }

    #[test]
    fn a_batch_fills_about_the_batch_size() {
        assert_eq!(records_per_batch(1024, 1_000_000), 961);
        assert_eq!(records_per_batch(1_000_000, 1000), 1);
    }
}
