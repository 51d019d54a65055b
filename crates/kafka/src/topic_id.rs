//! Kafka topic ids (KIP-516) for tinymq topics. A tinymq topic has a 64-bit id that its
//! cluster never hands out twice, so a topic deleted and created again under its name gets a
//! new one. Its Kafka id is that id in the UUID's low 64 bits, under a high half derived from
//! the cluster id (FNV-1a, never zero): topics of two tinymq clusters get different ids, and no
//! topic gets Kafka's reserved ids (zero, "none"; one, its metadata topic). A topic from an
//! image older than topic ids (native id 0) has the zero id, which Kafka reads as "no id".

use std::collections::HashMap;

use tinymq_meta::MetadataImage;
use uuid::Uuid;

/// The high half of every topic id in the cluster named `cluster_id`.
fn cluster_half(cluster_id: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = cluster_id.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    hash.max(1)
}

/// The Kafka id of the topic with native id `topic_id`.
pub(crate) fn kafka_id(cluster_id: &str, topic_id: u64) -> Uuid {
    if topic_id == 0 {
        return Uuid::nil();
    }
    Uuid::from_u64_pair(cluster_half(cluster_id), topic_id)
}

/// The Kafka id of the topic named `name` in `image`; zero if there is none.
pub(crate) fn of_topic(image: &MetadataImage, name: &str) -> Uuid {
    image
        .topics
        .get(name)
        .map_or(Uuid::nil(), |t| kafka_id(&image.cluster_id, t.id))
}

/// Topic names by Kafka id, for a request that names topics by id.
pub(crate) struct Names(HashMap<u64, String>);

impl Names {
    pub fn of(image: &MetadataImage) -> Names {
        let by_id = image
            .topics
            .iter()
            .filter(|(_, t)| t.id != 0)
            .map(|(name, t)| (t.id, name.clone()))
            .collect();
        Names(by_id)
    }

    /// The name of the topic with Kafka id `id` in `cluster_id`; `None` for an id no topic
    /// has (deleted, from another cluster, or made up).
    pub fn name(&self, cluster_id: &str, id: Uuid) -> Option<&str> {
        let (high, low) = id.as_u64_pair();
        if high != cluster_half(cluster_id) {
            return None;
        }
        self.0.get(&low).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_within_their_cluster_only() {
        let mut image = MetadataImage {
            cluster_id: "c1".into(),
            ..Default::default()
        };
        let topic = tinymq_meta::TopicRecord {
            id: 7,
            partitions: vec![],
            config: Default::default(),
        };
        image.topics.insert("orders".into(), topic);
        let id = of_topic(&image, "orders");
        assert_ne!(id, Uuid::nil());
        assert_ne!(id, Uuid::from_u64_pair(0, 1), "Kafka's metadata topic id");
        let names = Names::of(&image);
        assert_eq!(names.name("c1", id), Some("orders"));
        assert_eq!(names.name("c2", id), None, "another cluster's id");
        assert_eq!(names.name("c1", kafka_id("c1", 8)), None, "no such topic");
        assert_eq!(of_topic(&image, "missing"), Uuid::nil());
        assert_eq!(kafka_id("c1", 0), Uuid::nil(), "a topic from before ids");
        assert_ne!(kafka_id("c1", 7), kafka_id("c2", 7));
    }
}
