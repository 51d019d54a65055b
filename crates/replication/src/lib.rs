//! tinymq's replication rules as pure functions: no I/O, no clock, no async runtime. The broker
//! (as partition leader and as follower) and the MetaServer call these; they own the state and
//! the messages, this crate owns the decisions.
//!
//! The model is Kafka's in-sync-replica (ISR) replication with leader-epoch truncation
//! (KIP-101/279), with one stronger promise: a follower reports an offset to its leader only
//! after fsyncing it, so the end a follower reports is its *durable* end, and under flush
//! `always` an acknowledged record is on the disk of every in-sync replica.
//!
//! - [`leader_state`]: what a leader knows of its followers; the high watermark, ISR shrink and
//!   expand, `acks=all` and `min_insync_replicas`.
//! - [`epochs`]: the leader-epoch cache of a partition (the one the log persists), the leader's
//!   check of a follower's fetch and the truncation point of a follower.
//! - [`election`]: which replica leads.
//!
//! Every input can come from another broker or from disk, so nothing here panics on it:
//! out-of-range values are refused with an error or clamped, as each function documents.
//! `docs/replication.md` ("Rules") explains the rules and why they are safe.
//!
//! Conventions: offsets are `i64` and epochs `i32` (as in Kafka's wire format), broker ids
//! `u32`, times are milliseconds of a monotonic clock as `u64`. An *end* offset is exclusive:
//! the offset the next record would get.

pub mod election;
pub mod epochs;
pub mod leader_state;

pub use election::{choose_leader, preferred_leader};
pub use epochs::{
    fetch_divergence, truncation_point, EpochEnd, EpochError, FetchCheck, LeaderEpochCache,
    Truncation,
};
pub use leader_state::{
    acks_all_ready, high_watermark, isr_expand_candidates, isr_shrink, min_insync_check,
    visible_high_watermark, FetchStateError, FollowerState, Followers, LastFetch,
    NotEnoughReplicas,
};

/// A broker's id, as the MetaServer assigns it.
pub type BrokerId = u32;
/// A record's position in a partition (Kafka's `int64`).
pub type Offset = i64;
/// A leader epoch: bumped by the MetaServer on every leader change (Kafka's `int32`).
pub type Epoch = i32;
