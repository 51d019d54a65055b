//! Importing the metadata of a standalone server from before the MetaServer: one JSON file
//! (`<data>/__meta/metadata.json`) with the cluster id, the topics and their settings, and the
//! producer ids reserved. On the first start with the embedded MetaServer, its topics are
//! created on this broker with their settings, producer ids continue above the old ones, and the
//! file is renamed so that the import runs once.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use tinymq_meta::Command;

use crate::cluster::ClusterView;
use crate::topic::TopicSettings;

const LEGACY_FILE: &str = "metadata.json";
const IMPORTED_FILE: &str = "metadata.json.imported";

#[derive(Debug, Deserialize)]
pub struct LegacyMetadata {
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicSettings>,
    pub producer_ids_reserved: i64,
}

/// The legacy file in `meta_dir`, if one is waiting to be imported.
pub fn find(meta_dir: &Path) -> std::io::Result<Option<LegacyMetadata>> {
    match std::fs::read(meta_dir.join(LEGACY_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates the legacy topics (placed on this broker, the only one) and moves the producer-id
/// counter past the old reservation, then marks the file imported.
pub async fn import(
    cluster: &ClusterView,
    meta_dir: &Path,
    legacy: LegacyMetadata,
) -> std::io::Result<()> {
    let image = cluster.image();
    for (name, settings) in &legacy.topics {
        if image.topics.contains_key(name) {
            continue;
        }
        let command = Command::CreateTopic {
            name: name.clone(),
            partitions: settings.partitions,
            replication_factor: 1,
            config: settings.to_config_map(),
        };
        cluster
            .write(command)
            .await
            .map_err(|e| std::io::Error::other(format!("importing topic {name}: {}", e.message)))?;
    }
    let mut remaining = legacy.producer_ids_reserved - image.next_producer_id;
    while remaining > 0 {
        let count = remaining.min(tinymq_meta::command::PRODUCER_ID_BLOCK_MAX);
        cluster
            .write(Command::AllocateProducerIds { count })
            .await
            .map_err(|e| std::io::Error::other(format!("importing producer ids: {}", e.message)))?;
        remaining -= count;
    }
    let (from, to) = (meta_dir.join(LEGACY_FILE), meta_dir.join(IMPORTED_FILE));
    tokio::task::spawn_blocking(move || std::fs::rename(from, to))
        .await
        .map_err(std::io::Error::other)??;
    tracing::info!(
        topics = legacy.topics.len(),
        "imported the metadata of the earlier standalone server"
    );
    Ok(())
}
