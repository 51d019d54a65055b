//! Cluster metadata as the broker sees it: the cluster id, topics and their settings, and
//! producer-id allocation, behind the [`MetadataStore`] trait.
//!
//! The standalone server uses [`LocalMetadata`], a file in the data directory written
//! atomically (temp file, fsync, rename, directory fsync). The MetaServer (Raft) will be a
//! second implementation of the same trait; the broker does not change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tinymq_protocol::ErrorCode;

use crate::topic::TopicSettings;

/// Producer ids are reserved on disk in blocks of this many, so allocating one rarely writes.
/// Ids of a block not used before a restart are skipped, never reused.
pub const PRODUCER_ID_BLOCK: i64 = 1000;
/// Most topics one cluster holds.
pub const TOPICS_MAX: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    #[error("the cluster already has {TOPICS_MAX} topics")]
    TooManyTopics,
    #[error("metadata storage failed: {0}")]
    Storage(#[from] std::io::Error),
    #[error("metadata file {path} is unreadable: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl MetadataError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            MetadataError::TopicExists(_) => ErrorCode::TOPIC_ALREADY_EXISTS,
            MetadataError::UnknownTopic(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            MetadataError::TooManyTopics => ErrorCode::LIMIT_EXCEEDED,
            MetadataError::Storage(_) | MetadataError::Corrupt { .. } => ErrorCode::STORAGE_ERROR,
        }
    }
}

/// What a broker needs from the cluster's metadata. Methods may block on I/O; call them from
/// a blocking context.
pub trait MetadataStore: Send + Sync + std::fmt::Debug {
    fn cluster_id(&self) -> String;
    fn topics(&self) -> BTreeMap<String, TopicSettings>;
    fn topic(&self, name: &str) -> Option<TopicSettings>;
    fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), MetadataError>;
    fn delete_topic(&self, name: &str) -> Result<(), MetadataError>;
    /// A producer id never handed out before, cluster-wide.
    fn allocate_producer_id(&self) -> Result<i64, MetadataError>;
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct MetadataImage {
    cluster_id: String,
    topics: BTreeMap<String, TopicSettings>,
    /// Every producer id below this may have been handed out.
    producer_ids_reserved: i64,
}

#[derive(Debug)]
struct LocalState {
    image: MetadataImage,
    next_producer_id: i64,
}

/// Metadata kept in one JSON file, for the standalone server.
#[derive(Debug)]
pub struct LocalMetadata {
    path: PathBuf,
    state: Mutex<LocalState>,
}

const METADATA_FILE: &str = "metadata.json";

impl LocalMetadata {
    /// Opens the metadata in `dir`, creating it with a fresh cluster id if absent.
    pub fn open(dir: &Path) -> Result<LocalMetadata, MetadataError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(METADATA_FILE);
        let image = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| MetadataError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let image = MetadataImage {
                    cluster_id: new_cluster_id(),
                    topics: BTreeMap::new(),
                    producer_ids_reserved: 0,
                };
                write_atomically(&path, &image)?;
                image
            }
            Err(e) => return Err(e.into()),
        };
        let next_producer_id = image.producer_ids_reserved;
        Ok(LocalMetadata {
            path,
            state: Mutex::new(LocalState {
                image,
                next_producer_id,
            }),
        })
    }

    /// Applies `change` to a copy of the image, persists it, and only then makes it current.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut MetadataImage) -> Result<T, MetadataError>,
    ) -> Result<T, MetadataError> {
        let mut state = self.state.lock();
        let mut image = state.image.clone();
        let out = change(&mut image)?;
        write_atomically(&self.path, &image)?;
        state.image = image;
        Ok(out)
    }
}

impl MetadataStore for LocalMetadata {
    fn cluster_id(&self) -> String {
        self.state.lock().image.cluster_id.clone()
    }

    fn topics(&self) -> BTreeMap<String, TopicSettings> {
        self.state.lock().image.topics.clone()
    }

    fn topic(&self, name: &str) -> Option<TopicSettings> {
        self.state.lock().image.topics.get(name).cloned()
    }

    fn create_topic(&self, name: &str, settings: TopicSettings) -> Result<(), MetadataError> {
        self.update(|image| {
            if image.topics.contains_key(name) {
                return Err(MetadataError::TopicExists(name.into()));
            }
            if image.topics.len() >= TOPICS_MAX {
                return Err(MetadataError::TooManyTopics);
            }
            image.topics.insert(name.into(), settings);
            Ok(())
        })
    }

    fn delete_topic(&self, name: &str) -> Result<(), MetadataError> {
        self.update(|image| {
            image
                .topics
                .remove(name)
                .map(drop)
                .ok_or_else(|| MetadataError::UnknownTopic(name.into()))
        })
    }

    fn allocate_producer_id(&self) -> Result<i64, MetadataError> {
        let mut state = self.state.lock();
        if state.next_producer_id >= state.image.producer_ids_reserved {
            let mut image = state.image.clone();
            image.producer_ids_reserved = state.next_producer_id + PRODUCER_ID_BLOCK;
            write_atomically(&self.path, &image)?;
            state.image = image;
        }
        let id = state.next_producer_id;
        state.next_producer_id += 1;
        Ok(id)
    }
}

fn new_cluster_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("tmq-{:016x}{:08x}", nanos as u64, std::process::id())
}

fn write_atomically(path: &Path, image: &MetadataImage) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(image).map_err(std::io::Error::other)?;
    crate::durable_file::write_atomically(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_producer_ids_survive_reopening() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = LocalMetadata::open(tmp.path()).unwrap();
        let cluster = meta.cluster_id();
        meta.create_topic("a", TopicSettings::default()).unwrap();
        assert!(matches!(
            meta.create_topic("a", TopicSettings::default()),
            Err(MetadataError::TopicExists(_))
        ));
        let first = meta.allocate_producer_id().unwrap();
        let second = meta.allocate_producer_id().unwrap();
        assert_eq!(second, first + 1);
        drop(meta);

        let meta = LocalMetadata::open(tmp.path()).unwrap();
        assert_eq!(meta.cluster_id(), cluster);
        assert!(meta.topic("a").is_some());
        let after_restart = meta.allocate_producer_id().unwrap();
        assert!(
            after_restart > second,
            "ids are never reused across restarts"
        );
        meta.delete_topic("a").unwrap();
        assert!(matches!(
            meta.delete_topic("a"),
            Err(MetadataError::UnknownTopic(_))
        ));
    }
}
