//! The [`LogStore`] and [`OffsetStore`] impls: topic administration (create, delete,
//! list, add partitions, settings, logical record deletion) and the entry points of
//! appends, reads, timestamp lookups and long polls, which the other submodules carry
//! out. Committed offsets, group states and the transaction coordinator's records live
//! in the bridge's metadata stream, one log per coordinator shard (`crate::meta`); a
//! topic's transactional flag lives in its `topics` record.

use super::topics::{
    Resolved, capped_bytes, expiring_ms, expiry_of, segment_size_of, topic_id, topic_size_of,
    validate_config,
};
use super::{IggyBridge, named};
use crate::config::IggyTopicRef;
use crate::convert;
use crate::errors::{Op, map_iggy_error, timeout};
use crate::meta::{TopicKey, TopicMeta, ensure_stream};
use crate::partition::{self, PartitionId};
use async_trait::async_trait;
use bytes::Bytes;
use iggy::prelude::{IggyError, MaxTopicSize, PartitionClient, TopicClient, TopicCreateOptions};
use kafka_records::RecordBatch;
use kafka_store::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingAppend, PendingOffsets,
    ReadOutcome, RecordSink, StoreError, StoreResult, TimestampHit, TopicConfig, TopicInfo,
    ValidBatch, Watermarks,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[async_trait]
impl LogStore for IggyBridge {
    fn name(&self) -> &'static str {
        "iggy"
    }

    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo> {
        let partitions = partition::count_for_iggy(topic.partitions)?;
        validate_config(&topic.config)?;
        if self.resolve(&topic.name).await?.is_some() {
            return Err(StoreError::TopicAlreadyExists(topic.name));
        }
        let target = self.inner.map.resolve(&topic.name);
        if validate_only {
            let key = TopicKey {
                stream: target.stream,
                topic: target.topic,
                created_at: 0,
            };
            return Ok(TopicInfo {
                id: topic_id(&key),
                name: topic.name,
                partitions: topic.partitions,
                config: topic.config,
            });
        }
        let session = self.any_session();
        ensure_stream(
            session,
            &target.stream,
            self.inner.config.call_timeout,
            &self.inner.metrics,
        )
        .await?;
        let s = named(&target.stream, &topic.name)?;
        let mut options = TopicCreateOptions {
            partitions_count: Some(partitions),
            message_expiry: Some(expiry_of(expiring_ms(&topic.config))),
            max_topic_size: Some(topic_size_of(capped_bytes(&topic.config), partitions)),
            segment_size: segment_size_of(&topic.config),
            ..TopicCreateOptions::default()
        };
        let created = match tokio::time::timeout(
            self.inner.config.call_timeout,
            session.create_topic(&s, &target.topic, &options),
        )
        .await
        {
            Ok(Err(IggyError::InvalidTopicSize(_, floor))) => {
                options.max_topic_size = Some(MaxTopicSize::Custom(floor));
                self.call(
                    Op::Admin,
                    &topic.name,
                    -1,
                    session.create_topic(&s, &target.topic, &options),
                )
                .await
            }
            Ok(other) => other.map_err(|e| map_iggy_error(&e, Op::Admin, &topic.name, -1)),
            Err(_) => Err(timeout(Op::Admin, "create_topic")),
        }?;
        let key = TopicKey {
            stream: target.stream.clone(),
            topic: target.topic.clone(),
            created_at: created.created_at.as_micros(),
        };
        self.inner
            .meta
            .put_topic(
                session,
                &key,
                TopicMeta {
                    config: topic.config.clone(),
                    log_start: Default::default(),
                    compacted: Default::default(),
                    transactional: false,
                },
            )
            .await?;
        let created_partitions = partition::count_for_kafka(&topic.name, created.partitions_count)?;
        let info = TopicInfo {
            id: topic_id(&key),
            name: topic.name,
            partitions: created_partitions,
            config: topic.config,
        };
        self.remember(&info.name, Some(Arc::new(Resolved::new(target, created))))?;
        Ok(info)
    }

    async fn delete_topic(&self, name: &str) -> StoreResult<()> {
        let r = self.require(name, PartitionId::FIRST).await.map_err(|_| {
            StoreError::UnknownTopicOrPartition {
                topic: name.to_owned(),
                partition: -1,
            }
        })?;
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let session = self.any_session();
        let deleted = self
            .call(Op::Admin, name, -1, session.delete_topic(&s, &t))
            .await;
        self.forget(name);
        deleted?;
        self.forget_watches(&r.target);
        self.forget_read_ahead(&r.target);
        self.drop_companions(&r).await;
        self.inner.meta.forget_topic(session, &r.key).await?;
        Ok(())
    }

    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>> {
        match self.resolve_cached(name).await? {
            Some(r) => self.info(name, &r).map(Some),
            None => Ok(None),
        }
    }

    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>> {
        let cached = self.cached_by_id(id)?;
        if let Some((name, r)) = cached {
            return self.info(&name, &r).map(Some);
        }
        let found = self.topics().await?.into_iter().find(|t| t.id == id);
        if let Some(t) = &found {
            // Fill the cache, so the next lookup by this id is local.
            self.resolve(&t.name).await?;
        }
        Ok(found)
    }

    async fn topics(&self) -> StoreResult<Vec<TopicInfo>> {
        let mut out = Vec::new();
        for stream in self.inner.map.streams() {
            let s = named(&stream, &stream)?;
            let listed = match self
                .call(Op::Read, &stream, -1, self.any_session().get_topics(&s))
                .await
            {
                Ok(t) => t,
                Err(StoreError::UnknownTopicOrPartition { .. }) => continue,
                Err(e) => return Err(e),
            };
            for t in listed {
                let target = IggyTopicRef {
                    stream: stream.clone(),
                    topic: t.name.clone(),
                };
                let Some(name) = self.inner.map.reverse(&target) else {
                    continue;
                };
                let key = TopicKey {
                    stream: stream.clone(),
                    topic: t.name.clone(),
                    created_at: t.created_at.as_micros(),
                };
                let meta =
                    self.config_of(&key, t.message_expiry, t.max_topic_size, t.partitions_count)?;
                let partitions = partition::count_for_kafka(&name, t.partitions_count)?;
                out.push(TopicInfo {
                    name,
                    id: topic_id(&key),
                    partitions,
                    config: meta.config,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> StoreResult<()> {
        let r = self.require(name, PartitionId::FIRST).await?;
        let current = r.partitions_count;
        let asked = u32::try_from(total)
            .ok()
            .filter(|asked| *asked > current)
            .ok_or_else(|| {
                StoreError::InvalidPartitions(format!(
                    "topic {name} has {current} partitions, asked for {total}"
                ))
            })?;
        if validate_only {
            return Ok(());
        }
        let add = asked - current;
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let added = self
            .call(
                Op::Admin,
                name,
                -1,
                self.any_session().create_partitions(&s, &t, add),
            )
            .await;
        self.forget(name);
        added?;
        let meta = self.meta_of(&r)?;
        if meta.config.retention_bytes >= 0 {
            self.apply_iggy_settings(&r, name, &meta.config, asked)
                .await?;
        }
        Ok(())
    }

    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()> {
        validate_config(&config)?;
        let r = self.require(name, PartitionId::FIRST).await?;
        let applied = self
            .apply_iggy_settings(&r, name, &config, r.partitions_count)
            .await;
        self.forget(name);
        applied?;
        let mut meta = self.meta_of(&r)?;
        meta.config = config;
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, meta)
            .await
    }

    async fn append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
        _now_ms: i64,
    ) -> StoreResult<AppendOutcome> {
        self.start_append(topic, partition, batches).await?.await
    }

    async fn submit(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
        _now_ms: i64,
    ) -> StoreResult<PendingAppend> {
        self.start_append(topic, partition, batches).await
    }

    /// Maps the batch to Iggy messages as its records are read (see
    /// `IggyBridge::mapping_sink`).
    fn preparer(
        &self,
        _topic: &str,
        _partition: i32,
        batch: &RecordBatch,
        section: &Bytes,
        leader_epoch: i32,
    ) -> Option<Box<dyn RecordSink>> {
        self.mapping_sink(batch, section, leader_epoch)
    }

    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<ReadOutcome> {
        self.read_partition(topic, partition, offset, max_bytes)
            .await
    }

    async fn watermarks(&self, topic: &str, partition: i32) -> StoreResult<Watermarks> {
        let p = PartitionId::of(topic, partition)?;
        let r = self.require(topic, p).await?;
        self.watermarks_of(&r, p)
    }

    async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> StoreResult<Option<TimestampHit>> {
        // Kafka timestamps are the producer's and need not grow with offsets, so Iggy's
        // own timestamp index cannot answer this; the partition is scanned instead.
        let mut hit = None;
        self.scan(topic, PartitionId::of(topic, partition)?, |m| {
            if m.record.timestamp >= timestamp {
                hit = Some(TimestampHit {
                    offset: convert::kafka_i64(m.offset),
                    timestamp: m.record.timestamp,
                });
                return true;
            }
            false
        })
        .await?;
        Ok(hit)
    }

    async fn max_timestamp(
        &self,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<TimestampHit>> {
        let mut best: Option<TimestampHit> = None;
        self.scan(topic, PartitionId::of(topic, partition)?, |m| {
            if best.is_none_or(|b| m.record.timestamp > b.timestamp) {
                best = Some(TimestampHit {
                    offset: convert::kafka_i64(m.offset),
                    timestamp: m.record.timestamp,
                });
            }
            false
        })
        .await?;
        Ok(best)
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> StoreResult<i64> {
        let p = PartitionId::of(topic, partition)?;
        let r = self.require(topic, p).await?;
        let w = self.watermarks_of(&r, p)?;
        let target = if before_offset == -1 {
            w.high_watermark
        } else {
            before_offset
        };
        if target < 0 || target > w.high_watermark {
            return Err(StoreError::OffsetOutOfRange {
                offset: before_offset,
                log_start_offset: w.log_start_offset,
                high_watermark: w.high_watermark,
            });
        }
        if target <= w.log_start_offset {
            return Ok(w.log_start_offset);
        }
        // Iggy deletes whole segments only, so the log start is kept by the gateway
        // (see docs/bridge.md): Kafka clients no longer see the records below it.
        let mut meta = self.meta_of(&r)?;
        meta.log_start.insert(p.iggy(), target);
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, meta)
            .await?;
        Ok(target)
    }

    /// Only for topics this gateway has looked up (their description is cached, however
    /// old), as this cannot ask Iggy; a fetch looks its topics up first. The initial
    /// value is the high watermark as last seen.
    fn watch(&self, topic: &str, partition: i32) -> Option<watch::Receiver<i64>> {
        self.watch_partition(topic, partition)
    }

    fn notifies_every_append(&self) -> bool {
        // Native Iggy producers write to the same partitions without telling us.
        false
    }

    async fn is_transactional(&self, topic: &str) -> StoreResult<bool> {
        let r = self.require(topic, PartitionId::FIRST).await?;
        if self.meta_of(&r)?.transactional {
            return Ok(true);
        }
        // Another gateway may have set the flag since the last refresh of the topics log.
        Ok(self
            .inner
            .meta
            .topic_fresh(self.any_session(), &r.key)
            .await?
            .is_some_and(|m| m.transactional))
    }

    async fn mark_transactional(&self, topic: &str) -> StoreResult<()> {
        let r = self.require(topic, PartitionId::FIRST).await?;
        let mut meta = self.meta_of(&r)?;
        if meta.transactional {
            return Ok(());
        }
        meta.transactional = true;
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, meta)
            .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.ping_server().await
    }

    fn poll_interval(&self) -> Duration {
        self.inner.config.poll_interval
    }
}

#[async_trait]
impl OffsetStore for IggyBridge {
    async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner
            .meta
            .commit(self.any_session(), group, offsets)
            .await
    }

    async fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        self.inner
            .meta
            .fetch(self.any_session(), group, topic, partition)
            .await
    }

    async fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        self.inner.meta.fetch_all(self.any_session(), group).await
    }

    async fn delete(&self, group: &str, partitions: &[(String, i32)]) -> StoreResult<()> {
        self.inner
            .meta
            .delete(self.any_session(), group, partitions)
            .await
    }

    async fn delete_group(&self, group: &str) -> StoreResult<()> {
        self.inner
            .meta
            .delete_group(self.any_session(), group)
            .await
    }

    async fn groups(&self) -> StoreResult<Vec<String>> {
        self.inner.meta.groups(self.any_session()).await
    }

    async fn acquire_shard(&self, shard: u32) -> StoreResult<()> {
        self.inner
            .meta
            .acquire_shard(self.any_session(), shard)
            .await
    }

    async fn release_shard(&self, shard: u32) {
        if let Err(e) = self.inner.meta.release_shard(shard).await {
            tracing::warn!(shard, error = %e, "cannot release a coordinator shard");
        }
    }

    async fn put_group_state(&self, group: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.inner
            .meta
            .put_group_state(self.any_session(), group, state)
            .await
    }

    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner
            .meta
            .group_states(self.any_session(), shard)
            .await
    }

    async fn put_txn_state(&self, transactional_id: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.inner
            .meta
            .put_txn_state(self.any_session(), transactional_id, state)
            .await
    }

    async fn txn_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner.meta.txn_states(self.any_session(), shard).await
    }

    async fn claim_txn_epoch(&self, shard: u32) -> StoreResult<i32> {
        self.inner
            .meta
            .claim_txn_epoch(self.any_session(), shard)
            .await
    }

    async fn put_pending_offsets(
        &self,
        group: &str,
        producer_id: i64,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner
            .meta
            .put_pending_offsets(self.any_session(), group, producer_id, offsets)
            .await
    }

    async fn complete_pending_offsets(
        &self,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> StoreResult<()> {
        self.inner
            .meta
            .complete_pending_offsets(self.any_session(), group, producer_id, commit)
            .await
    }

    async fn pending_offsets(&self, shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        self.inner
            .meta
            .pending_offsets(self.any_session(), shard)
            .await
    }
}
