//! Quotas: per-principal rates of produce bytes, fetch bytes and requests, enforced by this
//! broker on its own connections by throttling, never by errors (as Kafka does).
//!
//! A principal over one of its rates owes a delay; the broker waits it out before serving the
//! request (produce bytes and requests are charged when a request is admitted) or before
//! answering it (fetch bytes are charged once the response's size is known), and the front
//! end reads no further request of that connection until the wait is over, so the client
//! feels backpressure instead of filling the broker's memory. The next request of any of the
//! principal's connections on this broker also waits until a debt still owed has been paid.
//!
//! Rates come from the metadata image's `quotas` (the principal's own entry, else the
//! `<default>` one; 0 = unlimited) and apply per broker: a principal served by three brokers
//! may reach three times its rates in the cluster. Nodes that proved who they are (cluster
//! secret or certificate) are never throttled; a merely claimed node role is not enough.
//!
//! The limiters of a principal are shared by all its connections here, in a map bounded by
//! `quota_principals_max` that forgets the least recently used principal first (idle ones
//! that owe nothing before busy ones). Locks are short and never held across an `.await`; a
//! request of a principal without any quota costs one lookup in the table of quotas, and
//! nothing at all while no quota is set.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tinymq_net::Peer;
use tinymq_protocol::{Frame, OpCode};

pub use tinymq_auth::{QuotaConfig, RateLimiter, QUOTA_DEFAULT_PRINCIPAL};

/// Default of `quota_principals_max`: principals whose limiters one broker keeps.
pub const QUOTA_PRINCIPALS_MAX_DEFAULT: usize = 10_000;

/// Longest one request is held back at once. A larger debt (a huge fetch against a small
/// rate) is paid over the following requests, so the rate still holds, while no response is
/// delayed past what a client's request timeout (30 s by default) tolerates.
pub const QUOTA_DELAY_MAX: Duration = Duration::from_secs(5);

/// A principal idle this long that owes nothing is the first to be forgotten.
const IDLE_FORGET_AFTER: Duration = Duration::from_secs(60);

/// What a quota limits; the `kind` label of the throttling metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    Produce,
    Fetch,
    Request,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [QuotaKind::Produce, QuotaKind::Fetch, QuotaKind::Request];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
            QuotaKind::Request => "request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The rates in force: each user's own (by user name: quotas name users only), and the
/// default for the others. Ordered maps here and below: a lookup compares a few short names
/// instead of hashing one with SipHash, which cost more per request (callgrind).
#[derive(Debug, Default)]
struct QuotaTable {
    own: BTreeMap<String, QuotaConfig>,
    default: Option<QuotaConfig>,
}

impl QuotaTable {
    fn from_image(quotas: &BTreeMap<String, QuotaConfig>) -> QuotaTable {
        let mut table = QuotaTable::default();
        for (principal, quota) in quotas {
            if principal == QUOTA_DEFAULT_PRINCIPAL {
                table.default = Some(*quota);
            } else if let Some(user) = principal.strip_prefix(USER_PREFIX) {
                table.own.insert(user.to_owned(), *quota);
            } else {
                // The MetaServer accepts only users and the default; nothing else can match.
                tracing::warn!(%principal, "a quota for something other than a user is ignored");
            }
        }
        table
    }

    fn is_empty(&self) -> bool {
        self.default.as_ref().is_none_or(unlimited) && self.own.values().all(unlimited)
    }

    /// The user's rates, `None` when it has no limit at all (its own entry wins over the
    /// default even when that entry is all zeros: an explicit exemption).
    fn of(&self, user: &str) -> Option<&QuotaConfig> {
        self.own
            .get(user)
            .or(self.default.as_ref())
            .filter(|q| !unlimited(q))
    }
}

fn unlimited(q: &QuotaConfig) -> bool {
    q.produce_bytes_per_sec == 0 && q.fetch_bytes_per_sec == 0 && q.requests_per_sec == 0
}

/// One principal's limiters on this broker, and its throttling counters.
#[derive(Debug)]
struct Entry {
    state: Mutex<EntryState>,
    throttle_nanos: [AtomicU64; 3],
    throttled: [AtomicU64; 3],
}

#[derive(Debug)]
struct EntryState {
    quota: QuotaConfig,
    limiters: [Option<RateLimiter>; 3],
    last_used: Instant,
    /// Until when the principal still owes a delay (a fetch answered late, a debt over
    /// [`QUOTA_DELAY_MAX`]): its next request waits for it.
    owed_until: Instant,
}

impl EntryState {
    fn new(quota: &QuotaConfig, now: Instant) -> EntryState {
        let limiter = |rate: u64| (rate > 0).then(|| RateLimiter::new(rate));
        EntryState {
            quota: *quota,
            limiters: [
                limiter(quota.produce_bytes_per_sec),
                limiter(quota.fetch_bytes_per_sec),
                limiter(quota.requests_per_sec),
            ],
            last_used: now,
            owed_until: now,
        }
    }
}

impl Entry {
    fn new(quota: &QuotaConfig, now: Instant) -> Entry {
        Entry {
            state: Mutex::new(EntryState::new(quota, now)),
            throttle_nanos: Default::default(),
            throttled: Default::default(),
        }
    }

    /// Charges `amounts` (indexed by [`QuotaKind`]) and returns how long to wait from `now`.
    fn charge(&self, amounts: [u64; 3], now: Instant) -> Duration {
        let mut owed = [Duration::ZERO; 3];
        let until = {
            let mut state = self.state.lock();
            state.last_used = now;
            for (kind, amount) in amounts.into_iter().enumerate() {
                if let (Some(limiter), true) = (&mut state.limiters[kind], amount > 0) {
                    owed[kind] = limiter.record(now, amount);
                }
            }
            let longest = owed.iter().copied().max().unwrap_or_default();
            let until = state.owed_until.max(now + longest);
            state.owed_until = until;
            until
        };
        for (kind, delay) in owed.iter().enumerate() {
            if !delay.is_zero() {
                let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
                self.throttle_nanos[kind].fetch_add(nanos, Ordering::Relaxed);
                self.throttled[kind].fetch_add(1, Ordering::Relaxed);
            }
        }
        until.saturating_duration_since(now).min(QUOTA_DELAY_MAX)
    }
}

/// How quota keys name users.
const USER_PREFIX: &str = "User:";

/// The quotas of one broker, keyed by user name (nodes are never throttled).
#[derive(Debug)]
pub struct Quotas {
    /// Whether any principal has a limit: when not, admission costs one atomic load.
    enabled: AtomicBool,
    table: RwLock<QuotaTable>,
    /// The image's quotas as last applied (most image changes leave them alone).
    applied: Mutex<BTreeMap<String, QuotaConfig>>,
    principals: Mutex<BTreeMap<String, Arc<Entry>>>,
    principals_max: usize,
}

/// What admitting a request decided.
#[derive(Debug, Default)]
pub struct Admission {
    /// How long to hold the request back before serving it (zero: at once).
    pub delay: Duration,
    /// The principal's limiters, when it has a quota: the fetch is charged to them once its
    /// response's size is known.
    pub throttle: Option<Throttle>,
}

/// A principal's limiters, for charging a response after admission.
#[derive(Debug, Clone)]
pub struct Throttle(Arc<Entry>);

impl Throttle {
    /// Charges a fetch response of `bytes`; returns how long to hold it back.
    pub fn fetched(&self, bytes: u64, now: Instant) -> Duration {
        self.0.charge([0, bytes, 0], now)
    }
}

/// One principal's throttling so far, for metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleStats {
    pub principal: String,
    pub kind: QuotaKind,
    /// Delay this kind's quota demanded (a request over two quotas waits for the longer).
    pub throttle_seconds: f64,
    pub throttled_requests: u64,
}

impl Quotas {
    pub fn new(principals_max: usize) -> Quotas {
        Quotas {
            enabled: AtomicBool::new(false),
            table: RwLock::new(QuotaTable::default()),
            applied: Mutex::new(BTreeMap::new()),
            principals: Mutex::new(BTreeMap::new()),
            principals_max: principals_max.max(1),
        }
    }

    /// Whether any principal has a limit now.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Takes the image's quotas (principal or `<default>` → rates). Limiters of principals
    /// whose rates changed start afresh at the new rates; those without any limit now are
    /// dropped.
    pub fn apply(&self, quotas: &BTreeMap<String, QuotaConfig>, now: Instant) {
        // Held throughout: two images applied at once take effect in the order they came.
        let mut applied = self.applied.lock();
        if *applied == *quotas {
            return;
        }
        applied.clone_from(quotas);
        let table = QuotaTable::from_image(quotas);
        self.enabled.store(!table.is_empty(), Ordering::Relaxed);
        // The table first, then the limiters: an admission holds the table's read lock while
        // it makes a limiter, so none made from the old table survives this.
        *self.table.write() = table;
        let table = self.table.read();
        let mut principals = self.principals.lock();
        principals.retain(|principal, entry| match table.of(principal) {
            None => false,
            Some(quota) => {
                let mut state = entry.state.lock();
                if state.quota != *quota {
                    *state = EntryState::new(quota, now);
                }
                true
            }
        });
    }

    /// Admits one request of `user` carrying `produce_bytes` of produce request (0 for other
    /// operations): charges it, and says how long to hold it back.
    pub fn admit(&self, user: &str, produce_bytes: u64, now: Instant) -> Admission {
        if !self.enabled() {
            return Admission::default();
        }
        let Some(entry) = self.entry(user, now) else {
            return Admission::default();
        };
        let delay = entry.charge([produce_bytes, 0, 1], now);
        Admission {
            delay,
            throttle: Some(Throttle(entry)),
        }
    }

    /// The user's limiters, made on first use; `None` when it has no limit.
    fn entry(&self, user: &str, now: Instant) -> Option<Arc<Entry>> {
        let table = self.table.read();
        let quota = table.of(user)?;
        let mut principals = self.principals.lock();
        if let Some(entry) = principals.get(user) {
            return Some(entry.clone());
        }
        if principals.len() >= self.principals_max {
            forget_one(&mut principals, now);
        }
        let entry = Arc::new(Entry::new(quota, now));
        principals.insert(user.to_owned(), entry.clone());
        Some(entry)
    }

    /// Every principal's throttling so far (kinds never throttled left out), by principal.
    pub fn stats(&self) -> Vec<ThrottleStats> {
        let entries: Vec<(String, Arc<Entry>)> = {
            let principals = self.principals.lock();
            principals
                .iter()
                .map(|(p, e)| (p.clone(), e.clone()))
                .collect()
        };
        let mut stats = Vec::new();
        for (user, entry) in entries {
            let principal = format!("{USER_PREFIX}{user}");
            for kind in QuotaKind::ALL {
                let throttled = entry.throttled[kind.index()].load(Ordering::Relaxed);
                if throttled == 0 {
                    continue;
                }
                let nanos = entry.throttle_nanos[kind.index()].load(Ordering::Relaxed);
                stats.push(ThrottleStats {
                    principal: principal.clone(),
                    kind,
                    throttle_seconds: nanos as f64 / 1e9,
                    throttled_requests: throttled,
                });
            }
        }
        stats.sort_by(|a, b| (&a.principal, a.kind.index()).cmp(&(&b.principal, b.kind.index())));
        stats
    }

    /// Principals with limiters on this broker now.
    pub fn principals(&self) -> usize {
        self.principals.lock().len()
    }
}

/// Admits one request of a connection: charges the principal's quotas and waits out what it
/// owes (the front end reads nothing more of the connection meanwhile). Returns the
/// principal's limiters for charging a fetch response later.
pub(crate) async fn admit(quotas: &Quotas, peer: &Peer, frame: &Frame) -> Option<Throttle> {
    if !quotas.enabled() {
        return None;
    }
    let user = user_of(peer)?;
    let produce_bytes = if frame.header.op_code() == OpCode::Produce.code() {
        frame.body.len() as u64
    } else {
        0
    };
    let admission = quotas.admit(user, produce_bytes, Instant::now());
    if !admission.delay.is_zero() {
        tokio::time::sleep(admission.delay).await;
    }
    admission.throttle
}

/// Charges a fetch response of `bytes` and holds it back for what the principal owes.
pub(crate) async fn hold_fetch(throttle: &Throttle, bytes: u64) {
    let delay = throttle.fetched(bytes, Instant::now());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// The user a connection's requests are charged to; `None` for nodes, never throttled
/// (their replication and metadata traffic is not a tenant's). Only a node principal is
/// exempt, one the connection proved (cluster secret or certificate): a node role merely
/// claimed in the handshake (`--auth none` without a cluster secret) is `User:ANONYMOUS`
/// like every other connection there, or anyone could escape its quota by claiming one.
fn user_of(peer: &Peer) -> Option<&str> {
    let principal = &peer.principal;
    if principal.is_node() {
        return None;
    }
    Some(&principal.name)
}

/// Makes room for one principal: the least recently used that is idle and owes nothing,
/// else the least recently used of all (its debt is forgiven: the map's bound comes first).
fn forget_one(principals: &mut BTreeMap<String, Arc<Entry>>, now: Instant) {
    let mut oldest_idle: Option<(Instant, &String)> = None;
    let mut oldest: Option<(Instant, &String)> = None;
    for (principal, entry) in principals.iter() {
        let state = entry.state.lock();
        let used = state.last_used;
        let idle =
            now.saturating_duration_since(used) >= IDLE_FORGET_AFTER && state.owed_until <= now;
        if idle && oldest_idle.is_none_or(|(t, _)| used < t) {
            oldest_idle = Some((used, principal));
        }
        if oldest.is_none_or(|(t, _)| used < t) {
            oldest = Some((used, principal));
        }
    }
    if let Some((_, principal)) = oldest_idle.or(oldest) {
        let principal = principal.clone();
        principals.remove(&principal);
    }
}

#[cfg(test)]
mod tests;
