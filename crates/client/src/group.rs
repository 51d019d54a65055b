//! A consumer's membership in a group: join, heartbeat (reporting what it owns), take the
//! assignment the coordinator hands out, and commit offsets under the current generation.
//! Driven from `Consumer::poll`, so a consumer that stops polling stops heartbeating and,
//! after its session timeout, loses its partitions to the others.
//!
//! The coordinator says how soon to heartbeat again: at the normal interval when nothing is
//! moving, and within ~100 ms while the member waits for partitions or must release some, so
//! a rebalance settles in about one normal interval. A member that cannot reach its
//! coordinator keeps reading what it owns until its own session would have expired, then
//! drops everything (another member may own it by now) and joins again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};
use crate::retry::{RETRY_BACKOFF, RETRY_BACKOFF_MAX};

/// How long fetching committed offsets waits for open transactions holding some of them to
/// end (KIP-447's `require_stable`), and the pause between asks.
const UNSTABLE_OFFSETS_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);
const UNSTABLE_OFFSETS_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Shortest heartbeat interval taken from a coordinator, so that a bad answer cannot make a
/// member heartbeat in a busy loop.
const HEARTBEAT_INTERVAL_MIN: Duration = Duration::from_millis(50);

pub type Tp = (String, u32);

/// What happened to the consumer's assignment, for applications that react to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// These partitions are now consumed by this member.
    Assigned(Vec<Tp>),
    /// These partitions were taken away (after their positions were committed, with
    /// auto-commit on).
    Revoked(Vec<Tp>),
}

pub(crate) fn to_set(list: &[m::TopicPartitions]) -> BTreeSet<Tp> {
    list.iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

pub(crate) fn to_wire(set: &BTreeSet<Tp>) -> Vec<m::TopicPartitions> {
    let mut out: Vec<m::TopicPartitions> = Vec::new();
    for (topic, partition) in set {
        match out.last_mut() {
            Some(last) if last.topic == *topic => last.partitions.push(*partition),
            _ => out.push(m::TopicPartitions {
                topic: topic.clone(),
                partitions: vec![*partition],
            }),
        }
    }
    out
}

#[derive(Debug)]
pub(crate) struct Membership {
    pub group: String,
    pub topics: Vec<String>,
    pub member_id: String,
    pub generation: u32,
    heartbeat_interval: Duration,
    next_heartbeat: Instant,
    coordinator: Option<Arc<Connection>>,
    /// How long one group request may take.
    request_timeout: Duration,
    /// When the last join or heartbeat the coordinator accepted was sent (its clock for the
    /// session started no earlier).
    last_heard: Instant,
    /// Pause before the next attempt after a failed join or heartbeat; doubles per failure.
    retry_backoff: Duration,
    /// Whether the current run of failures was already logged.
    warned: bool,
}

impl Membership {
    /// `session`: the session timeout the member will ask for. A group request waits at most
    /// half of it (and at most the client's request timeout): a coordinator that does not
    /// answer must not hold `poll` for longer than the session the member is trying to keep.
    pub fn new(
        group: &str,
        topics: Vec<String>,
        session: Duration,
        request_timeout: Duration,
    ) -> Membership {
        Membership {
            request_timeout: request_timeout.min(session / 2),
            group: group.into(),
            topics,
            member_id: String::new(),
            generation: 0,
            heartbeat_interval: Duration::from_secs(1),
            next_heartbeat: Instant::now(),
            coordinator: None,
            last_heard: Instant::now(),
            retry_backoff: RETRY_BACKOFF,
            warned: false,
        }
    }

    /// Whether the coordinator has not heard from this member for a whole session: it has
    /// dropped the member by now, and its partitions may belong to another.
    pub fn session_lost(&self, session: Duration) -> bool {
        self.joined() && self.last_heard.elapsed() >= session
    }

    /// Sends the next heartbeat at the next poll (to report a release at once).
    pub fn heartbeat_now(&mut self) {
        self.next_heartbeat = Instant::now();
    }

    /// Schedules the next join or heartbeat after a retriable failure; returns true for the
    /// first failure of a run (worth a warning).
    pub fn retry_later(&mut self) -> bool {
        self.next_heartbeat = Instant::now() + self.retry_backoff;
        self.retry_backoff = (self.retry_backoff * 2).min(RETRY_BACKOFF_MAX);
        !std::mem::replace(&mut self.warned, true)
    }

    /// Records an answer from the coordinator to a request sent at `sent`; returns true if it
    /// ends a run of failures.
    fn heard(&mut self, sent: Instant, interval_ms: u32) -> bool {
        if interval_ms > 0 {
            self.heartbeat_interval =
                Duration::from_millis(u64::from(interval_ms)).max(HEARTBEAT_INTERVAL_MIN);
        }
        self.last_heard = sent;
        self.next_heartbeat = Instant::now() + self.heartbeat_interval;
        self.retry_backoff = RETRY_BACKOFF;
        std::mem::replace(&mut self.warned, false)
    }

    pub fn joined(&self) -> bool {
        !self.member_id.is_empty()
    }

    pub fn heartbeat_due(&self) -> bool {
        Instant::now() >= self.next_heartbeat
    }

    /// Time left until the next heartbeat is due.
    pub fn until_heartbeat(&self) -> Duration {
        self.next_heartbeat
            .saturating_duration_since(Instant::now())
    }

    async fn coordinator(&mut self, cluster: &Cluster) -> Result<Arc<Connection>, ClientError> {
        if let Some(c) = self.coordinator.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = coordinator_for(cluster, &self.group).await?;
        self.coordinator = Some(c.clone());
        Ok(c)
    }

    async fn call<R: tinymq_protocol::Request>(
        &mut self,
        cluster: &Cluster,
        body: &R,
    ) -> Result<R::Response, ClientError> {
        let c = self.coordinator(cluster).await?;
        let result = c.request(body, self.request_timeout).await;
        if matches!(&result, Err(e) if e.needs_metadata_refresh() || e.code() == Some(ErrorCode::NOT_COORDINATOR))
        {
            self.coordinator = None;
        }
        result
    }

    pub async fn join(
        &mut self,
        cluster: &Cluster,
        session: Duration,
        strategy: &str,
    ) -> Result<BTreeSet<Tp>, ClientError> {
        let sent = Instant::now();
        let response = self
            .call(
                cluster,
                &m::JoinGroupRequest {
                    group_id: self.group.clone(),
                    member_id: self.member_id.clone(),
                    topics: self.topics.clone(),
                    session_timeout_ms: session.as_millis() as u32,
                    strategy: strategy.into(),
                    client_id: cluster.config.client_id.clone(),
                },
            )
            .await?;
        check(response.error.as_ref())?;
        self.member_id = response.member_id;
        self.generation = response.generation;
        if self.heard(sent, response.heartbeat_interval_ms) {
            tracing::info!(group = %self.group, "coordinator reachable again");
        }
        Ok(to_set(&response.assignment))
    }

    pub async fn heartbeat(
        &mut self,
        cluster: &Cluster,
        owned: &BTreeSet<Tp>,
    ) -> Result<BTreeSet<Tp>, ClientError> {
        let sent = Instant::now();
        let response = self
            .call(
                cluster,
                &m::HeartbeatRequest {
                    group_id: self.group.clone(),
                    member_id: self.member_id.clone(),
                    generation: self.generation,
                    owned: to_wire(owned),
                },
            )
            .await?;
        check(response.error.as_ref())?;
        self.generation = response.generation;
        if self.heard(sent, response.heartbeat_interval_ms) {
            tracing::info!(group = %self.group, "coordinator reachable again");
        }
        Ok(to_set(&response.assignment))
    }

    pub async fn commit(
        &mut self,
        cluster: &Cluster,
        offsets: Vec<m::CommittedOffset>,
    ) -> Result<(), ClientError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let request = m::OffsetCommitRequest {
            group_id: self.group.clone(),
            member_id: self.member_id.clone(),
            generation: self.generation,
            offsets,
        };
        let response = self.call(cluster, &request).await?;
        check(response.error.as_ref())
    }

    pub async fn committed(
        &mut self,
        cluster: &Cluster,
        partitions: &BTreeSet<Tp>,
    ) -> Result<Vec<(Tp, i64)>, ClientError> {
        // KIP-447: offsets an open transaction may still commit are waited for, so that this
        // member does not start before what its partitions' previous owner is committing.
        let request = m::OffsetFetchRequest {
            group_id: self.group.clone(),
            partitions: to_wire(partitions),
            require_stable: true,
        };
        let deadline = std::time::Instant::now() + UNSTABLE_OFFSETS_WAIT_MAX;
        let response = loop {
            let response = self.call(cluster, &request).await?;
            check(response.error.as_ref())?;
            let unstable = response.offsets.iter().find_map(|o| {
                o.error
                    .as_ref()
                    .filter(|e| e.error_code() == ErrorCode::UNSTABLE_OFFSET_COMMIT)
            });
            match unstable {
                Some(e) if std::time::Instant::now() >= deadline => {
                    return check(Some(e)).map(|_| vec![])
                }
                Some(_) => tokio::time::sleep(UNSTABLE_OFFSETS_RETRY).await,
                None => break response,
            }
        };
        Ok(response
            .offsets
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect())
    }

    pub async fn leave(&mut self, cluster: &Cluster) -> Result<(), ClientError> {
        if !self.joined() {
            return Ok(());
        }
        let response = self
            .call(
                cluster,
                &m::LeaveGroupRequest {
                    group_id: self.group.clone(),
                    member_id: self.member_id.clone(),
                },
            )
            .await?;
        self.member_id.clear();
        check(response.error.as_ref())
    }

    /// Forgets the member id after the coordinator no longer knows it; the next poll joins anew.
    pub fn reset(&mut self) {
        self.member_id.clear();
        self.generation = 0;
        self.coordinator = None;
    }
}

/// A connection to the coordinator of `group` (FindCoordinator, key type 0).
pub(crate) async fn coordinator_for(
    cluster: &Cluster,
    group: &str,
) -> Result<Arc<Connection>, ClientError> {
    let found = cluster
        .request(&m::FindCoordinatorRequest {
            group_id: group.to_string(),
            key_type: 0,
        })
        .await
        .and_then(|found| check(found.error.as_ref()).map(|()| found))
        // Joining needs READ on the group, which implies the DESCRIBE of this lookup.
        .map_err(|e| crate::cluster::refused_as(e, tinymq_auth::AclOperation::Read))?;
    cluster
        .connection(&format!("{}:{}", found.host, found.port))
        .await
}
