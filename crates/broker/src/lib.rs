//! The tinymq broker: it accepts client connections, speaks the native protocol, and serves
//! topic partitions stored as [`tinymq_log::PartitionLog`]s, with idempotent produce and
//! long-polling fetch.
//!
//! Layering: `server` (listener, timers, shutdown) → `connection` (framing, handshake,
//! backpressure, dispatch) → `handlers` (one per operation) → `state`/`partition` (topics,
//! logs, producer state) → `metadata` (cluster metadata behind a trait).

pub mod config;
mod connection;
mod durable_file;
pub mod group;
mod group_handlers;
mod handlers;
pub mod metadata;
pub mod partition;
pub mod producer_state;
mod server;
pub mod state;
pub mod topic;

pub use config::{BrokerConfig, DEFAULT_PORT};
pub use server::{Broker, StartError, META_DIR};
