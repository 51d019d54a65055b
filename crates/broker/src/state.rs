//! The broker's shared state: configuration, its view of the cluster, and the partitions it
//! holds (those whose replica list names it), opened and closed as the metadata image changes,
//! with the reason for each one that could not be opened (offline here; the rest are served).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use tinymq_log::LogError;
use tinymq_meta::command::OFFSETS_TOPIC;
use tinymq_meta::{BrokerRecord, TopicRecord};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::ClusterView;
use crate::config::BrokerConfig;
use crate::deletion::Deleter;
use crate::group::GroupCoordinator;
use crate::partition::Partition;
use crate::topic::TopicSettings;

/// The partitions of one topic held here, and the topic's id (0 for a topic from before ids).
#[derive(Debug, Default)]
pub(crate) struct LocalTopic {
    pub id: u64,
    pub partitions: BTreeMap<u32, Arc<Partition>>,
}

/// Open partitions by topic, then index (looked up by `&str` on every request).
pub(crate) type PartitionMap = HashMap<String, LocalTopic>;

/// Why each partition placed here could not be opened, by topic and index.
pub(crate) type OpenFailures = HashMap<String, BTreeMap<u32, String>>;

#[derive(Debug)]
pub struct BrokerState {
    pub config: BrokerConfig,
    /// The address clients should use to reach this broker, as the operator wrote it.
    pub advertised: crate::config::Advertised,
    pub cluster: Arc<ClusterView>,
    pub groups: GroupCoordinator,
    /// The transactional ids coordinated here (`crate::txn`).
    pub txns: crate::txn::coordinator::TxnStore,
    /// The half messages coordinated here (`crate::half`).
    pub halves: crate::half::HalfStore,
    /// Connections to the other brokers for transaction markers.
    pub(crate) txn_links: crate::txn::links::MarkerLinks,
    /// The partitions held here, by topic and index; changed only by `reconcile`.
    pub(crate) partitions: RwLock<PartitionMap>,
    /// Partitions placed here whose last open failed, with the reason; they answer
    /// `STORAGE_ERROR` until a later reconciliation opens them. Changed only by `reconcile`.
    pub(crate) open_failures: RwLock<OpenFailures>,
    /// Permits in bytes: the fetch memory (`fetch_memory_bytes_max`) not reserved by a fetch.
    pub(crate) fetch_memory: Arc<tokio::sync::Semaphore>,
    /// Removes the data of deleted partitions in the background.
    pub(crate) deleter: Deleter,
    /// The follower fetch tasks, by leader.
    pub(crate) fetchers: crate::replica::fetchers::Fetchers,
    /// The native port's connection counts, for metrics.
    pub connections: Arc<tinymq_net::ConnectionStats>,
    /// Per-principal throttling, with the rates of the metadata image.
    pub quotas: crate::quota::Quotas,
    /// The ACLs of the current image, for `crate::authorize`.
    pub(crate) authorization: tinymq_meta::authorize::AuthorizerCache,
    /// The broker as a client of its own cluster (dead letters, routes).
    pub internal: crate::internal_client::InternalClient,
    /// Share groups' state of the partitions led here.
    #[allow(dead_code)] // Read once issue 18's work lands.
    pub(crate) share: crate::share::registry::ShareGroups,
    /// Timer logs of delayed batches of the partitions led here.
    #[allow(dead_code)] // Read once issue 18's work lands.
    pub(crate) delays: crate::delay::slots::Delays,
    /// Route runners of the source partitions led here.
    #[allow(dead_code)] // Read once issue 18's work lands.
    pub(crate) routes: crate::route::registry::Routes,
}

impl BrokerState {
    pub fn new(
        config: BrokerConfig,
        advertised: crate::config::Advertised,
        cluster: Arc<ClusterView>,
    ) -> Result<BrokerState, LogError> {
        let groups = GroupCoordinator::default();
        // One broker per process: its logs share the process's cache of open files.
        tinymq_log::OpenFiles::shared().set_limit(config.open_segment_files_max);
        let deleter = Deleter::start(&config.data_dir).map_err(|source| LogError::Io {
            path: config.data_dir.clone(),
            source,
        })?;
        let fetch_memory = Arc::new(tokio::sync::Semaphore::new(
            config.fetch_memory_bytes_max as usize,
        ));
        let quotas = crate::quota::Quotas::new(config.quota_principals_max);
        let authorization =
            tinymq_meta::authorize::AuthorizerCache::new(config.authorization.clone());
        let internal = crate::internal_client::InternalClient::new(
            &advertised,
            config.links.clone(),
            config.node_id,
        );
        Ok(BrokerState {
            fetch_memory,
            quotas,
            internal,
            share: Default::default(),
            delays: Default::default(),
            routes: Default::default(),
            config,
            advertised,
            cluster,
            groups,
            txns: Default::default(),
            halves: Default::default(),
            txn_links: Default::default(),
            partitions: RwLock::new(HashMap::new()),
            open_failures: RwLock::new(HashMap::new()),
            deleter,
            fetchers: Default::default(),
            connections: Default::default(),
            authorization,
        })
    }

    /// Takes `bytes` of the fetch memory (`fetch_memory_bytes_max`, at most all of it) for
    /// fetched records held in memory until written by a listener that cannot send them from
    /// the file (the Kafka listener), so they count against the same bound as the fetches
    /// being read; `None` once the broker is shutting down.
    pub async fn hold_fetch_memory(
        &self,
        bytes: usize,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permits = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(self.config.fetch_memory_bytes_max);
        self.fetch_memory
            .clone()
            .acquire_many_owned(permits)
            .await
            .ok()
    }

    /// `AUTHORIZATION_FAILED` naming the permission unless `principal` has it under the
    /// current image's ACLs: for the Kafka listener's operations that have no native request
    /// (DescribeLogDirs, ElectLeaders, partition reassignments), so that they are governed by
    /// the same ACLs as the native port.
    pub fn check_permission(
        &self,
        principal: &tinymq_auth::Principal,
        permission: tinymq_meta::authorize::Permission<'_>,
    ) -> Result<(), m::Error> {
        // The access of `crate::authorize::access`, built here: `authorize` depends on this
        // module, not the other way round.
        self.authorization
            .current(|| self.cluster.version(), || self.cluster.image())
            .check(principal, permission)
    }

    pub fn node_id(&self) -> u32 {
        self.cluster.broker_id
    }

    /// Whether this broker's follower fetches recently found `leader`'s connection closed or
    /// refused (a hint for clients, see [`crate::replica::fetchers::LEADER_UNREACHABLE_HINT`]).
    pub fn leader_unreachable(&self, leader: u32) -> bool {
        let now = std::time::Instant::now();
        leader != self.node_id() && self.fetchers.leader_unreachable(leader, now)
    }

    /// A topic's settings: its stored config over this broker's defaults (the offsets
    /// topic's and the transaction states' are fixed: [`crate::group::offsets::topic_settings`]).
    pub fn settings_of(&self, name: &str, topic: &TopicRecord) -> TopicSettings {
        let partitions = topic.partitions.len() as u32;
        if name == OFFSETS_TOPIC {
            return crate::group::offsets::topic_settings(partitions, topic.replication_factor());
        }
        if name == tinymq_meta::command::TRANSACTION_TOPIC {
            let rf = topic.replication_factor();
            return crate::group::offsets::compacted_topic_settings(partitions, rf);
        }
        if name == tinymq_meta::command::HALF_TOPIC {
            return crate::half::topic_settings(partitions, topic.replication_factor());
        }
        TopicSettings::from_record(topic, &self.config.topic_defaults).unwrap_or_else(|(_, why)| {
            tracing::error!(topic = %name, error = %why, "stored topic settings are invalid; using the defaults");
            TopicSettings {
                partitions: topic.partitions.len() as u32,
                ..self.config.topic_defaults.clone()
            }
        })
    }

    /// The partition if this broker leads it now, with its leader epoch; otherwise the error
    /// for the client: internal (clients reach those only through the group operations),
    /// unknown, offline, led elsewhere (with the leader in the message), or led here but not
    /// openable (`STORAGE_ERROR` with the reason; nothing is written to it).
    pub fn led_partition(
        &self,
        topic: &str,
        index: u32,
    ) -> Result<(Arc<Partition>, u32), m::Error> {
        if tinymq_meta::is_internal_topic(topic) {
            return Err(ErrorCode::INVALID_TOPIC.with_message(format!(
                "{topic} is internal: it is reached through the group operations only"
            )));
        }
        self.led_partition_any(topic, index)
    }

    /// [`BrokerState::led_partition`] for internal topics too: for follower fetches and the
    /// group coordinator, never for a client's produce, fetch or list-offsets.
    pub(crate) fn led_partition_any(
        &self,
        topic: &str,
        index: u32,
    ) -> Result<(Arc<Partition>, u32), m::Error> {
        let image = self.cluster.image();
        let record = image
            .topics
            .get(topic)
            .and_then(|t| t.partitions.get(index as usize))
            .ok_or_else(|| unknown_partition(topic, index))?;
        match record.leader {
            None => Err(ErrorCode::LEADER_NOT_AVAILABLE.with_message(format!(
                "{topic}/{index} is offline: its in-sync replicas {:?} are not live",
                record.isr
            ))),
            Some(leader) if leader != self.node_id() => {
                let address = image
                    .brokers
                    .get(&leader)
                    .map_or_else(String::new, |b| format!(" at {}:{}", b.host, b.port));
                Err(ErrorCode::NOT_LEADER.with_message(format!(
                    "{topic}/{index} is led by broker {leader}{address}"
                )))
            }
            Some(_) => match self.local_partition(topic, index) {
                Some(p) => Ok((p, record.leader_epoch)),
                None => Err(self.not_open_error(topic, index)),
            },
        }
    }

    /// The error for a partition led here that is not open: why it cannot be opened, or that
    /// it is still being opened.
    fn not_open_error(&self, topic: &str, index: u32) -> m::Error {
        match self.open_failure(topic, index) {
            Some(reason) => ErrorCode::STORAGE_ERROR.with_message(format!(
                "{topic}/{index} cannot be opened on broker {}: {reason}",
                self.node_id()
            )),
            None => ErrorCode::LEADER_NOT_AVAILABLE
                .with_message(format!("{topic}/{index} is still being opened here")),
        }
    }

    /// Why the partition could not be opened here, if its last attempt failed.
    pub fn open_failure(&self, topic: &str, index: u32) -> Option<String> {
        self.open_failures.read().get(topic)?.get(&index).cloned()
    }

    /// How many partitions placed here failed their last open.
    pub fn open_failure_count(&self) -> usize {
        self.open_failures.read().values().map(|m| m.len()).sum()
    }

    /// The broker coordinating `group`: the leader of its offsets partition.
    pub fn coordinator_of(&self, group: &str) -> Result<BrokerRecord, m::Error> {
        let image = self.cluster.image();
        let index = crate::group::offsets::partition_for_group(group);
        let partition = image
            .topics
            .get(OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(index as usize))
            .ok_or_else(|| {
                ErrorCode::NOT_COORDINATOR.with_message("the offsets topic does not exist yet")
            })?;
        partition
            .leader
            .and_then(|leader| image.brokers.get(&leader))
            .filter(|b| !b.fenced)
            .cloned()
            .ok_or_else(|| {
                ErrorCode::LEADER_NOT_AVAILABLE.with_message(format!(
                    "the coordinator of group {group} ({OFFSETS_TOPIC}/{index}) is offline"
                ))
            })
    }

    /// `NOT_COORDINATOR` (naming the coordinator) unless this broker coordinates `group`;
    /// `COORDINATOR_LOAD_IN_PROGRESS` while it is still reading the group's offsets partition
    /// in its current leader epoch.
    pub fn check_coordinator(&self, group: &str) -> Result<(), m::Error> {
        let coordinator = self.coordinator_of(group)?;
        if coordinator.id == self.node_id() {
            let index = crate::group::offsets::partition_for_group(group);
            let image = self.cluster.image();
            let epoch = image
                .topics
                .get(OFFSETS_TOPIC)
                .and_then(|t| t.partitions.get(index as usize))
                .map_or(0, |p| p.leader_epoch);
            if self.groups.offsets.loaded_since(index, epoch).is_some() {
                return Ok(());
            }
            return Err(
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.with_message(format!(
                    "broker {} is loading the offsets of group {group} ({OFFSETS_TOPIC}/{index})",
                    self.node_id()
                )),
            );
        }
        Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "group {group} is coordinated by broker {} at {}:{}",
            coordinator.id, coordinator.host, coordinator.port
        )))
    }

    /// Whether `partition` is led here with at least its topic's `min_insync_replicas` in
    /// sync (a follower has none to count on).
    pub fn enough_in_sync(&self, partition: &Partition) -> bool {
        let isr = match &*partition.role.lock() {
            crate::role::Role::Leader(leader) => leader.isr().len(),
            crate::role::Role::Follower { .. } => return false,
        };
        let image = self.cluster.image();
        image
            .topics
            .get(&partition.topic)
            .is_none_or(|t| isr >= t.min_insync_replicas().max(1) as usize)
    }

    /// The node id of a partition's leader in this broker's image (0 = none or unknown).
    pub fn current_leader(&self, topic: &str, index: u32) -> u32 {
        let image = self.cluster.image();
        image
            .topics
            .get(topic)
            .and_then(|t| t.partitions.get(index as usize))
            .and_then(|p| p.leader)
            .unwrap_or(0)
    }

    /// The partition if it is open here, led or not.
    pub fn local_partition(&self, topic: &str, index: u32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .get(topic)?
            .partitions
            .get(&index)
            .cloned()
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .values()
            .flat_map(|t| t.partitions.values().cloned())
            .collect()
    }

    /// Partition count of a topic, if it exists in the cluster.
    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        let image = self.cluster.image();
        image.topics.get(topic).map(|t| t.partitions.len() as u32)
    }
}

pub fn unknown_partition(topic: &str, partition: u32) -> m::Error {
    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        .with_message(format!("unknown topic or partition {topic}/{partition}"))
}
