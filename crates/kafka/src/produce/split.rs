//! A Kafka partition's `records` as the record batches it holds. Kafka lets a producer send
//! several batches back to back in one partition's records; a native ProducePartition takes
//! exactly one, so each becomes its own. Only the length fields are read here (bounds-checked);
//! the broker validates each batch whole.

use bytes::Bytes;
use tinymq_protocol::batch::{batch_size, BATCH_HEADER_BYTES};

/// The batches in `records`, in order, or why they cannot be split.
pub(crate) fn batches(records: &Bytes) -> Result<Vec<Bytes>, String> {
    if records.is_empty() {
        return Err("no record batch in the partition's records".into());
    }
    // Each batch has at least a header: this bounds the list before it is allocated.
    let mut out = Vec::with_capacity((records.len() / BATCH_HEADER_BYTES).clamp(1, 16));
    let mut at = 0;
    while at < records.len() {
        let rest = records.slice(at..);
        let size = match batch_size(&rest) {
            Ok(Some(size)) if size < BATCH_HEADER_BYTES => {
                return Err(format!(
                    "batch at byte {at}: {size} bytes, shorter than its header"
                ));
            }
            Ok(Some(size)) => size,
            Ok(None) => {
                return Err(format!(
                    "{} bytes after the last batch, too few for a batch",
                    rest.len()
                ));
            }
            Err(e) => return Err(format!("batch at byte {at}: {e}")),
        };
        if size > rest.len() {
            return Err(format!(
                "batch at byte {at} says it is {size} bytes; only {} are there",
                rest.len()
            ));
        }
        out.push(rest.slice(..size));
        at += size;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};

    fn batch(value: &[u8]) -> Bytes {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: Some(b"k"),
            value: Some(value),
            headers: &[],
        });
        builder.build().unwrap()
    }

    #[test]
    fn batches_back_to_back_are_split_at_their_lengths() {
        let (a, b) = (batch(b"first"), batch(b"second, longer"));
        let mut both = a.to_vec();
        both.extend_from_slice(&b);
        assert_eq!(batches(&Bytes::from(both)).unwrap(), vec![a, b]);
    }

    #[test]
    fn truncated_or_trailing_bytes_are_refused() {
        let one = batch(b"v");
        assert!(batches(&one.slice(..one.len() - 1)).is_err());
        let mut trailing = one.to_vec();
        trailing.extend_from_slice(&[0; 5]);
        assert!(batches(&Bytes::from(trailing)).is_err());
        assert!(batches(&Bytes::new()).is_err());
        // A length field claiming 2 GiB.
        let mut huge = one.to_vec();
        huge[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(batches(&Bytes::from(huge)).is_err());
        let mut negative = one.to_vec();
        negative[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(batches(&Bytes::from(negative)).is_err());
    }
}
