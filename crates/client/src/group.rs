//! A consumer's membership in a group: join, heartbeat (reporting what it owns), take the
//! assignment the coordinator hands out, and commit offsets under the current generation.
//! Driven from `Consumer::poll`, so a consumer that stops polling stops heartbeating and,
//! after its session timeout, loses its partitions to the others.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};

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
}

impl Membership {
    pub fn new(group: &str, topics: Vec<String>) -> Membership {
        Membership {
            group: group.into(),
            topics,
            member_id: String::new(),
            generation: 0,
            heartbeat_interval: Duration::from_secs(1),
            next_heartbeat: Instant::now(),
            coordinator: None,
        }
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
        let found = cluster
            .request(&m::FindCoordinatorRequest {
                group_id: self.group.clone(),
            })
            .await?;
        check(found.error.as_ref())?;
        let c = cluster
            .connection(&format!("{}:{}", found.host, found.port))
            .await?;
        self.coordinator = Some(c.clone());
        Ok(c)
    }

    async fn call<R: tinymq_protocol::Request>(
        &mut self,
        cluster: &Cluster,
        body: &R,
    ) -> Result<R::Response, ClientError> {
        let c = self.coordinator(cluster).await?;
        let result = c.request(body, cluster.config.request_timeout).await;
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
        self.heartbeat_interval =
            Duration::from_millis(u64::from(response.heartbeat_interval_ms.max(100)));
        self.next_heartbeat = Instant::now() + self.heartbeat_interval;
        Ok(to_set(&response.assignment))
    }

    pub async fn heartbeat(
        &mut self,
        cluster: &Cluster,
        owned: &BTreeSet<Tp>,
    ) -> Result<BTreeSet<Tp>, ClientError> {
        self.next_heartbeat = Instant::now() + self.heartbeat_interval;
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
        let response = self
            .call(
                cluster,
                &m::OffsetFetchRequest {
                    group_id: self.group.clone(),
                    partitions: to_wire(partitions),
                },
            )
            .await?;
        check(response.error.as_ref())?;
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
    }
}
