//! Delayed delivery as pure logic (docs/queues.md, "Delayed delivery"): the timer log's
//! entries (a batch with its deliver-at time, the scheduler identity it is appended under,
//! and the mark that says it was delivered), the time-bucketed index that yields due batches
//! in deliver-at order, the per-partition state rebuilt from the log, and the rewrite of a
//! stored batch into the batch the partition receives. Time is passed in; no I/O.
//!
//! Exactly once, the argument the broker relies on: an entry is given a scheduler identity
//! (producer id, epoch, sequence) in an `Assigned` entry that is durable before the batch is
//! appended to the partition; sequences are appended in order by one writer, so after a crash
//! between the append and the `Delivered` mark the partition's producer state tells whether
//! the replayed identity is written already (a duplicate, or a sequence below the last one
//! written) or not (the next sequence), and it is appended at most once. The partition may
//! have forgotten the producer (its state expires 24 h after the producer's last write, and
//! the oldest of more than 10,000 producers are evicted), which is likely when the broker
//! leads the partition again a day or more later: then the partition itself is read from the
//! log end offset recorded in the `Assigned` entry for a batch with the identity (the
//! broker's `delay::doubt`), and only if none is there is the entry given a new identity.

pub mod entry;
pub mod index;
pub mod rewrite;
pub mod state;
#[cfg(test)]
mod tests;

pub use entry::{ClientIdentity, Decoded, Entry, EntryError, SchedulerStamp};
pub use index::{Slot, TimerIndex, Waiting, BUCKET_MS};
pub use rewrite::{deliverable_batch, DELIVER_AT_HEADER};
pub use state::{
    Admission, AdmitError, Limits, TimerState, DELAY_MS_MAX, DELIVERED_IDENTITIES_REMEMBERED_MAX,
    TIMER_BYTES_PER_PARTITION_MAX, TIMER_ENTRIES_PER_PARTITION_MAX,
};
