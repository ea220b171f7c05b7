//! The append path: a Kafka append mapped to Iggy messages and queued on its
//! partition's send queue, and the task that sends what waits there.
//!
//! One task at a time sends a partition's queue, oldest first, all that waits (up to
//! `send_batch_bytes`) in one `send_messages` over the partition's own session, so an
//! append's records land contiguously and appends land in call order. Appends that
//! arrive while a send is in flight share the next one (group commit). The semaphore
//! `max_in_flight_sends` bounds the sends in flight over all partitions.

use super::topics::Resolved;
use super::{IggyBridge, named, poisoned};
use crate::config::IggyTopicRef;
use crate::convert;
use crate::errors::Op;
use crate::mapping::{self, BatchFrame};
use crate::partition::PartitionId;
use bytes::Bytes;
use iggy::prelude::{IggyMessage, MessageClient, Partitioning};
use kafka_records::{ExactReencoding, NewRecord};
use kafka_store::{AppendOutcome, PendingAppend, StoreError, StoreResult, ValidBatch};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The appends of one partition waiting to be sent, in call order. One task at a time
/// sends them, all that are waiting in one Iggy call (up to `send_batch_bytes`):
/// appends that arrive while a send is in flight share the next one (group commit), so
/// many producers on one partition cost one round trip per turn, not one each.
pub(super) type SharedSendQueue = Arc<Mutex<SendQueue>>;

#[derive(Default)]
pub(super) struct SendQueue {
    waiting: VecDeque<Waiting>,
    sending: bool,
}

impl SendQueue {
    /// The appends for the next send, oldest first: as many as fit in `limit` payload
    /// bytes together, and always at least the oldest one, whatever its size.
    fn next_group(&mut self, limit: usize) -> Vec<Waiting> {
        let mut group = Vec::new();
        let mut bytes = 0usize;
        while let Some(w) = self.waiting.front() {
            if !group.is_empty() && bytes.saturating_add(w.bytes) > limit {
                break;
            }
            bytes = bytes.saturating_add(w.bytes);
            if let Some(w) = self.waiting.pop_front() {
                group.push(w);
            }
        }
        group
    }
}

/// One append's messages and where to tell it its base offset.
struct Waiting {
    messages: Vec<IggyMessage>,
    bytes: usize,
    done: tokio::sync::oneshot::Sender<StoreResult<Sent>>,
}

/// What a group send gives one append.
struct Sent {
    base_offset: i64,
    log_start_offset: i64,
}

/// Hands the queue back if its sending task ends early (a panic, or a poisoned lock):
/// the appends still waiting get an error instead of waiting forever.
struct Draining<'a> {
    queue: &'a SharedSendQueue,
    finished: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut q = match self.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        };
        q.sending = false;
        q.waiting.clear();
    }
}

impl IggyBridge {
    fn send_queue(
        &self,
        target: &IggyTopicRef,
        partition: PartitionId,
    ) -> StoreResult<SharedSendQueue> {
        let mut locks = self.inner.send_queues.lock().map_err(poisoned)?;
        Ok(locks
            .entry((target.clone(), partition))
            .or_insert_with(|| Arc::new(Mutex::new(SendQueue::default())))
            .clone())
    }

    /// Queues `messages` for the partition; they are sent after everything queued
    /// before them. The receiver gives the outcome of the send that carries them.
    fn enqueue(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        messages: Vec<IggyMessage>,
    ) -> StoreResult<tokio::sync::oneshot::Receiver<StoreResult<Sent>>> {
        let queue = self.send_queue(&r.target, partition)?;
        let bytes = messages
            .iter()
            .map(|m| m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len))
            .sum();
        let (done, answer) = tokio::sync::oneshot::channel();
        let lead = {
            let mut q = queue.lock().map_err(poisoned)?;
            q.waiting.push_back(Waiting {
                messages,
                bytes,
                done,
            });
            !std::mem::replace(&mut q.sending, true)
        };
        if lead {
            // A task of its own: the sends go on even if the caller is cancelled.
            let this = self.clone();
            let (r, topic) = (r.clone(), topic.to_owned());
            tokio::spawn(async move { this.drain(&r, &topic, partition, &queue).await });
        }
        Ok(answer)
    }

    /// Maps `batches` to Iggy messages and queues them for the partition (the order
    /// point of [`kafka_store::LogStore::submit`]); the future resolves once Iggy
    /// confirms them.
    pub(super) async fn start_append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
    ) -> StoreResult<PendingAppend> {
        let p = PartitionId::of(topic, partition)?;
        let r = self.require_cached(topic, p).await?;
        let meta = self.meta_of(&r)?;
        // Settings are checked when set, so only a damaged metadata record gets here.
        let max = usize::try_from(meta.config.max_message_bytes).map_err(|_| {
            StoreError::Internal(format!(
                "topic {topic}: stored max.message.bytes {} is negative",
                meta.config.max_message_bytes
            ))
        })?;
        // Refuse the whole call before anything is sent.
        if let Some(big) = batches.iter().find(|b| b.len() > max) {
            return Err(StoreError::MessageTooLarge {
                size: big.len(),
                max,
            });
        }
        let mut messages: Vec<IggyMessage> = Vec::new();
        let origin = iggy::prelude::IggyTimestamp::now().as_micros();
        for valid in &batches {
            // Checked whole by the broker, records already decompressed: mapped as they are.
            let batch = valid.batch();
            let frame = mapping::frame_of(batch.header());
            let records = valid.records();
            let mut exact = ExactReencoding::new(batch);
            let head = messages.len();
            let mut first_record = None;
            for (i, record) in records.enumerate() {
                let record = record.map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
                exact.record(&record);
                let delta = i32::try_from(i)
                    .map_err(|_| StoreError::CorruptBatch("too many records".into()))?;
                let first = (i == 0).then_some(&frame);
                let record = NewRecord::from(record);
                let message = mapping::to_message_at(&record, delta, first, origin)
                    .map_err(|e| StoreError::LimitReached(e.to_string()))?;
                messages.push(message);
                if i == 0 {
                    first_record = Some(record);
                }
            }
            // When the batch re-encodes exactly, reads reuse its CRC: the first message,
            // which carries the frame, is written again with it.
            if let (Some(crc), Some(record), Some(message)) =
                (exact.crc(), first_record, messages.get_mut(head))
            {
                let frame = BatchFrame {
                    crc: Some(crc),
                    ..frame
                };
                *message = mapping::to_message_at(&record, 0, Some(&frame), origin)
                    .map_err(|e| StoreError::LimitReached(e.to_string()))?;
            }
        }
        let count = convert::kafka_count(messages.len());
        if messages.is_empty() {
            let fresh = self.require(topic, p).await?;
            let w = self.watermarks_of(&fresh, p)?;
            return Ok(Box::pin(std::future::ready(Ok(AppendOutcome {
                base_offset: w.high_watermark,
                log_append_time: -1,
                log_start_offset: w.log_start_offset,
            }))));
        }
        let answer = self.enqueue(&r, topic, p, messages)?;
        let this = self.clone();
        Ok(Box::pin(async move {
            let sent = answer.await.map_err(|_| {
                StoreError::Internal("the send task ended without an answer".into())
            })??;
            this.notify(&r.target, p, sent.base_offset.saturating_add(count));
            Ok(AppendOutcome {
                base_offset: sent.base_offset,
                log_append_time: -1,
                log_start_offset: sent.log_start_offset,
            })
        }))
    }

    /// Sends what waits in `queue`, a group per Iggy call, until it is empty.
    async fn drain(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        queue: &SharedSendQueue,
    ) {
        let mut guard = Draining {
            queue,
            finished: false,
        };
        loop {
            let group: Vec<Waiting> = {
                let Ok(mut q) = queue.lock() else { return };
                let group = q.next_group(self.inner.config.send_batch_bytes);
                if group.is_empty() {
                    q.sending = false;
                    guard.finished = true;
                    return;
                }
                group
            };
            let counts: Vec<i64> = group
                .iter()
                .map(|w| convert::kafka_count(w.messages.len()))
                .collect();
            let mut dones = Vec::with_capacity(group.len());
            let mut messages = Vec::with_capacity(group.iter().map(|w| w.messages.len()).sum());
            for w in group {
                messages.extend(w.messages);
                dones.push(w.done);
            }
            let result = self.send_group(r, topic, partition, &mut messages).await;
            let mut next = result.as_ref().map_or(0, |s| s.base_offset);
            for (done, count) in dones.into_iter().zip(counts) {
                let answer = match &result {
                    Ok(sent) => Ok(Sent {
                        base_offset: next,
                        log_start_offset: sent.log_start_offset,
                    }),
                    Err(e) => Err(e.clone()),
                };
                next = next.saturating_add(count);
                // A caller that gave up no longer listens; its records are written.
                let _ = done.send(answer);
            }
        }
    }

    /// One Iggy send of `messages`; the base offset of the first.
    async fn send_group(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        messages: &mut [IggyMessage],
    ) -> StoreResult<Sent> {
        let (s, t) = (
            named(&r.target.stream, topic)?,
            named(&r.target.topic, topic)?,
        );
        let _permit = self
            .inner
            .sends
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("bridge closed".into()))?;
        let session = self.session_for(&r.target, partition);
        let sent = self
            .call(
                Op::Write,
                topic,
                partition.kafka(),
                session.send_messages(
                    &s,
                    &t,
                    &Partitioning::partition_id(partition.iggy()),
                    messages,
                ),
            )
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                // The topic may have been deleted or changed behind the cache.
                self.forget(topic);
                return Err(e);
            }
        };
        let confirmed = response
            .confirmations
            .iter()
            .find(|c| c.partition_id == partition.iggy())
            .or(response.confirmations.first())
            .and_then(|c| i64::try_from(c.base_offset).ok());
        match confirmed {
            // The log start may be up to `metadata_max_age` old; clients only report it.
            Some(base) => Ok(Sent {
                base_offset: base,
                log_start_offset: self.watermarks_of(r, partition)?.log_start_offset,
            }),
            // A server that confirms nothing: one send at a time per partition makes
            // "high watermark after minus what was sent" exact for this gateway.
            None => {
                let fresh = self.require(topic, partition).await?;
                let w = self.watermarks_of(&fresh, partition)?;
                let count = convert::kafka_count(messages.len());
                Ok(Sent {
                    base_offset: w.high_watermark - count,
                    log_start_offset: w.log_start_offset,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_groups_waiting_appends_up_to_the_limit() {
        let mut q = SendQueue::default();
        let mut answers = Vec::new();
        for bytes in [400, 300, 300, 1, 5000, 200, 700, 100] {
            let (done, answer) = tokio::sync::oneshot::channel();
            answers.push(answer);
            q.waiting.push_back(Waiting {
                messages: Vec::new(),
                bytes,
                done,
            });
        }
        let mut sizes = Vec::new();
        loop {
            let group = q.next_group(1000);
            if group.is_empty() {
                break;
            }
            sizes.push(group.iter().map(|w| w.bytes).collect::<Vec<_>>());
        }
        // In order; a group stays within the limit unless one append alone is larger.
        assert_eq!(
            sizes,
            vec![
                vec![400, 300, 300],
                vec![1],
                vec![5000],
                vec![200, 700, 100]
            ]
        );
        assert!(q.waiting.is_empty());
    }
}
