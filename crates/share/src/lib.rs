//! Share groups as pure logic (docs/queues.md, "Share groups"): one share partition's state
//! (its start offset, the in-flight records with their state, holder, lock deadline and
//! delivery count), the transitions (acquire, accept, release, release unseen, reject, lock expiry,
//! dead-lettering), and the records of the state log it is rebuilt from. Time is passed in;
//! nothing here does I/O (the broker's `share` module writes and reads the log's bytes).

mod expiry;
mod partition;
mod ranges;
mod state_log;

#[cfg(test)]
mod tests;

pub use partition::{
    range_len, AckKind, AcquiredRange, DeadLetterReason, InFlightRecord, RecordState, ShareError,
    SharePartition, StateCounts, UNSEEN_RETURNS_PER_RECORD_MAX,
};
pub use state_log::{decode_records, encode_record, Decoded, StateRecord, STATE_RECORD_BYTES_MAX};

/// Most records between a share partition's start and end offset (acquired, available,
/// waiting for the dead-letter topic, or done above the start): new records are not acquired
/// beyond `start_offset + SHARE_IN_FLIGHT_RECORDS_MAX`, so a slow record holds back at most
/// this many, and a partition's state stays small.
pub const SHARE_IN_FLIGHT_RECORDS_MAX: i64 = 10_000;
// Member ids and `max_delivery_attempts` are wire-visible: their rules and ranges are
// `tinymq_protocol::names`' (this crate depends on no other tinymq crate; callers check ids
// and read the settings before they reach a share partition).
