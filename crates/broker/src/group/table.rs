//! The coordinator's one map of groups: each entry is a native group or a classic one
//! (Kafka's protocol), so one group id names one group and one bound
//! (`super::GROUPS_MAX`) counts both. Beside the map it keeps what the classic mode needs
//! without walking every group: the ids of the classic entries (the classic tick, every
//! 100 ms, walks only those) and the bytes they keep together (so a join's or sync's budget
//! under [`CLASSIC_GROUPS_BYTES_MAX`] is one subtraction). Every change of the map goes
//! through [`Groups::insert`], [`Groups::remove`], [`Groups::retain`] and
//! [`Groups::with_classic`], which keep both exact.

use std::collections::{HashMap, HashSet};

use tokio::sync::oneshot;

use super::classic::{self, Budget, Deliveries, Reply, CLASSIC_GROUPS_BYTES_MAX, GROUP_BYTES_MAX};
use super::coordinator::Group;

/// A classic request waiting for its join or sync answer.
pub(super) type Waiter = oneshot::Sender<Reply>;
pub(super) type ClassicGroup = classic::Group<Waiter>;

/// Sends the replies due; a request that is no longer waiting (its connection closed) is
/// skipped. Called with no lock held.
pub(super) fn deliver(out: Deliveries<Waiter>) {
    for (waiter, reply) in out {
        let _ = waiter.send(reply);
    }
}

#[derive(Debug)]
pub(super) enum Entry {
    Native(Group),
    Classic(ClassicGroup),
}

impl Entry {
    /// Native members, or classic members (or ids handed out to members on their way).
    pub fn has_members(&self) -> bool {
        match self {
            Entry::Native(group) => !group.is_empty(),
            Entry::Classic(group) => !group.is_vacant(),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Groups {
    map: HashMap<String, Entry>,
    /// The keys of the `Entry::Classic` entries.
    classic_ids: HashSet<String>,
    /// What the classic groups keep ([`classic::Group::stored_bytes`] summed).
    classic_bytes: usize,
}

impl Groups {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.map.get(id)
    }

    pub fn native(&self, id: &str) -> Option<&Group> {
        match self.map.get(id) {
            Some(Entry::Native(group)) => Some(group),
            _ => None,
        }
    }

    pub fn native_mut(&mut self, id: &str) -> Option<&mut Group> {
        match self.map.get_mut(id) {
            Some(Entry::Native(group)) => Some(group),
            _ => None,
        }
    }

    pub fn classic(&self, id: &str) -> Option<&ClassicGroup> {
        match self.map.get(id) {
            Some(Entry::Classic(group)) => Some(group),
            _ => None,
        }
    }

    pub fn natives_mut(&mut self) -> impl Iterator<Item = (&String, &mut Group)> {
        self.map.iter_mut().filter_map(|(id, entry)| match entry {
            Entry::Native(group) => Some((id, group)),
            Entry::Classic(_) => None,
        })
    }

    pub fn natives(&self) -> impl Iterator<Item = (&String, &Group)> {
        self.map.iter().filter_map(|(id, entry)| match entry {
            Entry::Native(group) => Some((id, group)),
            Entry::Classic(_) => None,
        })
    }

    /// The classic groups, found by their ids (not by a walk over every group).
    pub fn classics(&self) -> impl Iterator<Item = (&String, &ClassicGroup)> {
        self.classic_ids
            .iter()
            .filter_map(|id| self.classic(id).map(|group| (id, group)))
    }

    /// Puts `entry` under `id`, replacing what was there.
    pub fn insert(&mut self, id: String, entry: Entry) {
        self.remove(&id);
        if let Entry::Classic(group) = &entry {
            self.classic_ids.insert(id.clone());
            self.classic_bytes = self.classic_bytes.saturating_add(group.stored_bytes());
        }
        self.map.insert(id, entry);
    }

    pub fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.map.remove(id)?;
        if let Entry::Classic(group) = &entry {
            self.classic_ids.remove(id);
            self.classic_bytes = self.classic_bytes.saturating_sub(group.stored_bytes());
        }
        Some(entry)
    }

    /// Keeps the entries `keep` says to (a walk over every group).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut Entry) -> bool) {
        let (ids, bytes) = (&mut self.classic_ids, &mut self.classic_bytes);
        self.map.retain(|id, entry| {
            let kept = keep(id, entry);
            if let (false, Entry::Classic(group)) = (kept, &*entry) {
                ids.remove(id);
                *bytes = bytes.saturating_sub(group.stored_bytes());
            }
            kept
        });
    }

    /// Applies `f` to classic group `id` (`None`: no classic group by that id), its budget
    /// set to what the other classic groups leave.
    pub fn with_classic<T>(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut ClassicGroup) -> T,
    ) -> Option<T> {
        let Some(Entry::Classic(group)) = self.map.get_mut(id) else {
            return None;
        };
        let before = group.stored_bytes();
        let others = self.classic_bytes.saturating_sub(before);
        group.budget = budget_left(others, CLASSIC_GROUPS_BYTES_MAX);
        let out = f(group);
        self.classic_bytes = others.saturating_add(group.stored_bytes());
        Some(out)
    }

    /// Time passes for the classic groups (the coordinator's tick): sessions expire, join
    /// phases end, groups vacant for `forget_after` are forgotten. Walks the classic groups
    /// only.
    pub fn tick_classic(
        &mut self,
        now: std::time::Instant,
        forget_after: std::time::Duration,
    ) -> Deliveries<Waiter> {
        let mut out = Vec::new();
        let mut forget = Vec::new();
        let Groups {
            map,
            classic_ids,
            classic_bytes,
        } = self;
        for id in classic_ids.iter() {
            let Some(Entry::Classic(group)) = map.get_mut(id) else {
                continue;
            };
            let before = group.stored_bytes();
            let (expired, delivered) = group.tick(now);
            // A tick only frees bytes.
            *classic_bytes = classic_bytes
                .saturating_sub(before)
                .saturating_add(group.stored_bytes());
            for member in expired {
                tracing::info!(group = %id, %member, "kafka group member session expired");
            }
            out.extend(delivered);
            if group.is_forgettable(now, forget_after) {
                forget.push(id.clone());
            }
        }
        for id in forget {
            self.remove(&id);
        }
        out
    }

    /// What the classic groups keep together.
    #[cfg(test)]
    pub fn classic_bytes(&self) -> usize {
        self.classic_bytes
    }

    /// Whether the ids and bytes kept beside the map match it (recounted).
    #[cfg(test)]
    pub fn is_consistent(&self) -> bool {
        let classic: Vec<(&String, &ClassicGroup)> = self
            .map
            .iter()
            .filter_map(|(id, entry)| match entry {
                Entry::Classic(group) => Some((id, group)),
                Entry::Native(_) => None,
            })
            .collect();
        let bytes: usize = classic.iter().map(|(_, g)| g.stored_bytes()).sum();
        let ids: HashSet<String> = classic.iter().map(|(id, _)| (*id).clone()).collect();
        bytes == self.classic_bytes && ids == self.classic_ids
    }
}

/// What one classic group may keep: [`GROUP_BYTES_MAX`], or less when the other classic
/// groups, keeping `others` bytes, leave less of `groups_bytes_max`.
pub(super) fn budget_left(others: usize, groups_bytes_max: usize) -> Budget {
    let left = groups_bytes_max.saturating_sub(others);
    if left < GROUP_BYTES_MAX {
        Budget {
            bytes_max: left,
            limit: "CLASSIC_GROUPS_BYTES_MAX",
        }
    } else {
        Budget::default()
    }
}
