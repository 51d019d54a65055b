//! Keeping the partitions held here in line with the metadata image: open those placed on this
//! broker, close those no longer placed here, and remove the data of topics that are gone.
//!
//! A topic is known by its id, not only its name: each partition directory holds a `topic-id`
//! file, and a directory (open or on disk) whose id differs from the image's topic of the same
//! name belongs to a deleted topic; its data is removed before the new topic's partition is
//! created. So a topic deleted and created again while a broker was down or between two
//! image reads never shows the old records.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tinymq_meta::{is_internal_topic, MetadataImage, TopicRecord};

use crate::partition::Partition;
use crate::state::{remove_partition_dir, BrokerState};

/// The file in a partition directory naming the topic id it belongs to.
const TOPIC_ID_FILE: &str = "topic-id";

/// The topic id recorded in a partition directory, if any.
fn recorded_topic_id(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(TOPIC_ID_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn record_topic_id(dir: &Path, id: u64) -> std::io::Result<()> {
    crate::durable_file::write_atomically(&dir.join(TOPIC_ID_FILE), id.to_string().as_bytes())
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
            // Internal topics (the group offsets) are opened by their own owners.
            .filter(|(name, _)| !is_internal_topic(name))
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
        for ((name, index), topic) in wanted {
            if self.local_partition(name, index).is_none() {
                self.open_partition(name, index, topic);
            }
        }
    }

    /// Closes and removes every open partition of a topic the image no longer has, or has
    /// under another id.
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
        for name in gone {
            let Some(local) = self.partitions.write().remove(&name) else {
                continue;
            };
            for (index, partition) in local.partitions {
                if let Err(e) = partition.close() {
                    tracing::error!(topic = %name, partition = index, error = %e, "close failed");
                }
                match remove_partition_dir(&self.config.data_dir, &name, index) {
                    Ok(()) => tracing::info!(topic = %name, partition = index, "deleted"),
                    Err(e) => {
                        tracing::error!(topic = %name, partition = index, error = %e, "removing the data failed")
                    }
                }
            }
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

    fn open_partition(&self, name: &str, index: u32, topic: &TopicRecord) {
        let data_dir = &self.config.data_dir;
        let dir = Partition::dir_for(data_dir, name, index);
        if !same_topic(recorded_topic_id(&dir), topic.id) {
            tracing::info!(
                topic = name,
                partition = index,
                "removing data of an earlier topic with this name"
            );
            if let Err(e) = remove_partition_dir(data_dir, name, index) {
                tracing::error!(topic = name, partition = index, error = %e, "cannot remove old data");
                return;
            }
        }
        let settings = self.settings_of(name, topic);
        let opened = Partition::open(data_dir, name, index, &settings).and_then(|p| {
            record_topic_id(&dir, topic.id).map_err(|source| tinymq_log::LogError::Io {
                path: dir.clone(),
                source,
            })?;
            Ok(p)
        });
        match opened {
            Ok(p) => {
                let mut partitions = self.partitions.write();
                let local = partitions.entry(name.to_string()).or_default();
                local.id = topic.id;
                local.partitions.insert(index, Arc::new(p));
            }
            Err(e) => {
                tracing::error!(topic = name, partition = index, error = %e, "cannot open partition")
            }
        }
    }
}

/// Removes partition directories of topics the image does not have (deleted while this broker
/// was down) or has under another id. Safe because the directory's identity matched the
/// cluster: the image is this cluster's. Internal (`__…`) directories are left alone.
pub fn remove_deleted_topics(data_dir: &Path, image: &MetadataImage) -> std::io::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((topic, index)) = name.rsplit_once('-') else {
            continue;
        };
        if is_internal_topic(topic) || index.parse::<u32>().is_err() {
            continue;
        }
        let current = image.topics.get(topic);
        let stale = current.is_none_or(|t| !same_topic(recorded_topic_id(&entry.path()), t.id));
        if stale {
            tracing::info!(topic, dir = %entry.path().display(), "removing data of a deleted topic");
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_without_an_id_are_adopted_and_others_must_match() {
        assert!(same_topic(None, 7));
        assert!(same_topic(Some(0), 7));
        assert!(same_topic(Some(7), 0));
        assert!(same_topic(Some(7), 7));
        assert!(!same_topic(Some(7), 8));
    }
}
