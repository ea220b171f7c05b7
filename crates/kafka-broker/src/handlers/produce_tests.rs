//! The topic settings honoured on produce: `compression.type`, LogAppendTime, the
//! timestamp window, keyless records on compacted topics and `max.message.bytes` on
//! the stored batch, checked through the whole request path on the embedded store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::broker::{Broker, now_ms};
use crate::config::BrokerConfig;
use crate::dispatch::{self, Outcome};
use crate::server::Stores;
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::{LogStore, NewTopic, TopicConfig};
use bytes::{Bytes, BytesMut};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, ErrorCode, ResponseBody};
use kafka_records::{
    BatchOptions, Compression, DecodeLimits, NewRecord, RecordBatch, TimestampType, encode_batch,
};
use std::sync::Arc;

const VERSION: i16 = 9;

/// A broker on the embedded store with one single-partition topic per `(name, settings)`.
async fn broker(topics: &[(&str, &[(&str, &str)])]) -> Broker {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let defaults = TopicConfig::default();
    for (name, settings) in topics {
        let mut config = defaults.clone();
        for (k, v) in *settings {
            config.set(&defaults, k, Some(v)).unwrap();
        }
        store
            .create_topic(
                NewTopic {
                    name: (*name).into(),
                    partitions: 1,
                    config,
                },
                false,
            )
            .await
            .unwrap();
    }
    let stores = Stores {
        log: store.clone(),
        offsets: store,
    };
    Broker::new(
        BrokerConfig::default(),
        stores,
        crate::pipeline::Pipeline::new(vec![]),
    )
}

fn records(n: usize, timestamp: i64, value_len: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord {
            timestamp: timestamp + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![b'a' + (i % 26) as u8; value_len])),
            headers: vec![kafka_records::Header::new(
                "h",
                Some(Bytes::from(format!("{i}"))),
            )],
        })
        .collect()
}

fn batch(options: &BatchOptions, records: &[NewRecord]) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(options, records, &mut out).unwrap();
    out.freeze()
}

async fn produce(broker: &Broker, topic: &str, records: Bytes) -> PartitionProduceResponse {
    let header = RequestHeader {
        request_api_key: ApiKey::Produce.as_i16(),
        request_api_version: VERSION,
        correlation_id: 1,
        ..Default::default()
    };
    let body = ProduceRequest {
        acks: -1,
        timeout_ms: 5000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from(topic.to_owned()),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(records),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let frame = encode_request(&header, &body.into()).unwrap().slice(4..);
    let peer = "127.0.0.1:1".parse().unwrap();
    let Outcome::Respond(r) = dispatch::handle(broker, peer, frame).await else {
        panic!("no produce response")
    };
    let (_, body) = decode_response(ApiKey::Produce, VERSION, &r.to_bytes().slice(4..)).unwrap();
    let ResponseBody::Produce(mut p) = body else {
        panic!("not a produce response")
    };
    p.responses.remove(0).partition_responses.remove(0)
}

/// The batches stored in `topic`, decoded.
async fn stored(broker: &Broker, topic: &str) -> Vec<RecordBatch> {
    let read = broker.stores.log.read(topic, 0, 0, 64 << 20).await.unwrap();
    read.batches
        .iter()
        .map(|b| RecordBatch::decode(b, &DecodeLimits::default()).unwrap())
        .collect()
}

fn plain(batch: &RecordBatch) -> Vec<NewRecord> {
    batch
        .records()
        .unwrap()
        .map(|r| NewRecord::from(r.unwrap()))
        .collect()
}

#[tokio::test]
async fn batches_are_stored_with_the_topics_codec() {
    let codecs = [
        ("as-sent", "producer"),
        ("uncompressed", "uncompressed"),
        ("gzip", "gzip"),
        ("snappy", "snappy"),
        ("lz4", "lz4"),
        ("zstd", "zstd"),
    ];
    let topics: Vec<(&str, Vec<(&str, &str)>)> = codecs
        .iter()
        .map(|(t, c)| (*t, vec![("compression.type", *c)]))
        .collect();
    let specs: Vec<(&str, &[(&str, &str)])> =
        topics.iter().map(|(t, s)| (*t, s.as_slice())).collect();
    let broker = broker(&specs).await;
    let sent = records(10, now_ms(), 200);
    for (topic, codec) in codecs {
        let mut expected_offset = 0;
        for (seq, from) in [Compression::None, Compression::Lz4, Compression::Zstd]
            .into_iter()
            .enumerate()
        {
            let options = BatchOptions {
                compression: from,
                producer_id: 7,
                producer_epoch: 1,
                base_sequence: seq as i32 * 10,
                ..BatchOptions::default()
            };
            let r = produce(&broker, topic, batch(&options, &sent)).await;
            assert_eq!(
                (r.error_code, r.base_offset),
                (0, expected_offset),
                "{topic} from {from:?}: {:?}",
                r.error_message
            );
            assert_eq!(r.log_append_time_ms, -1);
            expected_offset += 10;
        }
        let batches = stored(&broker, topic).await;
        assert_eq!(batches.len(), 3, "{topic}");
        for (seq, (b, from)) in batches
            .iter()
            .zip([Compression::None, Compression::Lz4, Compression::Zstd])
            .enumerate()
        {
            let want = match codec {
                "producer" => from,
                "uncompressed" => Compression::None,
                "gzip" => Compression::Gzip,
                "snappy" => Compression::Snappy,
                "lz4" => Compression::Lz4,
                _ => Compression::Zstd,
            };
            assert_eq!(b.compression(), want, "{topic} from {from:?}");
            assert_eq!(plain(b), sent, "{topic} from {from:?}");
            let h = b.header();
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (7, 1, seq as i32 * 10)
            );
            assert_eq!(h.attributes.timestamp_type(), TimestampType::CreateTime);
        }
    }
    // An idempotent retry of a recompressed batch is still recognised as a duplicate.
    let retry = BatchOptions {
        compression: Compression::Zstd,
        producer_id: 7,
        producer_epoch: 1,
        base_sequence: 20,
        ..BatchOptions::default()
    };
    let r = produce(&broker, "gzip", batch(&retry, &sent)).await;
    assert_eq!((r.error_code, r.base_offset), (0, 20));
    let w = broker.stores.log.watermarks("gzip", 0).await.unwrap();
    assert_eq!(w.high_watermark, 30);
}

#[tokio::test]
async fn log_append_time_replaces_the_producers_timestamps() {
    let broker = broker(&[
        ("lat", &[("message.timestamp.type", "LogAppendTime")]),
        (
            "lat-gzip",
            &[
                ("message.timestamp.type", "LogAppendTime"),
                ("compression.type", "gzip"),
            ],
        ),
    ])
    .await;
    // Timestamps far outside the CreateTime window: LogAppendTime topics do not check them.
    let sent = records(4, 1_000, 50);
    for topic in ["lat", "lat-gzip"] {
        let before = now_ms();
        let r = produce(
            &broker,
            topic,
            batch(
                &BatchOptions {
                    compression: Compression::Snappy,
                    ..BatchOptions::default()
                },
                &sent,
            ),
        )
        .await;
        let after = now_ms();
        assert_eq!(r.error_code, 0, "{topic}: {:?}", r.error_message);
        let t = r.log_append_time_ms;
        assert!((before..=after).contains(&t), "{topic}: {t}");
        let batches = stored(&broker, topic).await;
        let h = batches[0].header();
        assert_eq!(h.attributes.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(h.max_timestamp, t);
        let got = plain(&batches[0]);
        assert!(got.iter().all(|r| r.timestamp == t), "{topic}");
        let keys: Vec<_> = got.iter().map(|r| r.key.clone()).collect();
        let want: Vec<_> = sent.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys, want);
        // Looking up by time finds the batch by its append time, not by the producer's.
        let hit = broker
            .stores
            .log
            .offset_for_timestamp(topic, 0, 2_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((hit.offset, hit.timestamp), (0, t));
    }
    assert_eq!(
        stored(&broker, "lat-gzip").await[0].compression(),
        Compression::Gzip
    );
}

#[tokio::test]
async fn timestamps_outside_the_window_are_refused_per_record() {
    let broker = broker(&[
        ("default", &[]),
        (
            "narrow",
            &[
                ("message.timestamp.before.max.ms", "60000"),
                ("message.timestamp.after.max.ms", "60000"),
            ],
        ),
    ])
    .await;
    let now = now_ms();
    let two_hours = 2 * 3_600_000;
    // Broker default: one hour ahead at most, any age.
    let mut sent = records(3, now, 10);
    sent[1].timestamp = now + two_hours;
    let r = produce(&broker, "default", batch(&BatchOptions::default(), &sent)).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_TIMESTAMP.code());
    assert_eq!(
        r.error_message.as_deref(),
        Some("One or more records have been rejected due to invalid timestamp")
    );
    let indexes: Vec<i32> = r.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, [1]);
    let msg = r.record_errors[0]
        .batch_index_error_message
        .as_deref()
        .unwrap();
    assert!(msg.contains("is out of range"), "{msg}");
    let old = records(2, now - 10 * two_hours, 10);
    let r = produce(&broker, "default", batch(&BatchOptions::default(), &old)).await;
    assert_eq!(r.error_code, 0);
    // The topic's own window, both ways.
    let r = produce(&broker, "narrow", batch(&BatchOptions::default(), &old)).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_TIMESTAMP.code());
    assert_eq!(r.record_errors.len(), 2);
    let mut ahead = records(2, now, 10);
    ahead[0].timestamp = now + 120_000;
    let r = produce(&broker, "narrow", batch(&BatchOptions::default(), &ahead)).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_TIMESTAMP.code());
    let r = produce(
        &broker,
        "narrow",
        batch(&BatchOptions::default(), &records(2, now, 1)),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    assert_eq!(
        broker
            .stores
            .log
            .watermarks("narrow", 0)
            .await
            .unwrap()
            .high_watermark,
        2
    );
}

#[tokio::test]
async fn compacted_topics_refuse_keyless_records_whole() {
    let broker = broker(&[
        ("compacted", &[("cleanup.policy", "compact")]),
        ("both", &[("cleanup.policy", "compact,delete")]),
        ("deleted", &[]),
    ])
    .await;
    let mut sent = records(6, now_ms(), 10);
    for i in [1, 3, 4, 5] {
        sent[i].key = None;
    }
    for codec in [Compression::None, Compression::Gzip] {
        let options = BatchOptions {
            compression: codec,
            ..BatchOptions::default()
        };
        for topic in ["compacted", "both"] {
            let r = produce(&broker, topic, batch(&options, &sent)).await;
            assert_eq!(r.error_code, ErrorCode::INVALID_RECORD.code(), "{topic}");
            let indexes: Vec<i32> = r.record_errors.iter().map(|e| e.batch_index).collect();
            assert_eq!(indexes, [1, 3, 4, 5]);
            let messages: Vec<_> = r
                .record_errors
                .iter()
                .map(|e| e.batch_index_error_message.is_some())
                .collect();
            assert_eq!(messages, [true, true, true, false]);
            assert_eq!(
                r.record_errors[0].batch_index_error_message.as_deref(),
                Some(
                    format!(
                        "Compacted topic cannot accept message without key in topic \
                         partition {topic}-0"
                    )
                    .as_str()
                )
            );
            let top = r.error_message.as_deref().unwrap();
            assert!(
                top.starts_with("One or more records have been rejected due to 4 record errors"),
                "{top}"
            );
            let w = broker.stores.log.watermarks(topic, 0).await.unwrap();
            assert_eq!(w.high_watermark, 0, "{topic}: nothing stored");
        }
        let r = produce(&broker, "deleted", batch(&options, &sent)).await;
        assert_eq!(r.error_code, 0);
    }
    // Keys present, including empty ones and tombstones: accepted.
    let mut keyed = records(3, now_ms(), 10);
    keyed[0].key = Some(Bytes::new());
    keyed[1].value = None;
    let r = produce(
        &broker,
        "compacted",
        batch(&BatchOptions::default(), &keyed),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
}

#[tokio::test]
async fn max_message_bytes_applies_to_the_stored_batch() {
    let broker = broker(&[
        (
            "small-plain",
            &[
                ("compression.type", "uncompressed"),
                ("max.message.bytes", "20000"),
            ],
        ),
        ("small-as-sent", &[("max.message.bytes", "20000")]),
    ])
    .await;
    // 100 records of 1000 identical bytes: about 1 KB as zstd, 100 KB uncompressed.
    let sent = records(100, now_ms(), 1000);
    let zstd = batch(
        &BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        &sent,
    );
    assert!(zstd.len() < 20_000);
    let r = produce(&broker, "small-as-sent", zstd.clone()).await;
    assert_eq!(r.error_code, 0);
    let r = produce(&broker, "small-plain", zstd).await;
    assert_eq!(r.error_code, ErrorCode::MESSAGE_TOO_LARGE.code());
    let msg = r.error_message.unwrap();
    assert!(msg.contains("compression.type uncompressed"), "{msg}");
    assert_eq!(
        broker
            .stores
            .log
            .watermarks("small-plain", 0)
            .await
            .unwrap()
            .high_watermark,
        0
    );
}

#[tokio::test]
async fn a_producer_may_not_set_log_append_time() {
    let broker = broker(&[
        ("lat", &[("message.timestamp.type", "LogAppendTime")]),
        ("ct", &[]),
    ])
    .await;
    let options = BatchOptions {
        timestamp_type: TimestampType::LogAppendTime,
        ..BatchOptions::default()
    };
    let sent = records(2, now_ms(), 10);
    let r = produce(&broker, "lat", batch(&options, &sent)).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_TIMESTAMP.code());
    // On a CreateTime topic the bit is cleared and the records' own times kept.
    let r = produce(&broker, "ct", batch(&options, &sent)).await;
    assert_eq!(r.error_code, 0);
    let b = &stored(&broker, "ct").await[0];
    assert_eq!(
        b.header().attributes.timestamp_type(),
        TimestampType::CreateTime
    );
    assert_eq!(plain(b), sent);
}

/// What a [`Preparing`] store saw of one batch's preparation: the leader epoch the batch
/// carried when its sink was made, the one the sink was told it is stored with, and
/// whether it came in the check's walk (`false`: [`LogStore::prepare`] afterwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SinkMade {
    sent_epoch: i32,
    told_epoch: i32,
    in_walk: bool,
}

/// What a [`Preparing`] sink made of a batch: its records counted, and the epoch it was
/// told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counted {
    records: usize,
    told_epoch: i32,
}

/// The embedded store with a preparation that counts the records its sink is given,
/// and records what reached each append.
struct Preparing {
    inner: MemoryStore,
    in_prepare: std::sync::atomic::AtomicBool,
    sinks: std::sync::Mutex<Vec<SinkMade>>,
    /// Per appended batch: what it carried prepared, and its leader epoch as stored.
    appended: std::sync::Mutex<Vec<(Option<Counted>, i32)>>,
}

struct Counter(Counted);

impl crate::store::RecordSink for Counter {
    fn record(&mut self, _: &kafka_records::RecordRef<'_>) {
        self.0.records += 1;
    }
    fn finish(self: Box<Self>) -> Option<crate::store::Prepared> {
        Some(crate::store::Prepared::new(self.0))
    }
}

#[async_trait::async_trait]
impl LogStore for Preparing {
    fn name(&self) -> &'static str {
        "preparing"
    }
    async fn create_topic(
        &self,
        topic: NewTopic,
        validate_only: bool,
    ) -> crate::store::StoreResult<crate::store::TopicInfo> {
        self.inner.create_topic(topic, validate_only).await
    }
    async fn delete_topic(&self, name: &str) -> crate::store::StoreResult<()> {
        self.inner.delete_topic(name).await
    }
    async fn topic(
        &self,
        name: &str,
    ) -> crate::store::StoreResult<Option<crate::store::TopicInfo>> {
        self.inner.topic(name).await
    }
    async fn topic_by_id(
        &self,
        id: u128,
    ) -> crate::store::StoreResult<Option<crate::store::TopicInfo>> {
        self.inner.topic_by_id(id).await
    }
    async fn topics(&self) -> crate::store::StoreResult<Vec<crate::store::TopicInfo>> {
        self.inner.topics().await
    }
    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        v: bool,
    ) -> crate::store::StoreResult<()> {
        self.inner.create_partitions(name, total, v).await
    }
    async fn set_topic_config(
        &self,
        name: &str,
        config: TopicConfig,
    ) -> crate::store::StoreResult<()> {
        self.inner.set_topic_config(name, config).await
    }
    fn prepare(
        &self,
        topic: &str,
        partition: i32,
        batch: &crate::store::ValidBatch,
    ) -> Option<crate::store::Prepared> {
        use std::sync::atomic::Ordering;
        self.in_prepare.store(true, Ordering::SeqCst);
        let epoch = batch.header().partition_leader_epoch;
        let mut sink = self.preparer(topic, partition, batch.batch(), batch.section(), epoch)?;
        for record in batch.batch().record_refs_in(batch.section()) {
            sink.record(&record.ok()?);
        }
        self.in_prepare.store(false, Ordering::SeqCst);
        sink.finish()
    }
    fn preparer(
        &self,
        _topic: &str,
        _partition: i32,
        batch: &RecordBatch,
        _section: &Bytes,
        leader_epoch: i32,
    ) -> Option<Box<dyn crate::store::RecordSink>> {
        self.sinks.lock().unwrap().push(SinkMade {
            sent_epoch: batch.header().partition_leader_epoch,
            told_epoch: leader_epoch,
            in_walk: !self.in_prepare.load(std::sync::atomic::Ordering::SeqCst),
        });
        Some(Box::new(Counter(Counted {
            records: 0,
            told_epoch: leader_epoch,
        })))
    }
    async fn append(
        &self,
        t: &str,
        p: i32,
        b: Vec<crate::store::ValidBatch>,
        now: i64,
    ) -> crate::store::StoreResult<crate::store::AppendOutcome> {
        self.appended.lock().unwrap().extend(b.iter().map(|v| {
            let prepared = v
                .prepared()
                .and_then(|p| p.downcast_ref::<Counted>())
                .copied();
            (prepared, v.header().partition_leader_epoch)
        }));
        self.inner.append(t, p, b, now).await
    }
    async fn read(
        &self,
        t: &str,
        p: i32,
        o: i64,
        max: usize,
    ) -> crate::store::StoreResult<crate::store::ReadOutcome> {
        self.inner.read(t, p, o, max).await
    }
    async fn watermarks(
        &self,
        t: &str,
        p: i32,
    ) -> crate::store::StoreResult<crate::store::Watermarks> {
        self.inner.watermarks(t, p).await
    }
    async fn offset_for_timestamp(
        &self,
        t: &str,
        p: i32,
        ts: i64,
    ) -> crate::store::StoreResult<Option<crate::store::TimestampHit>> {
        self.inner.offset_for_timestamp(t, p, ts).await
    }
    async fn max_timestamp(
        &self,
        t: &str,
        p: i32,
    ) -> crate::store::StoreResult<Option<crate::store::TimestampHit>> {
        self.inner.max_timestamp(t, p).await
    }
    async fn delete_records(&self, t: &str, p: i32, before: i64) -> crate::store::StoreResult<i64> {
        self.inner.delete_records(t, p, before).await
    }
    fn watch(&self, t: &str, p: i32) -> Option<tokio::sync::watch::Receiver<i64>> {
        self.inner.watch(t, p)
    }
    async fn is_transactional(&self, t: &str) -> crate::store::StoreResult<bool> {
        self.inner.is_transactional(t).await
    }
    async fn mark_transactional(&self, t: &str) -> crate::store::StoreResult<()> {
        self.inner.mark_transactional(t).await
    }
}

#[tokio::test]
async fn the_store_prepares_a_batch_in_the_checks_walk_for_the_epoch_it_is_stored_with() {
    let store = Arc::new(Preparing {
        inner: MemoryStore::new(MemoryStoreConfig::default()),
        in_prepare: false.into(),
        sinks: Default::default(),
        appended: Default::default(),
    });
    let defaults = TopicConfig::default();
    for (name, settings) in [
        ("plain", &[][..]),
        ("gzip", &[("compression.type", "gzip")][..]),
        ("small", &[("max.message.bytes", "2000")][..]),
    ] {
        let mut config = defaults.clone();
        for (k, v) in settings {
            config.set(&defaults, k, Some(v)).unwrap();
        }
        let topic = NewTopic {
            name: name.into(),
            partitions: 1,
            config,
        };
        store.create_topic(topic, false).await.unwrap();
    }
    let offsets = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let broker = Broker::new(
        BrokerConfig::default(),
        Stores {
            log: store.clone(),
            offsets,
        },
        crate::pipeline::Pipeline::new(vec![]),
    );
    let sent = records(20, now_ms(), 100);
    let with_epoch = |epoch: i32| {
        batch(
            &BatchOptions {
                partition_leader_epoch: epoch,
                ..BatchOptions::default()
            },
            &sent,
        )
    };
    let walk = |sent_epoch| SinkMade {
        sent_epoch,
        told_epoch: 0,
        in_walk: true,
    };
    let prepared = Some(Counted {
        records: 20,
        told_epoch: 0,
    });
    // librdkafka sends leader epoch 0, the Java producer -1: both batches are prepared
    // in the check's walk, for epoch 0, and reach the append with it.
    for (i, epoch) in [0, -1, 5].into_iter().enumerate() {
        let r = produce(&broker, "plain", with_epoch(epoch)).await;
        assert_eq!(
            (r.error_code, r.base_offset),
            (0, 20 * i as i64),
            "epoch {epoch}"
        );
        let sinks = std::mem::take(&mut *store.sinks.lock().unwrap());
        assert_eq!(sinks, vec![walk(epoch)], "epoch {epoch}");
        let appended = std::mem::take(&mut *store.appended.lock().unwrap());
        assert_eq!(appended, vec![(prepared, 0)], "epoch {epoch}");
    }
    for b in stored(&broker, "plain").await {
        assert_eq!(b.header().partition_leader_epoch, 0);
        assert_eq!(plain(&b), sent);
    }
    // A topic that recompresses: no sink in the walk; the stored batch is prepared after.
    let r = produce(&broker, "gzip", with_epoch(-1)).await;
    assert_eq!(r.error_code, 0);
    let sinks = std::mem::take(&mut *store.sinks.lock().unwrap());
    assert_eq!(
        sinks,
        vec![SinkMade {
            in_walk: false,
            ..walk(0)
        }]
    );
    assert_eq!(
        std::mem::take(&mut *store.appended.lock().unwrap()),
        vec![(prepared, 0)]
    );
    // Past max.message.bytes, and a control batch: refused before any preparation.
    let r = produce(&broker, "small", with_epoch(-1)).await;
    assert_eq!(r.error_code, ErrorCode::MESSAGE_TOO_LARGE.code());
    let control = batch(
        &BatchOptions {
            control: true,
            partition_leader_epoch: 0,
            ..BatchOptions::default()
        },
        &[NewRecord {
            timestamp: now_ms(),
            key: Some(Bytes::from_static(&[0, 0, 0, 0])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: Vec::new(),
        }],
    );
    let r = produce(&broker, "plain", control).await;
    assert_eq!(r.error_code, ErrorCode::INVALID_RECORD.code());
    assert!(store.sinks.lock().unwrap().is_empty());
    assert!(store.appended.lock().unwrap().is_empty());
}
