//! Choosing a partition: Kafka's murmur2 for keyed records (so keyed data lands where Kafka
//! users expect), sticky round-robin for keyless ones.

pub use tinymq_protocol::hash::murmur2;

/// The partition Kafka's default partitioner picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has partitions");
    tinymq_protocol::hash::murmur2_positive(key) % partitions
}

/// Sticky partitioning for keyless records of one topic: stay on one partition until about a
/// batch worth of bytes went to it, then move to the next, so batches fill up instead of
/// spreading thin.
#[derive(Debug)]
pub struct Sticky {
    partition: u32,
    bytes: usize,
}

impl Default for Sticky {
    fn default() -> Sticky {
        // Producers started together do not all begin on the same partition.
        Sticky {
            partition: std::process::id(),
            bytes: 0,
        }
    }
}

impl Sticky {
    pub fn next(&mut self, partitions: u32, record_bytes: usize, batch_bytes: usize) -> u32 {
        if self.bytes >= batch_bytes {
            self.partition = self.partition.wrapping_add(1);
            self.bytes = 0;
        }
        self.partition %= partitions.max(1);
        self.bytes += record_bytes;
        self.partition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_moves_on_after_a_batch() {
        let mut sticky = Sticky::default();
        let first = sticky.next(3, 100, 250);
        assert_eq!(sticky.next(3, 100, 250), first);
        assert_eq!(sticky.next(3, 100, 250), first);
        assert_eq!(sticky.next(3, 100, 250), (first + 1) % 3);
    }
}
