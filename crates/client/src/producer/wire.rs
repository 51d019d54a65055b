//! A produce request encoded by hand around its record batch: the protobuf bytes of
//! `ProduceRequest` (one partition) up to and including the batch header form the head, and
//! the batch's records section, never copied, is the tail. The bytes are exactly what prost
//! encodes for the same message (fields in order, default values left out), which the tests
//! check; a transactional producer's `transactional_id` (field 4) goes before the partition
//! (field 3), which protobuf decoders accept as the same message.

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_varint, encoded_len_varint};

use crate::connection::SplitBody;

const WIRE_VARINT: u64 = 0;
const WIRE_LEN: u64 = 2;

fn key(field: u64, wire_type: u64) -> u64 {
    (field << 3) | wire_type
}

/// What one produce request for one partition says besides its batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProduceTarget<'a> {
    pub acks: i32,
    pub timeout_ms: u32,
    pub topic: &'a str,
    pub partition: u32,
    /// Empty unless the producer is transactional.
    pub transactional_id: &'a str,
}

/// The body of a `ProduceRequest` carrying the batch `batch_header ++ records` for one
/// partition.
pub(crate) fn produce_body(
    target: &ProduceTarget<'_>,
    batch_header: &[u8],
    records: &Bytes,
) -> SplitBody {
    let batch_len = (batch_header.len() + records.len()) as u64;
    // ProducePartition: topic = 1, partition = 2, records = 3.
    let mut partition_len = 0usize;
    if !target.topic.is_empty() {
        partition_len += 1 + encoded_len_varint(target.topic.len() as u64) + target.topic.len();
    }
    if target.partition != 0 {
        partition_len += 1 + encoded_len_varint(u64::from(target.partition));
    }
    partition_len += 1 + encoded_len_varint(batch_len) + batch_len as usize;

    let mut head = BytesMut::with_capacity(48 + target.topic.len() + batch_header.len());
    // ProduceRequest: acks = 1 (int32: negative values take ten bytes), timeout_ms = 2,
    // partitions = 3.
    if target.acks != 0 {
        encode_varint(key(1, WIRE_VARINT), &mut head);
        encode_varint(target.acks as i64 as u64, &mut head);
    }
    if target.timeout_ms != 0 {
        encode_varint(key(2, WIRE_VARINT), &mut head);
        encode_varint(u64::from(target.timeout_ms), &mut head);
    }
    if !target.transactional_id.is_empty() {
        encode_varint(key(4, WIRE_LEN), &mut head);
        encode_varint(target.transactional_id.len() as u64, &mut head);
        head.put_slice(target.transactional_id.as_bytes());
    }
    encode_varint(key(3, WIRE_LEN), &mut head);
    encode_varint(partition_len as u64, &mut head);
    if !target.topic.is_empty() {
        encode_varint(key(1, WIRE_LEN), &mut head);
        encode_varint(target.topic.len() as u64, &mut head);
        head.put_slice(target.topic.as_bytes());
    }
    if target.partition != 0 {
        encode_varint(key(2, WIRE_VARINT), &mut head);
        encode_varint(u64::from(target.partition), &mut head);
    }
    encode_varint(key(3, WIRE_LEN), &mut head);
    encode_varint(batch_len, &mut head);
    head.put_slice(batch_header);
    SplitBody {
        head: head.freeze(),
        tail: records.clone(),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use tinymq_protocol::messages as m;

    use super::*;

    fn prost_bytes(target: &ProduceTarget<'_>, batch: &[u8]) -> Vec<u8> {
        m::ProduceRequest {
            acks: target.acks,
            timeout_ms: target.timeout_ms,
            partitions: vec![m::ProducePartition {
                topic: target.topic.to_string(),
                partition: target.partition,
                records: Bytes::copy_from_slice(batch),
            }],
            transactional_id: target.transactional_id.to_string(),
        }
        .encode_to_vec()
    }

    #[test]
    fn the_bytes_are_prosts() {
        let header = [7u8; 61];
        for acks in [-1, 0, 1] {
            for timeout_ms in [0, 30_000, u32::MAX] {
                for topic in ["", "t", &"long-topic-name".repeat(20)] {
                    for partition in [0, 1, 300, u32::MAX] {
                        for records_len in [0usize, 5, 200, 70_000] {
                            let records = Bytes::from(vec![3u8; records_len]);
                            let target = ProduceTarget {
                                acks,
                                timeout_ms,
                                topic,
                                partition,
                                transactional_id: "",
                            };
                            let body = produce_body(&target, &header, &records);
                            let mut joined = body.head.to_vec();
                            joined.extend_from_slice(&body.tail);
                            let mut batch = header.to_vec();
                            batch.extend_from_slice(&records);
                            assert_eq!(joined, prost_bytes(&target, &batch));
                            let decoded = m::ProduceRequest::decode(&joined[..]).unwrap();
                            assert_eq!(decoded.partitions[0].records.len(), batch.len());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_transactional_id_decodes_as_prost_encodes_it() {
        let header = [7u8; 61];
        let records = Bytes::from(vec![3u8; 100]);
        let target = ProduceTarget {
            acks: -1,
            timeout_ms: 30_000,
            topic: "t",
            partition: 2,
            transactional_id: "orders-enricher-1",
        };
        let body = produce_body(&target, &header, &records);
        let mut joined = body.head.to_vec();
        joined.extend_from_slice(&body.tail);
        let mut batch = header.to_vec();
        batch.extend_from_slice(&records);
        let ours = m::ProduceRequest::decode(&joined[..]).unwrap();
        let theirs = m::ProduceRequest::decode(&prost_bytes(&target, &batch)[..]).unwrap();
        assert_eq!(ours, theirs);
    }
}
