//! Kafka's ConsumerProtocol bytes (the "consumer" protocol type's member metadata and
//! assignment: a 2-byte version, then the message) for native groups, so DescribeGroups
//! shows a native group's subscriptions and assignments as Kafka tools expect them.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use tinymq_protocol::messages as m;

/// The version written: version 0 of both messages, readable by every client.
const VERSION: i16 = 0;

fn with_version(body: impl Encodable) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(VERSION);
    // Encoding version 0 of these two messages cannot fail (no version-dependent fields).
    if body.encode(&mut out, VERSION).is_err() {
        return Bytes::new();
    }
    out.freeze()
}

fn partitions(list: &[u32]) -> Vec<i32> {
    list.iter().filter_map(|p| i32::try_from(*p).ok()).collect()
}

/// A native member's assignment as a ConsumerProtocolAssignment.
pub fn assignment(assigned: &[m::TopicPartitions]) -> Bytes {
    let assigned_partitions = assigned
        .iter()
        .map(|t| {
            AssignedTopic::default()
                .with_topic(TopicName(StrBytes::from_string(t.topic.clone())))
                .with_partitions(partitions(&t.partitions))
        })
        .collect();
    with_version(
        ConsumerProtocolAssignment::default().with_assigned_partitions(assigned_partitions),
    )
}

/// A native member's topics as a ConsumerProtocolSubscription.
pub fn subscription(topics: &[String]) -> Bytes {
    let topics = topics.iter().cloned().map(StrBytes::from_string).collect();
    with_version(ConsumerProtocolSubscription::default().with_topics(topics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn a_native_assignment_reads_back_as_kafka_decodes_it() {
        let mut bytes = assignment(&[m::TopicPartitions {
            topic: "t".into(),
            partitions: vec![0, 2],
        }]);
        assert_eq!(bytes.get_i16(), VERSION);
        let decoded = ConsumerProtocolAssignment::decode(&mut bytes, VERSION).unwrap();
        assert_eq!(decoded.assigned_partitions.len(), 1);
        assert_eq!(decoded.assigned_partitions[0].topic.0.as_str(), "t");
        assert_eq!(decoded.assigned_partitions[0].partitions, vec![0, 2]);
        let mut bytes = subscription(&["a".into(), "b".into()]);
        assert_eq!(bytes.get_i16(), VERSION);
        let decoded = ConsumerProtocolSubscription::decode(&mut bytes, VERSION).unwrap();
        assert_eq!(decoded.topics.len(), 2);
    }
}
