//! The tinymq client library (async, tokio): a [`Producer`] that needs only a topic name, a
//! [`Consumer`] of assigned partitions with long polling, and an [`Admin`] for topics.
//!
//! Every client bootstraps from one or more node addresses, fetches routes (which broker
//! leads each partition), caches them, and refreshes them when they age or when a broker
//! answers `NOT_LEADER` or `UNKNOWN_TOPIC_OR_PARTITION`.

mod admin;
mod authenticate;
mod cluster;
mod connection;
mod consumer;
mod coordinator;
mod error;
mod group;
mod producer;
mod retry;
pub mod routes;
mod security;
mod security_admin;
pub mod share;

pub use admin::{
    Admin, CommittedOffset, DescribeGroupResponse, DescribeTopicResponse, GroupType, ListedGroup,
    PartitionMove, PartitionState, TopicConfig,
};
pub use cluster::{ClientConfig, Cluster};
pub use connection::{Connection, SplitBody};
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, Isolation, StartFrom, UnavailablePartition,
};
pub use error::ClientError;
pub use group::GroupEvent;
pub use producer::{
    murmur2, partition_for_key, Acks, BatchDelivery, BatchMetadata, DelayedDelivery,
    DelayedMetadata, DeliveryFuture, HalfCheck, HalfChecker, HalfDecision, HalfMessage, Producer,
    ProducerConfig, ProducerRecord, RecordMetadata,
};
pub use security::{ClientTls, Login, ScramMechanism, Security};
pub use security_admin::{AclFilter, PutUserMode, Quota, UserInfo, SCRAM_MECHANISMS_DEFAULT};
pub use tinymq_protocol::batch::Compression;
pub use tinymq_protocol::messages::NodeRole;
pub use tinymq_protocol::ErrorCode;
