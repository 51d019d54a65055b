//! Kafka's murmur2 hash, used to place keys on partitions and groups on coordinators, so that
//! keyed data lands where Kafka users expect.

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

/// `murmur2` made non-negative the way Kafka does (`& 0x7fffffff`).
pub fn murmur2_positive(data: &[u8]) -> u32 {
    (murmur2(data) & 0x7fff_ffff) as u32
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
}
