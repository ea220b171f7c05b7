//! Record batches captured from real Kafka clients, in `fixtures/record-batches/`.
//!
//! Each `<name>.bin` holds the `records` bytes of one Produce partition; `<name>.json`
//! beside it lists what the client was asked to send:
//!
//! ```text
//! {"client": "...", "client_version": "...", "codec": "none|gzip|snappy|lz4|zstd",
//!  "records": [{"key": "<hex>"|null, "value": "<hex>"|null,
//!               "headers": [["name", "<hex>"|null], ...]}, ...]}
//! ```
//!
//! Every pair present is decoded and compared. Which client/codec pairs must exist is
//! only enforced with `KAFKA_FIXTURES_REQUIRED=1`; otherwise a missing one is noted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use kafka_records::{
    BatchOptions, Compression, DecodeLimits, Header, NewRecord, Record, decode_batches,
    encode_batch,
};
use serde_json::Value;

/// (client, codec) pairs the capture must cover; kafkajs has no zstd of its own.
const EXPECTED: &[(&str, &[&str])] = &[
    ("librdkafka", &["none", "gzip", "snappy", "lz4", "zstd"]),
    ("java", &["none", "gzip", "snappy", "lz4", "zstd"]),
    ("kafka-python", &["none", "gzip", "snappy", "lz4", "zstd"]),
    ("kafkajs", &["none", "gzip", "snappy", "lz4"]),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/record-batches")
}

/// Maps the client string of a capture to one of the names in [`EXPECTED`].
fn canonical_client(client: &str) -> String {
    let c = client.to_ascii_lowercase();
    if c.contains("librdkafka") || c.contains("confluent") || c.contains("kcat") {
        "librdkafka".into()
    } else if c.contains("kafka-python") || c.contains("kafka_python") {
        "kafka-python".into()
    } else if c.contains("kafkajs") {
        "kafkajs".into()
    } else if c.contains("java") || c.contains("kafka-clients") {
        "java".into()
    } else {
        c
    }
}

fn codec_named(name: &str) -> Compression {
    match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => panic!("unknown codec {other:?} in fixture"),
    }
}

fn hex_field(v: &Value, what: &str) -> Option<Bytes> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(Bytes::from(
            hex::decode(s).unwrap_or_else(|e| panic!("{what}: bad hex: {e}")),
        )),
        other => panic!("{what}: expected hex string or null, got {other}"),
    }
}

struct Expected {
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<Header>,
}

fn expected_records(json: &Value) -> Vec<Expected> {
    json["records"]
        .as_array()
        .expect("records array")
        .iter()
        .map(|r| Expected {
            key: hex_field(&r["key"], "key"),
            value: hex_field(&r["value"], "value"),
            headers: r["headers"]
                .as_array()
                .map(|hs| {
                    hs.iter()
                        .map(|h| {
                            let name = h[0].as_str().expect("header name").to_owned();
                            Header::new(name, hex_field(&h[1], "header value"))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

fn check_pair(bin: &Path, json: &Value) -> (String, String) {
    let name = bin.display();
    let client = canonical_client(json["client"].as_str().expect("client"));
    let codec_name = json["codec"].as_str().expect("codec").to_owned();
    let codec = codec_named(&codec_name);
    let input = Bytes::from(std::fs::read(bin).unwrap());

    let seq =
        decode_batches(&input, &DecodeLimits::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        seq.truncated_tail, 0,
        "{name}: a Produce payload has no partial batch"
    );
    assert!(!seq.batches.is_empty(), "{name}: no batch");

    let mut decoded: Vec<Record> = Vec::new();
    let mut notes = Vec::new();
    for batch in &seq.batches {
        assert_eq!(batch.compression(), codec, "{name}: codec of batch");
        let records: Vec<Record> = batch
            .records()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(records.len(), batch.header().record_count as usize);
        if check_reencoding(batch, &records, &name.to_string()) {
            notes.push("re-encoded byte for byte");
        }
        if codec == Compression::Snappy {
            let xerial = batch.raw_records().starts_with(b"\x82SNAPPY\0");
            notes.push(if xerial {
                "xerial framing"
            } else {
                "raw snappy"
            });
        }
        decoded.extend(records);
    }

    let expected = expected_records(json);
    assert_eq!(decoded.len(), expected.len(), "{name}: record count");
    for (i, (got, want)) in decoded.iter().zip(&expected).enumerate() {
        assert_eq!(got.key, want.key, "{name}: key of record {i}");
        assert_eq!(got.value, want.value, "{name}: value of record {i}");
        assert_eq!(
            got.headers.to_vec(),
            want.headers,
            "{name}: headers of record {i}"
        );
    }
    println!(
        "ok {name}: {client} {} {codec_name}, {} batch(es), {} record(s) {notes:?}",
        json["client_version"].as_str().unwrap_or("?"),
        seq.batches.len(),
        decoded.len()
    );
    (client, codec_name)
}

/// Re-encodes the decoded records. Uncompressed batches with consecutive offsets must come
/// back byte for byte; compressed ones (compressors differ) must decode to the same records.
///
/// Returns whether the byte-for-byte comparison applied.
fn check_reencoding(batch: &kafka_records::RecordBatch, records: &[Record], name: &str) -> bool {
    let h = batch.header();
    let options = BatchOptions {
        base_offset: h.base_offset,
        partition_leader_epoch: h.partition_leader_epoch,
        compression: batch.compression(),
        timestamp_type: batch.timestamp_type(),
        transactional: batch.is_transactional(),
        control: batch.is_control(),
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
        base_timestamp: Some(h.base_timestamp),
    };
    let new: Vec<NewRecord> = records
        .iter()
        .map(|r| NewRecord {
            timestamp: h.base_timestamp.wrapping_add(r.timestamp_delta),
            ..NewRecord::from(r.clone())
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&options, &new, &mut out).unwrap();
    let consecutive = records
        .iter()
        .enumerate()
        .all(|(i, r)| r.offset_delta as usize == i);
    let plain_header = h.max_timestamp == new.iter().map(|r| r.timestamp).max().unwrap_or(-1)
        && h.last_offset_delta == (records.len() as i32 - 1).max(0);
    let exact = batch.compression() == Compression::None && consecutive && plain_header;
    if exact {
        assert_eq!(
            &out[..],
            &batch.as_bytes()[..],
            "{name}: byte-exact re-encoding"
        );
    }
    let again = decode_batches(&out.freeze(), &DecodeLimits::default()).unwrap();
    let again: Vec<Record> = again.batches[0]
        .records()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(again.len(), records.len());
    for (a, b) in again.iter().zip(records) {
        assert_eq!(
            (&a.key, &a.value, &a.headers),
            (&b.key, &b.value, &b.headers),
            "{name}"
        );
    }
    exact
}

#[test]
fn real_client_batches_decode_to_what_was_sent() {
    let dir = fixtures_dir();
    let required = std::env::var("KAFKA_FIXTURES_REQUIRED").as_deref() == Ok("1");
    let mut present = BTreeSet::new();
    let mut pairs = 0;

    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            let mut bins: Vec<PathBuf> = entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "bin"))
                .collect();
            bins.sort();
            for bin in bins {
                let json_path = bin.with_extension("json");
                let Ok(text) = std::fs::read_to_string(&json_path) else {
                    println!("note: {} has no .json beside it, skipped", bin.display());
                    continue;
                };
                let json: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", json_path.display()));
                present.insert(check_pair(&bin, &json));
                pairs += 1;
            }
        }
        Err(e) => println!("note: {} not readable ({e})", dir.display()),
    }
    println!("{pairs} fixture pair(s) checked");

    let mut missing = Vec::new();
    for (client, codecs) in EXPECTED {
        for codec in *codecs {
            if !present.contains(&(client.to_string(), codec.to_string())) {
                missing.push(format!("{client}/{codec}"));
            }
        }
    }
    if !missing.is_empty() {
        assert!(
            !required,
            "KAFKA_FIXTURES_REQUIRED=1 but fixtures are missing: {}",
            missing.join(", ")
        );
        println!("note: no fixture yet for {}", missing.join(", "));
    }
}
