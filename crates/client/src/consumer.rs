//! The consumer: assign partitions, seek, and poll records with long-polling fetches sent to
//! each partition's leader. Records of a partition come back in offset order; every batch's
//! CRC is checked before its records are returned.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::batch::{BatchIter, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{check, ClientError};
use crate::group::{GroupEvent, Membership};

/// Where a partition without a position (and, in a group, without a committed offset) starts:
/// the group's `auto_offset_reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
}

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub client: ClientConfig,
    pub start_from: StartFrom,
    /// Longest a fetch waits on the broker for data (long polling).
    pub max_wait: Duration,
    pub min_bytes: u32,
    /// Bytes per fetch response, across partitions.
    pub max_bytes: u32,
    pub partition_bytes_max: u32,
    /// In a group: the coordinator drops a member it has not heard from for this long.
    pub session_timeout: Duration,
    /// In a group: commit the positions this often from `poll` (at-least-once), and before
    /// partitions are revoked. `None`: only explicit `commit` calls.
    pub auto_commit_interval: Option<Duration>,
    /// In a group: "sticky" (default), "range" or "roundrobin".
    pub strategy: String,
}

impl ConsumerConfig {
    pub fn new(bootstrap: &str) -> ConsumerConfig {
        ConsumerConfig {
            client: ClientConfig::new(bootstrap),
            start_from: StartFrom::Latest,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 16 << 20,
            partition_bytes_max: 1 << 20,
            session_timeout: Duration::from_secs(10),
            auto_commit_interval: Some(Duration::from_secs(5)),
            strategy: "sticky".into(),
        }
    }
}

/// A record as consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

type PartitionKey = (String, u32);

/// A consumer of explicitly assigned partitions.
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use std::time::Duration;
/// use tinymq_client::{Consumer, ConsumerConfig, StartFrom};
/// let mut config = ConsumerConfig::new("127.0.0.1:21581");
/// config.start_from = StartFrom::Earliest;
/// let mut consumer = Consumer::new(config)?;
/// consumer.assign("orders", None).await?; // every partition
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     println!("{}/{} {:?}", record.partition, record.offset, record.value);
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    /// Next offset to read per assigned partition; `None` until resolved by `start_from`.
    positions: BTreeMap<PartitionKey, Option<i64>>,
    membership: Option<Membership>,
    paused: BTreeSet<PartitionKey>,
    events: Vec<GroupEvent>,
    last_auto_commit: Instant,
}

impl Consumer {
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        Ok(Consumer {
            cluster: Cluster::new(config.client.clone())?,
            config,
            positions: BTreeMap::new(),
            membership: None,
            paused: BTreeSet::new(),
            events: Vec::new(),
            last_auto_commit: Instant::now(),
        })
    }

    /// Joins `group` to consume `topics`: the group's coordinator decides which partitions
    /// this consumer gets, and `poll` keeps the membership alive (heartbeats) and follows
    /// changes. Positions start at the group's committed offsets, else at `start_from`.
    pub async fn subscribe(&mut self, group: &str, topics: &[&str]) -> Result<(), ClientError> {
        for topic in topics {
            self.cluster.refresh(topic).await?;
        }
        self.membership = Some(Membership::new(
            group,
            topics.iter().map(|t| t.to_string()).collect(),
        ));
        Ok(())
    }

    /// Assignment changes since the last call.
    pub fn take_events(&mut self) -> Vec<GroupEvent> {
        std::mem::take(&mut self.events)
    }

    /// The partitions this consumer currently reads.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.positions.keys().cloned().collect()
    }

    /// Stops fetching a partition (its position and ownership are kept) until `resume`.
    pub fn pause(&mut self, topic: &str, partition: u32) {
        self.paused.insert((topic.to_string(), partition));
    }

    pub fn resume(&mut self, topic: &str, partition: u32) {
        self.paused.remove(&(topic.to_string(), partition));
    }

    fn owned(&self) -> BTreeSet<PartitionKey> {
        self.positions.keys().cloned().collect()
    }

    fn position_offsets(&self, keys: &BTreeSet<PartitionKey>) -> Vec<m::CommittedOffset> {
        keys.iter()
            .filter_map(|k| {
                let offset = self.positions.get(k).copied().flatten()?;
                Some(m::CommittedOffset {
                    topic: k.0.clone(),
                    partition: k.1,
                    offset,
                    metadata: String::new(),
                    error: None,
                })
            })
            .collect()
    }

    /// Commits the current position of every owned partition (the next offset to consume), so
    /// the group resumes there. Needs a group.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let offsets = self.position_offsets(&self.owned());
        let Some(membership) = self.membership.as_mut() else {
            return Err(ClientError::Config(
                "commit needs a group: use subscribe".into(),
            ));
        };
        membership.commit(&self.cluster, offsets).await
    }

    /// At-most-once: fetches records and commits past them *before* returning them, so a crash
    /// while processing skips them rather than delivering them twice.
    pub async fn poll_at_most_once(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ConsumerRecord>, ClientError> {
        let records = self.poll(timeout).await?;
        if !records.is_empty() {
            self.commit().await?;
        }
        Ok(records)
    }

    /// Commits (with auto-commit on) and leaves the group, so its partitions move at once.
    pub async fn close(mut self) -> Result<(), ClientError> {
        if self.membership.is_some() {
            if self.config.auto_commit_interval.is_some() {
                self.commit().await?;
            }
            if let Some(mut membership) = self.membership.take() {
                membership.leave(&self.cluster).await?;
            }
        }
        Ok(())
    }

    /// Joins, heartbeats when due, follows the assignment, and auto-commits when due.
    async fn group_tick(&mut self) -> Result<(), ClientError> {
        let Some(mut membership) = self.membership.take() else {
            return Ok(());
        };
        let result = self.group_tick_with(&mut membership).await;
        self.membership = Some(membership);
        result
    }

    async fn group_tick_with(&mut self, membership: &mut Membership) -> Result<(), ClientError> {
        if !membership.joined() {
            let granted = membership
                .join(
                    &self.cluster,
                    self.config.session_timeout,
                    &self.config.strategy,
                )
                .await?;
            self.apply_assignment(membership, granted).await?;
        } else if membership.heartbeat_due() {
            match membership.heartbeat(&self.cluster, &self.owned()).await {
                Ok(granted) => self.apply_assignment(membership, granted).await?,
                Err(e) if matches!(e.code(), Some(ErrorCode::UNKNOWN_MEMBER_ID)) => {
                    // Dropped from the group (session expired): everything is gone; join again.
                    let lost: Vec<_> = std::mem::take(&mut self.positions).into_keys().collect();
                    if !lost.is_empty() {
                        self.events.push(GroupEvent::Revoked(lost));
                    }
                    membership.reset();
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(interval) = self.config.auto_commit_interval {
            if self.last_auto_commit.elapsed() >= interval {
                self.last_auto_commit = Instant::now();
                let offsets = self.position_offsets(&self.owned());
                if let Err(e) = membership.commit(&self.cluster, offsets).await {
                    tracing::warn!(group = %membership.group, error = %e, "auto-commit failed");
                }
            }
        }
        Ok(())
    }

    /// Releases revoked partitions (committing them first with auto-commit on) and takes new
    /// ones at their committed offsets.
    async fn apply_assignment(
        &mut self,
        membership: &mut Membership,
        assignment: BTreeSet<PartitionKey>,
    ) -> Result<(), ClientError> {
        let owned = self.owned();
        let revoked: BTreeSet<_> = owned.difference(&assignment).cloned().collect();
        if !revoked.is_empty() {
            if self.config.auto_commit_interval.is_some() {
                let offsets = self.position_offsets(&revoked);
                if let Err(e) = membership.commit(&self.cluster, offsets).await {
                    tracing::warn!(group = %membership.group, error = %e, "commit on revoke failed");
                }
            }
            for key in &revoked {
                self.positions.remove(key);
            }
            self.events
                .push(GroupEvent::Revoked(revoked.into_iter().collect()));
        }
        let added: BTreeSet<_> = assignment.difference(&owned).cloned().collect();
        if !added.is_empty() {
            for (key, offset) in membership.committed(&self.cluster, &added).await? {
                self.positions.insert(key, (offset >= 0).then_some(offset));
            }
            for key in &added {
                self.positions.entry(key.clone()).or_insert(None);
                self.cluster.route(&key.0).await?;
            }
            self.events
                .push(GroupEvent::Assigned(added.into_iter().collect()));
        }
        Ok(())
    }

    /// Adds partitions of `topic` to the assignment (`None`: every partition).
    pub async fn assign(
        &mut self,
        topic: &str,
        partitions: Option<Vec<u32>>,
    ) -> Result<(), ClientError> {
        let route = self.cluster.refresh(topic).await?;
        let all: Vec<u32> = (0..route.partition_count()).collect();
        for p in partitions.unwrap_or(all) {
            if p >= route.partition_count() {
                return Err(ClientError::Server {
                    code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message: format!("{topic} has no partition {p}"),
                });
            }
            self.positions.entry((topic.to_string(), p)).or_insert(None);
        }
        Ok(())
    }

    pub fn seek(&mut self, topic: &str, partition: u32, offset: i64) {
        self.positions
            .insert((topic.to_string(), partition), Some(offset));
    }

    /// The next offset this consumer will read from a partition, once known.
    pub fn position(&self, topic: &str, partition: u32) -> Option<i64> {
        self.positions
            .get(&(topic.to_string(), partition))
            .copied()
            .flatten()
    }

    /// A partition's offset: `-1` latest, `-2` earliest, or the first at or after a timestamp.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        self.cluster.list_offset(topic, partition, timestamp).await
    }

    /// Fixes the start position of every assigned partition that has none yet (by
    /// `start_from`), without fetching. `poll` does this itself; call it to pin "latest" down
    /// before producers start.
    pub async fn resolve_positions(&mut self) -> Result<(), ClientError> {
        let unresolved: Vec<PartitionKey> = self
            .positions
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let timestamp = match self.config.start_from {
            StartFrom::Earliest => -2,
            StartFrom::Latest => -1,
        };
        for key in unresolved {
            let offset = self.list_offset(&key.0, key.1, timestamp).await?;
            self.positions.insert(key, Some(offset));
        }
        Ok(())
    }

    /// Fetches whatever is available, waiting up to `timeout` for something to arrive.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        self.group_tick().await?;
        self.resolve_positions().await?;
        // In a group, wake up in time for the next heartbeat.
        let timeout = match &self.membership {
            Some(m) => timeout.min(m.until_heartbeat().max(Duration::from_millis(1))),
            None => timeout,
        };
        let mut by_leader: HashMap<String, Vec<m::FetchPartition>> = HashMap::new();
        for ((topic, partition), position) in &self.positions {
            if self.paused.contains(&(topic.clone(), *partition)) {
                continue;
            }
            let route = self.cluster.route(topic).await?;
            let leader = match route.leader(*partition) {
                Ok(leader) => leader.to_string(),
                Err(e) => {
                    // Offline for now: fetch the others and look again at the next poll.
                    tracing::debug!(%topic, partition, error = %e, "skipping a partition without a leader");
                    self.cluster.invalidate(topic);
                    continue;
                }
            };
            by_leader
                .entry(leader)
                .or_default()
                .push(m::FetchPartition {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: position.expect("resolved above"),
                    partition_bytes_max: self.config.partition_bytes_max,
                });
        }
        let wait = timeout.min(self.config.max_wait);
        if by_leader.is_empty() {
            // Nothing to fetch (no assignment yet, or all paused): wait instead of spinning.
            tokio::time::sleep(wait).await;
            return Ok(Vec::new());
        }
        let fetches = by_leader.into_iter().map(|(leader, partitions)| {
            let cluster = self.cluster.clone();
            let request = m::FetchRequest {
                max_wait_ms: wait.as_millis() as u32,
                min_bytes: self.config.min_bytes,
                max_bytes: self.config.max_bytes,
                partitions,
            };
            let timeout = wait + self.config.client.request_timeout;
            tokio::spawn(async move {
                cluster
                    .connection(&leader)
                    .await?
                    .request(&request, timeout)
                    .await
            })
        });
        let mut records = Vec::new();
        let mut first_error = None;
        for fetch in fetches.collect::<Vec<_>>() {
            let response = match fetch.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            };
            for p in response.partitions {
                if let Err(e) = self.take_records(p, &mut records) {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if records.is_empty() => Err(e),
            _ => Ok(records),
        }
    }

    /// Decodes one partition's fetch result, appending records at or after its position.
    fn take_records(
        &mut self,
        p: m::FetchPartitionResult,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<(), ClientError> {
        if let Err(e) = check(p.error.as_ref()) {
            if e.needs_metadata_refresh() {
                self.cluster.invalidate(&p.topic);
            }
            return Err(e);
        }
        let key = (p.topic.clone(), p.partition);
        let Some(Some(mut position)) = self.positions.get(&key).copied() else {
            return Ok(());
        };
        for batch in BatchIter::new(p.records) {
            let batch = batch?;
            if batch.is_control() {
                position = position.max(batch.next_offset());
                continue;
            }
            for record in batch.records(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)? {
                if record.offset < position {
                    continue;
                }
                position = record.offset + 1;
                out.push(ConsumerRecord {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset: record.offset,
                    timestamp_ms: record.timestamp_ms,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value))
                        .collect(),
                });
            }
        }
        self.positions.insert(key, Some(position));
        Ok(())
    }
}
