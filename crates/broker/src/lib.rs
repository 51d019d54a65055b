//! The tinymq broker: it accepts client connections, speaks the native protocol, and serves
//! topic partitions stored as [`tinymq_log::PartitionLog`]s, with idempotent produce and
//! long-polling fetch.
//!
//! Layering: `server` (listener, timers, shutdown, joining the cluster) → the shared front end
//! [`tinymq_net`] (framing, handshake, limits, backpressure) → `connection` (admission and
//! dispatch) → `handlers` (one per operation) →
//! `state`/`partition` (the partitions held here, logs, producer state) → `cluster` (the
//! broker's registration and its view of the cluster metadata, from the MetaServer).

mod alter_config;
mod authorize;
pub mod cleaner;
pub mod cluster;
pub mod config;
mod connection;
mod delay;
mod deletion;
mod fetch_frame;
mod filtered_fetch;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod group;
mod group_handlers;
mod half;
mod handlers;
pub mod internal_client;
mod join;
mod legacy;
mod offsets_partitions;
pub mod partition;
pub mod partition_txns;
pub mod producer_state;
pub mod quota;
mod reconcile;
pub mod replica;
pub mod role;
mod route;
mod security_admin;
mod server;
mod service;
mod share;
pub mod state;
pub mod stats;
pub mod topic;
mod topic_handlers;
pub mod txn;
mod txn_handlers;

pub use config::{Advertised, BrokerConfig, DEFAULT_PORT};
pub use connection::BrokerFront;
pub use server::{Broker, StartError, META_DIR};
pub use service::delete_records::DELETE_RECORDS_TIMEOUT_MAX;
pub use tinymq_net::ListenerLimits;
