//! The append path: a Kafka append mapped to Iggy messages and queued on its
//! partition's send queue, and the task that sends what waits there.
//!
//! One task at a time sends a partition's queue, oldest first, all that waits (up to
//! `send_batch_bytes`) in one `send_messages` over the partition's own session, so an
//! append's records land contiguously and appends land in call order. Appends that
//! arrive while a send is in flight share the next one (group commit). The semaphore
//! `max_in_flight_sends` bounds the sends in flight over all partitions.
//!
//! What a queue holds is counted until Iggy confirms it or it is known not to have
//! landed: `send_queue_appends` and `send_queue_bytes` per partition, `send_buffer_bytes`
//! over all ([`Budget`]). An append that does not fit waits for room, in arrival order
//! ([`Room`]), up to `send_queue_wait`, so a producer that outpaces Iggy is slowed down
//! the way a Kafka broker slows it, instead of having its requests read, checked and
//! mapped only to be refused and sent again; past the wait it is refused
//! (`Unavailable`, nothing written). A send
//! whose outcome is unknown (a timeout, a connection lost after the request left) is
//! never reported failed while it could still land: the task asks Iggy whether the
//! send's first message id is there ([`IggyBridge::settle_unknown`]) and answers from
//! that; one found not to have landed is sent once more before it is reported failed. Retries of an idempotent producer's batch (same producer id, epoch, sequence
//! and record count) join the held batch or are answered from the last batches that
//! landed ([`Landed`]), so they are not written twice. A send that fails takes the
//! waiting appends of its idempotent producers with it ([`SendQueue::fail_behind`]): the
//! broker has the producer's next batches in flight behind a failed one, and none of
//! them may land after the gap.

use super::session::send_messages_raw;
use super::topics::Resolved;
use super::{IggyBridge, named, poisoned};
use crate::config::IggyTopicRef;
use crate::convert;
use crate::errors::{Op, map_iggy_error};
use crate::mapping::{self, BatchMapping, MappingError, WireMessages};
use crate::partition::PartitionId;
use crate::polled;
use bytes::Bytes;
use iggy::prelude::PollingStrategy;
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
use iggy_common::wire_conversions::identifier_to_wire;
use kafka_records::{RecordBatch, RecordRef};
use kafka_store::{
    AppendOutcome, PendingAppend, Prepared, RecordSink, StoreError, StoreResult, ValidBatch,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Retries of one held batch that may wait for it at once; a Kafka producer has one
/// retry of a batch in flight at a time, so more come from several connections or a
/// misbehaving client.
const MAX_JOINED: usize = 16;

/// A batch's messages mapped ahead of its append ([`IggyBridge::mapping_sink`]),
/// taken by the first append that uses them, with their hold on the bridge's budget for
/// such messages.
struct PreparedMessages(Mutex<Option<(WireMessages, PreparedHold)>>);

/// Bytes reserved in the bridge's budget for messages mapped ahead of their appends,
/// given back when dropped (the messages taken by their append, or the batch dropped).
struct PreparedHold {
    held: Arc<AtomicUsize>,
    bytes: usize,
}

impl PreparedHold {
    /// Reserves `bytes` within `limit`; `None` when they do not fit.
    fn reserve(held: &Arc<AtomicUsize>, bytes: usize, limit: usize) -> Option<PreparedHold> {
        let before = held.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > limit {
            held.fetch_sub(bytes, Ordering::Relaxed);
            return None;
        }
        Some(PreparedHold {
            held: Arc::clone(held),
            bytes,
        })
    }
}

impl Drop for PreparedHold {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The fewest bytes a record takes in a records section: its length, attributes,
/// timestamp and offset deltas, key and value lengths and header count, one byte each.
const MIN_RECORD_BYTES: usize = 7;

/// Bytes the messages of `batch` (its records section `section_len` bytes) take, about:
/// the batch's bytes (values, keys, producer headers) and the wire's own per message. A
/// record takes at least [`MIN_RECORD_BYTES`] of its section, so the estimate stays
/// within a multiple of the batch's size.
fn capacity_of(batch: &RecordBatch, section_len: usize) -> usize {
    let records = usize::try_from(batch.header().record_count)
        .unwrap_or(0)
        .min(section_len / MIN_RECORD_BYTES);
    batch
        .encoded_len()
        .max(section_len)
        .saturating_add(records.saturating_mul(mapping::MESSAGE_OVERHEAD))
}

/// Messages the records of `batches` map to: one per record.
fn records_of(batches: &[ValidBatch]) -> usize {
    batches
        .iter()
        .map(|b| usize::try_from(b.batch().header().record_count).unwrap_or(0))
        .fold(0, usize::saturating_add)
}

/// The bridge's [`RecordSink`]: one batch's messages, mapped as the check reads its
/// records ([`IggyBridge::preparer`]), with their hold on the budget for such messages.
struct MappingSink {
    messages: WireMessages,
    mapping: BatchMapping,
    batch: RecordBatch,
    section: Bytes,
    hold: PreparedHold,
}

impl RecordSink for MappingSink {
    fn record(&mut self, record: &RecordRef<'_>) {
        self.mapping
            .record(&mut self.messages, &self.section, record);
    }

    fn finish(self: Box<Self>) -> Option<Prepared> {
        let MappingSink {
            mut messages,
            mapping,
            batch,
            section,
            hold,
        } = *self;
        mapping.finish(&mut messages, &batch, &section).ok()?;
        Some(Prepared::new(PreparedMessages(Mutex::new(Some((
            messages, hold,
        ))))))
    }
}

/// [`IggyBridge::preparer`] with the budget `held` of at most `limit` bytes, for `batch`
/// appended with `leader_epoch`; `ids(n)` reserves `n` message ids and gives the first.
/// The batch's records are not checked yet, so the ids reserved (one per record) are
/// bounded by what its section can hold, not only by its `recordCount`.
fn sink_within(
    held: &Arc<AtomicUsize>,
    limit: usize,
    batch: &RecordBatch,
    leader_epoch: i32,
    section: &Bytes,
    ids: impl FnOnce(usize) -> u128,
) -> Option<MappingSink> {
    let capacity = capacity_of(batch, section.len());
    let hold = PreparedHold::reserve(held, capacity.saturating_add(mapping::MAX_SEND_ROOM), limit)?;
    let origin = iggy::prelude::IggyTimestamp::now().as_micros();
    let n = usize::try_from(batch.header().record_count)
        .unwrap_or(0)
        .min(section.len() / MIN_RECORD_BYTES);
    let messages = WireMessages::sealed(mapping::MAX_SEND_ROOM, capacity, origin, ids(n), n);
    Some(MappingSink {
        messages,
        mapping: BatchMapping::new(batch, true).with_leader_epoch(leader_epoch),
        batch: batch.clone(),
        section: section.clone(),
        hold,
    })
}

/// How often a send whose outcome was unknown, and which [`IggyBridge::settle_unknown`]
/// then found not to have landed, is sent again before its appends are answered
/// `Unavailable`.
const UNSETTLED_RESENDS: u32 = 1;

/// Messages beyond a send's own that [`IggyBridge::settle_unknown`] looks through for
/// it: room for what other writers (native Iggy producers) added after it.
const UNKNOWN_SEND_WINDOW: usize = 1024;

/// The appends of one partition waiting to be sent, in call order. One task at a time
/// sends them, all that are waiting in one Iggy call (up to `send_batch_bytes`):
/// appends that arrive while a send is in flight share the next one (group commit), so
/// many producers on one partition cost one round trip per turn, not one each.
pub(super) type SharedSendQueue = Arc<Mutex<SendQueue>>;

/// The identity of an idempotent producer's batch: a retry carries the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct BatchKey {
    producer_id: i64,
    epoch: i16,
    base_sequence: i32,
    records: i32,
}

impl BatchKey {
    /// The key of an append of exactly one batch from an idempotent producer.
    fn of(batches: &[ValidBatch]) -> Option<BatchKey> {
        let [only] = batches else { return None };
        let h = only.batch().header();
        (h.producer_id >= 0 && h.base_sequence >= 0).then_some(BatchKey {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            records: h.record_count,
        })
    }
}

/// Batches of recent idempotent producers that landed in one partition, per producer
/// the last [`LANDED_PER_PRODUCER`] (as many as a Kafka producer keeps in flight). The
/// producers remembered over all partitions are at most `dedup_producers`: at that
/// bound a new producer takes the place of this partition's least recently seen one,
/// or is not remembered when this partition has none.
#[derive(Default)]
struct Landed {
    producers: HashMap<i64, LandedOf>,
    clock: u64,
}

struct LandedOf {
    seen: u64,
    epoch: i16,
    batches: VecDeque<(i32, i32, i64)>,
}

/// Batches remembered per producer, as many as Kafka's producer keeps in flight.
const LANDED_PER_PRODUCER: usize = 5;

impl Landed {
    fn find(&self, k: &BatchKey) -> Option<i64> {
        let of = self.producers.get(&k.producer_id)?;
        if of.epoch != k.epoch {
            return None;
        }
        of.batches
            .iter()
            .find(|(seq, n, _)| *seq == k.base_sequence && *n == k.records)
            .map(|(_, _, offset)| *offset)
    }

    /// Remembers a landed batch; `may_grow` says whether a producer not remembered yet
    /// may be added (else it replaces this partition's least recently seen one). Returns
    /// whether the number of producers remembered grew.
    fn insert(&mut self, k: BatchKey, base_offset: i64, may_grow: bool) -> bool {
        self.clock += 1;
        let mut grew = false;
        if !self.producers.contains_key(&k.producer_id) {
            if may_grow {
                grew = true;
            } else {
                // Linear, but only when a new producer arrives at the bound.
                let Some(oldest) = self
                    .producers
                    .iter()
                    .min_by_key(|(_, of)| of.seen)
                    .map(|(id, _)| *id)
                else {
                    return false;
                };
                self.producers.remove(&oldest);
            }
        }
        let of = self.producers.entry(k.producer_id).or_insert(LandedOf {
            seen: 0,
            epoch: k.epoch,
            batches: VecDeque::new(),
        });
        of.seen = self.clock;
        if of.epoch != k.epoch {
            of.epoch = k.epoch;
            of.batches.clear();
        }
        if of.batches.len() >= LANDED_PER_PRODUCER {
            of.batches.pop_front();
        }
        of.batches
            .push_back((k.base_sequence, k.records, base_offset));
        grew
    }
}

/// Room for payload bytes, first come first served: a partition's `send_queue_bytes`,
/// or `send_buffer_bytes` over all partitions (shared by every partition's [`Room`]).
/// An append takes as many bytes as its payload, all of them when it is larger (it then
/// goes alone).
#[derive(Clone)]
pub(super) struct Budget {
    bytes: Arc<Semaphore>,
    max_bytes: u32,
}

impl Budget {
    pub(super) fn new(max_bytes: usize) -> Budget {
        let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1);
        Budget {
            bytes: Arc::new(Semaphore::new(max_bytes as usize)),
            max_bytes,
        }
    }

    /// Bytes free now.
    fn free(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Permits `bytes` of payload take: all of the room when they are more.
    fn wanted(&self, bytes: usize) -> u32 {
        u32::try_from(bytes).unwrap_or(u32::MAX).min(self.max_bytes)
    }

    /// Waits for room for `bytes`.
    async fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.bytes)
            .acquire_many_owned(self.wanted(bytes))
            .await
            .ok()
    }

    /// Room for `bytes` if it is free now and nobody waits before.
    fn try_take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.bytes)
            .try_acquire_many_owned(self.wanted(bytes))
            .ok()
    }
}

/// Admission to one partition's send queue, first come first served: an append takes
/// one of `send_queue_appends` slots, its bytes of the partition's [`Budget`]
/// (`send_queue_bytes`), then its bytes of the [`Budget`] over all partitions, and
/// gives them back when Iggy has answered its send. Waiting appends queue in arrival
/// order ([`Semaphore`] is fair), so a large append is not overtaken for ever by small
/// ones, and an append whose caller gives up leaves the line. Each append takes its
/// partition's room before the budget's, so no append holds budget while it waits for
/// its partition.
pub(super) struct Room {
    appends: Arc<Semaphore>,
    bytes: Budget,
    all: Budget,
}

/// An append's place in its partition's queue and in the budget over all partitions,
/// held until its send is answered.
pub(super) struct Admitted {
    _append: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl Room {
    pub(super) fn new(max_appends: usize, max_bytes: usize, all: Budget) -> Room {
        Room {
            appends: Arc::new(Semaphore::new(max_appends.max(1))),
            bytes: Budget::new(max_bytes),
            all,
        }
    }

    /// Waits for a slot, for `bytes` of the partition's room and for `bytes` of the
    /// budget.
    async fn admit(&self, bytes: usize) -> Option<Admitted> {
        let append = Arc::clone(&self.appends).acquire_owned().await.ok()?;
        let part = self.bytes.take(bytes).await?;
        let all = self.all.take(bytes).await?;
        Some(Admitted {
            _append: append,
            _bytes: part,
            _all: all,
        })
    }

    /// A slot and `bytes` of room in the partition and the budget if they are free now
    /// and no append waits before.
    fn try_admit(&self, bytes: usize) -> Option<Admitted> {
        let append = Arc::clone(&self.appends).try_acquire_owned().ok()?;
        let part = self.bytes.try_take(bytes)?;
        let all = self.all.try_take(bytes)?;
        Some(Admitted {
            _append: append,
            _bytes: part,
            _all: all,
        })
    }
}

pub(super) struct SendQueue {
    room: Arc<Room>,
    waiting: VecDeque<Waiting>,
    sending: bool,
    /// Payload bytes held: waiting, in flight or awaiting confirmation.
    bytes: usize,
    /// Appends held, counted like `bytes`.
    appends: usize,
    /// Idempotent batches held, each with the retries that joined it.
    joined: HashMap<BatchKey, Vec<Answer>>,
    landed: Landed,
}

impl SendQueue {
    fn new(max_appends: usize, max_bytes: usize, all: Budget) -> SendQueue {
        SendQueue {
            room: Arc::new(Room::new(max_appends, max_bytes, all)),
            waiting: VecDeque::new(),
            sending: false,
            bytes: 0,
            appends: 0,
            joined: HashMap::new(),
            landed: Landed::default(),
        }
    }

    /// Fails every waiting append of the idempotent producers (id and epoch) in `failed`
    /// with `error`, and the retries that joined them: a producer's batch that failed
    /// leaves a gap its later batches must not land behind. The producer resends them,
    /// in order, after the failed one.
    fn fail_behind(&mut self, failed: &[(i64, i16)], error: &StoreError) {
        if failed.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.waiting);
        for w in waiting {
            let behind = w
                .key
                .is_some_and(|k| failed.contains(&(k.producer_id, k.epoch)));
            if !behind {
                self.waiting.push_back(w);
                continue;
            }
            self.bytes = self.bytes.saturating_sub(w.bytes);
            self.appends = self.appends.saturating_sub(1);
            if let Some(k) = w.key {
                for joined in self.joined.remove(&k).unwrap_or_default() {
                    let _ = joined.send(Err(error.clone()));
                }
            }
            let _ = w.done.send(Err(error.clone()));
        }
    }

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

type Answer = tokio::sync::oneshot::Sender<StoreResult<Sent>>;
type AnswerRx = tokio::sync::oneshot::Receiver<StoreResult<Sent>>;

/// What one try at queueing an append came to.
enum Placed {
    /// Answered or queued: what `enqueue` returns.
    Done(StoreResult<Queued>),
    /// No room: why, should the wait for room end without it.
    Full(String),
}

/// One append's messages, its place in the queue and where to tell it its base offset.
struct Waiting {
    messages: WireMessages,
    bytes: usize,
    key: Option<BatchKey>,
    done: Answer,
    admitted: Admitted,
}

/// What a group send gives one append.
#[derive(Debug, Clone, Copy)]
struct Sent {
    base_offset: i64,
    log_start_offset: i64,
}

/// How an append joins its partition's queue.
enum Queued {
    /// Waits for the send that carries it (or carries the batch it retries).
    Waits(AnswerRx),
    /// A retry of an idempotent batch that already landed, at this base offset.
    Landed(i64),
}

/// Hands the queue back if its sending task ends early (a panic, or a poisoned lock):
/// the appends still waiting get an error instead of waiting forever, and what they
/// held is released.
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
        q.bytes = 0;
        q.appends = 0;
        q.sending = false;
        q.waiting.clear();
        q.joined.clear();
    }
}

impl IggyBridge {
    fn send_queue(
        &self,
        target: &IggyTopicRef,
        partition: PartitionId,
    ) -> StoreResult<SharedSendQueue> {
        let config = &self.inner.config;
        let mut locks = self.inner.send_queues.lock().map_err(poisoned)?;
        Ok(locks
            .entry((target.clone(), partition))
            .or_insert_with(|| {
                Arc::new(Mutex::new(SendQueue::new(
                    config.send_queue_appends,
                    config.send_queue_bytes,
                    self.inner.send_budget.clone(),
                )))
            })
            .clone())
    }

    /// Queues `messages` for the partition; they are sent after everything queued
    /// before them. A retry of an idempotent batch still held joins it instead, and a
    /// retry of one that landed is answered with its offset: neither is written again.
    /// An append that does not fit the partition's queue waits for room
    /// (`send_queue_wait` at most, in arrival order), then is refused (retriable;
    /// nothing written).
    async fn enqueue(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        messages: WireMessages,
        key: Option<BatchKey>,
    ) -> StoreResult<Queued> {
        let config = &self.inner.config;
        let queue = self.send_queue(&r.target, partition)?;
        let bytes = messages.data_bytes();
        let room = {
            let q = queue.lock().map_err(poisoned)?;
            Arc::clone(&q.room)
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        let mut append = Some((messages, done, answer));
        let mut admitted = room.try_admit(bytes);
        loop {
            let full =
                match self.place(r, topic, partition, &queue, key, &mut append, &mut admitted) {
                    Placed::Done(queued) => return queued,
                    Placed::Full(why) => why,
                };
            match tokio::time::timeout(config.send_queue_wait, room.admit(bytes)).await {
                Ok(Some(a)) => admitted = Some(a),
                Ok(None) | Err(_) => return Err(StoreError::Unavailable(full)),
            }
        }
    }

    /// One try at queueing `append` (taken when it is answered or queued): a retry of
    /// a held or landed batch is answered at once, else the append is queued if it has
    /// its place (`admitted`), else the queue is full (the message to refuse with).
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        queue: &SharedSendQueue,
        key: Option<BatchKey>,
        append: &mut Option<(WireMessages, Answer, AnswerRx)>,
        admitted: &mut Option<Admitted>,
    ) -> Placed {
        let config = &self.inner.config;
        let mut q = match queue.lock().map_err(poisoned) {
            Ok(q) => q,
            Err(e) => return Placed::Done(Err(e)),
        };
        // Checked on every try: while an append waits for room, a retry of its batch may
        // have been queued or landed.
        if let Some(k) = key {
            if let Some(joined) = q.joined.get_mut(&k) {
                // Retries whose requests timed out no longer listen.
                joined.retain(|j| !j.is_closed());
                if joined.len() >= MAX_JOINED {
                    return Placed::Done(Err(StoreError::Unavailable(format!(
                        "{topic}/{partition}: {MAX_JOINED} retries already wait for this batch"
                    ))));
                }
                let Some((_, done, answer)) = append.take() else {
                    return Placed::Done(Err(StoreError::Internal("append placed twice".into())));
                };
                joined.push(done);
                return Placed::Done(Ok(Queued::Waits(answer)));
            }
            if let Some(base) = q.landed.find(&k) {
                return Placed::Done(Ok(Queued::Landed(base)));
            }
        }
        let Some(place) = admitted.take() else {
            return Placed::Full(format!(
                "{topic}/{partition}: the send queue to Iggy is full ({} appends, {} bytes; \
                 send_queue_appends {}, send_queue_bytes {}; {} of send_buffer_bytes {} \
                 free over all partitions; waited {:?})",
                q.appends,
                q.bytes,
                config.send_queue_appends,
                config.send_queue_bytes,
                self.inner.send_budget.free(),
                config.send_buffer_bytes,
                config.send_queue_wait
            ));
        };
        let Some((messages, done, answer)) = append.take() else {
            return Placed::Done(Err(StoreError::Internal("append placed twice".into())));
        };
        let bytes = messages.data_bytes();
        q.bytes = q.bytes.saturating_add(bytes);
        q.appends += 1;
        if let Some(k) = key {
            q.joined.insert(k, Vec::new());
        }
        q.waiting.push_back(Waiting {
            messages,
            bytes,
            key,
            done,
            admitted: place,
        });
        let lead = !std::mem::replace(&mut q.sending, true);
        drop(q);
        if lead {
            // A task of its own: the sends go on even if the caller is cancelled.
            let this = self.clone();
            let (r, topic, queue) = (r.clone(), topic.to_owned(), Arc::clone(queue));
            tokio::spawn(async move { this.drain(&r, &topic, partition, &queue).await });
        }
        Placed::Done(Ok(Queued::Waits(answer)))
    }

    /// The messages of one batch, mapped ahead of its append as the broker's check reads
    /// its records, on the thread that checks it ([`kafka_store::LogStore::preparer`]):
    /// the same messages [`WireMessages::push_batch`] writes at the append, with the most
    /// room a send can need in front ([`mapping::MAX_SEND_ROOM`]) and the time of the
    /// mapping as their origin timestamp, each finished as it is written (its id and
    /// checksum; [`WireMessages::sealed`]) while its bytes are in this core's cache.
    /// Messages mapped ahead and not yet taken by their appends take at most
    /// `send_buffer_bytes` (their buffers' capacity) over the bridge; past it `None`, and
    /// when the batch does not map the sink gives nothing: the append maps the records
    /// itself (and reports why they do not map). The first message's frame carries
    /// `leader_epoch`, the epoch the batch is appended with.
    pub(crate) fn mapping_sink(
        &self,
        batch: &RecordBatch,
        section: &Bytes,
        leader_epoch: i32,
    ) -> Option<Box<dyn RecordSink>> {
        let sink = sink_within(
            &self.inner.prepared_bytes,
            self.inner.config.send_buffer_bytes,
            batch,
            leader_epoch,
            section,
            |n| self.message_id(self.reserve_message_ids(n)),
        )?;
        Some(Box::new(sink))
    }

    /// The prepared messages of an append of one batch, taken (a clone of the batch
    /// that reaches an append later finds none and maps its records itself); their
    /// bytes leave the budget of messages mapped ahead, for the send queue's.
    fn take_prepared(batches: &[ValidBatch]) -> Option<WireMessages> {
        let [only] = batches else { return None };
        let (messages, _hold) = only
            .prepared()?
            .downcast_ref::<PreparedMessages>()?
            .0
            .lock()
            .ok()?
            .take()?;
        Some(messages)
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
        let messages = match Self::take_prepared(&batches) {
            Some(messages) => messages,
            None => {
                let origin = iggy::prelude::IggyTimestamp::now().as_micros();
                // Room in front for the request's routing fields and batch header, so a
                // send of this append alone is finished in place.
                let room = match (
                    WireIdentifier::named(r.target.stream.as_str()),
                    WireIdentifier::named(r.target.topic.as_str()),
                ) {
                    (Ok(s), Ok(t)) => {
                        mapping::send_room(&s, &t, &WirePartitioning::PartitionId(p.iggy()))
                    }
                    _ => 0,
                };
                let capacity = batches
                    .iter()
                    .map(|b| capacity_of(b.batch(), b.section().len()))
                    .fold(0usize, usize::saturating_add);
                let n = records_of(&batches);
                let first_id = self.message_id(self.reserve_message_ids(n));
                let mut messages = WireMessages::sealed(room, capacity, origin, first_id, n);
                for valid in &batches {
                    // Checked whole by the broker, records already decompressed: mapped
                    // as they are.
                    messages
                        .push_batch(valid.batch(), valid.section())
                        .map_err(|e| match e {
                            MappingError::Records(e) => StoreError::CorruptBatch(e),
                            e => StoreError::LimitReached(e.to_string()),
                        })?;
                }
                messages
            }
        };
        let count = convert::kafka_count(messages.count());
        if messages.is_empty() {
            let fresh = self.require(topic, p).await?;
            let w = self.watermarks_of(&fresh, p)?;
            return Ok(Box::pin(std::future::ready(Ok(AppendOutcome {
                base_offset: w.high_watermark,
                log_append_time: -1,
                log_start_offset: w.log_start_offset,
            }))));
        }
        let queued = self
            .enqueue(&r, topic, p, messages, BatchKey::of(&batches))
            .await?;
        let answer = match queued {
            Queued::Waits(answer) => answer,
            Queued::Landed(base_offset) => {
                let w = self.watermarks_of(&r, p)?;
                return Ok(Box::pin(std::future::ready(Ok(AppendOutcome {
                    base_offset,
                    log_append_time: -1,
                    log_start_offset: w.log_start_offset,
                }))));
            }
        };
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
    ///
    /// A send whose outcome is unknown (no answer in time, or the connection lost after
    /// the request left) is not reported as failed: Iggy may still write it, and the
    /// producer's retry would then land a second copy. The group stays held (its bytes
    /// counted, the partition's later appends behind it) until the bridge finds out
    /// whether it landed; see [`IggyBridge::settle_unknown`].
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
                .map(|w| convert::kafka_count(w.messages.count()))
                .collect();
            let bytes: usize = group.iter().map(|w| w.bytes).sum();
            let count: usize = group.iter().map(|w| w.messages.count()).sum();
            let mut answers = Vec::with_capacity(group.len());
            let mut appends = Vec::with_capacity(group.len());
            // The group's places in the queue, given back once Iggy has answered.
            let mut places = Vec::with_capacity(group.len());
            for w in group {
                appends.push(w.messages);
                answers.push((w.key, w.done));
                places.push(w.admitted);
            }
            let result = match self.body_of(r, topic, partition, appends) {
                Err(e) => Err(e),
                Ok(body) => {
                    // The id the bridge looks for when it must find out whether the send
                    // landed.
                    let first_id = body.first_id;
                    let mut resends = 0;
                    loop {
                        let sent = self
                            .send_group(r, topic, partition, body.body.clone(), count)
                            .await;
                        let Err(StoreError::Timeout(why)) = sent else {
                            break sent;
                        };
                        let settled = self
                            .settle_unknown(r, topic, partition, first_id, count, &why)
                            .await;
                        // Known not to have landed (most often a send written into a
                        // connection Iggy had already closed, a restart): sent again,
                        // under the same ids, as the producer would resend it.
                        if matches!(settled, Err(StoreError::Unavailable(_)))
                            && resends < UNSETTLED_RESENDS
                        {
                            resends += 1;
                            continue;
                        }
                        break settled;
                    }
                }
            };
            let Ok(mut q) = queue.lock() else { return };
            drop(places);
            q.bytes = q.bytes.saturating_sub(bytes);
            q.appends = q.appends.saturating_sub(answers.len());
            if let Err(e) = &result {
                let failed: Vec<(i64, i16)> = answers
                    .iter()
                    .filter_map(|(key, _)| key.map(|k| (k.producer_id, k.epoch)))
                    .collect();
                q.fail_behind(&failed, e);
            }
            let mut next = result.as_ref().map_or(0, |s| s.base_offset);
            for ((key, done), count) in answers.into_iter().zip(counts) {
                let answer = match &result {
                    Ok(sent) => Ok(Sent {
                        base_offset: next,
                        log_start_offset: sent.log_start_offset,
                    }),
                    Err(e) => Err(e.clone()),
                };
                if let Some(k) = key {
                    if let Ok(sent) = &answer {
                        let remembered = &self.inner.dedup_producers;
                        let room =
                            remembered.load(Ordering::Relaxed) < self.inner.config.dedup_producers;
                        if q.landed.insert(k, sent.base_offset, room) {
                            remembered.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    for joined in q.joined.remove(&k).unwrap_or_default() {
                        let _ = joined.send(answer.clone());
                    }
                }
                next = next.saturating_add(count);
                // A caller that gave up no longer listens; its records are written.
                let _ = done.send(answer);
            }
        }
    }

    /// Reserves `count` fresh message ids for one send; the first's number (see
    /// [`IggyBridge::message_id`]).
    fn reserve_message_ids(&self, count: usize) -> u64 {
        let n = u64::try_from(count).unwrap_or(u64::MAX);
        self.inner.message_ids.fetch_add(n, Ordering::Relaxed)
    }

    /// The id of a message the bridge sends, from its reserved number: unique within
    /// this bridge's run and, with a random start, across runs.
    fn message_id(&self, n: u64) -> u128 {
        (u128::from(self.inner.id_prefix) << 64) | u128::from(n)
    }

    /// Finds out whether a send with an unknown outcome landed: looks for its first
    /// message (by id) among the partition's last messages, asking over the
    /// partition's own session, so the question queues behind the send on that
    /// connection and is answered after it. Asks again every `retry_interval` while
    /// Iggy does not answer, however long that takes: giving up would leave a write
    /// that may still land reported as failed.
    async fn settle_unknown(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        first_id: u128,
        count: usize,
        why: &str,
    ) -> StoreResult<Sent> {
        tracing::warn!(
            topic,
            partition = partition.kafka(),
            messages = count,
            reason = why,
            "a send to Iggy has an unknown outcome; holding it until Iggy answers"
        );
        let window = u32::try_from(count.saturating_add(UNKNOWN_SEND_WINDOW)).unwrap_or(u32::MAX);
        let (s, t) = (
            named(&r.target.stream, topic)?,
            named(&r.target.topic, topic)?,
        );
        loop {
            let session = self.session_for(&r.target, partition);
            let polled = self
                .call(
                    Op::Read,
                    topic,
                    partition.kafka(),
                    polled::poll_checked(
                        session,
                        &s,
                        &t,
                        partition.iggy(),
                        &PollingStrategy::last(),
                        window,
                    ),
                )
                .await;
            match polled {
                Ok(polled) => {
                    let found = polled
                        .messages
                        .iter()
                        .find(|m| m.header.id == first_id)
                        .and_then(|m| i64::try_from(m.header.offset).ok());
                    tracing::info!(
                        topic,
                        partition = partition.kafka(),
                        landed = found.is_some(),
                        "the send with an unknown outcome is settled"
                    );
                    return match found {
                        Some(base_offset) => Ok(Sent {
                            base_offset,
                            log_start_offset: self.watermarks_of(r, partition)?.log_start_offset,
                        }),
                        None => Err(StoreError::Unavailable(format!(
                            "{topic}/{partition}: Iggy did not take the send"
                        ))),
                    };
                }
                // The topic is gone: nothing can land any more.
                Err(e @ StoreError::UnknownTopicOrPartition { .. }) => return Err(e),
                Err(_) => tokio::time::sleep(self.inner.config.retry_interval).await,
            }
        }
    }

    /// The request body of one send of `appends` to the partition: messages not
    /// finished as they were written get ids from one block reserved for the send.
    fn body_of(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        appends: Vec<WireMessages>,
    ) -> StoreResult<mapping::SendBody> {
        let wire =
            |e: iggy::prelude::IggyError| map_iggy_error(&e, Op::Write, topic, partition.kafka());
        let stream = identifier_to_wire(&named(&r.target.stream, topic)?).map_err(wire)?;
        let topic_id = identifier_to_wire(&named(&r.target.topic, topic)?).map_err(wire)?;
        let partitioning = WirePartitioning::PartitionId(partition.iggy());
        let unfinished: usize = appends
            .iter()
            .filter(|a| a.sealed_first_id().is_none())
            .map(WireMessages::count)
            .sum();
        let mut next = self.reserve_message_ids(unfinished.max(1));
        mapping::send_body(appends, &stream, &topic_id, &partitioning, || {
            let id = self.message_id(next);
            next = next.wrapping_add(1);
            id
        })
        .map_err(wire)
    }

    /// One Iggy send of `body` (`count` messages); the base offset of the first.
    async fn send_group(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        body: bytes::Bytes,
        count: usize,
    ) -> StoreResult<Sent> {
        let _permit = self
            .inner
            .sends
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("bridge closed".into()))?;
        let session = self.session_for(&r.target, partition);
        let send = send_messages_raw(session, body);
        let sent = self.call(Op::Write, topic, partition.kafka(), send).await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                // The topic may have been deleted or changed behind the cache; a stall
                // says nothing about that, and appends during it keep the description.
                if !matches!(e, StoreError::Timeout(_) | StoreError::Unavailable(_)) {
                    self.forget(topic);
                }
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
                let count = convert::kafka_count(count);
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

    /// The prepared messages of a checked batch, its records fed to the sink one by one.
    fn prepare_within(
        held: &Arc<AtomicUsize>,
        limit: usize,
        batch: &ValidBatch,
        ids: impl FnOnce(usize) -> u128,
    ) -> Option<Prepared> {
        let epoch = batch.header().partition_leader_epoch;
        let sink = sink_within(held, limit, batch.batch(), epoch, batch.section(), ids)?;
        let mut sink: Box<dyn RecordSink> = Box::new(sink);
        for r in batch.batch().record_refs_in(batch.section()) {
            sink.record(&r.unwrap());
        }
        sink.finish()
    }

    #[test]
    fn a_send_groups_waiting_appends_up_to_the_limit() {
        let mut q = SendQueue::new(100, 1 << 20, Budget::new(1 << 20));
        let mut answers = Vec::new();
        for bytes in [400, 300, 300, 1, 5000, 200, 700, 100] {
            let (done, answer) = tokio::sync::oneshot::channel();
            answers.push(answer);
            let admitted = q.room.try_admit(bytes).unwrap();
            q.waiting.push_back(Waiting {
                messages: WireMessages::new(0, 0, 0),
                bytes,
                key: None,
                done,
                admitted,
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

    #[test]
    fn a_failed_send_fails_the_waiting_appends_of_its_producers() {
        let mut q = SendQueue::new(100, 1 << 20, Budget::new(1 << 20));
        let key = |producer_id, epoch, base_sequence| BatchKey {
            producer_id,
            epoch,
            base_sequence,
            records: 1,
        };
        let mut answers = Vec::new();
        for k in [
            Some(key(7, 0, 1)),
            Some(key(8, 0, 5)),
            None,
            Some(key(7, 0, 2)),
            Some(key(7, 1, 0)),
        ] {
            let (done, answer) = tokio::sync::oneshot::channel();
            answers.push(answer);
            let admitted = q.room.try_admit(10).unwrap();
            q.bytes += 10;
            q.appends += 1;
            if let Some(k) = k {
                q.joined.insert(k, Vec::new());
            }
            q.waiting.push_back(Waiting {
                messages: WireMessages::new(0, 0, 0),
                bytes: 10,
                key: k,
                done,
                admitted,
            });
        }
        let (retry, retried) = tokio::sync::oneshot::channel();
        q.joined.get_mut(&key(7, 0, 2)).unwrap().push(retry);
        // Producer 7 at epoch 0 had a batch fail ahead of these.
        q.fail_behind(&[(7, 0)], &StoreError::Unavailable("lost".into()));
        let failed: Vec<bool> = answers
            .iter_mut()
            .map(|a| matches!(a.try_recv(), Ok(Err(_))))
            .collect();
        assert_eq!(failed, [true, false, false, true, false]);
        assert!(matches!(retried.blocking_recv(), Ok(Err(_))));
        assert_eq!((q.waiting.len(), q.appends, q.bytes), (3, 3, 30));
        assert!(!q.joined.contains_key(&key(7, 0, 1)));
        assert!(q.joined.contains_key(&key(7, 1, 0)));
        // Their places in the queue are given back.
        assert_eq!(q.room.appends.available_permits(), 97);
    }

    /// The body of a send of `messages` alone, ids from 1.
    fn body_of(messages: WireMessages) -> bytes::Bytes {
        let target = (
            WireIdentifier::named("kafka").unwrap(),
            WireIdentifier::named("prepared-topic").unwrap(),
            WirePartitioning::PartitionId(1),
        );
        let mut id = 0u128;
        mapping::send_body(vec![messages], &target.0, &target.1, &target.2, || {
            id += 1;
            id
        })
        .unwrap()
        .body
    }

    /// A batch of `n` records of 100 bytes, headers from the `headed`th record on.
    fn batch_bytes(n: i64, headed: i64) -> bytes::Bytes {
        use kafka_records::{BatchOptions, Header, NewRecord, encode_batch};
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000 + i,
                key: (i % 3 == 0).then(|| bytes::Bytes::from(format!("key-{i}"))),
                value: Some(bytes::Bytes::from(vec![i as u8; 100])),
                headers: if i >= headed {
                    vec![Header::new(bytes::Bytes::from_static(b"h"), None)]
                } else {
                    vec![]
                },
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        out.freeze()
    }

    #[test]
    fn the_checks_walk_maps_the_same_messages_as_the_append() {
        let limits = kafka_records::DecodeLimits::default();
        // All in place; in place then record by record; record by record from the first;
        // each as sent (leader epoch 0, as librdkafka sends) and with the epoch the
        // broker stamps over another (-1, as the Java producer sends; 7).
        for (headed, sent_epoch) in [(100, 0), (30, 0), (0, 0), (100, -1), (30, -1), (0, 7)] {
            let mut bytes = batch_bytes(40, headed).to_vec();
            bytes[12..16].copy_from_slice(&i32::to_be_bytes(sent_epoch));
            let bytes = Bytes::from(bytes);
            let held = Arc::new(AtomicUsize::new(0));
            let mut made = 0;
            let mut sink_for = |b: &RecordBatch, s: &Bytes| {
                made += 1;
                assert_eq!(b.header().partition_leader_epoch, sent_epoch);
                let sink = sink_within(&held, usize::MAX, b, 0, s, |_| 1)?;
                Some(Box::new(sink) as Box<dyn RecordSink>)
            };
            let mut checked =
                kafka_store::check_batches_with(&bytes, &limits, &mut sink_for).unwrap();
            assert_eq!(made, 1);
            let batch = checked.batches.remove(0);
            let taken = IggyBridge::take_prepared(std::slice::from_ref(&batch)).unwrap();
            // What the append would map from the batch as stored, stamped with epoch 0.
            let stamped = batch.with_leader_epoch(0);
            let mut own = WireMessages::new(0, 0, taken.origin_micros());
            own.push_batch(stamped.batch(), stamped.section()).unwrap();
            let case = format!("headers from {headed}, epoch {sent_epoch}");
            assert_eq!(taken.count(), 40, "{case}");
            assert_eq!(body_of(taken), body_of(own), "{case}");
            assert_eq!(held.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn a_batch_failing_its_check_after_its_records_gives_back_its_hold() {
        // recordCount says 41 but the batch holds 40: every record is well-formed and
        // fed to the sink, then the count fails the check.
        let mut bytes = batch_bytes(40, 100).to_vec();
        bytes[57..61].copy_from_slice(&41i32.to_be_bytes());
        let crc = kafka_records::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        let held = Arc::new(AtomicUsize::new(0));
        let mut fed = 0usize;
        let mut sink_for = |b: &RecordBatch, s: &Bytes| {
            let sink = sink_within(&held, usize::MAX, b, 0, s, |n| {
                fed = n;
                1
            })?;
            Some(Box::new(sink) as Box<dyn RecordSink>)
        };
        let limits = kafka_records::DecodeLimits::default();
        let err =
            kafka_store::check_batches_with(&bytes::Bytes::from(bytes), &limits, &mut sink_for)
                .unwrap_err();
        assert!(err.to_string().contains("record"), "{err}");
        assert_eq!(fed, 41);
        assert_eq!(held.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn prepared_messages_are_the_appends_own_and_taken_once() {
        // From the 30th record on, headers: the rest goes record by record.
        let batch = kafka_store::suite::valid(vec![batch_bytes(40, 30)])
            .unwrap()
            .remove(0);
        let held = Arc::new(AtomicUsize::new(0));
        let prepared = prepare_within(&held, usize::MAX, &batch, |_| 1).unwrap();
        let reserved = held.load(Ordering::Relaxed);
        assert_eq!(
            reserved,
            capacity_of(batch.batch(), batch.section().len()) + mapping::MAX_SEND_ROOM
        );
        // The budget holds one such batch, not two.
        assert!(prepare_within(&held, reserved * 3 / 2, &batch, |_| 1).is_none());
        assert_eq!(held.load(Ordering::Relaxed), reserved);
        let batch = batch.with_prepared(prepared);
        let clone = batch.clone();
        let taken = IggyBridge::take_prepared(std::slice::from_ref(&batch)).unwrap();
        // Taken: out of the budget.
        assert_eq!(held.load(Ordering::Relaxed), 0);
        // What the append would have written itself, at the same origin.
        let mut own = WireMessages::new(0, 0, taken.origin_micros());
        own.push_batch(batch.batch(), batch.section()).unwrap();
        assert_eq!(taken.count(), 40);
        assert_eq!(taken.data_bytes(), own.data_bytes());
        assert_eq!(body_of(taken), body_of(own));
        // Taken once: the clone, and an append of two batches, map their records.
        assert!(IggyBridge::take_prepared(std::slice::from_ref(&clone)).is_none());
        let fresh = prepare_within(&held, usize::MAX, &batch, |_| 1).unwrap();
        let batch = batch.with_prepared(fresh);
        assert!(IggyBridge::take_prepared(&[batch.clone(), batch.clone()]).is_none());
        // Never taken: given back when the last copy of the batch goes.
        assert_eq!(held.load(Ordering::Relaxed), reserved);
        drop(clone);
        drop(batch);
        assert_eq!(held.load(Ordering::Relaxed), 0);
    }

    fn key(producer_id: i64, epoch: i16, base_sequence: i32) -> BatchKey {
        BatchKey {
            producer_id,
            epoch,
            base_sequence,
            records: 3,
        }
    }

    #[test]
    fn landed_batches_are_found_per_producer_and_epoch() {
        let mut landed = Landed::default();
        assert!(landed.insert(key(7, 0, 0), 100, true));
        assert!(!landed.insert(key(7, 0, 3), 103, true));
        assert_eq!(landed.find(&key(7, 0, 0)), Some(100));
        assert_eq!(landed.find(&key(7, 0, 3)), Some(103));
        // Another epoch, sequence, record count or producer is another batch.
        assert_eq!(landed.find(&key(7, 1, 0)), None);
        assert_eq!(landed.find(&key(7, 0, 6)), None);
        assert_eq!(landed.find(&key(8, 0, 0)), None);
        let mut other = key(7, 0, 0);
        other.records = 4;
        assert_eq!(landed.find(&other), None);
        // A new epoch forgets the old one's batches.
        landed.insert(key(7, 1, 0), 200, true);
        assert_eq!(landed.find(&key(7, 0, 3)), None);
        assert_eq!(landed.find(&key(7, 1, 0)), Some(200));
    }

    #[test]
    fn landed_memory_is_bounded() {
        let mut landed = Landed::default();
        // At the bound with nothing here to replace: not remembered.
        assert!(!landed.insert(key(1, 0, 0), 0, false));
        assert!(landed.producers.is_empty());
        for seq in 0..20 {
            landed.insert(key(1, 0, seq), i64::from(seq), true);
        }
        assert_eq!(landed.producers[&1].batches.len(), LANDED_PER_PRODUCER);
        assert_eq!(landed.find(&key(1, 0, 19)), Some(19));
        assert_eq!(landed.find(&key(1, 0, 0)), None);
        for producer in 2..4 {
            assert!(landed.insert(key(producer, 0, 0), producer, true));
        }
        // At the bound: each new producer replaces the least recently seen one.
        for producer in 4..10 {
            assert!(!landed.insert(key(producer, 0, 0), producer, false));
        }
        assert_eq!(landed.producers.len(), 3);
        assert!(landed.find(&key(9, 0, 0)).is_some());
        assert!(landed.find(&key(1, 0, 19)).is_none());
    }

    #[tokio::test]
    async fn a_queue_takes_one_append_of_any_size_then_keeps_its_bounds() {
        let room = Room::new(2, 100, Budget::new(1000));
        // Larger than the queue: taken when it is empty, and then it goes alone.
        let big = room.try_admit(10_000).unwrap();
        assert!(room.try_admit(1).is_none());
        drop(big);
        let a = room.try_admit(60).unwrap();
        assert!(room.try_admit(41).is_none());
        let b = room.try_admit(40).unwrap();
        // Two appends held: no slot for a third, however small.
        assert!(room.try_admit(0).is_none());
        drop((a, b));
        assert!(room.try_admit(100).is_some());
    }

    #[tokio::test]
    async fn appends_wait_for_room_in_arrival_order_and_may_give_up() {
        use std::time::Duration;
        let room = Arc::new(Room::new(10, 100, Budget::new(1000)));
        let first = room.try_admit(80).unwrap();
        // A large append waits; a small one that arrives after it waits behind it,
        // although it would fit now.
        let large = tokio::spawn({
            let room = Arc::clone(&room);
            async move { room.admit(100).await.map(|_| "large") }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(room.try_admit(10).is_none(), "overtook a waiting append");
        let small = tokio::spawn({
            let room = Arc::clone(&room);
            async move { room.admit(10).await.map(|_| "small") }
        });
        // One that gives up leaves the line without taking anything.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), room.admit(5))
                .await
                .is_err()
        );
        assert!(!large.is_finished() && !small.is_finished());
        drop(first);
        assert_eq!(large.await.unwrap(), Some("large"));
        assert_eq!(small.await.unwrap(), Some("small"));
        // Everything given back.
        assert!(room.try_admit(100).is_some());
    }

    #[tokio::test]
    async fn partitions_share_the_budget_and_wait_for_it_in_arrival_order() {
        use std::time::Duration;
        let all = Budget::new(150);
        let (p0, p1) = (
            Arc::new(Room::new(10, 100, all.clone())),
            Arc::new(Room::new(10, 100, all.clone())),
        );
        let a = p0.try_admit(100).unwrap();
        // Room in its own partition, not in the budget: waits for the budget.
        assert!(p1.try_admit(60).is_none());
        let waiting = tokio::spawn({
            let p1 = Arc::clone(&p1);
            async move { p1.admit(60).await.is_some() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A smaller one behind it does not overtake it, in either partition.
        assert!(p1.try_admit(10).is_none(), "overtook a waiting append");
        assert!(p0.try_admit(1).is_none(), "overtook a waiting append");
        assert!(!waiting.is_finished());
        drop(a);
        assert!(waiting.await.unwrap());
        // Larger than the budget: taken when it is all free, and then it goes alone.
        let all_of_it = Room::new(10, 1000, all.clone());
        let big = all_of_it.try_admit(10_000).unwrap();
        assert_eq!(all.free(), 0);
        assert!(p0.try_admit(1).is_none());
        drop(big);
        assert_eq!(all.free(), 150);
    }
}
