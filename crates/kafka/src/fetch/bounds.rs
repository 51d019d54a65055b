//! Kafka's byte bounds on a fetch's records, applied to the native answer. Kafka bounds the
//! whole response by the request's `max_bytes` and each partition by its
//! `partition_max_bytes`, except that the first record batch of the first partition with
//! records is returned whatever its size, so a consumer always makes progress (KIP-74).
//! Clients size their receive buffers from these bounds (librdkafka refuses a response larger
//! than `fetch.max.bytes` plus overhead), so a partition whose batches do not fit in what is
//! left is answered without records this time; it is asked for again in the next fetch.
//!
//! The native fetch returns at least one whole batch for every partition, so its answers may
//! exceed Kafka's bound; they are cut back here to whole batches.

use bytes::Bytes;
use tinymq_protocol::batch::batch_size;

/// What is left of a fetch's `max_bytes` as its partitions are answered in request order.
#[derive(Debug)]
pub(crate) struct Budget {
    left_bytes: usize,
    /// No partition has returned records yet: the next one with records keeps its first batch
    /// whatever its size.
    first: bool,
}

impl Budget {
    pub fn new(max_bytes: i32) -> Budget {
        Budget {
            left_bytes: usize::try_from(max_bytes).unwrap_or(0),
            first: true,
        }
    }

    /// `records` (whole batches) cut to the batches that fit in `partition_max_bytes` and
    /// what is left of the budget, which they are then taken from.
    pub fn take(&mut self, records: Bytes, partition_max_bytes: i32) -> Bytes {
        if records.is_empty() {
            return records;
        }
        let partition_max = usize::try_from(partition_max_bytes).unwrap_or(0);
        let limit = partition_max.min(self.left_bytes);
        let kept = whole_batches_within(&records, limit, self.first);
        if kept > 0 {
            self.first = false;
        }
        self.left_bytes = self.left_bytes.saturating_sub(kept);
        records.slice(..kept)
    }
}

/// The length of the longest prefix of whole batches of `records` within `limit` bytes; with
/// `at_least_one`, the first batch counts whatever its size.
fn whole_batches_within(records: &[u8], limit: usize, at_least_one: bool) -> usize {
    let mut end = 0;
    while let Some(rest) = records.get(end..).filter(|rest| !rest.is_empty()) {
        let Ok(Some(size)) = batch_size(rest) else {
            break;
        };
        let next = end.saturating_add(size);
        if next > records.len() || (next > limit && !(at_least_one && end == 0)) {
            break;
        }
        end = next;
    }
    end
}

#[cfg(test)]
mod tests {
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};

    use super::*;

    /// A batch of one record whose value is `value_bytes` long.
    fn batch(value_bytes: usize) -> Vec<u8> {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        let value = vec![7u8; value_bytes];
        builder.push(&RecordInput {
            timestamp_ms: 0,
            key: None,
            value: Some(&value),
            headers: &[],
        });
        builder.build().unwrap().to_vec()
    }

    fn batches(sizes: &[usize]) -> (Bytes, Vec<usize>) {
        let all: Vec<Vec<u8>> = sizes.iter().map(|s| batch(*s)).collect();
        let lens = all.iter().map(Vec::len).collect();
        (Bytes::from(all.concat()), lens)
    }

    #[test]
    fn the_first_partition_keeps_its_first_batch_whatever_its_size() {
        let (records, lens) = batches(&[5000, 100]);
        let mut budget = Budget::new(1000);
        assert_eq!(budget.take(records, 1000).len(), lens[0]);
        // Nothing is left for the next partition, however small its batch.
        let (small, _) = batches(&[10]);
        assert!(budget.take(small, 1000).is_empty());
    }

    #[test]
    fn later_partitions_get_the_whole_batches_that_fit() {
        let (first, first_lens) = batches(&[100]);
        let (second, lens) = batches(&[100, 100, 100]);
        let mut budget = Budget::new((first_lens[0] + lens[0] + lens[1] + 10) as i32);
        assert_eq!(budget.take(first, 1 << 20).len(), first_lens[0]);
        assert_eq!(budget.take(second, 1 << 20).len(), lens[0] + lens[1]);
    }

    #[test]
    fn partition_max_bytes_bounds_each_partition() {
        let (records, lens) = batches(&[100, 100, 100]);
        let mut budget = Budget::new(1 << 20);
        assert_eq!(
            budget
                .take(records.clone(), (lens[0] + lens[1]) as i32)
                .len(),
            lens[0] + lens[1]
        );
        assert_eq!(
            budget.take(records, 1).len(),
            0,
            "not the first partition any more"
        );
    }

    #[test]
    fn an_empty_partition_does_not_use_up_the_exemption() {
        let mut budget = Budget::new(10);
        assert!(budget.take(Bytes::new(), 10).is_empty());
        let (big, lens) = batches(&[500]);
        assert_eq!(budget.take(big, 10).len(), lens[0]);
    }
}
