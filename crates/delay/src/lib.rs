//! Delayed delivery as pure logic (docs/queues.md, "Delayed delivery"): the timer log's
//! entries (a batch with its deliver-at time, and the marks that say it was delivered) and the
//! time-bucketed index that yields due batches in deliver-at order. Time is passed in.
//!
//! Owner: the delayed-delivery work of issue 18 (a skeleton until it lands).
