//! The half messages coordinated here, in memory: per led partition of `__half_messages`,
//! the halves not yet resolved (pending, or committing: decided and being appended) and the
//! outcomes of recently resolved ones (so a retried HalfEnd is answered as the first was).
//! Memory never runs ahead of the log: a half enters after its `stored` record is held by
//! every in-sync replica, and leaves after its `resolved` (rollback) or `delivered` record is.
//! The rules of checks and expiry are pure functions of the wall clock given to them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;
use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};
use tokio::sync::Notify;

/// Most unresolved halves one broker coordinates (`half_pending_max`); HalfSend is refused
/// with LIMIT_EXCEEDED past it.
pub const HALF_PENDING_MAX: usize = 100_000;
/// Most record bytes of unresolved halves one broker holds in memory
/// (`half_pending_bytes_max`, 64 MiB); HalfSend is refused with LIMIT_EXCEEDED past it.
pub const HALF_PENDING_BYTES_MAX: usize = 64 << 20;
/// Most unresolved halves of one producer group (`half_group_pending_max`), and most of
/// their record bytes (`half_group_pending_bytes_max`, 16 MiB): one group cannot take a
/// broker's whole room.
pub const HALF_GROUP_PENDING_MAX: usize = 10_000;
pub const HALF_GROUP_PENDING_BYTES_MAX: usize = 16 << 20;
/// Resolved halves whose outcome each partition remembers for retried HalfEnds
/// (`half_recent_outcomes_max`); older ones are answered HALF_MESSAGE_NOT_FOUND.
pub const HALF_RECENT_OUTCOMES_MAX: usize = 10_000;
/// HalfSend request ids each partition remembers, so that a retried HalfSend is answered
/// with the half the first one stored (`half_request_ids_max`).
pub const HALF_REQUEST_IDS_MAX: usize = 20_000;
/// HalfCheckPolls waiting at once on one broker (`half_polls_max`); more get LIMIT_EXCEEDED.
pub const HALF_POLLS_MAX: usize = 1_000;
/// Commits left in doubt recovered at once on one broker (each reads its partition).
pub const HALF_RECOVERIES_MAX: usize = 4;

/// Where a half stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HalfPhase {
    /// Stored; waiting for its producer, or for a check.
    Pending,
    /// Decided commit; its records are being appended (a new coordinator looks for them at
    /// or after `scan_from` in their partition before appending them again).
    Committing {
        scan_from: i64,
        topic_id: u64,
        nonce: u64,
    },
}

/// A resolved half as remembered: whose it was, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub group: String,
    pub topic: String,
    pub outcome: Outcome,
}

/// How a resolved half ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Committed { base_offset: i64 },
    RolledBack { reason: String },
}

/// One unresolved half message.
#[derive(Debug, Clone)]
pub struct Half {
    pub group: String,
    pub topic: String,
    /// The topic's id when the half was stored (a topic made again is not the same).
    pub topic_id: u64,
    /// The producer's id of its HalfSend (empty: none), for retries.
    pub request_id: String,
    pub partition: u32,
    /// The record batch as the producer sent it.
    pub records: Bytes,
    pub record_count: u32,
    pub stored_ms: i64,
    pub first_check_ms: i64,
    /// Checks offered since this coordinator loaded it (not logged: the deadline, which is,
    /// bounds a half's life whatever happens to the count).
    pub checks: u32,
    pub next_check_ms: i64,
    pub phase: HalfPhase,
    /// A resolution is being made durable: nothing else touches it meanwhile.
    pub busy: bool,
}

impl Half {
    /// The half a `stored` record describes.
    pub fn stored(group: String, s: m::HalfStored) -> Half {
        let record_count = tinymq_protocol::batch::RecordBatch::parse(s.records.clone())
            .map(|b| b.record_count().max(0) as u32)
            .unwrap_or(0);
        Half {
            group,
            topic: s.topic,
            topic_id: s.topic_id,
            request_id: s.request_id,
            partition: s.partition,
            records: s.records,
            record_count,
            stored_ms: s.stored_ms,
            first_check_ms: s.first_check_ms,
            checks: 0,
            next_check_ms: s.first_check_ms,
            phase: HalfPhase::Pending,
            busy: false,
        }
    }

    /// When a half nobody answers is rolled back whatever the checks: its first check plus
    /// `checks_max` intervals.
    pub fn deadline_ms(&self, rules: &CheckRules) -> i64 {
        self.first_check_ms
            .saturating_add(i64::from(rules.checks_max).saturating_mul(rules.interval_ms))
    }
}

/// When halves are checked: every `interval_ms` after the first check, at most `checks_max`
/// times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckRules {
    pub interval_ms: i64,
    pub checks_max: u32,
}

/// The halves of one led partition, indexed by group, with their counts and bytes, the
/// outcomes of recently resolved ones and the request ids of recent HalfSends.
#[derive(Debug, Default)]
pub struct PartitionHalves {
    halves: BTreeMap<i64, Half>,
    by_group: HashMap<String, GroupHalves>,
    bytes: usize,
    recent: HashMap<i64, Resolved>,
    recent_order: VecDeque<i64>,
    requests: HashMap<(String, String), i64>,
    request_order: VecDeque<(String, String)>,
}

/// One group's unresolved halves.
#[derive(Debug, Default)]
struct GroupHalves {
    ids: std::collections::BTreeSet<i64>,
    bytes: usize,
}

impl PartitionHalves {
    /// Adds half `id` (and remembers its request id).
    pub fn insert(&mut self, id: i64, half: Half) {
        if !half.request_id.is_empty() {
            let key = (half.group.clone(), half.request_id.clone());
            if self.requests.insert(key.clone(), id).is_none() {
                self.request_order.push_back(key);
            }
            while self.request_order.len() > HALF_REQUEST_IDS_MAX {
                if let Some(old) = self.request_order.pop_front() {
                    self.requests.remove(&old);
                }
            }
        }
        let group = self.by_group.entry(half.group.clone()).or_default();
        group.ids.insert(id);
        group.bytes += half.records.len();
        self.bytes += half.records.len();
        if let Some(old) = self.halves.insert(id, half) {
            self.forget_usage(id, &old);
        }
    }

    /// Removes half `id`.
    pub fn remove(&mut self, id: i64) -> Option<Half> {
        let half = self.halves.remove(&id)?;
        self.forget_usage(id, &half);
        Some(half)
    }

    fn forget_usage(&mut self, id: i64, half: &Half) {
        self.bytes -= half.records.len();
        if let Some(group) = self.by_group.get_mut(&half.group) {
            group.ids.remove(&id);
            group.bytes -= half.records.len();
            if group.ids.is_empty() {
                self.by_group.remove(&half.group);
            }
        }
    }

    pub fn get(&self, id: i64) -> Option<&Half> {
        self.halves.get(&id)
    }

    /// A half to change in place (its phase, checks, busy flag: never its group or records).
    pub fn get_mut(&mut self, id: i64) -> Option<&mut Half> {
        self.halves.get_mut(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&i64, &Half)> {
        self.halves.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&i64, &mut Half)> {
        self.halves.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.halves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.halves.is_empty()
    }

    /// Record bytes of the unresolved halves.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Unresolved halves of `group` and their record bytes.
    pub fn group_usage(&self, group: &str) -> (usize, usize) {
        self.by_group
            .get(group)
            .map_or((0, 0), |g| (g.ids.len(), g.bytes))
    }

    /// The half a HalfSend of `group` with `request_id` stored, if remembered.
    pub fn request(&self, group: &str, request_id: &str) -> Option<i64> {
        if request_id.is_empty() {
            return None;
        }
        self.requests
            .get(&(group.to_string(), request_id.to_string()))
            .copied()
    }

    /// Records how half `id` ended, forgetting the oldest past the bound.
    pub fn remember(&mut self, id: i64, resolved: Resolved) {
        if self.recent.insert(id, resolved).is_none() {
            self.recent_order.push_back(id);
        }
        while self.recent_order.len() > HALF_RECENT_OUTCOMES_MAX {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
    }

    /// How half `id` of `group` for `topic` ended, if it is remembered.
    pub fn outcome(&self, id: i64, group: &str, topic: &str) -> Option<&Outcome> {
        self.recent
            .get(&id)
            .filter(|r| r.group == group && r.topic == topic)
            .map(|r| &r.outcome)
    }

    /// Hands out up to `max` of `group`'s halves whose check is due at `now` (and that `may`
    /// allows), counting the check and scheduling the next.
    pub fn take_due(
        &mut self,
        group: &str,
        now: i64,
        max: usize,
        rules: &CheckRules,
        may: impl Fn(&Half) -> bool,
    ) -> Vec<(i64, Half)> {
        let mut out = Vec::new();
        let Some(ids) = self.by_group.get(group).map(|g| &g.ids) else {
            return out;
        };
        for id in ids {
            if out.len() >= max {
                break;
            }
            let Some(half) = self.halves.get_mut(id) else {
                continue;
            };
            let due = half.phase == HalfPhase::Pending
                && !half.busy
                && half.next_check_ms <= now
                && half.checks < rules.checks_max
                && now < half.deadline_ms(rules);
            if due && may(half) {
                half.checks += 1;
                half.next_check_ms = now.saturating_add(rules.interval_ms);
                out.push((*id, half.clone()));
            }
        }
        out
    }

    /// The earliest time one of `group`'s pending halves comes due for a check.
    pub fn next_due_ms(&self, group: &str, rules: &CheckRules) -> Option<i64> {
        self.by_group
            .get(group)?
            .ids
            .iter()
            .filter_map(|id| self.halves.get(id))
            .filter(|h| h.phase == HalfPhase::Pending && !h.busy)
            .filter(|h| h.checks < rules.checks_max)
            .map(|h| h.next_check_ms)
            .min()
    }

    /// The pending halves to roll back by default at `now`, with why: every check offered
    /// went unanswered, or the deadline passed.
    pub fn expired(&self, now: i64, rules: &CheckRules) -> Vec<(i64, &'static str)> {
        self.halves
            .iter()
            .filter(|(_, h)| h.phase == HalfPhase::Pending && !h.busy)
            .filter_map(|(id, h)| {
                if h.checks >= rules.checks_max && now >= h.next_check_ms {
                    Some((*id, "checks exhausted"))
                } else if now >= h.deadline_ms(rules) {
                    Some((*id, "lifetime"))
                } else {
                    None
                }
            })
            .collect()
    }
}

#[derive(Debug)]
enum Led {
    Loading(u32),
    Loaded(u32, Box<PartitionHalves>),
}

/// The halves coordinated here, by partition of `__half_messages`.
#[derive(Debug)]
pub struct HalfStore {
    led: Mutex<HashMap<u32, Led>>,
    /// Woken when halves come or go (pollers and the timer wait on it).
    pub changed: Notify,
    /// HalfCheckPolls waiting now ([`HALF_POLLS_MAX`]).
    pub polls: std::sync::atomic::AtomicUsize,
    /// Turns of commits in doubt being recovered ([`HALF_RECOVERIES_MAX`]).
    pub recoveries: tokio::sync::Semaphore,
    /// The next partition for a keyless half, in turn.
    pub next_partition: std::sync::atomic::AtomicU32,
}

impl Default for HalfStore {
    fn default() -> HalfStore {
        HalfStore {
            led: Mutex::default(),
            changed: Notify::new(),
            polls: Default::default(),
            recoveries: tokio::sync::Semaphore::new(HALF_RECOVERIES_MAX),
            next_partition: Default::default(),
        }
    }
}

impl HalfStore {
    /// The partitions led here and their epochs (loading or loaded).
    pub fn led(&self) -> BTreeMap<u32, u32> {
        self.led
            .lock()
            .iter()
            .map(|(i, l)| match l {
                Led::Loading(e) | Led::Loaded(e, _) => (*i, *e),
            })
            .collect()
    }

    /// Starts loading `index` in `epoch` unless it is loading or loaded in it already.
    pub fn begin_load(&self, index: u32, epoch: u32) -> bool {
        let mut led = self.led.lock();
        match led.get(&index) {
            Some(Led::Loading(e) | Led::Loaded(e, _)) if *e == epoch => false,
            _ => {
                led.insert(index, Led::Loading(epoch));
                true
            }
        }
    }

    /// Installs what the load of `index` in `epoch` found, unless leadership moved meanwhile.
    pub fn finish_load(&self, index: u32, epoch: u32, loaded: PartitionHalves) -> bool {
        let mut led = self.led.lock();
        if !matches!(led.get(&index), Some(Led::Loading(e)) if *e == epoch) {
            return false;
        }
        led.insert(index, Led::Loaded(epoch, Box::new(loaded)));
        drop(led);
        self.changed.notify_waiters();
        true
    }

    /// Forgets a load of `index` in `epoch` that failed, so that the next sync tries again.
    pub fn fail_load(&self, index: u32, epoch: u32) {
        let mut led = self.led.lock();
        if matches!(led.get(&index), Some(Led::Loading(e)) if *e == epoch) {
            led.remove(&index);
        }
    }

    pub fn drop_partition(&self, index: u32) {
        self.led.lock().remove(&index);
        self.changed.notify_waiters();
    }

    /// Runs `f` on partition `index`'s halves if they are loaded in `epoch` (None: any epoch),
    /// else NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
    pub fn with<T>(
        &self,
        index: u32,
        epoch: Option<u32>,
        f: impl FnOnce(&mut PartitionHalves) -> T,
    ) -> Result<T, m::Error> {
        let mut led = self.led.lock();
        match led.get_mut(&index) {
            Some(Led::Loaded(e, halves)) if epoch.is_none_or(|want| want == *e) => Ok(f(halves)),
            Some(Led::Loading(_)) => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.with_message(
                format!("__half_messages/{index} is being loaded here; retry"),
            )),
            _ => Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
                "__half_messages/{index} is not led here (in this epoch); find the coordinator again"
            ))),
        }
    }

    /// Runs `f` on every loaded partition's halves.
    pub fn each(&self, mut f: impl FnMut(u32, u32, &mut PartitionHalves)) {
        for (index, led) in self.led.lock().iter_mut() {
            if let Led::Loaded(epoch, halves) = led {
                f(*index, *epoch, halves);
            }
        }
    }

    /// Unresolved halves and their record bytes, over every partition.
    pub fn usage(&self) -> (usize, usize) {
        let mut usage = (0, 0);
        self.each(|_, _, p| {
            usage.0 += p.len();
            usage.1 += p.bytes();
        });
        usage
    }
}
