//! tinymq's cluster metadata as a deterministic state machine: the [`MetadataImage`] (brokers,
//! topics, partition placement, leaders and in-sync replicas, producer-id blocks), the
//! [`MetadataRecord`]s that change it, and [`execute`], which turns a [`Command`] into records
//! and a reply without I/O. The MetaServer replicates the records with Raft; every replica
//! applies them in order and so holds the same image. Snapshots are the serialized image.

pub mod authorize;
pub mod command;
pub mod dir_lock;
pub mod election;
pub mod image;
mod isr;
pub mod link;
pub mod placement;
pub mod raft;
mod reassign;
pub mod security;
pub mod security_ops;
pub mod server;
pub mod service;
pub mod session;
mod topic_config;

pub use command::{default_replication_factor, DEFAULT_REPLICATION_FACTOR_MAX};
pub use command::{execute, Command, MetaError, Reply};
pub use election::choose_leader;
pub use image::{
    default_min_insync_replicas, is_internal_topic, BrokerRecord, KafkaAddress, MetadataImage,
    MetadataRecord, PartitionRecord, TopicRecord, MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION,
};
pub use placement::PlannedMove;
pub use topic_config::{
    CLEANUP_POLICY, DELETE_RETENTION_MS, MAX_COMPACTION_LAG_MS, MIN_CLEANABLE_DIRTY_RATIO,
    MIN_COMPACTION_LAG_MS,
};

/// Executes a command and applies its records: what a single-node MetaServer does, and what
/// the tests use to drive the image.
pub fn execute_and_apply(image: &mut MetadataImage, command: &Command) -> Result<Reply, MetaError> {
    let (records, reply) = execute(image, command)?;
    for record in &records {
        image.apply(record);
    }
    Ok(reply)
}

#[cfg(test)]
mod replication_tests;
#[cfg(test)]
mod tests;
