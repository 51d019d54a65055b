//! The broker's shared state: configuration, the metadata store, and the open partitions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use tinymq_log::LogError;

use crate::config::BrokerConfig;
use crate::group::GroupCoordinator;
use crate::metadata::MetadataStore;
use crate::partition::Partition;
use crate::topic::TopicSettings;

/// An open topic: its settings and its partitions, by index.
#[derive(Debug)]
pub struct OpenTopic {
    pub settings: TopicSettings,
    pub partitions: Vec<Arc<Partition>>,
}

#[derive(Debug)]
pub struct BrokerState {
    pub config: BrokerConfig,
    /// The address clients should use to reach this broker.
    pub advertised: SocketAddr,
    pub metadata: Arc<dyn MetadataStore>,
    pub groups: GroupCoordinator,
    topics: RwLock<HashMap<String, Arc<OpenTopic>>>,
}

impl BrokerState {
    /// Opens every topic the metadata knows. Blocks on disk I/O (recovery).
    pub fn open(
        config: BrokerConfig,
        advertised: SocketAddr,
        metadata: Arc<dyn MetadataStore>,
    ) -> Result<BrokerState, LogError> {
        let groups = GroupCoordinator::open(&config.data_dir)?;
        let state = BrokerState {
            config,
            advertised,
            metadata,
            groups,
            topics: RwLock::new(HashMap::new()),
        };
        for (name, settings) in state.metadata.topics() {
            let topic = state.open_topic(&name, settings, false)?;
            state.topics.write().insert(name, Arc::new(topic));
        }
        Ok(state)
    }

    /// Opens (creating when `fresh`, after removing any leftover directories of an earlier
    /// topic with the same name) the partitions of a topic.
    pub fn open_topic(
        &self,
        name: &str,
        settings: TopicSettings,
        fresh: bool,
    ) -> Result<OpenTopic, LogError> {
        let data_dir = &self.config.data_dir;
        let mut partitions = Vec::with_capacity(settings.partitions as usize);
        for index in 0..settings.partitions {
            if fresh {
                remove_partition_dir(data_dir, name, index)?;
            }
            partitions.push(Arc::new(Partition::open(data_dir, name, index, &settings)?));
        }
        Ok(OpenTopic {
            settings,
            partitions,
        })
    }

    pub fn insert_topic(&self, name: &str, topic: OpenTopic) {
        self.topics.write().insert(name.into(), Arc::new(topic));
    }

    pub fn remove_topic(&self, name: &str) -> Option<Arc<OpenTopic>> {
        self.topics.write().remove(name)
    }

    pub fn topic(&self, name: &str) -> Option<Arc<OpenTopic>> {
        self.topics.read().get(name).cloned()
    }

    pub fn partition(&self, topic: &str, index: u32) -> Option<Arc<Partition>> {
        self.topic(topic)?.partitions.get(index as usize).cloned()
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    /// Partition count of a topic, if it exists.
    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        self.topic(topic).map(|t| t.settings.partitions)
    }

    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.topics.read().keys().cloned().collect();
        names.sort();
        names
    }
}

pub fn remove_partition_dir(
    data_dir: &std::path::Path,
    topic: &str,
    index: u32,
) -> Result<(), LogError> {
    let dir = Partition::dir_for(data_dir, topic, index);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::Io {
            path: dir,
            source: e,
        }),
    }
}
