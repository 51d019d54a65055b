//! Keeping the partitions held here in line with the metadata image: open those placed on this
//! broker, close those no longer placed here, and remove the data of topics that are gone.
//!
//! A topic is known by its id, not only its name: each partition directory holds a `topic-id`
//! file, and a directory (open or on disk) whose id differs from the image's topic of the same
//! name belongs to a deleted topic; its directory is renamed away (and removed in the
//! background, [`crate::deletion`]) before the new topic's partition is created. So a topic
//! deleted and created again while a broker was down or between two image reads never shows
//! the old records.
//!
//! A partition that cannot be opened (an I/O error, or even a panic while opening) stays
//! offline with its reason recorded, and the broker serves the rest; the next reconciliation
//! (the next image change) tries it again.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tinymq_meta::{is_internal_topic, MetadataImage, TopicRecord};

use crate::partition::Partition;
use crate::state::BrokerState;

/// Threads opening partitions at once. Opening one mostly waits on the disk (directory and
/// file fsyncs, reading the active segment), so a broker with thousands of partitions opens
/// them several at a time even on few cores.
const PARTITION_OPEN_THREADS: usize = 8;

/// The file in a partition directory naming the topic id it belongs to.
const TOPIC_ID_FILE: &str = "topic-id";

/// The topic id recorded in a partition directory, if any.
fn recorded_topic_id(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(TOPIC_ID_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn record_topic_id(dir: &Path, id: u64) -> std::io::Result<()> {
    let path = dir.join(TOPIC_ID_FILE);
    tinymq_storage::replace_file(&tinymq_storage::OsStorage, &path, id.to_string().as_bytes())?;
    Ok(())
}

/// Whether a directory recorded for topic id `recorded` belongs to `current` (id 0 is a
/// topic from before ids: it matches anything, since nothing better is known).
fn same_topic(recorded: Option<u64>, current: u64) -> bool {
    match recorded {
        None | Some(0) => true,
        Some(id) => current == 0 || id == current,
    }
}

impl BrokerState {
    /// Brings the open partitions in line with `image`. Blocks on disk I/O (recovery); run it
    /// on a blocking thread. Errors are per partition and logged; the rest proceed.
    pub fn reconcile(&self, image: &MetadataImage) {
        self.drop_gone_topics(image);
        let me = self.node_id();
        let wanted: BTreeMap<(&String, u32), &TopicRecord> = image
            .topics
            .iter()
            .flat_map(|(name, topic)| {
                topic
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(move |(_, p)| p.replicas.contains(&me))
                    .map(move |(i, _)| ((name, i as u32), topic))
            })
            .collect();
        self.close_unwanted(&wanted);
        self.open_failures.write().retain(|name, failed| {
            failed.retain(|index, _| wanted.contains_key(&(name, *index)));
            !failed.is_empty()
        });
        let closed: Vec<(&String, u32, &TopicRecord)> = wanted
            .into_iter()
            .filter(|((name, index), _)| self.local_partition(name, *index).is_none())
            .map(|((name, index), topic)| (name, index, topic))
            .collect();
        self.open_partitions(&closed);
        self.assume_roles(image);
        self.apply_topic_settings(image);
    }

    /// Gives each open partition its topic's settings from `image`, so that an altered topic
    /// (`AlterTopicConfig`) takes effect here without a restart.
    pub(crate) fn apply_topic_settings(&self, image: &MetadataImage) {
        let open: Vec<(String, Vec<Arc<Partition>>)> = self
            .partitions
            .read()
            .iter()
            .map(|(name, local)| (name.clone(), local.partitions.values().cloned().collect()))
            .collect();
        for (name, partitions) in open {
            let Some(topic) = image.topics.get(&name) else {
                continue;
            };
            // Settings this broker cannot take leave its open partitions as they are:
            // `settings_of`'s fall-back to the defaults is for opening a partition, and pushed
            // into a live one it could shrink retention and delete segments.
            let settings = if name == tinymq_meta::command::OFFSETS_TOPIC
                || name == tinymq_meta::command::TRANSACTION_TOPIC
            {
                self.settings_of(&name, topic)
            } else {
                match crate::topic::TopicSettings::from_record(topic, &self.config.topic_defaults) {
                    Ok(settings) => settings,
                    Err((_, why)) => {
                        tracing::warn!(topic = %name, error = %why, "the topic's stored settings are invalid here; its open partitions keep their settings");
                        continue;
                    }
                }
            };
            for partition in partitions {
                if let Err(e) = partition.apply_settings(&settings) {
                    tracing::error!(topic = %name, partition = partition.index, error = %e, "cannot apply the topic's settings; the partition keeps its previous ones");
                }
            }
        }
    }

    /// Opens `closed` on up to [`PARTITION_OPEN_THREADS`] threads, each partition made
    /// available as soon as it is open, and records why each one that failed could not be.
    fn open_partitions(&self, closed: &[(&String, u32, &TopicRecord)]) {
        on_threads(closed, |&(name, index, topic)| {
            let outcome = self.open_partition(name, index, topic);
            let mut failures = self.open_failures.write();
            match outcome {
                Ok(()) => {
                    if let Some(failed) = failures.get_mut(name) {
                        failed.remove(&index);
                    }
                }
                Err(reason) => {
                    failures
                        .entry(name.clone())
                        .or_default()
                        .insert(index, reason);
                }
            }
        });
    }

    /// Flushes and closes every open partition (at shutdown), [`PARTITION_OPEN_THREADS`] at
    /// a time: each close waits on fsyncs. Returns whether every one closed cleanly.
    pub fn close_all(&self) -> bool {
        let clean = std::sync::atomic::AtomicBool::new(true);
        on_threads(&self.all_partitions(), |partition| {
            if let Err(e) = partition.close() {
                clean.store(false, Ordering::Relaxed);
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "close failed");
            }
        });
        clean.into_inner()
    }

    /// Gives each open partition the role the image names: leader or follower, with the
    /// leader epoch and ISR.
    pub(crate) fn assume_roles(&self, image: &MetadataImage) {
        let me = self.node_id();
        for partition in self.all_partitions() {
            let record = image
                .topics
                .get(&partition.topic)
                .and_then(|t| t.partitions.get(partition.index as usize));
            if let Some(record) = record {
                partition.assume_role(me, record);
            }
        }
    }

    /// Drops every open partition of a topic the image no longer has, or has under another
    /// id: appends are refused, the directory is renamed for the background removal
    /// ([`crate::deletion`]), and nothing is flushed, so deleting thousands of partitions takes
    /// a rename each, not fsyncs and file removals.
    fn drop_gone_topics(&self, image: &MetadataImage) {
        let gone: Vec<String> = self
            .partitions
            .read()
            .iter()
            .filter(|(name, local)| {
                image
                    .topics
                    .get(*name)
                    .is_none_or(|t| !same_topic(Some(local.id), t.id))
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &gone {
            let Some(local) = self.partitions.write().remove(name) else {
                continue;
            };
            for (index, partition) in local.partitions {
                partition.abandon();
                let dir = Partition::dir_for(&self.config.data_dir, name, index);
                if let Err(e) = crate::deletion::retire(&dir) {
                    tracing::error!(topic = %name, partition = index, error = %e, "cannot rename the data of a deleted partition for removal");
                }
            }
            tracing::info!(topic = %name, "deleted; its data is removed in the background");
        }
        if !gone.is_empty() {
            self.deleter.wake();
        }
    }

    /// Closes (keeping the data) open partitions no longer placed here.
    fn close_unwanted(&self, wanted: &BTreeMap<(&String, u32), &TopicRecord>) {
        let mut closing: Vec<Arc<Partition>> = Vec::new();
        {
            let mut partitions = self.partitions.write();
            for (name, local) in partitions.iter_mut() {
                local.partitions.retain(|index, p| {
                    let keep = wanted.contains_key(&(name, *index));
                    if !keep {
                        closing.push(p.clone());
                    }
                    keep
                });
            }
            partitions.retain(|_, local| !local.partitions.is_empty());
        }
        for p in closing {
            if let Err(e) = p.close() {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "close failed");
            }
        }
    }

    /// Opens one partition and adds it to the open ones; on failure returns why (logged at
    /// ERROR). A panic while opening is caught here, so that it takes only this partition
    /// offline, never the broker.
    fn open_partition(&self, name: &str, index: u32, topic: &TopicRecord) -> Result<(), String> {
        let data_dir = &self.config.data_dir;
        let dir = Partition::dir_for(data_dir, name, index);
        let opened = contain_panic(|| {
            if !same_topic(recorded_topic_id(&dir), topic.id) {
                tracing::info!(
                    topic = name,
                    partition = index,
                    "removing data of an earlier topic with this name"
                );
                crate::deletion::retire(&dir)
                    .map_err(|e| format!("cannot remove the data of an earlier topic: {e}"))?;
                self.deleter.wake();
            }
            let settings = self.settings_of(name, topic);
            let replicated = topic
                .partitions
                .get(index as usize)
                .is_some_and(|p| p.replicas.len() > 1);
            let partition = Partition::open(data_dir, name, index, &settings, replicated)
                .map_err(|e| e.to_string())?;
            // Rewritten (two fsyncs) only when it changes: not on every start.
            if recorded_topic_id(&dir) != Some(topic.id) {
                record_topic_id(&dir, topic.id)
                    .map_err(|e| format!("cannot record the topic id in {}: {e}", dir.display()))?;
            }
            Ok(partition)
        });
        let partition = opened.inspect_err(|reason| {
            tracing::error!(topic = name, partition = index, error = %reason, "cannot open partition; it stays offline here");
        })?;
        // Its role before anyone can reach it: a freshly opened partition would otherwise lead
        // with an ISR of itself alone until the next `assume_roles`.
        if let Some(record) = topic.partitions.get(index as usize) {
            partition.assume_role(self.node_id(), record);
        }
        let mut partitions = self.partitions.write();
        let local = partitions.entry(name.to_string()).or_default();
        local.id = topic.id;
        local.partitions.insert(index, Arc::new(partition));
        Ok(())
    }
}

/// Runs `work` on every item, on up to [`PARTITION_OPEN_THREADS`] threads.
fn on_threads<T: Sync>(items: &[T], work: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    let drain = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            work(item);
        }
    };
    let threads = PARTITION_OPEN_THREADS.min(items.len());
    if threads <= 1 {
        return drain();
    }
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(drain);
        }
    });
}

/// Runs `open`, turning a panic inside it into an error: the last line of defence that keeps
/// an unforeseen bug in opening one partition from stopping the whole broker.
fn contain_panic<T>(open: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(open))
        .unwrap_or_else(|panic| Err(format!("opening it panicked: {}", panic_message(&*panic))))
}

/// The message a panic carried, if it is text.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

impl BrokerState {
    /// At start: hands the partition directories of topics the image does not have (deleted
    /// while this broker was down), or has under another id, to the background removal. Safe
    /// because the directory's identity matched the cluster: the image is this cluster's.
    /// Internal (`__…`) directories are left alone.
    pub fn retire_deleted_topics(&self, image: &MetadataImage) -> std::io::Result<()> {
        let mut retired = false;
        for entry in std::fs::read_dir(&self.config.data_dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if crate::deletion::is_retired(&name) || !entry.file_type()?.is_dir() {
                continue;
            }
            let Some((topic, index)) = name.rsplit_once('-') else {
                continue;
            };
            if is_internal_topic(topic) || index.parse::<u32>().is_err() {
                continue;
            }
            let current = image.topics.get(topic);
            if current.is_none_or(|t| !same_topic(recorded_topic_id(&entry.path()), t.id)) {
                tracing::info!(topic, dir = %entry.path().display(), "removing data of a deleted topic");
                crate::deletion::retire(&entry.path())?;
                retired = true;
            }
        }
        if retired {
            self.deleter.wake();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterView;
    use crate::config::BrokerConfig;
    use tinymq_meta::link::MetaLink;
    use tinymq_meta::PartitionRecord;
    use tinymq_protocol::ErrorCode;

    /// A broker state (id 1) whose image holds topic `t` with `partitions` partitions led here.
    fn state_with_topic(data_dir: &Path, partitions: usize) -> BrokerState {
        let cluster = ClusterView::new(1, MetaLink::remote(vec![], 1));
        let mut image = MetadataImage {
            cluster_id: "tmq-test".into(),
            ..MetadataImage::default()
        };
        let led_here = PartitionRecord {
            replicas: vec![1],
            leader: Some(1),
            leader_epoch: 1,
            isr: vec![1],
            ..PartitionRecord::default()
        };
        image.topics.insert(
            "t".into(),
            TopicRecord {
                id: 7,
                partitions: vec![led_here; partitions],
                config: BTreeMap::new(),
            },
        );
        cluster.offer(1, image);
        let config = BrokerConfig {
            data_dir: data_dir.to_path_buf(),
            ..BrokerConfig::default()
        };
        let addr = config.listen;
        BrokerState::new(config, addr.into(), Arc::new(cluster)).unwrap()
    }

    #[test]
    fn an_unopenable_partition_is_offline_with_its_reason_and_the_others_are_served() {
        let tmp = tempfile::tempdir().unwrap();
        let state = state_with_topic(tmp.path(), 3);
        // A file where partition 1's directory should be: its log cannot be opened.
        let blocker = Partition::dir_for(tmp.path(), "t", 1);
        std::fs::write(&blocker, b"not a directory").unwrap();
        state.reconcile(&state.cluster.image());

        assert!(state.led_partition("t", 0).is_ok());
        assert!(state.led_partition("t", 2).is_ok());
        let err = state.led_partition("t", 1).unwrap_err();
        assert_eq!(err.error_code(), ErrorCode::STORAGE_ERROR);
        assert!(
            err.message
                .starts_with("t/1 cannot be opened on broker 1: "),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("t-1"),
            "names the path: {}",
            err.message
        );

        // Once the cause is gone, the next reconciliation opens it.
        std::fs::remove_file(&blocker).unwrap();
        state.reconcile(&state.cluster.image());
        assert!(state.led_partition("t", 1).is_ok());
        assert_eq!(state.open_failure("t", 1), None);
    }

    #[test]
    fn a_failure_is_forgotten_when_the_partition_is_no_longer_placed_here() {
        let tmp = tempfile::tempdir().unwrap();
        let state = state_with_topic(tmp.path(), 2);
        std::fs::write(Partition::dir_for(tmp.path(), "t", 1), b"x").unwrap();
        state.reconcile(&state.cluster.image());
        assert!(state.open_failure("t", 1).is_some());
        state.reconcile(&MetadataImage::default());
        assert_eq!(state.open_failure("t", 1), None);
        assert!(state.all_partitions().is_empty());
    }

    #[test]
    fn a_panic_while_opening_becomes_an_error() {
        let outcome: Result<(), String> = contain_panic(|| panic!("boom at {}", 42));
        assert_eq!(outcome, Err("opening it panicked: boom at 42".into()));
        let outcome: Result<(), String> = contain_panic(|| std::panic::panic_any(7u8));
        assert_eq!(
            outcome,
            Err("opening it panicked: a panic without a message".into())
        );
        assert_eq!(contain_panic(|| Ok::<_, String>(5)), Ok(5));
    }

    #[test]
    fn directories_without_an_id_are_adopted_and_others_must_match() {
        assert!(same_topic(None, 7));
        assert!(same_topic(Some(0), 7));
        assert!(same_topic(Some(7), 0));
        assert!(same_topic(Some(7), 7));
        assert!(!same_topic(Some(7), 8));
    }
}
