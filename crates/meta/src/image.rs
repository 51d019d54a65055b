//! The metadata image: everything the cluster agrees on, changed only by applying
//! [`MetadataRecord`]s in log order. Applying is deterministic and total: a record that does not
//! fit the image (it cannot, if the leader's commands produced it against this image) is
//! ignored, and no value overflows or panics, so every replica of the log computes the same
//! image.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tinymq_auth::{AclEntry, QuotaConfig, StoredCredential};

/// Whether `name` is an internal topic (`__consumer_offsets`, …): never created, listed or
/// opened as a user topic. The rule is the protocol's (`tinymq_protocol::names`).
pub use tinymq_protocol::names::is_internal_topic;

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
    /// Where Kafka clients reach the broker's Kafka listener (`--kafka-advertise`); `None`
    /// for a broker without one, and in images and log entries from before Kafka listeners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaAddress>,
}

/// A broker's advertised Kafka listener address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaAddress {
    pub host: String,
    pub port: u16,
}

/// One partition's placement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Broker ids holding a copy, the preferred leader first. During a reassignment: the
    /// target replicas first, then the ones being removed.
    pub replicas: Vec<u32>,
    /// `None` while no in-sync replica is alive (the partition is offline).
    pub leader: Option<u32>,
    /// Bumped at every leader change; stamped into every batch the leader writes.
    pub leader_epoch: u32,
    /// In-sync replicas: the leader, and followers that hold every record it acknowledged.
    pub isr: Vec<u32>,
    /// Bumped at every change of leader, ISR, replicas or reassignment state: an
    /// `AlterPartition` must name the current one, so a proposal made from an outdated view
    /// changes nothing. (0 in images from before partition epochs.)
    #[serde(default)]
    pub partition_epoch: u32,
    /// Replicas a reassignment adds (in `replicas`, copying the data, not yet all in sync).
    #[serde(default)]
    pub adding_replicas: Vec<u32>,
    /// Replicas a reassignment removes once every adding replica is in sync (in `replicas`).
    #[serde(default)]
    pub removing_replicas: Vec<u32>,
    /// The last in-sync replica restarted after an unclean shutdown under a flush policy other
    /// than `always`, so its disk may lack acknowledged records: the partition stays offline
    /// until an unclean election (topic setting `unclean_leader_election`) picks a leader.
    #[serde(default)]
    pub needs_unclean_election: bool,
}

impl PartitionRecord {
    /// Sets the leader and ISR; a new leader starts a new leader epoch.
    fn lead(&mut self, leader: Option<u32>, isr: &[u32]) {
        let next = PartitionRecord {
            leader,
            isr: isr.to_vec(),
            ..self.clone()
        };
        self.take_state(&next);
    }

    /// Takes `next`'s replicas, leader, ISR, reassignment state and flag (its epochs are
    /// ignored): a different leader bumps the leader epoch, any change the partition epoch.
    /// Commands compute their replies with this too, so a reply matches the applied state.
    pub fn take_state(&mut self, next: &PartitionRecord) {
        let same = self.replicas == next.replicas
            && self.leader == next.leader
            && self.isr == next.isr
            && self.adding_replicas == next.adding_replicas
            && self.removing_replicas == next.removing_replicas
            && self.needs_unclean_election == next.needs_unclean_election;
        if same {
            return;
        }
        if self.leader != next.leader {
            self.leader_epoch = self.leader_epoch.saturating_add(1);
        }
        self.partition_epoch = self.partition_epoch.saturating_add(1);
        self.replicas.clone_from(&next.replicas);
        self.leader = next.leader;
        self.isr.clone_from(&next.isr);
        self.adding_replicas.clone_from(&next.adding_replicas);
        self.removing_replicas.clone_from(&next.removing_replicas);
        self.needs_unclean_election = next.needs_unclean_election;
    }

    /// Whether a reassignment is under way.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas once the reassignment under way (if any) completes.
    pub fn target_replicas(&self) -> Vec<u32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
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

/// Topic setting: in-sync replicas an `acks=all` write needs (1 to the replication factor).
pub const MIN_INSYNC_REPLICAS: &str = "min_insync_replicas";
/// Topic setting: `true` lets a replica outside the ISR lead when no in-sync one can
/// (acknowledged records may be lost); `false` (the default) keeps the partition offline.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean_leader_election";
/// Topic setting read by the MetaServer: the flush policy (`always`, `interval:<ms>`, `os`).
pub const FLUSH: &str = "flush";

/// `min_insync_replicas` when a topic does not set it: 2 for three or more replicas (one
/// broker may be lost without refusing writes or losing acknowledged ones), else 1.
pub fn default_min_insync_replicas(replication_factor: u32) -> u32 {
    if replication_factor >= 3 {
        2
    } else {
        1
    }
}

impl TopicRecord {
    /// The replication factor (of its first partition; a reassignment may change one).
    pub fn replication_factor(&self) -> u32 {
        self.partitions
            .first()
            .map_or(1, |p| p.target_replicas().len() as u32)
    }

    /// The topic's `min_insync_replicas`, or its default (also for an unreadable value, which
    /// `CreateTopic` never stores).
    pub fn min_insync_replicas(&self) -> u32 {
        self.config
            .get(MIN_INSYNC_REPLICAS)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| default_min_insync_replicas(self.replication_factor()))
    }

    /// Whether the topic opted in to unclean leader election.
    pub fn unclean_leader_election(&self) -> bool {
        self.config
            .get(UNCLEAN_LEADER_ELECTION)
            .is_some_and(|v| v == "true")
    }

    /// Whether every acknowledged record was fsynced on every in-sync replica: flush policy
    /// `always`. A topic without the setting (created before settings were stored, or the
    /// offsets topic) counts as not, which is the cautious answer.
    pub fn flushes_always(&self) -> bool {
        self.config.get(FLUSH).is_some_and(|v| v == "always")
    }
}

/// A content-based route (docs/queues.md, "Routes"): the leader of each partition of `from`
/// copies every record that matches `filter` into `to` exactly once. Checked by
/// `Command::CreateRoute` ([`crate::command`]) before it is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    /// Unique over the cluster's life, like a topic's: a route deleted and created again
    /// under its name gets a new id, so it keeps no progress of the old one (its progress
    /// group is named with the id).
    pub id: u64,
    pub from: String,
    pub to: String,
    /// A filter expression (crate `tinymq-filter`); empty = every record.
    pub filter: String,
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
    /// Replaces a topic's settings (`AlterTopicConfig`, checked before).
    SetTopicConfig {
        name: String,
        config: BTreeMap<String, String>,
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
    /// decommissioned broker); a different leader bumps the leader epoch. Ends a reassignment.
    MovePartition {
        name: String,
        partition: u32,
        replicas: Vec<u32>,
        leader: Option<u32>,
        isr: Vec<u32>,
    },
    /// Sets every part of a partition's state but its epochs, which follow
    /// ([`PartitionRecord::take_state`]): what ISR changes, elections and reassignments write.
    UpdatePartition {
        name: String,
        partition: u32,
        state: PartitionRecord,
    },
    /// Moves a partition's epoch past `partition_epoch` (if it is still there) without any
    /// other change: the MetaServer refused its leader's ISR proposal at the current epochs,
    /// and no delayed copy of that proposal may apply later.
    BumpPartitionEpoch {
        name: String,
        partition: u32,
        partition_epoch: u32,
    },
    /// Creates a user or replaces its SCRAM verifiers ([`crate::security`]).
    PutUser {
        name: String,
        credentials: Vec<StoredCredential>,
    },
    DeleteUser {
        name: String,
    },
    /// Adds ACLs (ones already present stay as they are).
    CreateAcls {
        acls: Vec<AclEntry>,
    },
    /// Removes exactly these ACLs (the ones a `DeleteAcls` filter matched).
    DeleteAcls {
        acls: Vec<AclEntry>,
    },
    /// Sets a principal's (or the default, `<default>`) quota.
    SetQuota {
        principal: String,
        quota: QuotaConfig,
    },
    RemoveQuota {
        principal: String,
    },
    CreateRoute {
        name: String,
        route: RouteRecord,
    },
    /// Removes a route (`DeleteRoute`, or its topic deleted).
    DeleteRoute {
        name: String,
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
    /// SCRAM verifiers by user name, at most one per mechanism; never passwords.
    #[serde(default)]
    pub users: BTreeMap<String, Vec<StoredCredential>>,
    #[serde(default)]
    pub acls: BTreeSet<AclEntry>,
    /// Quotas by principal (`User:NAME`, or `<default>` for every user without its own).
    #[serde(default)]
    pub quotas: BTreeMap<String, QuotaConfig>,
    /// Content-based routes by name (none in images from before routes).
    #[serde(default)]
    pub routes: BTreeMap<String, RouteRecord>,
    /// Route ids are never reused.
    #[serde(default)]
    pub next_route_id: u64,
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
                self.next_broker_epoch = self.next_broker_epoch.max(broker.epoch.saturating_add(1));
                self.brokers.insert(broker.id, broker.clone());
            }
            MetadataRecord::FenceBroker { id, epoch } => {
                if let Some(b) = self.brokers.get_mut(id).filter(|b| b.epoch == *epoch) {
                    b.fenced = true;
                }
            }
            MetadataRecord::CreateTopic { name, topic } => {
                self.next_topic_id = self.next_topic_id.max(topic.id.saturating_add(1));
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
            MetadataRecord::SetTopicConfig { name, config } => {
                if let Some(t) = self.topics.get_mut(name) {
                    t.config = config.clone();
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
                self.next_producer_id = self.next_producer_id.max(first.saturating_add(*count));
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
                    let next = PartitionRecord {
                        replicas: replicas.clone(),
                        leader: *leader,
                        isr: isr.clone(),
                        ..PartitionRecord::default()
                    };
                    p.take_state(&next);
                }
            }
            MetadataRecord::UpdatePartition {
                name,
                partition,
                state,
            } => {
                if let Some(p) = self.partition_mut(name, *partition) {
                    p.take_state(state);
                }
            }
            MetadataRecord::BumpPartitionEpoch {
                name,
                partition,
                partition_epoch,
            } => {
                if let Some(p) = self.partition_mut(name, *partition) {
                    if p.partition_epoch == *partition_epoch {
                        p.partition_epoch = p.partition_epoch.saturating_add(1);
                    }
                }
            }
            MetadataRecord::PutUser { .. }
            | MetadataRecord::DeleteUser { .. }
            | MetadataRecord::CreateAcls { .. }
            | MetadataRecord::DeleteAcls { .. }
            | MetadataRecord::SetQuota { .. }
            | MetadataRecord::RemoveQuota { .. } => crate::security::apply(self, record),
            MetadataRecord::CreateRoute { name, route } => {
                self.next_route_id = self.next_route_id.max(route.id.saturating_add(1));
                self.routes
                    .entry(name.clone())
                    .or_insert_with(|| route.clone());
            }
            MetadataRecord::DeleteRoute { name } => {
                self.routes.remove(name);
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
