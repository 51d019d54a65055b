//! Choosing a partition: Kafka's murmur2 for keyed records (so keyed data lands where Kafka
//! users expect), sticky round-robin for keyless ones.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), 32-bit, seed 0x9747b28c.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has partitions");
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
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

    /// Vectors from Kafka's own tests of `Utils.murmur2`.
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (input, want) in cases {
            assert_eq!(murmur2(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn sticky_moves_on_after_a_batch() {
        let sticky = StickyPartitioner::default();
        let first = sticky.next("t", 3, 100, 250);
        assert_eq!(sticky.next("t", 3, 100, 250), first);
        assert_eq!(sticky.next("t", 3, 100, 250), first);
        assert_eq!(sticky.next("t", 3, 100, 250), (first + 1) % 3);
    }
}
