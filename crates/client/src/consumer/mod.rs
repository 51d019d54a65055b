//! The consumer: assign partitions (or join a group), seek, and poll records with long-polling
//! fetches sent to each partition's leader. Records of a partition come back in offset order;
//! every batch's CRC is checked before its records are returned. With a filter
//! (`ConsumerConfig::filter`) the broker returns only matching records, in batches with offset
//! gaps, and the position moves to the fetch's `next_offset`, past the records skipped.
//!
//! Transactions (KIP-98): control batches (transaction markers) are never returned, whatever
//! the isolation; under [`Isolation::ReadCommitted`] fetches stop at the last stable offset
//! and the records of aborted transactions are dropped, by Kafka's consumer rule
//! (`tinymq_protocol::batch::control::AbortedFilter`). The position moves past both.
//!
//! A partition whose leader cannot be reached does not stop the others: it is skipped, retried
//! with a growing backoff, and listed by [`Consumer::unavailable`] (with a WARN line when it
//! goes away and an INFO line when it is back).

mod fetch;
mod group_tick;
mod partitions;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::ErrorCode;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::ClientError;
use crate::group::{GroupEvent, Membership};
pub use partitions::UnavailablePartition;
use partitions::{PartitionKey, Partitions};

/// Where a partition without a position (and, in a group, without a committed offset) starts:
/// the group's `auto_offset_reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
    /// The first offset whose record timestamp is at or after this time (ms since the Unix
    /// epoch); the end of the partition when no record is that recent.
    Timestamp(i64),
}

impl StartFrom {
    /// The ListOffsets timestamp that finds this offset.
    fn timestamp(self) -> i64 {
        match self {
            StartFrom::Earliest => -2,
            StartFrom::Latest => -1,
            StartFrom::Timestamp(ms) => ms,
        }
    }

    /// The offset a partition starts at: a search by time that finds no record that recent
    /// (-1) starts at the end, where the next such record will be.
    pub(crate) async fn offset(
        self,
        cluster: &Cluster,
        topic: &str,
        partition: u32,
        isolation: Isolation,
    ) -> Result<i64, ClientError> {
        let level = isolation.level();
        let found = cluster
            .list_offset_isolated(topic, partition, self.timestamp(), level)
            .await?;
        match self {
            StartFrom::Timestamp(_) if found < 0 => {
                cluster
                    .list_offset_isolated(topic, partition, -1, level)
                    .await
            }
            _ => Ok(found),
        }
    }
}

/// Which records a consumer reads (Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Every record below the high watermark, open and aborted transactions' included.
    #[default]
    ReadUncommitted,
    /// Records below the last stable offset, without those of aborted transactions.
    ReadCommitted,
}

impl Isolation {
    /// The protocol's `isolation_level`.
    pub fn level(self) -> u32 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
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
    /// Most records one `poll` returns; the rest of a fetch waits for the next `poll`, and
    /// only returned records count as consumed (and are committed). Like Kafka's
    /// `max.poll.records`.
    pub max_poll_records: usize,
    /// Broker-side filter (docs/queues.md, "Filters"), e.g. `tag = 'red'`: fetches return only
    /// matching records, and positions (and group commits) move past the others. Checked by
    /// `Consumer::new`.
    pub filter: Option<String>,
    /// Read uncommitted (default) or read committed; "latest" is the last stable offset
    /// under read committed.
    pub isolation: Isolation,
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
            max_poll_records: 500,
            filter: None,
            isolation: Isolation::ReadUncommitted,
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

/// A consumer of explicitly assigned partitions, or a member of a group.
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
///
/// `poll` may be cancelled (e.g. in `tokio::select!`) without losing or skipping records:
/// fetches run in the background and their answers wait for the next `poll`, records count as
/// consumed only once `poll` returned them, and the group membership is kept across every
/// await. What a cancel cannot undo is a group request already sent: a join whose answer is
/// dropped leaves the coordinator counting a member nobody runs (its partitions wait one
/// session), and a dropped commit may still land after a later one (moving the committed
/// offset back, so records are delivered again). Where that matters, stop between polls, as
/// `tinymq consume` does.
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    parts: Partitions,
    membership: Option<Membership>,
    paused: BTreeSet<PartitionKey>,
    events: Vec<GroupEvent>,
    last_auto_commit: Instant,
    /// Fetches and offset lookups running in the background (see `fetch.rs`).
    in_flight: tokio::task::JoinSet<fetch::Answer>,
}

impl Consumer {
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        if config.max_poll_records == 0 {
            return Err(ClientError::Config(
                "max_poll_records must be at least 1".into(),
            ));
        }
        if let Some(filter) = &config.filter {
            // The broker would refuse it with the same message: say so before connecting.
            tinymq_filter::Filter::parse(filter)
                .map_err(|e| ClientError::Config(format!("invalid filter:\n{e}")))?;
        }
        Ok(Consumer {
            cluster: Cluster::new_for(config.client.clone(), tinymq_auth::AclOperation::Read)?,
            config,
            parts: Partitions::default(),
            membership: None,
            paused: BTreeSet::new(),
            events: Vec::new(),
            last_auto_commit: Instant::now(),
            in_flight: tokio::task::JoinSet::new(),
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
            self.config.session_timeout,
            self.config.client.request_timeout,
        ));
        Ok(())
    }

    /// Assignment changes since the last call.
    pub fn take_events(&mut self) -> Vec<GroupEvent> {
        std::mem::take(&mut self.events)
    }

    /// The partitions this consumer currently reads.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.parts.keys().into_iter().collect()
    }

    /// Assigned partitions that cannot be read right now (no leader, leader unreachable), and
    /// why; `poll` keeps retrying them.
    pub fn unavailable(&self) -> Vec<UnavailablePartition> {
        self.parts.unavailable()
    }

    /// Stops fetching and returning a partition (its position and ownership are kept) until
    /// `resume`.
    pub fn pause(&mut self, topic: &str, partition: u32) {
        self.paused.insert((topic.to_string(), partition));
    }

    pub fn resume(&mut self, topic: &str, partition: u32) {
        self.paused.remove(&(topic.to_string(), partition));
    }

    /// Commits the position of every owned partition: the next offset `poll` has not
    /// returned yet, so the group resumes right after what this consumer handed out. Needs a
    /// group. A retriable failure (the coordinator moving, say) is retried for up to the
    /// session timeout.
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let Some(membership) = self.membership.as_mut() else {
            return Err(ClientError::Config(
                "commit needs a group: use subscribe".into(),
            ));
        };
        let keys = self.parts.keys();
        let timeout = self.config.session_timeout;
        group_tick::commit_positions_retrying(
            membership,
            &self.cluster,
            &self.parts,
            &keys,
            timeout,
        )
        .await
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
        let Some(mut membership) = self.membership.take() else {
            return Ok(());
        };
        let committed = if self.config.auto_commit_interval.is_some() && membership.joined() {
            let keys = self.parts.keys();
            let timeout = self.config.session_timeout;
            group_tick::commit_positions_retrying(
                &mut membership,
                &self.cluster,
                &self.parts,
                &keys,
                timeout,
            )
            .await
        } else {
            Ok(())
        };
        // Leave even if the commit failed, so the partitions move at once.
        let left = membership.leave(&self.cluster).await;
        committed.and(left)
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
            self.parts.add((topic.to_string(), p), None);
        }
        Ok(())
    }

    /// Moves an assigned partition's position: the next `poll` returns records from `offset`
    /// on. A partition not assigned (in a group: not owned) is refused, since reading it
    /// would read another member's partition.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: i64) -> Result<(), ClientError> {
        if self.parts.seek(&(topic.to_string(), partition), offset) {
            Ok(())
        } else {
            Err(ClientError::Config(format!(
                "cannot seek {topic}/{partition}: not assigned to this consumer"
            )))
        }
    }

    /// The broker-side filter this consumer fetches with, if any.
    pub fn filter(&self) -> Option<&str> {
        self.config.filter.as_deref()
    }

    /// The next offset `poll` will return from a partition (what a commit stores), once known.
    pub fn position(&self, topic: &str, partition: u32) -> Option<i64> {
        self.parts.position(&(topic.to_string(), partition))
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
    /// before producers start. A partition whose leader cannot be reached stays unresolved
    /// (and is listed by `unavailable`); the others are resolved.
    pub async fn resolve_positions(&mut self) -> Result<(), ClientError> {
        let start_from = self.config.start_from;
        for key in self.parts.unresolved(Instant::now()) {
            let isolation = self.config.isolation;
            match start_from
                .offset(&self.cluster, &key.0, key.1, isolation)
                .await
            {
                Ok(offset) => {
                    self.parts.resolve(&key, offset);
                    self.now_available(&key);
                }
                Err(e) if e.is_retriable() => self.now_unavailable(&key, &e),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn now_unavailable(&mut self, key: &PartitionKey, error: &ClientError) {
        if error.needs_metadata_refresh() {
            self.cluster.invalidate(&key.0);
        }
        if self.parts.mark_unavailable(key, error, Instant::now()) {
            tracing::warn!(topic = %key.0, partition = key.1, %error,
                "partition unavailable; reading the others and retrying it");
        }
    }

    fn now_available(&mut self, key: &PartitionKey) {
        if self.parts.mark_available(key) {
            tracing::info!(topic = %key.0, partition = key.1, "partition available again");
        }
    }

    /// Returns up to `max_poll_records` records, waiting up to `timeout` for some to arrive.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        self.poll_up_to(timeout, self.config.max_poll_records).await
    }

    /// Like `poll`, returning at most `max_records` (at least 1). Records fetched beyond that
    /// stay for the next poll and are not yet consumed: a commit stores the position after
    /// the last record returned.
    pub async fn poll_up_to(
        &mut self,
        timeout: Duration,
        max_records: usize,
    ) -> Result<Vec<ConsumerRecord>, ClientError> {
        let max_records = max_records.max(1);
        self.group_tick().await?;
        if !self.parts.has_buffered(&self.paused) {
            // In a group, wake up in time for the next heartbeat.
            let timeout = match &self.membership {
                Some(m) => timeout.min(m.until_heartbeat().max(Duration::from_millis(1))),
                None => timeout,
            };
            self.fetch(timeout.min(self.config.max_wait)).await?;
        }
        Ok(self.parts.drain(max_records, &self.paused))
    }
}
