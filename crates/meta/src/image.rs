//! The metadata image: everything the cluster agrees on, changed only by applying
//! [`MetadataRecord`]s in log order. Applying is deterministic and total: a record that does not
//! fit the image (it cannot, if commands produced it) is ignored, never a panic, so every
//! replica of the log computes the same image.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Whether `name` is an internal topic (`__consumer_offsets`, …): never created, listed or
/// opened as a user topic.
pub fn is_internal_topic(name: &str) -> bool {
    name.starts_with("__")
}

/// A broker as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub id: u32,
    pub host: String,
    pub port: u16,
    /// Changes at every registration; requests carrying an older epoch are from a previous
    /// incarnation of the broker.
    pub epoch: u64,
    /// A fenced broker leads nothing and is not placed on; it is unfenced when it registers again.
    pub fenced: bool,
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Broker ids holding a copy, the preferred leader first.
    pub replicas: Vec<u32>,
    /// `None` while no in-sync replica is alive (the partition is offline).
    pub leader: Option<u32>,
    /// Bumped at every leader change; stamped into every batch the leader writes.
    pub leader_epoch: u32,
    /// In-sync replicas.
    pub isr: Vec<u32>,
}

impl PartitionRecord {
    /// Sets the leader and ISR; a new leader starts a new leader epoch.
    fn lead(&mut self, leader: Option<u32>, isr: &[u32]) {
        if self.leader != leader {
            self.leader_epoch += 1;
        }
        self.leader = leader;
        self.isr = isr.to_vec();
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Unique over the cluster's life: a topic deleted and created again under the same name
    /// gets a new id, so a broker never mistakes the old topic's data for the new one's. (0 in
    /// images from before ids: such topics have no id.)
    #[serde(default)]
    pub id: u64,
    pub partitions: Vec<PartitionRecord>,
    /// Topic settings by name (`retention_ms`, `flush`, …), validated where they are used.
    pub config: BTreeMap<String, String>,
}

/// A change to the image; the replicated log is a sequence of these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    SetClusterId {
        cluster_id: String,
    },
    RegisterBroker {
        broker: BrokerRecord,
    },
    FenceBroker {
        id: u32,
        epoch: u64,
    },
    CreateTopic {
        name: String,
        topic: TopicRecord,
    },
    DeleteTopic {
        name: String,
    },
    AddPartitions {
        name: String,
        partitions: Vec<PartitionRecord>,
    },
    ChangePartition {
        name: String,
        partition: u32,
        leader: Option<u32>,
        isr: Vec<u32>,
    },
    /// Producer ids `[first, first + count)` are handed out; they are never handed out again.
    AllocateProducerIds {
        first: i64,
        count: i64,
    },
    /// Removes a broker for good: it leaves `brokers` and its id is never registered again.
    DecommissionBroker {
        id: u32,
    },
    /// Sets a partition's replica list, leader and ISR at once (a partition moved off a
    /// decommissioned broker); a different leader bumps the leader epoch.
    MovePartition {
        name: String,
        partition: u32,
        replicas: Vec<u32>,
        leader: Option<u32>,
        isr: Vec<u32>,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub brokers: BTreeMap<u32, BrokerRecord>,
    pub topics: BTreeMap<String, TopicRecord>,
    /// The next producer id never handed out.
    pub next_producer_id: i64,
    /// Epochs are unique across brokers and registrations.
    pub next_broker_epoch: u64,
    /// Topic ids are never reused.
    #[serde(default)]
    pub next_topic_id: u64,
    /// Ids of decommissioned brokers: never registered again.
    #[serde(default)]
    pub decommissioned_brokers: BTreeSet<u32>,
}

impl MetadataImage {
    fn partition_mut(&mut self, topic: &str, partition: u32) -> Option<&mut PartitionRecord> {
        self.topics
            .get_mut(topic)
            .and_then(|t| t.partitions.get_mut(partition as usize))
    }

    /// Applies one record.
    pub fn apply(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::SetClusterId { cluster_id } => self.cluster_id = cluster_id.clone(),
            MetadataRecord::RegisterBroker { broker } => {
                self.next_broker_epoch = self.next_broker_epoch.max(broker.epoch + 1);
                self.brokers.insert(broker.id, broker.clone());
            }
            MetadataRecord::FenceBroker { id, epoch } => {
                if let Some(b) = self.brokers.get_mut(id).filter(|b| b.epoch == *epoch) {
                    b.fenced = true;
                }
            }
            MetadataRecord::CreateTopic { name, topic } => {
                self.next_topic_id = self.next_topic_id.max(topic.id + 1);
                self.topics
                    .entry(name.clone())
                    .or_insert_with(|| topic.clone());
            }
            MetadataRecord::DeleteTopic { name } => {
                self.topics.remove(name);
            }
            MetadataRecord::AddPartitions { name, partitions } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.partitions.extend(partitions.iter().cloned());
                }
            }
            MetadataRecord::ChangePartition {
                name,
                partition,
                leader,
                isr,
            } => {
                if let Some(p) = self.partition_mut(name, *partition) {
                    p.lead(*leader, isr);
                }
            }
            MetadataRecord::AllocateProducerIds { first, count } => {
                self.next_producer_id = self.next_producer_id.max(first + count);
            }
            MetadataRecord::DecommissionBroker { id } => {
                self.brokers.remove(id);
                self.decommissioned_brokers.insert(*id);
            }
            MetadataRecord::MovePartition {
                name,
                partition,
                replicas,
                leader,
                isr,
            } => {
                if let Some(p) = self.partition_mut(name, *partition) {
                    p.replicas = replicas.clone();
                    p.lead(*leader, isr);
                }
            }
        }
    }

    /// The id the next topic gets (ids start at 1).
    pub fn new_topic_id(&self) -> u64 {
        self.next_topic_id.max(1)
    }

    /// Names of the topics users see (internal `__…` topics left out), sorted.
    pub fn user_topic_names(&self) -> Vec<String> {
        self.topics
            .keys()
            .filter(|name| !is_internal_topic(name))
            .cloned()
            .collect()
    }

    /// Live (unfenced) broker ids, sorted.
    pub fn live_brokers(&self) -> Vec<u32> {
        self.brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| b.id)
            .collect()
    }

    /// How many partitions each live broker leads, and holds replicas of.
    pub fn load(&self) -> BTreeMap<u32, (usize, usize)> {
        let mut load: BTreeMap<u32, (usize, usize)> = self
            .live_brokers()
            .into_iter()
            .map(|b| (b, (0, 0)))
            .collect();
        for p in self.topics.values().flat_map(|t| &t.partitions) {
            if let Some(l) = p.leader.and_then(|l| load.get_mut(&l)) {
                l.0 += 1;
            }
            for r in &p.replicas {
                if let Some(l) = load.get_mut(r) {
                    l.1 += 1;
                }
            }
        }
        load
    }

    /// Serialized image: the Raft snapshot.
    pub fn to_snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the image serializes")
    }

    pub fn from_snapshot(bytes: &[u8]) -> Result<MetadataImage, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}
