//! One metadata log in generations, shared by every gateway on the meta stream: how it
//! is read, caught up, written, sealed and rolled into its next generation. The record
//! formats and the state folded from them are the caller's ([`Fold`]); the protocol is
//! described in the `crate::meta` module docs.

use super::{call, named, poisoned};
use crate::errors::Op;
use crate::metrics::IggyMetrics;
use crate::polled;
use crate::proof::{MetaProof, Verdict};
use bytes::Bytes;
use iggy::prelude::{
    IggyClient, IggyMessage, MessageClient, Partitioning, PollingStrategy, TopicClient,
    TopicCreateOptions,
};
use kafka_store::{StoreError, StoreResult};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Messages per poll when reading a log, and per send when writing a snapshot.
pub(super) const META_PAGE: u32 = 1000;

/// The high half of the id of every snapshot record: a copy written after the
/// generation's first marker (a second roller finishing the same snapshot) is ignored.
const SNAPSHOT_ID_HIGH: u64 = 0x736e_6170_7368_6f74;

/// Least time between two warnings about unreadable records of one log.
const SKIP_WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Generations one catch-up moves through at most before it reports back.
const MAX_MOVES: usize = 8;

/// Times a write is tried again when a seal landed before it or its generation vanished.
const WRITE_ATTEMPTS: usize = 4;

/// Reads of a write that is not visible yet before it counts as unconfirmed.
const READ_BACK_TRIES: u32 = 5;

/// The record that closes a snapshot.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotEnd {
    pub(super) snapshot_end: u64,
}

/// The record that ends a generation: records after the first one are not part of it,
/// and the log continues in generation `next` once that has its snapshot.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Seal {
    pub(super) seal: u64,
    pub(super) next: u64,
}

/// What a payload is to the protocol.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Control {
    /// A snapshot marker of this generation number.
    End(u64),
    /// A seal of generation `seal`, naming the next one.
    Seal { seal: u64, next: u64 },
    /// A record of the log's own.
    Record,
}

pub(super) fn control(payload: &[u8]) -> Control {
    // Both control records are short; a long payload is a record, unparsed here.
    if payload.len() > 64 {
        return Control::Record;
    }
    if let Ok(end) = serde_json::from_slice::<SnapshotEnd>(payload) {
        return Control::End(end.snapshot_end);
    }
    if let Ok(s) = serde_json::from_slice::<Seal>(payload) {
        return Control::Seal {
            seal: s.seal,
            next: s.next,
        };
    }
    Control::Record
}

/// The Iggy topic of generation `generation` of log `base`.
pub(super) fn generation_name(base: &str, generation: u64) -> String {
    if generation == 0 {
        base.to_owned()
    } else {
        format!("{base}.{generation}")
    }
}

/// The generation an Iggy topic named `name` is of log `base`, if it is one.
pub(super) fn generation_of(base: &str, name: &str) -> Option<u64> {
    if name == base {
        return Some(0);
    }
    let n: u64 = name.strip_prefix(base)?.strip_prefix('.')?.parse().ok()?;
    (n > 0 && generation_name(base, n) == name).then_some(n)
}

/// Whether a message id is one of a snapshot record.
fn is_snapshot_id(id: u128) -> bool {
    (id >> 64) as u64 == SNAPSHOT_ID_HIGH
}

/// The state folded from one log's records, last record per key wins.
pub(super) trait Fold: Default + Send {
    /// Folds one record in; `false` (and no change) when it cannot be read.
    fn apply(&mut self, payload: &[u8]) -> bool;
    /// The live state as records, which folded into an empty state give it back.
    fn records(&self) -> StoreResult<Vec<Vec<u8>>>;
    /// Live keys.
    fn live(&self) -> u64;
}

/// What every log shares: where the meta stream is, the bounds, ids for writes, and
/// generations waiting to be deleted.
#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) stream: String,
    pub(super) call_timeout: Duration,
    pub(super) metrics: IggyMetrics,
    pub(super) snapshot_records: u64,
    pub(super) record_max: usize,
    /// How long a generation left behind stays, for readers and writers still in it.
    pub(super) grace: Duration,
    id_high: u64,
    ids: AtomicU64,
    doomed: Mutex<Vec<(String, Instant)>>,
    /// Signs what is written and checks what is read (see [`crate::proof`]).
    proof: MetaProof,
    /// When refused records were last reported, and how many since.
    refused: Mutex<(Option<Instant>, u64)>,
}

impl Ctx {
    pub(super) fn new(
        stream: &str,
        call_timeout: Duration,
        metrics: &IggyMetrics,
        snapshot_records: u64,
        record_max: usize,
        grace: Duration,
        random: u64,
    ) -> Ctx {
        Ctx {
            stream: stream.to_owned(),
            call_timeout,
            metrics: metrics.clone(),
            snapshot_records,
            record_max,
            grace,
            id_high: if random == SNAPSHOT_ID_HIGH {
                !random
            } else {
                random
            },
            ids: AtomicU64::new(1),
            doomed: Mutex::new(Vec::new()),
            proof: MetaProof::off(stream),
            refused: Mutex::new((None, 0)),
        }
    }

    /// Signs and checks records with `proof`.
    pub(super) fn with_proof(mut self, proof: MetaProof) -> Ctx {
        self.proof = proof;
        self
    }

    /// Whether a record read from `log` may be used; a refused one is counted and
    /// reported (one warning per [`SKIP_WARN_INTERVAL`] at most over every log).
    fn proven(&self, log: &str, m: &IggyMessage) -> bool {
        if !self.proof.enabled() {
            return true;
        }
        let verdict = self.proof.check(
            log,
            &m.payload,
            crate::proof::header_of(m).as_deref(),
            m.header.timestamp,
        );
        if verdict == Verdict::Accepted {
            return true;
        }
        self.metrics.record_meta_refused(log, verdict.reason());
        if let Ok(mut r) = self.refused.lock() {
            r.1 = r.1.saturating_add(1);
            if r.0.is_none_or(|t| t.elapsed() >= SKIP_WARN_INTERVAL) {
                tracing::warn!(
                    log,
                    offset = m.header.offset,
                    reason = verdict.reason(),
                    refused = r.1,
                    "ignored metadata records without a valid proof that a gateway wrote \
                     them (an Iggy user other than the gateways can write the meta stream, \
                     or the gateways' meta secrets differ)"
                );
                *r = (Some(Instant::now()), 0);
            }
        }
        false
    }

    /// `n` consecutive fresh ids of ordinary records; the first is returned.
    fn ids(&self, n: usize) -> u128 {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let first = self.ids.fetch_add(n, Ordering::Relaxed);
        (u128::from(self.id_high) << 64) | u128::from(first)
    }

    fn snapshot_ids(&self, n: usize) -> u128 {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let first = self.ids.fetch_add(n, Ordering::Relaxed);
        (u128::from(SNAPSHOT_ID_HIGH) << 64) | u128::from(first)
    }

    /// The names of the topics of the meta stream.
    pub(super) async fn names(&self, client: &IggyClient) -> StoreResult<Vec<String>> {
        Ok(call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            &self.stream,
            client.get_topics(&named(&self.stream)?),
        )
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect())
    }

    pub(super) async fn ensure_topic(&self, client: &IggyClient, topic: &str) -> StoreResult<()> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        let found = call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            topic,
            client.get_topic(&s, &t),
        )
        .await?;
        if found.is_some() {
            return Ok(());
        }
        let options = TopicCreateOptions {
            partitions_count: Some(1),
            ..TopicCreateOptions::default()
        };
        match call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            topic,
            client.create_topic(&s, topic, &options),
        )
        .await
        {
            Ok(_) | Err(StoreError::TopicAlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes a topic of the meta stream; a failure is logged (it is tried again
    /// later or at the next start).
    pub(super) async fn drop_topic(&self, client: &IggyClient, topic: &str) {
        let (Ok(s), Ok(t)) = (named(&self.stream), named(topic)) else {
            return;
        };
        let deleted = call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            topic,
            client.delete_topic(&s, &t),
        )
        .await;
        match deleted {
            Ok(()) | Err(StoreError::UnknownTopicOrPartition { .. }) => {}
            Err(e) => tracing::warn!(topic, error = %e, "cannot delete an old metadata log"),
        }
    }

    /// Deletes `topic` once the grace has passed (see [`Ctx::reap`]).
    fn doom(&self, topic: String) {
        let at = Instant::now() + self.grace;
        if let Ok(mut doomed) = self.doomed.lock()
            && !doomed.iter().any(|(t, _)| *t == topic)
        {
            doomed.push((topic, at));
        }
    }

    /// Deletes the generations whose grace has passed.
    pub(super) async fn reap(&self, client: &IggyClient) {
        let due: Vec<String> = match self.doomed.lock() {
            Ok(mut doomed) => {
                let now = Instant::now();
                let (due, keep): (Vec<_>, Vec<_>) =
                    doomed.drain(..).partition(|(_, at)| *at <= now);
                *doomed = keep;
                due.into_iter().map(|(t, _)| t).collect()
            }
            Err(_) => return,
        };
        for topic in due {
            self.drop_topic(client, &topic).await;
        }
    }

    /// Sends records of log `log` (its base name) with consecutive ids from
    /// `first_id`, in one `send_messages`, each with its proof when a secret is set.
    async fn append(
        &self,
        client: &IggyClient,
        log: &str,
        topic: &str,
        first_id: u128,
        payloads: Vec<Vec<u8>>,
    ) -> StoreResult<()> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        let now_ms = crate::proof::unix_ms();
        let mut messages = payloads
            .into_iter()
            .zip(first_id..)
            .map(|(p, id)| {
                let headers = self
                    .proof
                    .sign(log, &p, now_ms)
                    .map(|proof| crate::proof::headers(&proof));
                let mut m = IggyMessage::builder()
                    .payload(Bytes::from(p))
                    .maybe_user_headers(headers.transpose()?)
                    .build()
                    .map_err(|e| StoreError::Internal(format!("metadata record: {e}")))?;
                m.header.id = id;
                Ok(m)
            })
            .collect::<StoreResult<Vec<_>>>()?;
        call(
            &self.metrics,
            self.call_timeout,
            Op::Write,
            topic,
            client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut messages),
        )
        .await
        .map(|_| ())
    }

    async fn poll(
        &self,
        client: &IggyClient,
        topic: &str,
        offset: u64,
    ) -> StoreResult<Vec<IggyMessage>> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        Ok(call(
            &self.metrics,
            self.call_timeout,
            Op::Read,
            topic,
            polled::poll_checked(
                client,
                &s,
                &t,
                0,
                &PollingStrategy::offset(offset),
                META_PAGE,
            ),
        )
        .await?
        .messages)
    }
}

/// Where this gateway stands in a log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cursor {
    /// Whether the state was read at all.
    pub(super) loaded: bool,
    /// The generation read and written.
    pub(super) generation: u64,
    /// The next offset to read in it.
    pub(super) next: u64,
    /// The generation the first seal of this one names, once read.
    pub(super) sealed: Option<u64>,
    /// Records after the snapshot read or written so far.
    pub(super) tail: u64,
    /// Whether the state was given up on purpose (a coordinator shard released); kept
    /// until it is read again.
    pub(super) released: bool,
}

/// The end of one read of a generation.
#[derive(Debug, Default)]
struct Scan {
    next: u64,
    marked: bool,
    seal: Option<u64>,
    tail: u64,
    found: bool,
}

/// Where a read of a generation starts, and the record it looks for.
#[derive(Debug, Clone, Copy)]
struct Start {
    generation: u64,
    from: u64,
    /// Whether the snapshot marker lies before `from` (always for generation 0).
    marked: bool,
    want: Option<u128>,
}

impl Start {
    /// A generation read from its beginning.
    fn whole(generation: u64) -> Start {
        Start {
            generation,
            from: 0,
            marked: generation == 0,
            want: None,
        }
    }
}

/// One log: its state, and where this gateway stands in it (held while reading or
/// writing, so the state changes in log order).
#[derive(Debug)]
pub(super) struct Log<S> {
    pub(super) base: String,
    pub(super) state: Mutex<S>,
    pub(super) cursor: tokio::sync::Mutex<Cursor>,
    /// When unreadable records were last reported, and how many since.
    skipped: Mutex<(Option<Instant>, u64)>,
}

fn gone(e: &StoreError) -> bool {
    matches!(e, StoreError::UnknownTopicOrPartition { .. })
}

impl<S: Fold> Log<S> {
    pub(super) fn new(base: String) -> Log<S> {
        Log {
            base,
            state: Mutex::new(S::default()),
            cursor: tokio::sync::Mutex::new(Cursor::default()),
            skipped: Mutex::new((None, 0)),
        }
    }

    /// Reads generation `generation` from `from` into `sink` until its end or its
    /// first seal (not read past: the records after it are not the generation's).
    async fn scan(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        start: Start,
        sink: &mut (dyn FnMut(&[u8]) -> bool + Send),
    ) -> StoreResult<Scan> {
        let Start {
            generation,
            from,
            mut marked,
            want,
        } = start;
        let topic = generation_name(&self.base, generation);
        let mut scan = Scan {
            next: from,
            ..Scan::default()
        };
        let mut skipped = 0u64;
        'pages: loop {
            let messages = ctx.poll(client, &topic, scan.next).await?;
            if messages.is_empty() {
                break;
            }
            for m in &messages {
                if !ctx.proven(&self.base, m) {
                    // Not a gateway's: as if it were not there (not even a seal or a
                    // marker).
                    scan.next = m.header.offset + 1;
                    continue;
                }
                match control(&m.payload) {
                    Control::End(n) => {
                        if n == generation && !marked {
                            marked = true;
                            scan.tail = 0;
                        }
                        scan.next = m.header.offset + 1;
                        continue;
                    }
                    Control::Seal { seal, next } if seal == generation && next > seal && marked => {
                        // Stay on the seal: reading again finds it again.
                        scan.next = m.header.offset;
                        scan.seal = Some(next);
                        break 'pages;
                    }
                    Control::Seal { .. } => {
                        scan.next = m.header.offset + 1;
                        continue;
                    }
                    Control::Record => {}
                }
                scan.next = m.header.offset + 1;
                if marked && is_snapshot_id(m.header.id) {
                    continue;
                }
                if want == Some(m.header.id) {
                    scan.found = true;
                }
                if m.payload.len() > ctx.record_max || !sink(&m.payload) {
                    skipped += 1;
                }
                if marked {
                    scan.tail += 1;
                }
            }
        }
        scan.marked = marked;
        self.report_skipped(skipped);
        Ok(scan)
    }

    /// One warning per [`SKIP_WARN_INTERVAL`] at most, counting what was skipped since.
    fn report_skipped(&self, n: u64) {
        if n == 0 {
            return;
        }
        let Ok(mut s) = self.skipped.lock() else {
            return;
        };
        s.1 = s.1.saturating_add(n);
        if s.0.is_none_or(|t| t.elapsed() >= SKIP_WARN_INTERVAL) {
            tracing::warn!(
                log = %self.base,
                skipped = s.1,
                "skipped unreadable or oversized metadata records"
            );
            *s = (Some(Instant::now()), 0);
        }
    }

    fn apply(&self, payload: &[u8]) -> bool {
        match self.state.lock() {
            Ok(mut state) => state.apply(payload),
            Err(_) => false,
        }
    }

    /// Reads the log from its newest generation with a complete snapshot; the older
    /// ones are deleted after the grace. Creates generation 0 of a log that has none.
    pub(super) async fn load(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
    ) -> StoreResult<()> {
        for _ in 0..3 {
            let names = ctx.names(client).await?;
            let mut generations: Vec<u64> = names
                .iter()
                .filter_map(|n| generation_of(&self.base, n))
                .collect();
            generations.sort_unstable();
            if generations.is_empty() {
                ctx.ensure_topic(client, &self.base).await?;
                *self.state.lock().map_err(poisoned)? = S::default();
                *cur = Cursor {
                    loaded: true,
                    ..Cursor::default()
                };
                return Ok(());
            }
            let mut vanished = false;
            while let Some(generation) = generations.pop() {
                let mut fresh = S::default();
                let scan = match self
                    .scan(ctx, client, Start::whole(generation), &mut |p| {
                        fresh.apply(p)
                    })
                    .await
                {
                    Ok(scan) => scan,
                    Err(e) if gone(&e) => {
                        vanished = true;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if !scan.marked {
                    // A roll in progress, or one cut short: not this log's state yet.
                    continue;
                }
                *self.state.lock().map_err(poisoned)? = fresh;
                *cur = Cursor {
                    loaded: true,
                    generation,
                    next: scan.next,
                    sealed: scan.seal,
                    tail: scan.tail,
                    released: false,
                };
                for older in generations {
                    ctx.doom(generation_name(&self.base, older));
                }
                return Ok(());
            }
            if !vanished {
                break;
            }
        }
        Err(StoreError::Unavailable(format!(
            "metadata log {} has no complete generation",
            self.base
        )))
    }

    /// Reads what was written since this gateway last read, through seals into the
    /// generations they name. With `complete`, a seal whose next generation has no
    /// snapshot yet gets it written here (its roller may be gone); without, reading
    /// stops at the seal. `true` when the record with id `want` was read before any
    /// seal of its generation.
    pub(super) async fn catch_up(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
        complete: bool,
        want: Option<u128>,
    ) -> StoreResult<bool> {
        if !cur.loaded {
            self.load(ctx, client, cur).await?;
            return Ok(false);
        }
        let mut found = false;
        for _ in 0..MAX_MOVES {
            let to = match cur.sealed {
                Some(to) => to,
                None => {
                    let scan = match self
                        .scan(
                            ctx,
                            client,
                            Start {
                                generation: cur.generation,
                                from: cur.next,
                                marked: true,
                                want,
                            },
                            &mut |p| self.apply(p),
                        )
                        .await
                    {
                        Ok(scan) => scan,
                        Err(e) if gone(&e) => {
                            // Left behind longer than the grace: read it all again.
                            self.load(ctx, client, cur).await?;
                            return Ok(false);
                        }
                        Err(e) => return Err(e),
                    };
                    found |= scan.found;
                    cur.next = scan.next;
                    cur.tail = cur.tail.saturating_add(scan.tail);
                    match scan.seal {
                        None => return Ok(found),
                        Some(to) => {
                            cur.sealed = Some(to);
                            to
                        }
                    }
                }
            };
            if self.enter(ctx, client, cur, to).await? {
                continue;
            }
            if !complete {
                return Ok(found);
            }
            if self.left_behind(ctx, client, cur.generation, to).await? {
                // Paused past the grace: the log moved on and this gateway's state is
                // old. Writing the snapshot now would bring back a dead generation.
                self.load(ctx, client, cur).await?;
                return Ok(false);
            }
            self.write_snapshot(ctx, client, to).await?;
            if !self.enter(ctx, client, cur, to).await? {
                return Err(StoreError::Unavailable(format!(
                    "metadata log {}: generation {to} has no complete snapshot",
                    self.base
                )));
            }
        }
        Ok(found)
    }

    /// Whether the roll from `generation` into `to` is long over: `generation` is gone
    /// (deleted a grace after others moved on) or a generation above `to` exists (only
    /// a gateway that entered `to` can have rolled past it).
    async fn left_behind(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        generation: u64,
        to: u64,
    ) -> StoreResult<bool> {
        let existing: Vec<u64> = ctx
            .names(client)
            .await?
            .iter()
            .filter_map(|n| generation_of(&self.base, n))
            .collect();
        Ok(!existing.contains(&generation) || existing.iter().any(|g| *g > to))
    }

    /// Moves to generation `to` when its snapshot is complete: its state replaces this
    /// one whole, and the generation left is deleted after the grace.
    async fn enter(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
        to: u64,
    ) -> StoreResult<bool> {
        let mut fresh = S::default();
        let scan = match self
            .scan(ctx, client, Start::whole(to), &mut |p| fresh.apply(p))
            .await
        {
            Ok(scan) => scan,
            Err(e) if gone(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        if !scan.marked {
            return Ok(false);
        }
        *self.state.lock().map_err(poisoned)? = fresh;
        let left = cur.generation;
        *cur = Cursor {
            loaded: true,
            generation: to,
            next: scan.next,
            sealed: scan.seal,
            tail: scan.tail,
            released: false,
        };
        if left != to {
            ctx.doom(generation_name(&self.base, left));
        }
        Ok(true)
    }

    /// Writes the state (as of the seal just read) into generation `to` as snapshot
    /// records, then its marker.
    async fn write_snapshot(&self, ctx: &Ctx, client: &IggyClient, to: u64) -> StoreResult<()> {
        let topic = generation_name(&self.base, to);
        ctx.ensure_topic(client, &topic).await?;
        let records = self.state.lock().map_err(poisoned)?.records()?;
        let live = records.len();
        let page = usize::try_from(META_PAGE).unwrap_or(1000);
        for chunk in records.chunks(page) {
            let first = ctx.snapshot_ids(chunk.len());
            ctx.append(client, &self.base, &topic, first, chunk.to_vec())
                .await?;
        }
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: to })
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        ctx.append(client, &self.base, &topic, ctx.ids(1), vec![end])
            .await?;
        tracing::info!(log = %self.base, generation = to, records = live, "metadata log snapshotted");
        Ok(())
    }

    /// Seals the generation and rolls the log into a new one when its tail is
    /// `snapshot_records` long and at least as long as the live state. A failure is
    /// logged and left for the next write.
    pub(super) async fn roll_if_long(&self, ctx: &Ctx, client: &IggyClient, cur: &mut Cursor) {
        let live = match self.state.lock() {
            Ok(s) => s.live(),
            Err(_) => return,
        };
        if cur.sealed.is_some() || cur.tail < ctx.snapshot_records.max(live) {
            return;
        }
        if let Err(e) = self.roll(ctx, client, cur).await {
            tracing::warn!(log = %self.base, error = %e, "metadata log roll failed");
        }
    }

    /// Seals the current generation naming one above every generation there is, then
    /// catches up through the first seal (this one or a racing roller's), writing the
    /// snapshot it names if it is not complete yet.
    pub(super) async fn roll(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
    ) -> StoreResult<()> {
        let names = ctx.names(client).await?;
        let next = names
            .iter()
            .filter_map(|n| generation_of(&self.base, n))
            .max()
            .unwrap_or(0)
            .max(cur.generation)
            .saturating_add(1);
        let seal = serde_json::to_vec(&Seal {
            seal: cur.generation,
            next,
        })
        .map_err(|e| StoreError::Internal(e.to_string()))?;
        let topic = generation_name(&self.base, cur.generation);
        ctx.append(client, &self.base, &topic, ctx.ids(1), vec![seal])
            .await?;
        self.catch_up(ctx, client, cur, true, None).await?;
        Ok(())
    }

    fn check_sizes(ctx: &Ctx, payloads: &[Vec<u8>]) -> StoreResult<()> {
        match payloads.iter().map(Vec::len).max() {
            Some(size) if size > ctx.record_max => Err(StoreError::MessageTooLarge {
                size,
                max: ctx.record_max,
            }),
            _ => Ok(()),
        }
    }

    /// Writes records to a log other gateways write too, and returns once they are
    /// confirmed part of it: read back before any seal of the generation they landed
    /// in. Records that landed after a seal are written again into the next
    /// generation. Applied to the state as they are read back, in log order.
    pub(super) async fn write_shared(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
        payloads: Vec<Vec<u8>>,
    ) -> StoreResult<()> {
        if payloads.is_empty() {
            return Ok(());
        }
        Self::check_sizes(ctx, &payloads)?;
        for _ in 0..WRITE_ATTEMPTS {
            self.catch_up(ctx, client, cur, true, None).await?;
            if cur.sealed.is_some() {
                continue;
            }
            let generation = cur.generation;
            let first = ctx.ids(payloads.len());
            let topic = generation_name(&self.base, generation);
            match ctx
                .append(client, &self.base, &topic, first, payloads.clone())
                .await
            {
                Ok(()) => {}
                Err(e) if gone(&e) => {
                    self.load(ctx, client, cur).await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            for attempt in 0..READ_BACK_TRIES {
                if self.catch_up(ctx, client, cur, true, Some(first)).await? {
                    self.roll_if_long(ctx, client, cur).await;
                    return Ok(());
                }
                if cur.generation != generation {
                    // A seal landed first: written again into the generation it names.
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
            }
            if cur.generation == generation {
                break;
            }
        }
        Err(StoreError::Unavailable(format!(
            "metadata log {}: a write could not be confirmed",
            self.base
        )))
    }

    /// Writes records to a log this gateway alone writes (a coordinator shard it holds)
    /// and applies them: not read back.
    pub(super) async fn write_owned(
        &self,
        ctx: &Ctx,
        client: &IggyClient,
        cur: &mut Cursor,
        payloads: Vec<Vec<u8>>,
    ) -> StoreResult<()> {
        if payloads.is_empty() {
            return Ok(());
        }
        Self::check_sizes(ctx, &payloads)?;
        if !cur.loaded || cur.sealed.is_some() {
            // A roll the previous writer left unfinished is finished first.
            self.catch_up(ctx, client, cur, true, None).await?;
        }
        for attempt in 0..2 {
            let topic = generation_name(&self.base, cur.generation);
            let first = ctx.ids(payloads.len());
            match ctx
                .append(client, &self.base, &topic, first, payloads.clone())
                .await
            {
                Ok(()) => {
                    let n = u64::try_from(payloads.len()).unwrap_or(u64::MAX);
                    {
                        let mut state = self.state.lock().map_err(poisoned)?;
                        let mut skipped = 0u64;
                        for p in &payloads {
                            if !state.apply(p) {
                                skipped += 1;
                            }
                        }
                        drop(state);
                        self.report_skipped(skipped);
                    }
                    cur.tail = cur.tail.saturating_add(n);
                    self.roll_if_long(ctx, client, cur).await;
                    return Ok(());
                }
                // Another writer rolled it (two coordinators for a moment): read again.
                Err(e) if gone(&e) && attempt == 0 => {
                    self.catch_up(ctx, client, cur, true, None).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unavailable(format!(
            "metadata log {}: its generation keeps vanishing",
            self.base
        )))
    }

    /// Forgets the state: the next use reads the log again.
    pub(super) fn unload(&self, cur: &mut Cursor) -> StoreResult<()> {
        *self.state.lock().map_err(poisoned)? = S::default();
        *cur = Cursor {
            released: true,
            ..Cursor::default()
        };
        Ok(())
    }

    /// Every generation of this log, deleted now (a legacy log after its migration).
    pub(super) async fn drop_all(&self, ctx: &Ctx, client: &IggyClient) -> StoreResult<()> {
        let names = ctx.names(client).await?;
        for name in names {
            if generation_of(&self.base, &name).is_some() {
                ctx.drop_topic(client, &name).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_named_and_recognized() {
        assert_eq!(generation_name("offsets", 0), "offsets");
        assert_eq!(generation_name("offsets", 7), "offsets.7");
        assert_eq!(generation_name("groups.3", 7), "groups.3.7");
        for n in [0, 1, 42, u64::MAX] {
            assert_eq!(
                generation_of("offsets", &generation_name("offsets", n)),
                Some(n)
            );
            for shard in 0..16 {
                let base = format!("groups.{shard}");
                assert_eq!(generation_of(&base, &generation_name(&base, n)), Some(n));
            }
        }
        for other in [
            "topics",
            "offsets.",
            "offsets.0",
            "offsets.01",
            "offsets.-1",
            "offsets.x",
            "offsetsx",
            "offsets.1.2",
        ] {
            assert_eq!(generation_of("offsets", other), None, "{other}");
        }
        // Shard 1 and shard 12 never claim each other's generations.
        assert_eq!(generation_of("groups.1", "groups.12"), None);
        assert_eq!(generation_of("groups.1", "groups.12.3"), None);
        assert_eq!(generation_of("groups.12", "groups.1.2"), None);
        assert_eq!(generation_of("groups.1", "groups.1.2"), Some(2));
    }

    #[test]
    fn control_records_are_told_apart_from_records() {
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: 3 }).unwrap();
        assert_eq!(control(&end), Control::End(3));
        let seal = serde_json::to_vec(&Seal { seal: 3, next: 5 }).unwrap();
        assert_eq!(control(&seal), Control::Seal { seal: 3, next: 5 });
        for other in [
            &br#"{"snapshot_end":3,"x":1}"#[..],
            br#"{"seal":3}"#,
            br#"{"g":"a","s":null}"#,
            br#"not json"#,
            b"",
        ] {
            assert_eq!(control(other), Control::Record);
        }
    }

    #[test]
    fn snapshot_ids_are_recognized_and_ordinary_ids_never_are() {
        let ctx = Ctx::new(
            "m",
            Duration::from_secs(1),
            &IggyMetrics::default(),
            100,
            1 << 20,
            Duration::from_secs(1),
            SNAPSHOT_ID_HIGH,
        );
        assert!(is_snapshot_id(ctx.snapshot_ids(3)));
        let first = ctx.ids(5);
        for id in first..first + 5 {
            assert!(!is_snapshot_id(id));
        }
        assert_ne!(ctx.ids(1), ctx.ids(1));
    }
}
