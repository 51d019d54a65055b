//! How a runner sends one round of copies so that the target only ever holds a prefix of
//! them: the copies go as whole batches (`Producer::send_batch`, a batch lands entirely or
//! not at all), one batch at a time, each acknowledged before the next is sent. A batch that
//! fails ends the round there, so no later copy can land past a copy that failed for good
//! (which the recovery scan would otherwise take as done: docs/queues.md, "Routes"). A batch
//! too large for the target is split in halves; a single copy too large stalls the route.

use std::collections::VecDeque;

use tinymq_client::{ClientError, Producer, ProducerRecord};
use tinymq_protocol::ErrorCode;

use crate::route::registry::RouteError;

/// Estimated bytes of the copies of one batch at most (the target's `message_bytes_max` may
/// be lower: such a batch is refused before it is sent, and split).
pub const COPY_BATCH_BYTES_MAX: usize = 256 * 1024;
/// Per-record bytes a batch adds besides keys, values and headers (lengths, deltas).
const RECORD_OVERHEAD_BYTES: usize = 32;

/// Estimated encoded size of a copy.
pub fn estimated_bytes(record: &ProducerRecord) -> usize {
    let field = |b: &Option<bytes::Bytes>| b.as_ref().map_or(0, bytes::Bytes::len);
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| k.len() + field(v) + 8)
        .sum();
    RECORD_OVERHEAD_BYTES + field(&record.key) + field(&record.value) + headers
}

/// Cuts `copies` (in source order) into consecutive batches of at most
/// [`COPY_BATCH_BYTES_MAX`] estimated bytes (a larger copy is a batch of its own).
pub fn cut(copies: Vec<ProducerRecord>) -> VecDeque<Vec<ProducerRecord>> {
    let mut batches = VecDeque::new();
    let (mut batch, mut bytes) = (Vec::new(), 0usize);
    for copy in copies {
        let size = estimated_bytes(&copy);
        if !batch.is_empty() && bytes.saturating_add(size) > COPY_BATCH_BYTES_MAX {
            batches.push_back(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
        batch.push(copy);
    }
    if !batch.is_empty() {
        batches.push_back(batch);
    }
    batches
}

/// Sends `copies` to partition-pinned `topic`, in order, a batch at a time; calls `landed`
/// with the target offset one past each acknowledged batch and its copy count. Stops at the
/// first batch that fails (after the producer's retries) with [`RouteError::Delivery`].
pub async fn send_in_order(
    producer: &Producer,
    topic: &str,
    copies: Vec<ProducerRecord>,
    mut landed: impl FnMut(i64, u32),
) -> Result<(), RouteError> {
    let mut batches = cut(copies);
    while let Some(batch) = batches.pop_front() {
        let count = batch.len();
        let kept = (count > 1).then(|| batch.clone());
        let outcome = match producer.send_batch(topic, batch).await {
            Ok(delivery) => delivery.await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(done) => landed(
                done.base_offset
                    .saturating_add(i64::from(done.record_count)),
                done.record_count,
            ),
            Err(e) if too_large(&e) => {
                // Nothing of it landed (a batch is written whole or not at all): send it
                // again in halves, first half first. A single copy too large stalls.
                let Some(mut first) = kept else {
                    return Err(RouteError::Delivery(e));
                };
                let second = first.split_off(count / 2);
                batches.push_front(second);
                batches.push_front(first);
            }
            Err(e) => return Err(RouteError::Delivery(e)),
        }
    }
    Ok(())
}

/// Whether `e` refuses a batch as too large (never written, by the client's check or the
/// broker's).
pub fn too_large(e: &ClientError) -> bool {
    matches!(e, ClientError::RecordTooLarge { .. })
        || e.code() == Some(ErrorCode::MESSAGE_TOO_LARGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(value_bytes: usize) -> ProducerRecord {
        ProducerRecord::value(vec![0u8; value_bytes])
    }

    #[test]
    fn batches_keep_order_and_stay_under_the_byte_budget() {
        let copies: Vec<ProducerRecord> = (0..100).map(|_| copy(10_000)).collect();
        let batches = cut(copies);
        assert!(batches.len() > 1);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 100);
        for batch in &batches {
            let bytes: usize = batch.iter().map(estimated_bytes).sum();
            assert!(bytes <= COPY_BATCH_BYTES_MAX, "{bytes}");
        }
    }

    #[test]
    fn a_copy_larger_than_the_budget_is_a_batch_of_its_own() {
        let copies = vec![copy(10), copy(COPY_BATCH_BYTES_MAX), copy(10)];
        let sizes: Vec<usize> = cut(copies).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        assert!(cut(Vec::new()).is_empty());
    }

    #[test]
    fn too_large_means_the_client_check_or_the_broker_code() {
        let client = ClientError::RecordTooLarge {
            topic: "t".into(),
            bytes: 2,
            limit: 1,
        };
        assert!(too_large(&client));
        let broker = ClientError::Server {
            code: ErrorCode::MESSAGE_TOO_LARGE,
            message: String::new(),
        };
        assert!(too_large(&broker));
        assert!(!too_large(&ClientError::Protocol("x".into())));
    }
}
