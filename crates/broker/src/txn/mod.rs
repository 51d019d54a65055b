//! The transaction coordinator (Kafka's KIP-98, served on both ports): the broker leading a
//! transactional id's partition of the internal topic `__transaction_state`
//! (`murmur2(id) % TRANSACTION_PARTITIONS`) coordinates it. Each state change of an id is one
//! record in that partition, acknowledged once every in-sync replica holds it (fsynced), so a
//! new coordinator replays the partition and carries on: it finishes the markers of a
//! transaction that was deciding, and aborts one that passed its timeout.
//!
//! - [`state`]: the state machine, pure.
//! - [`log`]: the records, and the replay of a partition; `load`: taking over a partition.
//! - [`coordinator`]: the ids coordinated here, in memory, one change at a time per id.
//! - [`ops`]: the requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//!   DescribeTransactions, ListTransactions) and the timer.
//! - [`links`]: connections to the other brokers, for markers.
//! - [`verify`]: a partition leader's check with the coordinator before a transaction's
//!   first batch there (KIP-890 part 1).
//! - [`markers`]: writing the COMMIT or ABORT markers to every partition of a transaction,
//!   then completing it.
//!
//! docs/transactions.md describes what this guarantees and what it costs.

pub mod coordinator;
mod durable;
pub mod links;
mod load;
pub mod log;
pub mod markers;
pub mod ops;
pub mod state;
pub mod verify;

pub use coordinator::{partition_for_txn, TxnStore, TRANSACTION_PARTITIONS};
pub(crate) use durable::coordinator_epoch;
pub use durable::coordinator_of;
pub use load::sync;
pub use tinymq_meta::command::TRANSACTION_TOPIC;
