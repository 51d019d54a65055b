//! Fetch sessions (KIP-227): the listener remembers, per session, which partitions a consumer
//! fetches, from which offsets, and what it last told the consumer about each. A session's
//! next request (an *incremental* fetch) names only the partitions whose fetch offset changed
//! and those to forget; its answer lists only the partitions with news: records, an error, or
//! a high watermark, last stable offset or log start offset that moved. A consumer of many
//! partitions of which few are busy then sends and receives a few partitions per fetch
//! instead of all of them.
//!
//! A request's `(session_id, session_epoch)` says what it is, as in Kafka:
//! - epoch -1: a full fetch with no session (closing `session_id` first, if named);
//! - epoch 0: a full fetch asking for a new session (closing `session_id` first, if named);
//!   the answer carries the new session's id, or 0 when none could be made, after which the
//!   client keeps sending full fetches;
//! - any other epoch: the next fetch of session `session_id`, which must be the epoch the
//!   session expects (1 after its creation, then one more each time, 1 again after
//!   `i32::MAX`). An unknown session, or one made by another principal, is answered
//!   FETCH_SESSION_ID_NOT_FOUND; another epoch INVALID_FETCH_SESSION_EPOCH; a session made
//!   with topic names used with topic ids or the other way round FETCH_SESSION_TOPIC_ID_ERROR.
//!   On any of these a client starts again with a full fetch.
//!
//! This module is the bookkeeping only; `super` reads the partitions. The cache is bounded
//! (`sessions_max`, [`FETCH_SESSIONS_MAX`] by default, [`FETCH_SESSION_PARTITIONS_MAX`],
//! [`FETCH_SESSION_PARTITIONS_TOTAL_MAX`]); a full cache makes room by evicting the sessions
//! unused longest, if unused for [`FETCH_SESSION_EVICTABLE_AFTER`], and otherwise makes no
//! session: the client still fetches, with full fetches.
//!
//! Sessions answer nothing by themselves: whatever is answered is read through the native
//! fetch under the requester's identity, so a session grants no access its user lacks
//! (`super::with_news` skips the read of partitions with nothing to answer).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::TopicName;
use parking_lot::Mutex;
use tinymq_auth::Principal;
use uuid::Uuid;

/// Sessions kept at once per listener by default (`--kafka-fetch-sessions-max`; Kafka's
/// `max.incremental.fetch.session.cache.slots`).
pub const FETCH_SESSIONS_MAX: usize = 1_000;
/// Partitions in one session: the native fetch's bound on partitions per request.
pub const FETCH_SESSION_PARTITIONS_MAX: usize = 10_000;
/// Partitions in all sessions together (about 100 bytes each: 20 MB).
pub const FETCH_SESSION_PARTITIONS_TOTAL_MAX: usize = 200_000;
/// How long a session must have gone unused before a new one may evict it (Kafka's
/// `min.incremental.fetch.session.eviction.ms`).
pub const FETCH_SESSION_EVICTABLE_AFTER: Duration = Duration::from_secs(120);

/// A partition as a request names it: by topic name (Fetch v12 and older) or topic id (v13+).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TopicRef {
    Name(TopicName),
    Id(Uuid),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub topic: TopicRef,
    pub index: i32,
}

/// One partition to read: where from and how much.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Wanted {
    pub key: Key,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
}

/// What a request says about sessions, and its partitions.
#[derive(Debug)]
pub(crate) struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// Whether the request names topics by id (Fetch v13+).
    pub topic_ids: bool,
    /// In request order.
    pub partitions: Vec<Wanted>,
    /// Partitions an incremental fetch drops from its session.
    pub forgotten: Vec<Key>,
}

/// How a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Every partition asked for, no session.
    Sessionless,
    /// Every partition asked for, and a session made of them.
    Create,
    /// The session's partitions, answering only those with news.
    Incremental { id: i32 },
}

/// A request with its session applied: the partitions to read, in order.
#[derive(Debug)]
pub(crate) struct Opened {
    pub kind: Kind,
    pub partitions: Vec<Wanted>,
    pub topic_ids: bool,
    /// Per partition, in an incremental fetch: what the session's last answer told, if that
    /// answer had no error. Such a partition whose log still says the same and whose fetch
    /// offset is its end has nothing to answer, and need not be read (`None`: read it).
    pub last_told: Vec<Option<Told>>,
}

/// What a partition's answer told the client about its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Told {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// One partition's answer, as far as the session needs to know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    pub told: Told,
    pub error: bool,
    pub has_records: bool,
}

impl Outcome {
    /// Records or an error: answered whatever it told before.
    fn must_answer(&self) -> bool {
        self.error || self.has_records
    }
}

#[derive(Debug, Clone)]
struct Entry {
    wanted: Wanted,
    /// `None` until answered once (a partition new to the session is always answered), and
    /// after an answer with an error.
    told: Option<Told>,
}

#[derive(Debug)]
struct Session {
    owner: Principal,
    topic_ids: bool,
    /// The epoch the session's next request must carry.
    epoch: i32,
    /// In fetch order: a partition answered with records moves to the end, so a fetch's byte
    /// budget does not always go to the same partitions.
    entries: Vec<Entry>,
    last_used: Instant,
}

struct Cache {
    sessions: HashMap<i32, Session>,
    partitions_total: usize,
    sessions_max: usize,
}

/// The listener's fetch sessions.
pub(crate) struct FetchSessions {
    cache: Mutex<Cache>,
}

/// The epoch after `epoch` (Kafka's: 1 follows `i32::MAX`).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl FetchSessions {
    /// At most `sessions_max` sessions (0: none is ever made).
    pub fn new(sessions_max: usize) -> FetchSessions {
        let cache = Cache {
            sessions: HashMap::new(),
            partitions_total: 0,
            sessions_max,
        };
        FetchSessions {
            cache: Mutex::new(cache),
        }
    }

    /// The partitions `request` reads, its session updated; or the Kafka error answering it.
    pub fn open(
        &self,
        owner: &Principal,
        request: SessionRequest,
        now: Instant,
    ) -> Result<Opened, i16> {
        let mut cache = self.cache.lock();
        let full = matches!(request.epoch, -1 | 0);
        if full {
            if request.session_id != 0 {
                cache.remove_owned(request.session_id, owner);
            }
            let kind = match request.epoch {
                0 => Kind::Create,
                _ => Kind::Sessionless,
            };
            let last_told = vec![None; request.partitions.len()];
            return Ok(Opened {
                kind,
                partitions: request.partitions,
                topic_ids: request.topic_ids,
                last_told,
            });
        }
        let id = request.session_id;
        let Some(session) = cache.sessions.get_mut(&id).filter(|s| s.owner == *owner) else {
            return Err(K::FetchSessionIdNotFound.code());
        };
        if session.epoch != request.epoch {
            return Err(K::InvalidFetchSessionEpoch.code());
        }
        if session.topic_ids != request.topic_ids {
            return Err(K::FetchSessionTopicIdError.code());
        }
        session.epoch = next_epoch(session.epoch);
        session.last_used = now;
        let before = session.entries.len();
        apply(&mut session.entries, request.partitions, &request.forgotten);
        let after = session.entries.len();
        let partitions = session.entries.iter().map(|e| e.wanted.clone()).collect();
        let last_told = session.entries.iter().map(|e| e.told).collect();
        cache.partitions_total = (cache.partitions_total + after).saturating_sub(before);
        if after == 0 {
            // As Kafka: a session left with no partitions ends, and the fetch is sessionless.
            cache.remove_owned(id, owner);
            return Ok(Opened {
                kind: Kind::Sessionless,
                partitions,
                topic_ids: request.topic_ids,
                last_told,
            });
        }
        if after > FETCH_SESSION_PARTITIONS_MAX
            || cache.partitions_total > FETCH_SESSION_PARTITIONS_TOTAL_MAX
        {
            // Too large to keep: the client starts again, and its full fetch gets no session.
            cache.remove_owned(id, owner);
            return Err(K::FetchSessionIdNotFound.code());
        }
        Ok(Opened {
            kind: Kind::Incremental { id },
            partitions,
            topic_ids: request.topic_ids,
            last_told,
        })
    }

    /// After the partitions of `opened` at `read` (indexes; every one but in an incremental
    /// fetch) were read, `outcomes` in the same order: the session id to answer with, and
    /// which of them the answer lists.
    pub fn finish(
        &self,
        owner: &Principal,
        opened: &Opened,
        read: &[usize],
        outcomes: &[Outcome],
        now: Instant,
    ) -> (i32, Vec<bool>) {
        debug_assert_eq!(read.len(), outcomes.len());
        let every = vec![true; outcomes.len()];
        match opened.kind {
            Kind::Sessionless => (0, every),
            Kind::Create => {
                debug_assert_eq!(read.len(), opened.partitions.len());
                let id = self.create(owner, opened, outcomes, now).unwrap_or(0);
                (id, every)
            }
            Kind::Incremental { id } => {
                let read: Vec<&Wanted> = read.iter().map(|i| &opened.partitions[*i]).collect();
                let mut cache = self.cache.lock();
                match cache.sessions.get_mut(&id).filter(|s| s.owner == *owner) {
                    Some(session) => (id, session.update(&read, outcomes)),
                    // Evicted meanwhile: answering everything is still a true answer, and the
                    // client's next fetch learns that the session is gone.
                    None => (id, every),
                }
            }
        }
    }

    /// A new session of `opened`'s partitions, if the cache has or can make room for it.
    fn create(
        &self,
        owner: &Principal,
        opened: &Opened,
        outcomes: &[Outcome],
        now: Instant,
    ) -> Option<i32> {
        let count = opened.partitions.len();
        if count > FETCH_SESSION_PARTITIONS_MAX || has_duplicates(&opened.partitions) {
            return None;
        }
        let entries = opened
            .partitions
            .iter()
            .zip(outcomes)
            .map(|(wanted, outcome)| Entry {
                wanted: wanted.clone(),
                told: Some(outcome.told).filter(|_| !outcome.error),
            })
            .collect();
        let mut cache = self.cache.lock();
        if !cache.make_room(count, now) {
            return None;
        }
        let id = cache.new_id()?;
        cache.partitions_total += count;
        let session = Session {
            owner: owner.clone(),
            topic_ids: opened.topic_ids,
            epoch: 1,
            entries,
            last_used: now,
        };
        cache.sessions.insert(id, session);
        Some(id)
    }

    #[cfg(test)]
    pub fn len(&self) -> (usize, usize) {
        let cache = self.cache.lock();
        (cache.sessions.len(), cache.partitions_total)
    }
}

/// An incremental request's changes: partitions added or moved (in place), then forgotten.
fn apply(entries: &mut Vec<Entry>, changed: Vec<Wanted>, forgotten: &[Key]) {
    if !changed.is_empty() {
        // The changes by key (the last of a key named twice wins), matched against entries.
        let mut changes: HashMap<Key, Option<Wanted>> = HashMap::with_capacity(changed.len());
        let mut order = Vec::with_capacity(changed.len());
        for wanted in changed {
            if changes.insert(wanted.key.clone(), None).is_none() {
                order.push(wanted.key.clone());
            }
            changes.insert(wanted.key.clone(), Some(wanted));
        }
        for entry in entries.iter_mut() {
            if let Some(wanted) = changes.get_mut(&entry.wanted.key).and_then(Option::take) {
                entry.wanted = wanted;
            }
        }
        for key in order {
            if let Some(Some(wanted)) = changes.remove(&key) {
                entries.push(Entry { wanted, told: None });
            }
        }
    }
    if !forgotten.is_empty() {
        let forgotten: std::collections::HashSet<&Key> = forgotten.iter().collect();
        entries.retain(|e| !forgotten.contains(&e.wanted.key));
    }
}

fn has_duplicates(partitions: &[Wanted]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(partitions.len());
    !partitions.iter().all(|w| seen.insert(&w.key))
}

impl Session {
    /// Records what each partition read told (`read` and `outcomes` in the same order); says
    /// which of them the client needs answered.
    fn update(&mut self, read: &[&Wanted], outcomes: &[Outcome]) -> Vec<bool> {
        let mut by_key: HashMap<&Key, usize> = HashMap::with_capacity(read.len());
        for (i, wanted) in read.iter().enumerate() {
            by_key.insert(&wanted.key, i);
        }
        // A partition not in the session any more (changed meanwhile) is answered.
        let mut include = vec![true; read.len()];
        let mut moved_back = vec![false; self.entries.len()];
        let mut any_moved = false;
        for (entry, moved) in self.entries.iter_mut().zip(moved_back.iter_mut()) {
            let Some(&i) = by_key.get(&entry.wanted.key) else {
                continue;
            };
            let outcome = &outcomes[i];
            include[i] = outcome.must_answer() || entry.told != Some(outcome.told);
            entry.told = Some(outcome.told).filter(|_| !outcome.error);
            // Partitions that returned records go to the back of the next fetch.
            *moved = outcome.has_records;
            any_moved |= outcome.has_records;
        }
        if any_moved {
            let mut front = Vec::with_capacity(self.entries.len());
            let mut back = Vec::new();
            for (entry, moved) in std::mem::take(&mut self.entries)
                .into_iter()
                .zip(moved_back)
            {
                match moved {
                    true => back.push(entry),
                    false => front.push(entry),
                }
            }
            front.extend(back);
            self.entries = front;
        }
        include
    }
}

impl Cache {
    fn remove_owned(&mut self, id: i32, owner: &Principal) {
        if self.sessions.get(&id).is_some_and(|s| s.owner == *owner) {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: i32) {
        if let Some(session) = self.sessions.remove(&id) {
            self.partitions_total = self.partitions_total.saturating_sub(session.entries.len());
        }
    }

    /// Evicts sessions unused for [`FETCH_SESSION_EVICTABLE_AFTER`], longest unused first,
    /// until one more session of `partitions` fits; whether it does.
    fn make_room(&mut self, partitions: usize, now: Instant) -> bool {
        let fits = |c: &Cache| {
            c.sessions.len() < c.sessions_max
                && c.partitions_total + partitions <= FETCH_SESSION_PARTITIONS_TOTAL_MAX
        };
        if fits(self) {
            return true;
        }
        let mut evictable: Vec<(Instant, i32)> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                now.saturating_duration_since(s.last_used) >= FETCH_SESSION_EVICTABLE_AFTER
            })
            .map(|(id, s)| (s.last_used, *id))
            .collect();
        evictable.sort_unstable();
        for (_, id) in evictable {
            self.remove(id);
            if fits(self) {
                return true;
            }
        }
        fits(self)
    }

    /// A random positive id no session has; `None` if the system's random source fails.
    fn new_id(&self) -> Option<i32> {
        for _ in 0..16 {
            let mut bytes = [0u8; 4];
            getrandom::fill(&mut bytes).ok()?;
            let id = i32::from_le_bytes(bytes) & i32::MAX;
            if id != 0 && !self.sessions.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
