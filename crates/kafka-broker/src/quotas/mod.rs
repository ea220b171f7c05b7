//! Client quotas: how much a client may produce, fetch and keep the broker busy.
//!
//! Three quotas, as Kafka names them, per client id:
//!
//! - `producer_byte_rate`: Produce request bytes per second;
//! - `consumer_byte_rate`: Fetch response bytes per second;
//! - `request_percentage`: time spent handling the client's requests, in percent of one
//!   second per second (100 = one handler busy all the time).
//!
//! # Which quota applies
//!
//! A quota comes from the most specific place that sets it: an entity set with
//! AlterClientQuotas for the exact client id, then the default client-id entity (client
//! id with a null name), then the broker's settings ([`QuotaConfig`]; unlimited unless
//! set, as in Kafka). Entities are keyed by [`QuotaEntity`], which already has room for a
//! user component, so per-user and (user, client id) quotas can be resolved in Kafka's
//! order once connections carry an authenticated principal.
//!
//! # Measuring
//!
//! Usage is a `rate::Rate` over a sliding window of `window_samples` slots of
//! `window_size` (Kafka: 11 of 1 s). Each tracked client id has one rate per quota. When a
//! client is over a quota, the throttle time is how long it must stay silent for its rate
//! to come back to the bound; the quota layer (`pipeline::quotas`) puts it in
//! `throttle_time_ms` and mutes the connection for that long.
//!
//! # Bounded state, and rotating client ids
//!
//! At most `max_tracked_clients` client ids have rates of their own. A client id unseen
//! for a whole window has no usage left to remember, so it is dropped first when room is
//! needed. When every tracked id is still active, a new client id is measured in one
//! shared overflow entry, together with every other untracked id, against the quota that
//! applies to it; so a client cannot buy fresh quota by inventing client ids once the
//! table is full.
//!
//! Kafka keeps one set of rates per client id (expired after an hour idle), so a client
//! that changes its client id with every connection gets a fresh default quota each time.
//! The gateway adds a second measure: every connection also has its own rates, checked
//! against the quota of the client id it currently uses. A connection never gets more
//! than one client's quota, however often it changes its client id; a client rotating
//! ids over many connections is bounded by the connection limits (per IP and in total)
//! times the default quota. Per-user quotas, once principals exist, close the rest.
//!
//! # Where quotas are kept
//!
//! Quotas set with AlterClientQuotas go to a [`QuotaStore`]. The broker reads them at
//! start and writes every change through. The built-in [`MemoryQuotaStore`] keeps them in
//! memory only: they do not survive a restart of the gateway (as with the embedded store
//! itself). A backend that can persist them (the Iggy bridge) implements the trait.

pub(crate) mod rate;

use crate::error::BrokerError;
use rate::{Rate, Window};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The quota settings of the broker.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaConfig {
    /// Produce bytes per second allowed to a client id without a quota of its own; 0
    /// means unlimited (Kafka's default client-id `producer_byte_rate`, unset by default).
    pub producer_byte_rate: u64,
    /// Fetch response bytes per second allowed to a client id without a quota of its
    /// own; 0 means unlimited (Kafka's default client-id `consumer_byte_rate`).
    pub consumer_byte_rate: u64,
    /// Request handling time, in percent, allowed to a client id without a quota of its
    /// own; 0 means unlimited (Kafka's default client-id `request_percentage`).
    pub request_percentage: f64,
    /// Slots of the sliding window usage is measured over (Kafka's `quota.window.num`).
    pub window_samples: usize,
    /// Length of one slot (Kafka's `quota.window.size.seconds`).
    pub window_size: Duration,
    /// Client ids with usage tracked on their own; beyond this, idle ones are dropped and
    /// new ones share one entry.
    pub max_tracked_clients: usize,
    /// Quota entities AlterClientQuotas may configure; beyond this, a new entity is
    /// refused with `POLICY_VIOLATION`.
    pub max_entities: usize,
    /// Whether AlterClientQuotas may change quotas. Without authentication any client
    /// could lift its own quota (as with a Kafka broker without an authorizer); `false`
    /// answers every entry with `CLUSTER_AUTHORIZATION_FAILED`, leaving quotas to the
    /// settings.
    pub alter_enabled: bool,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            producer_byte_rate: 0,
            consumer_byte_rate: 0,
            request_percentage: 0.0,
            window_samples: 11,
            window_size: Duration::from_secs(1),
            max_tracked_clients: 10_000,
            max_entities: 10_000,
            alter_enabled: true,
        }
    }
}

impl QuotaConfig {
    pub(crate) fn window(&self) -> Window {
        Window {
            samples: self.window_samples.max(2),
            slot_ms: u64::try_from(self.window_size.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        }
    }
}

/// A quota key Kafka's AlterClientQuotas accepts for client-id and user entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    /// `producer_byte_rate` (a whole number of bytes per second).
    ProducerByteRate,
    /// `consumer_byte_rate` (a whole number of bytes per second).
    ConsumerByteRate,
    /// `request_percentage`.
    RequestPercentage,
    /// `controller_mutation_rate`: accepted and listed, not enforced (the gateway has no
    /// controller whose mutations it could pace).
    ControllerMutationRate,
}

impl QuotaKey {
    /// Every key.
    pub const ALL: [QuotaKey; 4] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
    ];

    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
        }
    }

    /// The key of a name, `None` for a name Kafka does not know for these entities.
    pub fn parse(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether values must be whole numbers (Kafka types the byte rates as longs).
    pub fn integral(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate
        )
    }

    /// Checks a value as Kafka does: above zero, finite, whole for the byte rates.
    pub fn check(self, value: f64) -> Result<(), String> {
        if !value.is_finite() {
            return Err(format!("Quota {} must be a finite number", self.name()));
        }
        if value <= 0.0 {
            return Err(format!("Quota {} must be greater than 0", self.name()));
        }
        if self.integral() {
            if value > i64::MAX as f64 {
                return Err(format!(
                    "Proposed value for {} is too large for a LONG",
                    self.name()
                ));
            }
            if (value % 1.0).abs() > 1e-6 {
                return Err(format!("{} cannot be a fractional value", self.name()));
            }
        }
        Ok(())
    }
}

/// A name in a quota entity: a specific one, or the default (Kafka's null name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    /// The default entity of its type.
    Default,
    /// A specific name.
    Named(Arc<str>),
}

impl EntityName {
    /// Kafka's form: `None` for the default.
    pub fn as_option(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// Whom a quota is for. Only client-id entities are served for now; `user` is here so
/// user and (user, client-id) entities need no change of key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    /// The `user` component, when present.
    pub user: Option<EntityName>,
    /// The `client-id` component, when present.
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// The entity of one client id.
    pub fn client(name: &str) -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(EntityName::Named(Arc::from(name))),
        }
    }

    /// The default client-id entity.
    pub fn default_client() -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(EntityName::Default),
        }
    }

    /// The components as Kafka lists them: `(entity_type, name)`.
    pub fn components(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            out.push(("user", u.as_option()));
        }
        if let Some(c) = &self.client_id {
            out.push(("client-id", c.as_option()));
        }
        out
    }
}

/// The values set for one entity.
pub type QuotaValues = BTreeMap<QuotaKey, f64>;

/// Where quota entities set with AlterClientQuotas are kept.
pub trait QuotaStore: Send + Sync + fmt::Debug + 'static {
    /// Every entity with its values, read once when the broker starts.
    fn load(&self) -> Result<Vec<(QuotaEntity, QuotaValues)>, BrokerError>;

    /// Replaces the values of `entity`; empty values remove it.
    fn save(&self, entity: &QuotaEntity, values: &QuotaValues) -> Result<(), BrokerError>;
}

/// Keeps quota entities in memory only: they are lost when the process ends.
#[derive(Debug, Default)]
pub struct MemoryQuotaStore {
    entities: Mutex<BTreeMap<QuotaEntity, QuotaValues>>,
}

impl QuotaStore for MemoryQuotaStore {
    fn load(&self) -> Result<Vec<(QuotaEntity, QuotaValues)>, BrokerError> {
        let map = self.entities.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map.iter().map(|(e, v)| (e.clone(), v.clone())).collect())
    }

    fn save(&self, entity: &QuotaEntity, values: &QuotaValues) -> Result<(), BrokerError> {
        let mut map = self.entities.lock().unwrap_or_else(|e| e.into_inner());
        if values.is_empty() {
            map.remove(entity);
        } else {
            map.insert(entity.clone(), values.clone());
        }
        Ok(())
    }
}

/// The quotas that apply to one client id; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Bounds {
    pub(crate) produce: Option<f64>,
    pub(crate) fetch: Option<f64>,
    pub(crate) request: Option<f64>,
}

impl Bounds {
    pub(crate) fn any(&self) -> bool {
        self.produce.is_some() || self.fetch.is_some() || self.request.is_some()
    }
}

/// What a client is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// Produce request bytes.
    Produce,
    /// Fetch response bytes.
    Fetch,
    /// Request handling time, in percent-seconds (`seconds * 100`).
    Request,
}

/// One client's (or one connection's) rates.
#[derive(Debug, Clone)]
pub(crate) struct Rates {
    produce: Rate,
    fetch: Rate,
    request: Rate,
}

impl Rates {
    pub(crate) fn new(window: Window, now: u64) -> Rates {
        Rates {
            produce: Rate::new(window, now),
            fetch: Rate::new(window, now),
            request: Rate::new(window, now),
        }
    }

    fn rate(&mut self, usage: Usage) -> &mut Rate {
        match usage {
            Usage::Produce => &mut self.produce,
            Usage::Fetch => &mut self.fetch,
            Usage::Request => &mut self.request,
        }
    }

    /// Adds `value` and returns the throttle time against `bound` (0 when unlimited).
    pub(crate) fn record(
        &mut self,
        window: Window,
        now: u64,
        usage: Usage,
        value: f64,
        bound: Option<f64>,
    ) -> u64 {
        let rate = self.rate(usage);
        rate.record(window, now, value);
        match bound {
            Some(b) => rate.throttle_ms(window, now, b),
            None => 0,
        }
    }

    pub(crate) fn unrecord(&mut self, window: Window, now: u64, usage: Usage, value: f64) {
        self.rate(usage).unrecord(window, now, value);
    }

    fn last_active(&self) -> u64 {
        self.produce
            .last_active()
            .max(self.fetch.last_active())
            .max(self.request.last_active())
    }
}

/// The tracked client ids.
#[derive(Debug)]
struct Tracked {
    clients: HashMap<Arc<str>, Rates>,
    /// Shared by client ids that found the table full.
    overflow: Rates,
    /// When idle ids were last swept out (at most once per slot, so a full table of
    /// active ids does not cost a scan per request).
    last_sweep: Option<u64>,
}

/// The broker's quotas: configured entities and every tracked client's usage.
#[derive(Debug)]
pub(crate) struct Quotas {
    config: QuotaConfig,
    window: Window,
    store: Arc<dyn QuotaStore>,
    entities: RwLock<HashMap<QuotaEntity, QuotaValues>>,
    /// Whether any quota can apply (a default from the settings or a configured
    /// entity): when not, requests skip the quota work entirely.
    active: AtomicBool,
    tracked: Mutex<Tracked>,
    epoch: Instant,
}

impl Quotas {
    /// Quotas from `config`, with the entities `store` holds.
    pub(crate) fn new(
        config: QuotaConfig,
        store: Arc<dyn QuotaStore>,
    ) -> Result<Quotas, BrokerError> {
        let entities: HashMap<_, _> = store.load()?.into_iter().collect();
        let window = config.window();
        let quotas = Quotas {
            window,
            store,
            entities: RwLock::new(entities),
            active: AtomicBool::new(false),
            tracked: Mutex::new(Tracked {
                clients: HashMap::new(),
                overflow: Rates::new(window, 0),
                last_sweep: None,
            }),
            epoch: Instant::now(),
            config,
        };
        quotas.refresh_active();
        Ok(quotas)
    }

    pub(crate) fn config(&self) -> &QuotaConfig {
        &self.config
    }

    pub(crate) fn window(&self) -> Window {
        self.window
    }

    /// Milliseconds on the quotas' clock.
    pub(crate) fn now_ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn refresh_active(&self) {
        let c = &self.config;
        let configured = !self.read_entities().is_empty();
        let defaults =
            c.producer_byte_rate > 0 || c.consumer_byte_rate > 0 || c.request_percentage > 0.0;
        self.active.store(configured || defaults, Ordering::Relaxed);
    }

    fn read_entities(&self) -> std::sync::RwLockReadGuard<'_, HashMap<QuotaEntity, QuotaValues>> {
        self.entities.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The quotas that apply to `client_id`: its own entity, then the default client-id
    /// entity, then the settings.
    pub(crate) fn bounds(&self, client_id: &str) -> Bounds {
        let entities = self.read_entities();
        let own = entities.get(&QuotaEntity::client(client_id));
        let default = entities.get(&QuotaEntity::default_client());
        let pick = |key: QuotaKey, setting: f64| {
            own.and_then(|v| v.get(&key))
                .or_else(|| default.and_then(|v| v.get(&key)))
                .copied()
                .or((setting > 0.0).then_some(setting))
        };
        let c = &self.config;
        Bounds {
            produce: pick(QuotaKey::ProducerByteRate, c.producer_byte_rate as f64),
            fetch: pick(QuotaKey::ConsumerByteRate, c.consumer_byte_rate as f64),
            request: pick(QuotaKey::RequestPercentage, c.request_percentage),
        }
    }

    /// Adds usage for `client_id` and returns its throttle time against `bound`.
    pub(crate) fn record(
        &self,
        client_id: &str,
        now: u64,
        usage: Usage,
        value: f64,
        bound: Option<f64>,
    ) -> u64 {
        let mut t = self.tracked.lock().unwrap_or_else(|e| e.into_inner());
        self.rates(&mut t, client_id, now)
            .record(self.window, now, usage, value, bound)
    }

    /// Takes back usage added for `client_id`.
    pub(crate) fn unrecord(&self, client_id: &str, now: u64, usage: Usage, value: f64) {
        let mut t = self.tracked.lock().unwrap_or_else(|e| e.into_inner());
        self.rates(&mut t, client_id, now)
            .unrecord(self.window, now, usage, value);
    }

    /// The rates of `client_id`, making room for it when needed.
    fn rates<'a>(&self, t: &'a mut Tracked, client_id: &str, now: u64) -> &'a mut Rates {
        if !t.clients.contains_key(client_id) {
            if t.clients.len() >= self.config.max_tracked_clients {
                self.evict_idle(t, now);
            }
            if t.clients.len() >= self.config.max_tracked_clients {
                return &mut t.overflow;
            }
            t.clients
                .insert(Arc::from(client_id), Rates::new(self.window, now));
        }
        match t.clients.get_mut(client_id) {
            Some(r) => r,
            // Inserted just above when absent.
            None => &mut t.overflow,
        }
    }

    /// Drops client ids without usage in the whole window; they have nothing left to
    /// count. One pass frees every such id, so the cost is shared by the inserts that
    /// follow.
    fn evict_idle(&self, t: &mut Tracked, now: u64) {
        if t.last_sweep
            .is_some_and(|at| now < at.saturating_add(self.window.slot_ms))
        {
            return;
        }
        t.last_sweep = Some(now);
        // A rate's last activity is known to the start of its newest slot, so an id is
        // idle once that slot and a whole window have passed.
        let idle = self.window.total_ms().saturating_add(self.window.slot_ms);
        t.clients
            .retain(|_, r| now.saturating_sub(r.last_active()) < idle);
    }

    /// Client ids tracked on their own.
    #[cfg(test)]
    pub(crate) fn tracked_len(&self) -> usize {
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clients
            .len()
    }

    /// Every configured entity with its values.
    pub(crate) fn entities(&self) -> Vec<(QuotaEntity, QuotaValues)> {
        self.read_entities()
            .iter()
            .map(|(e, v)| (e.clone(), v.clone()))
            .collect()
    }

    /// The values of one entity.
    pub(crate) fn get(&self, entity: &QuotaEntity) -> Option<QuotaValues> {
        self.read_entities().get(entity).cloned()
    }

    /// Whether a new entity could be added.
    pub(crate) fn has_room(&self) -> bool {
        self.read_entities().len() < self.config.max_entities
    }

    /// Replaces the values of `entity` (empty removes it), in the store and here.
    pub(crate) fn set(&self, entity: QuotaEntity, values: QuotaValues) -> Result<(), BrokerError> {
        self.store.save(&entity, &values)?;
        {
            let mut map = self.entities.write().unwrap_or_else(|e| e.into_inner());
            if values.is_empty() {
                map.remove(&entity);
            } else {
                map.insert(entity, values);
            }
        }
        self.refresh_active();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(config: QuotaConfig) -> Quotas {
        Quotas::new(config, Arc::new(MemoryQuotaStore::default())).unwrap()
    }

    #[test]
    fn the_most_specific_quota_applies() {
        let q = quotas(QuotaConfig {
            producer_byte_rate: 1000,
            ..QuotaConfig::default()
        });
        assert!(q.active());
        assert_eq!(q.bounds("a").produce, Some(1000.0));
        assert_eq!(q.bounds("a").fetch, None);
        let mut v = QuotaValues::new();
        v.insert(QuotaKey::ProducerByteRate, 500.0);
        v.insert(QuotaKey::ConsumerByteRate, 700.0);
        q.set(QuotaEntity::default_client(), v).unwrap();
        assert_eq!(q.bounds("a").produce, Some(500.0));
        assert_eq!(q.bounds("a").fetch, Some(700.0));
        let mut v = QuotaValues::new();
        v.insert(QuotaKey::ProducerByteRate, 50.0);
        q.set(QuotaEntity::client("a"), v).unwrap();
        assert_eq!(q.bounds("a").produce, Some(50.0));
        // Keys the client's own entity does not set come from the default entity.
        assert_eq!(q.bounds("a").fetch, Some(700.0));
        assert_eq!(q.bounds("b").produce, Some(500.0));
        q.set(QuotaEntity::client("a"), QuotaValues::new()).unwrap();
        assert_eq!(q.bounds("a").produce, Some(500.0));
    }

    #[test]
    fn no_quota_means_inactive() {
        let q = quotas(QuotaConfig::default());
        assert!(!q.active());
        assert!(!q.bounds("x").any());
        let mut v = QuotaValues::new();
        v.insert(QuotaKey::RequestPercentage, 10.0);
        q.set(QuotaEntity::client("x"), v).unwrap();
        assert!(q.active());
        q.set(QuotaEntity::client("x"), QuotaValues::new()).unwrap();
        assert!(!q.active());
    }

    #[test]
    fn idle_clients_are_evicted_and_a_full_table_shares_one_entry() {
        let q = quotas(QuotaConfig {
            max_tracked_clients: 3,
            ..QuotaConfig::default()
        });
        let w = q.window().total_ms() + q.window().slot_ms;
        for id in ["a", "b", "c"] {
            q.record(id, 0, Usage::Produce, 1.0, None);
        }
        assert_eq!(q.tracked_len(), 3);
        // All three are still active: new ids share the overflow entry, and share its
        // usage, so inventing ids buys no fresh quota.
        let bound = Some(100.0);
        let mut throttled = 0;
        for i in 0..50 {
            if q.record(&format!("rot-{i}"), 10, Usage::Produce, 100.0, bound) > 0 {
                throttled += 1;
            }
        }
        assert_eq!(q.tracked_len(), 3);
        assert!(throttled > 0, "rotating ids escaped the quota");
        // Not yet idle for a whole window after their newest slot: no room.
        q.record("e", w - 1, Usage::Produce, 1.0, None);
        assert_eq!(q.tracked_len(), 3);
        // Once the three have been idle for a whole window, they make room (the sweep
        // runs at most once per slot).
        q.record("d", w + 1_000, Usage::Produce, 1.0, None);
        assert_eq!(q.tracked_len(), 1);
    }

    #[test]
    fn values_are_checked_as_kafka_does() {
        assert!(QuotaKey::ProducerByteRate.check(1024.0).is_ok());
        assert!(QuotaKey::ProducerByteRate.check(0.0).is_err());
        assert!(QuotaKey::ProducerByteRate.check(-1.0).is_err());
        assert!(QuotaKey::ProducerByteRate.check(10.5).is_err());
        assert!(QuotaKey::RequestPercentage.check(10.5).is_ok());
        assert!(QuotaKey::RequestPercentage.check(f64::NAN).is_err());
        assert!(QuotaKey::ConsumerByteRate.check(f64::INFINITY).is_err());
        assert_eq!(
            QuotaKey::parse("producer_byte_rate"),
            Some(QuotaKey::ProducerByteRate)
        );
        assert_eq!(QuotaKey::parse("bogus"), None);
    }

    #[test]
    fn quotas_in_the_store_are_loaded_at_start() {
        let store = Arc::new(MemoryQuotaStore::default());
        let mut v = QuotaValues::new();
        v.insert(QuotaKey::ConsumerByteRate, 99.0);
        store.save(&QuotaEntity::client("c"), &v).unwrap();
        let q = Quotas::new(QuotaConfig::default(), store).unwrap();
        assert_eq!(q.bounds("c").fetch, Some(99.0));
    }
}
