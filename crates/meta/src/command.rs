//! Commands: pure functions from (image, request) to (records, reply). The MetaServer's Raft
//! leader executes a command against its image, appends the records to the replicated log,
//! and every replica applies them. Nothing here does I/O, so every rule is unit-tested.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tinymq_protocol::ErrorCode;

use crate::image::{
    BrokerRecord, KafkaAddress, MetadataImage, MetadataRecord, PartitionRecord, TopicRecord,
};
use crate::placement::{place, PlannedMove};
use crate::security::PutUserMode;
use tinymq_auth::{AclEntry, AclFilter, QuotaConfig, StoredCredential};

pub mod routes;
pub use routes::{ROUTES_MAX, ROUTE_NAME_BYTES_MAX};

// The topic-name rule and the partition range are the protocol's, as every listener checks
// them.
pub use tinymq_protocol::names::{
    TOPIC_NAME_BYTES_MAX, TOPIC_PARTITIONS_MAX, TOPIC_PARTITIONS_MIN,
};
/// Most partition replicas placed on one broker. File descriptors no longer grow with
/// partitions (the broker's `open_segment_files_max` bounds its open segment files); this
/// bounds the memory and the opening time at start instead (measured in BENCHMARKS.md).
pub const PARTITION_REPLICAS_PER_BROKER_MAX: usize = 12_000;
/// A broker not heard from for this long is fenced by the MetaServer leader (a broker whose
/// process died is fenced sooner: see `session.rs`). Seven heartbeats fit in it; a broker
/// trusts its own session for less (`SESSION_TRUST` in the broker), so it stops acknowledging
/// writes before this runs out.
pub const BROKER_SESSION_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);
/// Most producer ids handed out at once.
pub const PRODUCER_ID_BLOCK_MAX: i64 = 1_000_000;
/// The first producer id a cluster hands out (0 is never used; see `AllocateProducerIds`).
pub const PRODUCER_ID_FIRST: i64 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Names the cluster; issued once by the first leader. Later ones change nothing.
    SetClusterId {
        cluster_id: String,
    },
    /// A broker starting (or coming back after being fenced). Refused while another live
    /// incarnation with a different address holds the id: broker ids are not shared.
    RegisterBroker {
        id: u32,
        host: String,
        port: u16,
        /// Whether the broker's previous run ended cleanly (its data directory's marker says
        /// so). After an unclean end its disk may lack acknowledged records: it leaves the
        /// ISRs it was in (see `register_broker`). Log entries from before this field: true.
        #[serde(default = "yes")]
        clean_shutdown: bool,
        /// The broker's Kafka listener, if it has one; log entries from before it: none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kafka: Option<KafkaAddress>,
    },
    /// Issued by the MetaServer leader when a broker's session expired.
    FenceBroker {
        id: u32,
        epoch: u64,
    },
    CreateTopic {
        name: String,
        partitions: u32,
        replication_factor: u32,
        config: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    /// Grows a topic to `partitions` (never shrinks it).
    AlterPartitions {
        name: String,
        partitions: u32,
    },
    /// Sets and removes settings of an existing topic ([`crate::topic_config`]); brokers
    /// apply the result to their open partitions without a restart.
    AlterTopicConfig {
        name: String,
        set: BTreeMap<String, String>,
        unset: Vec<String>,
    },
    AllocateProducerIds {
        count: i64,
    },
    /// Removes a stopped broker from the cluster for good (`tinymq broker decommission`): it
    /// is refused while the broker is live, and while it holds partition replicas unless
    /// `move_partitions` (then each is placed on a live broker instead; where it held the only
    /// in-sync copy, the new replica starts empty: those records are lost). Its id is never
    /// registered again. Deciding twice is the same as once.
    DecommissionBroker {
        id: u32,
        move_partitions: bool,
    },
    /// Creates the internal topic [`OFFSETS_TOPIC`] if it does not exist yet, placed like any
    /// topic with `min(OFFSETS_REPLICATION_FACTOR_MAX, live brokers)` replicas per partition,
    /// `min_insync_replicas` by the default rule and flush `always`; its partition leaders
    /// coordinate consumer groups.
    EnsureOffsetsTopic {
        partitions: u32,
    },
    /// Creates the internal topic [`TRANSACTION_TOPIC`] if it does not exist yet, placed as
    /// [`Command::EnsureOffsetsTopic`] places the offsets topic; its partition leaders
    /// coordinate transactional ids and store their transactions' states.
    EnsureTransactionTopic {
        partitions: u32,
    },
    /// Creates the internal topic [`HALF_TOPIC`] if it does not exist yet, placed as
    /// [`Command::EnsureOffsetsTopic`] places the offsets topic; its partition leaders
    /// coordinate producer groups' half messages and store them until they are resolved.
    EnsureHalfTopic {
        partitions: u32,
    },
    /// Sent by a partition's leader to change its ISR: refused unless `broker_id` leads the
    /// partition under `broker_epoch` (its current, unfenced registration) and `leader_epoch`
    /// and `partition_epoch` are the partition's current ones, so a proposal from a deposed
    /// leader or an outdated view changes nothing. The new ISR holds the leader, only replicas,
    /// and only live brokers among the members it adds. Replies [`Reply::Partition`]. When the
    /// ISR then holds every replica a reassignment adds, the reassignment completes.
    AlterPartition {
        topic: String,
        partition: u32,
        broker_id: u32,
        broker_epoch: u64,
        leader_epoch: u32,
        partition_epoch: u32,
        isr: Vec<u32>,
    },
    /// Moves leadership to each partition's first replica where it is live, in sync and not
    /// leading (of `topic`, or of every topic), except to `except_brokers` (ones registered
    /// too recently). Issued periodically by the MetaServer leader.
    ElectPreferredLeaders {
        #[serde(default)]
        topic: Option<String>,
        #[serde(default)]
        except_brokers: Vec<u32>,
    },
    /// Starts moving a partition to `target_replicas` (preferred leader first): the new
    /// replicas are added, and once all are in sync the others leave. Replaces a reassignment
    /// under way. Replies [`Reply::Partition`].
    ReassignPartition {
        topic: String,
        partition: u32,
        target_replicas: Vec<u32>,
    },
    /// Cancels the reassignment under way of a partition: back to the replicas it had before
    /// the move (the adding ones leave). Refused with `INVALID_REQUEST` when none is under way.
    /// Replies [`Reply::Partition`].
    CancelReassignment {
        topic: String,
        partition: u32,
    },
    /// Spreads replicas and preferred leaders evenly over the live brokers
    /// ([`crate::placement::rebalance_plan`]): starts those reassignments, or with `dry_run`
    /// only returns them. Replies [`Reply::Plan`].
    Rebalance {
        #[serde(default)]
        dry_run: bool,
    },
    /// Moves every replica off broker `id` ([`crate::placement::drain_plan`]), as `Rebalance`.
    DrainBroker {
        id: u32,
        #[serde(default)]
        dry_run: bool,
    },
    /// Creates a user or replaces its SCRAM verifiers ([`crate::security`]).
    PutUser {
        name: String,
        credentials: Vec<StoredCredential>,
        mode: PutUserMode,
    },
    DeleteUser {
        name: String,
    },
    /// Changes some of a user's SCRAM verifiers, one mechanism at a time, against the image
    /// this is applied to (Kafka's AlterUserScramCredentials): `delete` removes mechanisms the
    /// user has (else `USER_NOT_FOUND`), `upsert` adds or replaces the others'. The user is
    /// created by its first verifier and deleted with its last.
    AlterUserCredentials {
        name: String,
        #[serde(default)]
        delete: Vec<tinymq_auth::ScramMechanism>,
        #[serde(default)]
        upsert: Vec<StoredCredential>,
    },
    /// Creates user `admin` when the cluster has no user yet, else nothing; replies
    /// [`Reply::UserCreated`]. Issued by the MetaServer leader at start.
    BootstrapAdmin {
        credentials: Vec<StoredCredential>,
    },
    /// Adds ACLs; duplicates are no-ops.
    CreateAcls {
        acls: Vec<AclEntry>,
    },
    /// Removes every ACL the filter matches; replies [`Reply::AclsRemoved`].
    DeleteAcls {
        filter: AclFilter,
    },
    SetQuota {
        principal: String,
        quota: QuotaConfig,
    },
    /// Changes some rates of a principal's quota against the image it is applied to (Kafka's
    /// AlterClientQuotas): a rate given replaces the current one (0: no limit), one not given
    /// is kept; a quota left with no limit is removed.
    AlterQuota {
        principal: String,
        #[serde(default)]
        produce_bytes_per_sec: Option<u64>,
        #[serde(default)]
        fetch_bytes_per_sec: Option<u64>,
    },
    RemoveQuota {
        principal: String,
    },
    /// Creates a content-based route ([`routes`]): refused for a name in use
    /// (`ROUTE_ALREADY_EXISTS`), an unknown or internal topic, the same topic on both ends, a
    /// filter that does not parse (`INVALID_FILTER`) and past [`ROUTES_MAX`].
    CreateRoute {
        name: String,
        from: String,
        to: String,
        filter: String,
    },
    /// Deletes a route (`ROUTE_NOT_FOUND` if there is none by that name).
    DeleteRoute {
        name: String,
    },
}

fn yes() -> bool {
    true
}

/// The internal topic whose partition leaders coordinate consumer groups and store their
/// committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The internal topic whose partition leaders coordinate transactions and store their states.
pub const TRANSACTION_TOPIC: &str = "__transaction_state";
/// The internal topic whose partition leaders coordinate half messages (transactional
/// messages with check-back) and store them until they are committed or rolled back.
pub const HALF_TOPIC: &str = "__half_messages";
/// Most replicas of each offsets partition (Kafka's `offsets.topic.replication.factor`): with
/// three, committed offsets survive losing any one broker and commits go on meanwhile.
pub const OFFSETS_REPLICATION_FACTOR_MAX: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Done,
    BrokerRegistered {
        epoch: u64,
    },
    ProducerIds {
        first: i64,
        count: i64,
    },
    /// A partition's state after the command (`AlterPartition`, `ReassignPartition`): the
    /// sender updates its cache from it (leader, epochs, ISR, replicas).
    Partition(PartitionRecord),
    /// The reassignments a `Rebalance` or `DrainBroker` started (or would start: dry run).
    Plan(Vec<PlannedMove>),
    /// The ACLs a `DeleteAcls` removed.
    AclsRemoved(Vec<AclEntry>),
    /// Whether `BootstrapAdmin` created the user.
    UserCreated(bool),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MetaError {
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    #[error(
        "invalid topic name {0:?}: 1 to {TOPIC_NAME_BYTES_MAX} characters of [A-Za-z0-9._-], \
         neither . nor .., not starting with __"
    )]
    InvalidTopic(String),
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("replication factor {want} needs {want} live brokers; {live} are live")]
    NotEnoughBrokers { want: u32, live: usize },
    #[error("unknown broker {0}")]
    UnknownBroker(u32),
    #[error("broker id {id} is registered by a live broker at {address}; ids are not shared (it is released {session_s} s after that broker stops)")]
    BrokerIdInUse {
        id: u32,
        address: String,
        session_s: u64,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("broker {0} was decommissioned: its id is retired for good; start the broker with a new id and an empty data directory")]
    BrokerDecommissioned(u32),
    #[error("broker {id} is live at {address}; stop it first (SIGTERM), then decommission it")]
    BrokerLive { id: u32, address: String },
    #[error("broker {id} holds {count} partition replicas ({examples}); their data is not replicated, so removing the broker loses it: delete those topics first, or decommission with --move-partitions to place them, empty, on live brokers")]
    BrokerHoldsPartitions {
        id: u32,
        count: usize,
        examples: String,
    },
    #[error("unknown partition {topic}/{partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("invalid topic setting: {0}")]
    InvalidConfig(String),
    #[error("broker {id} sent broker epoch {sent}, but its current registration is {current:?} (or fenced): a previous incarnation; register again")]
    StaleBrokerEpoch {
        id: u32,
        sent: u64,
        current: Option<u64>,
    },
    #[error("broker {broker} does not lead {topic}/{partition} (leader {leader:?})")]
    NotLeader {
        topic: String,
        partition: u32,
        broker: u32,
        leader: Option<u32>,
    },
    #[error("{topic}/{partition}: leader epoch {sent} is not the current {current}")]
    FencedLeaderEpoch {
        topic: String,
        partition: u32,
        sent: u32,
        current: u32,
    },
    #[error("{topic}/{partition}: partition epoch {sent} is not the current {current}; refresh and propose again")]
    StalePartitionEpoch {
        topic: String,
        partition: u32,
        sent: u32,
        current: u32,
    },
    #[error("user {0} already exists")]
    UserExists(String),
    #[error("unknown user {0}")]
    UserNotFound(String),
    #[error("the cluster holds its most {what} ({max}); remove some first")]
    LimitReached { what: String, max: usize },
    #[error("route {0} already exists")]
    RouteExists(String),
    #[error("unknown route {0}")]
    RouteNotFound(String),
    /// The filter parser's text as it is (`column N: …` and a caret line under the column),
    /// so the caret lines up.
    #[error("{0}")]
    InvalidFilter(String),
    #[error("{topic}/{partition}: broker {broker} cannot join the ISR (not a replica, not live, or fenced)")]
    IneligibleReplica {
        topic: String,
        partition: u32,
        broker: u32,
    },
    /// A drain has nowhere to put a replica: the live brokers other than the drained one
    /// (`left`) all hold the partition already. Worded for what the operator asked, since
    /// the drained broker may well be live.
    #[error("draining broker {id} would leave {left} live brokers for replication factor {want} of topic '{topic}' (each replica needs a broker of its own): start another broker first")]
    DrainLeavesTooFew {
        id: u32,
        left: usize,
        want: u32,
        topic: String,
    },
}

impl MetaError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            MetaError::TopicExists(_) => ErrorCode::TOPIC_ALREADY_EXISTS,
            MetaError::UnknownTopic(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            MetaError::InvalidTopic(_) => ErrorCode::INVALID_TOPIC,
            MetaError::InvalidPartitions(_) => ErrorCode::INVALID_PARTITIONS,
            MetaError::NotEnoughBrokers { .. } | MetaError::DrainLeavesTooFew { .. } => {
                ErrorCode::NOT_ENOUGH_REPLICAS
            }
            MetaError::UnknownBroker(_)
            | MetaError::Invalid(_)
            | MetaError::BrokerDecommissioned(_)
            | MetaError::BrokerLive { .. }
            | MetaError::BrokerHoldsPartitions { .. } => ErrorCode::INVALID_REQUEST,
            MetaError::BrokerIdInUse { .. } => ErrorCode::BROKER_ID_IN_USE,
            MetaError::UnknownPartition { .. } => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            MetaError::InvalidConfig(_) => ErrorCode::INVALID_CONFIG,
            MetaError::StaleBrokerEpoch { .. } => ErrorCode::STALE_BROKER_EPOCH,
            MetaError::NotLeader { .. } => ErrorCode::NOT_LEADER,
            MetaError::FencedLeaderEpoch { .. } => ErrorCode::FENCED_LEADER_EPOCH,
            MetaError::StalePartitionEpoch { .. } => ErrorCode::INVALID_UPDATE_VERSION,
            MetaError::IneligibleReplica { .. } => ErrorCode::INELIGIBLE_REPLICA,
            MetaError::UserExists(_) => ErrorCode::USER_ALREADY_EXISTS,
            MetaError::UserNotFound(_) => ErrorCode::USER_NOT_FOUND,
            MetaError::LimitReached { .. } => ErrorCode::INVALID_REQUEST,
            MetaError::RouteExists(_) => ErrorCode::ROUTE_ALREADY_EXISTS,
            MetaError::RouteNotFound(_) => ErrorCode::ROUTE_NOT_FOUND,
            MetaError::InvalidFilter(_) => ErrorCode::INVALID_FILTER,
        }
    }
}

pub type Outcome = Result<(Vec<MetadataRecord>, Reply), MetaError>;

fn valid_topic_name(name: &str) -> bool {
    tinymq_protocol::names::validate_user_topic_name(name).is_ok()
}

/// Runs `command` against `image` without changing it.
pub fn execute(image: &MetadataImage, command: &Command) -> Outcome {
    match command {
        Command::SetClusterId { cluster_id } => {
            if !image.cluster_id.is_empty() {
                return Ok((vec![], Reply::Done));
            }
            if cluster_id.is_empty() || cluster_id.len() > 64 {
                return Err(MetaError::Invalid(format!("cluster id {cluster_id:?}")));
            }
            Ok((
                vec![MetadataRecord::SetClusterId {
                    cluster_id: cluster_id.clone(),
                }],
                Reply::Done,
            ))
        }
        Command::RegisterBroker {
            id,
            host,
            port,
            clean_shutdown,
            kafka,
        } => register_broker(image, *id, host, *port, *clean_shutdown, kafka.clone()),
        Command::FenceBroker { id, epoch } => fence_broker(image, *id, *epoch),
        Command::CreateTopic {
            name,
            partitions,
            replication_factor,
            config,
        } => create_topic(image, name, *partitions, *replication_factor, config),
        Command::DeleteTopic { name } => {
            if crate::is_internal_topic(name) {
                return Err(MetaError::InvalidTopic(name.clone()));
            }
            if !image.topics.contains_key(name) {
                return Err(MetaError::UnknownTopic(name.clone()));
            }
            let mut records = vec![MetadataRecord::DeleteTopic { name: name.clone() }];
            records.extend(routes::routes_of_deleted_topic(image, name));
            Ok((records, Reply::Done))
        }
        Command::AlterPartitions { name, partitions } => alter_partitions(image, name, *partitions),
        Command::AlterTopicConfig { name, set, unset } => {
            crate::topic_config::alter_topic_config(image, name, set, unset)
        }
        Command::DecommissionBroker {
            id,
            move_partitions,
        } => decommission_broker(image, *id, *move_partitions),
        Command::EnsureOffsetsTopic { partitions } => {
            ensure_internal_topic(image, OFFSETS_TOPIC, *partitions)
        }
        Command::EnsureTransactionTopic { partitions } => {
            ensure_internal_topic(image, TRANSACTION_TOPIC, *partitions)
        }
        Command::EnsureHalfTopic { partitions } => {
            ensure_internal_topic(image, HALF_TOPIC, *partitions)
        }
        Command::AlterPartition {
            topic,
            partition,
            broker_id,
            broker_epoch,
            leader_epoch,
            partition_epoch,
            isr,
        } => crate::isr::alter_partition(
            image,
            &crate::isr::Proposal {
                topic,
                partition: *partition,
                broker_id: *broker_id,
                broker_epoch: *broker_epoch,
                leader_epoch: *leader_epoch,
                partition_epoch: *partition_epoch,
                isr,
            },
        ),
        Command::ElectPreferredLeaders {
            topic,
            except_brokers,
        } => crate::election::elect_preferred_leaders(image, topic.as_deref(), except_brokers),
        Command::ReassignPartition {
            topic,
            partition,
            target_replicas,
        } => crate::reassign::reassign_partition(image, topic, *partition, target_replicas),
        Command::CancelReassignment { topic, partition } => {
            crate::reassign::cancel_reassignment(image, topic, *partition)
        }
        Command::Rebalance { dry_run } => {
            crate::reassign::start_plan(image, crate::placement::rebalance_plan(image), *dry_run)
        }
        Command::DrainBroker { id, dry_run } => {
            let plan = crate::placement::drain_plan(image, *id)?;
            crate::reassign::start_plan(image, plan, *dry_run)
        }
        Command::AllocateProducerIds { count } => {
            if !(1..=PRODUCER_ID_BLOCK_MAX).contains(count) {
                return Err(MetaError::Invalid(format!("producer id block of {count}")));
            }
            // Id 0 is never handed out: proto3 cannot tell it from an absent field, so a
            // client that forgot to set its producer id would look like producer 0.
            let first = image.next_producer_id.max(PRODUCER_ID_FIRST);
            Ok((
                vec![MetadataRecord::AllocateProducerIds {
                    first,
                    count: *count,
                }],
                Reply::ProducerIds {
                    first,
                    count: *count,
                },
            ))
        }
        Command::PutUser {
            name,
            credentials,
            mode,
        } => crate::security::put_user(image, name, credentials, *mode),
        Command::DeleteUser { name } => crate::security::delete_user(image, name),
        Command::AlterUserCredentials {
            name,
            delete,
            upsert,
        } => crate::security::alter_user_credentials(image, name, delete, upsert),
        Command::AlterQuota {
            principal,
            produce_bytes_per_sec,
            fetch_bytes_per_sec,
        } => crate::security::alter_quota(
            image,
            principal,
            *produce_bytes_per_sec,
            *fetch_bytes_per_sec,
        ),
        Command::BootstrapAdmin { credentials } => {
            crate::security::bootstrap_admin(image, credentials)
        }
        Command::CreateAcls { acls } => crate::security::create_acls(image, acls),
        Command::DeleteAcls { filter } => crate::security::delete_acls(image, filter),
        Command::SetQuota { principal, quota } => {
            crate::security::set_quota(image, principal, quota)
        }
        Command::RemoveQuota { principal } => crate::security::remove_quota(image, principal),
        Command::CreateRoute {
            name,
            from,
            to,
            filter,
        } => routes::create_route(image, name, from, to, filter),
        Command::DeleteRoute { name } => routes::delete_route(image, name),
    }
}

fn register_broker(
    image: &MetadataImage,
    id: u32,
    host: &str,
    port: u16,
    clean_shutdown: bool,
    kafka: Option<KafkaAddress>,
) -> Outcome {
    if image.decommissioned_brokers.contains(&id) {
        return Err(MetaError::BrokerDecommissioned(id));
    }
    if let Some(other) = image
        .brokers
        .get(&id)
        .filter(|b| !b.fenced && (b.host != host || b.port != port))
    {
        return Err(MetaError::BrokerIdInUse {
            id,
            address: format!("{}:{}", other.host, other.port),
            session_s: BROKER_SESSION_TIMEOUT.as_secs_f64().ceil() as u64,
        });
    }
    let epoch = image.next_broker_epoch;
    let mut records = vec![MetadataRecord::RegisterBroker {
        broker: BrokerRecord {
            id,
            host: host.into(),
            port,
            epoch,
            fenced: false,
            kafka,
        },
    }];
    records.extend(crate::election::after_registration(
        image,
        id,
        clean_shutdown,
    ));
    Ok((records, Reply::BrokerRegistered { epoch }))
}

/// Fences a broker: it leaves every ISR it is in but the last one, and the partitions it led
/// get a leader from the rest ([`crate::election::after_fence`]).
fn fence_broker(image: &MetadataImage, id: u32, epoch: u64) -> Outcome {
    let broker = image.brokers.get(&id).ok_or(MetaError::UnknownBroker(id))?;
    if broker.epoch != epoch || broker.fenced {
        return Ok((vec![], Reply::Done));
    }
    let mut records = vec![MetadataRecord::FenceBroker { id, epoch }];
    records.extend(crate::election::after_fence(image, id));
    Ok((records, Reply::Done))
}

/// At most this many replicas for a topic created without a replication factor: three copies
/// survive losing one broker while `min_insync_replicas` 2 still accepts writes.
pub const DEFAULT_REPLICATION_FACTOR_MAX: u32 = 3;

/// The replication factor of a topic created without one: `min(max, live brokers)`.
pub fn default_replication_factor(live_brokers: usize, max: u32) -> u32 {
    u32::try_from(live_brokers).unwrap_or(u32::MAX).min(max)
}

/// The replication settings of a new topic, checked, with their defaults filled in: stored
/// with the topic so later default changes do not alter it.
fn replication_config(
    config: &BTreeMap<String, String>,
    replication_factor: u32,
) -> Result<BTreeMap<String, String>, MetaError> {
    use crate::image::{MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION};
    let mut config = config.clone();
    let min_insync = match config.get(MIN_INSYNC_REPLICAS) {
        None => crate::image::default_min_insync_replicas(replication_factor),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=replication_factor).contains(n))
            .ok_or_else(|| {
                MetaError::InvalidConfig(format!(
                    "{MIN_INSYNC_REPLICAS} must be 1 to the replication factor \
                     {replication_factor}, got {v:?}"
                ))
            })?,
    };
    let unclean = match config.get(UNCLEAN_LEADER_ELECTION).map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(MetaError::InvalidConfig(format!(
                "{UNCLEAN_LEADER_ELECTION} must be true or false, got {v:?}"
            )))
        }
    };
    config.insert(MIN_INSYNC_REPLICAS.into(), min_insync.to_string());
    config.insert(UNCLEAN_LEADER_ELECTION.into(), unclean.to_string());
    Ok(config)
}

fn new_partitions(
    image: &MetadataImage,
    count: u32,
    replication_factor: u32,
) -> Result<Vec<PartitionRecord>, MetaError> {
    let live = image.live_brokers();
    if replication_factor == 0 || replication_factor as usize > live.len() {
        return Err(MetaError::NotEnoughBrokers {
            want: replication_factor,
            live: live.len(),
        });
    }
    let load = image.load();
    let leader_load = load
        .iter()
        .map(|(b, (leaders, _))| (*b, *leaders))
        .collect();
    let placed = place(count, replication_factor, &live, &leader_load);
    let replicas_on = |broker: u32| load.get(&broker).map_or(0, |(_, replicas)| *replicas);
    let mut added: BTreeMap<u32, usize> = BTreeMap::new();
    for broker in placed.iter().flatten() {
        *added.entry(*broker).or_default() += 1;
    }
    if let Some((broker, n)) = added
        .iter()
        .map(|(b, n)| (*b, replicas_on(*b) + n))
        .find(|(_, n)| *n > PARTITION_REPLICAS_PER_BROKER_MAX)
    {
        return Err(MetaError::InvalidPartitions(format!(
            "broker {broker} would hold {n} partition replicas; at most \
             {PARTITION_REPLICAS_PER_BROKER_MAX} per broker (add brokers or delete topics)"
        )));
    }
    Ok(placed
        .into_iter()
        .map(|replicas| PartitionRecord {
            leader: Some(replicas[0]),
            // A new partition is empty: its leader alone is in sync, and followers join the
            // ISR as they catch up (the leader's `AlterPartition`). An ISR claiming more
            // would let a fence elect a replica that holds nothing.
            isr: vec![replicas[0]],
            replicas,
            ..PartitionRecord::default()
        })
        .collect())
}

fn create_topic(
    image: &MetadataImage,
    name: &str,
    partitions: u32,
    replication_factor: u32,
    config: &BTreeMap<String, String>,
) -> Outcome {
    if !valid_topic_name(name) {
        return Err(MetaError::InvalidTopic(name.into()));
    }
    if image.topics.contains_key(name) {
        return Err(MetaError::TopicExists(name.into()));
    }
    if !(TOPIC_PARTITIONS_MIN..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err(MetaError::InvalidPartitions(format!(
            "{partitions} ({TOPIC_PARTITIONS_MIN} to {TOPIC_PARTITIONS_MAX})"
        )));
    }
    let replication_factor = match replication_factor {
        0 => default_replication_factor(image.live_brokers().len(), DEFAULT_REPLICATION_FACTOR_MAX),
        n => n,
    };
    let placed = new_partitions(image, partitions, replication_factor)?;
    let topic = TopicRecord {
        id: image.new_topic_id(),
        partitions: placed,
        config: replication_config(config, replication_factor)?,
    };
    Ok((
        vec![MetadataRecord::CreateTopic {
            name: name.into(),
            topic,
        }],
        Reply::Done,
    ))
}

/// Creates the internal topic `name` (offsets or transaction states) unless it exists: placed
/// like any topic with `min(OFFSETS_REPLICATION_FACTOR_MAX, live brokers)` replicas, flush
/// `always` (what it holds is acknowledged once fsynced on every in-sync replica).
fn ensure_internal_topic(image: &MetadataImage, name: &str, partitions: u32) -> Outcome {
    if image.topics.contains_key(name) {
        return Ok((vec![], Reply::Done));
    }
    if !(TOPIC_PARTITIONS_MIN..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err(MetaError::InvalidPartitions(partitions.to_string()));
    }
    let replication_factor =
        default_replication_factor(image.live_brokers().len(), OFFSETS_REPLICATION_FACTOR_MAX);
    let config = [(crate::image::FLUSH.to_string(), "always".to_string())].into();
    let topic = TopicRecord {
        id: image.new_topic_id(),
        partitions: new_partitions(image, partitions, replication_factor)?,
        config: replication_config(&config, replication_factor)?,
    };
    Ok((
        vec![MetadataRecord::CreateTopic {
            name: name.into(),
            topic,
        }],
        Reply::Done,
    ))
}

fn alter_partitions(image: &MetadataImage, name: &str, partitions: u32) -> Outcome {
    if crate::is_internal_topic(name) {
        return Err(MetaError::InvalidTopic(name.into()));
    }
    let topic = image
        .topics
        .get(name)
        .ok_or_else(|| MetaError::UnknownTopic(name.into()))?;
    let current = topic.partitions.len() as u32;
    if partitions <= current || partitions > TOPIC_PARTITIONS_MAX {
        return Err(MetaError::InvalidPartitions(format!(
            "{name} has {current} partitions; it can grow to at most {TOPIC_PARTITIONS_MAX}, never shrink (asked {partitions})"
        )));
    }
    let replication_factor = topic
        .partitions
        .first()
        .map_or(1, |p| p.replicas.len() as u32);
    let added = new_partitions(image, partitions - current, replication_factor)?;
    Ok((
        vec![MetadataRecord::AddPartitions {
            name: name.into(),
            partitions: added,
        }],
        Reply::Done,
    ))
}

/// Most partitions a refused decommission names in its message.
const DECOMMISSION_EXAMPLES_MAX: usize = 5;

fn decommission_broker(image: &MetadataImage, id: u32, move_partitions: bool) -> Outcome {
    if image.decommissioned_brokers.contains(&id) {
        return Ok((vec![], Reply::Done));
    }
    let broker = image.brokers.get(&id).ok_or(MetaError::UnknownBroker(id))?;
    if !broker.fenced {
        return Err(MetaError::BrokerLive {
            id,
            address: format!("{}:{}", broker.host, broker.port),
        });
    }
    let held: Vec<(&String, usize, &PartitionRecord)> = image
        .topics
        .iter()
        .flat_map(|(name, t)| {
            t.partitions
                .iter()
                .enumerate()
                .map(move |(i, p)| (name, i, p))
        })
        .filter(|(_, _, p)| p.replicas.contains(&id))
        .collect();
    if !held.is_empty() && !move_partitions {
        let mut examples: Vec<String> = held
            .iter()
            .take(DECOMMISSION_EXAMPLES_MAX)
            .map(|(name, i, _)| format!("{name}/{i}"))
            .collect();
        if held.len() > DECOMMISSION_EXAMPLES_MAX {
            examples.push("…".into());
        }
        return Err(MetaError::BrokerHoldsPartitions {
            id,
            count: held.len(),
            examples: examples.join(", "),
        });
    }
    let mut records = vec![MetadataRecord::DecommissionBroker { id }];
    let mut replicas_held: BTreeMap<u32, usize> = image
        .load()
        .into_iter()
        .filter(|(b, _)| *b != id)
        .map(|(b, (_, replicas))| (b, replicas))
        .collect();
    for (name, index, p) in held {
        let (replacement, _) = replicas_held
            .iter()
            .filter(|(b, _)| !p.replicas.contains(b))
            .min_by_key(|(b, n)| (**n, **b))
            .map(|(b, n)| (*b, *n))
            .ok_or(MetaError::NotEnoughBrokers {
                want: p.replicas.len() as u32,
                live: replicas_held.len(),
            })?;
        *replicas_held.entry(replacement).or_default() += 1;
        let replicas = p
            .replicas
            .iter()
            .map(|r| if *r == id { replacement } else { *r })
            .collect();
        let (leader, isr) = leader_after_removing(image, p, id, replacement);
        records.push(MetadataRecord::MovePartition {
            name: name.clone(),
            partition: index as u32,
            replicas,
            leader,
            isr,
        });
    }
    Ok((records, Reply::Done))
}

/// Leader and ISR of a partition once broker `id` leaves its replicas for `replacement`. The
/// other in-sync replicas keep the data (the leader stays, or a live one of them leads); where
/// `id` held the only in-sync copy, the replacement leads with an empty log.
fn leader_after_removing(
    image: &MetadataImage,
    p: &PartitionRecord,
    id: u32,
    replacement: u32,
) -> (Option<u32>, Vec<u32>) {
    let isr: Vec<u32> = p.isr.iter().copied().filter(|b| *b != id).collect();
    if isr.is_empty() {
        return (Some(replacement), vec![replacement]);
    }
    let live = |b: &u32| image.brokers.get(b).is_some_and(|r| !r.fenced);
    let leader = match p.leader {
        Some(l) if l != id => Some(l),
        _ => isr.iter().copied().find(live),
    };
    (leader, isr)
}
