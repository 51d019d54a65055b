//! Choosing a partition: Kafka's murmur2 for keyed records (so keyed data lands where Kafka
//! users expect), sticky round-robin for keyless ones.

pub use tinymq_protocol::hash::murmur2;

use std::collections::HashMap;

use parking_lot::Mutex;

/// The partition Kafka's default partitioner picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has partitions");
    tinymq_protocol::hash::murmur2_positive(key) % partitions
}

/// Sticky partitioning for keyless records: stay on one partition until about a batch worth
/// of bytes went to it, then move to the next, so batches fill up instead of spreading thin.
#[derive(Debug, Default)]
pub struct StickyPartitioner {
    state: Mutex<HashMap<String, (u32, usize)>>,
}

impl StickyPartitioner {
    pub fn next(
        &self,
        topic: &str,
        partitions: u32,
        record_bytes: usize,
        batch_bytes: usize,
    ) -> u32 {
        let mut state = self.state.lock();
        if !state.contains_key(topic) {
            state.insert(
                topic.to_string(),
                (std::process::id() % partitions.max(1), 0),
            );
        }
        let entry = state.get_mut(topic).expect("inserted above");
        if entry.1 >= batch_bytes {
            entry.0 += 1;
            entry.1 = 0;
        }
        entry.0 %= partitions;
        entry.1 += record_bytes;
        entry.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_moves_on_after_a_batch() {
        let sticky = StickyPartitioner::default();
        let first = sticky.next("t", 3, 100, 250);
        assert_eq!(sticky.next("t", 3, 100, 250), first);
        assert_eq!(sticky.next("t", 3, 100, 250), first);
        assert_eq!(sticky.next("t", 3, 100, 250), (first + 1) % 3);
    }
}
