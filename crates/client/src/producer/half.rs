//! Half messages (docs/transactions.md, "Half messages"): transactional messages with
//! check-back, RocketMQ's model of the transactional outbox.
//!
//! ```text
//! let half = producer.send_half("orders-app", "orders", records, check_after).await?;
//! ... run the local transaction (a database commit) ...
//! half.commit().await?        // the records appear in their partition, as one batch
//!   or half.rollback().await? // they never appear
//! ```
//!
//! A process that dies (or stays silent) between the two leaves the half unresolved: once
//! its check time comes, the group's coordinator offers it to a live member of the producer
//! group, a [`HalfChecker`] running [`Producer::check_halves`]'s listener, which looks at its
//! local transaction and answers commit, rollback or unknown (asked again later). Unanswered
//! halves are rolled back after the broker's `half_checks_max` checks.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::batch::{BatchBuilder, ProducerStamp, RecordBatch};
use tinymq_protocol::messages as m;

use super::{partition_for_key, queue, Producer, ProducerRecord};
use crate::coordinator::CoordinatorLink;
use crate::error::ClientError;

/// FindCoordinator's key type for a producer group's half messages.
const HALF_KEY_TYPE: u32 = 2;
/// How long one half operation retries retriable refusals (a coordinator moving or loading).
const HALF_OPERATION_DEADLINE: Duration = Duration::from_secs(60);
/// How long one check poll waits at the coordinator.
const POLL_WAIT: Duration = Duration::from_secs(5);
/// Pause after a poll that failed.
const POLL_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Producer groups whose coordinator connection one producer keeps (`half_groups_max`).
const HALF_GROUPS_MAX: usize = 64;

/// The coordinator links of the producer groups a producer used.
pub(crate) type HalfLinks = parking_lot::Mutex<HashMap<String, Arc<CoordinatorLink>>>;

/// A stored half message: nobody sees its records until it is committed.
#[derive(Clone)]
pub struct HalfMessage {
    producer: Producer,
    pub group: String,
    /// Its id within the group (an offset of the group's `__half_messages` partition).
    pub id: i64,
    pub topic: String,
    /// The partition its records go to on commit.
    pub partition: u32,
}

impl std::fmt::Debug for HalfMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HalfMessage")
            .field("group", &self.group)
            .field("id", &self.id)
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl HalfMessage {
    /// Appends the records to their partition (as one batch); returns the first one's
    /// offset (-1 when the commit was made before the coordinator's last restart). A retry
    /// of a commit that succeeded succeeds again; after a rollback it fails with
    /// `HALF_MESSAGE_RESOLVED`.
    pub async fn commit(&self) -> Result<i64, ClientError> {
        self.producer
            .end_half(&self.group, &self.topic, self.id, true)
            .await
    }

    /// Drops the half: its records never appear.
    pub async fn rollback(&self) -> Result<(), ClientError> {
        self.producer
            .end_half(&self.group, &self.topic, self.id, false)
            .await
            .map(|_| ())
    }
}

/// What a member of the producer group answers a check with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfDecision {
    Commit,
    Rollback,
    /// Not known yet: the half is offered again after the broker's check interval.
    Unknown,
}

/// A half offered for a check.
#[derive(Debug, Clone)]
pub struct HalfCheck {
    pub group: String,
    pub id: i64,
    pub topic: String,
    pub partition: u32,
    /// The records as sent (each with its partition and timestamp).
    pub records: Vec<ProducerRecord>,
    /// 1 for the first check of this half, then 2, ...
    pub check_number: u32,
    /// When the half was stored (ms since the Unix epoch).
    pub stored_ms: i64,
}

/// A running check listener; it stops when dropped or with [`HalfChecker::stop`].
#[derive(Debug)]
pub struct HalfChecker {
    task: tokio::task::JoinHandle<()>,
}

impl HalfChecker {
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for HalfChecker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A new HalfSend request id: unique in the process (a counter) and across processes (the
/// process id, the clock, and the standard library's random hash keys).
fn request_id() -> String {
    use std::hash::BuildHasher;
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SENT.fetch_add(1, Ordering::Relaxed);
    let salt = std::collections::hash_map::RandomState::new().hash_one((
        std::process::id(),
        queue::now_ms(),
        n,
    ));
    format!("{salt:016x}-{n:x}")
}

fn decode(group: &str, check: m::HalfCheck) -> Result<HalfCheck, ClientError> {
    let batch = RecordBatch::parse(check.records)
        .map_err(|e| ClientError::Protocol(format!("a half check's batch: {e}")))?;
    let records = batch
        .records(tinymq_protocol::batch::BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)
        .map_err(|e| ClientError::Protocol(format!("a half check's records: {e}")))?
        .into_iter()
        .map(|r| ProducerRecord {
            key: r.key,
            value: r.value,
            headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
            partition: Some(check.partition),
            timestamp_ms: Some(r.timestamp_ms),
        })
        .collect();
    Ok(HalfCheck {
        group: group.to_string(),
        id: check.half_id,
        topic: check.topic,
        partition: check.partition,
        records,
        check_number: check.check_number,
        stored_ms: check.stored_ms,
    })
}

impl Producer {
    fn half_link(&self, group: &str) -> Arc<CoordinatorLink> {
        let mut links = self.inner.halves.lock();
        if let Some(link) = links.get(group) {
            return link.clone();
        }
        if links.len() >= HALF_GROUPS_MAX {
            links.clear();
        }
        let link = Arc::new(CoordinatorLink::new(group.to_string(), HALF_KEY_TYPE));
        links.insert(group.to_string(), link.clone());
        link
    }

    async fn half_call<R: tinymq_protocol::Request>(
        &self,
        group: &str,
        request: &R,
        timeout: Duration,
        top: impl Fn(&R::Response) -> Option<&m::Error>,
    ) -> Result<R::Response, ClientError> {
        let deadline = Instant::now() + HALF_OPERATION_DEADLINE;
        self.half_link(group)
            .call(
                &self.inner.cluster,
                request,
                (timeout, deadline),
                top,
                |_| {},
            )
            .await
    }

    /// Stores `records` (at least one, all for one partition: the first record's, else its
    /// key's hash, else the next in turn) as a half message of producer group `group`, first
    /// offered for a check `check_after` after it is stored (at most an hour; zero: 6 s).
    /// Returns once the half is durable; commit or roll it back with what is returned.
    ///
    /// Retries (after a timeout, a coordinator moving) carry the same request id, so the
    /// coordinator answers them with the half the first attempt stored.
    pub async fn send_half(
        &self,
        group: &str,
        topic: &str,
        records: Vec<ProducerRecord>,
        check_after: Duration,
    ) -> Result<HalfMessage, ClientError> {
        let Some(first) = records.first() else {
            return Err(ClientError::Config(
                "a half needs at least one record".into(),
            ));
        };
        let state = self.topic(topic).await?;
        let count = state.partition_count()?;
        let partition = match (first.partition, &first.key) {
            (Some(p), _) => self.check_partition(&state, p, count)?,
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => state.next_batch_partition.fetch_add(1, Ordering::Relaxed) % count,
        };
        if records
            .iter()
            .any(|r| r.partition.is_some_and(|p| p != partition))
        {
            return Err(ClientError::Config(
                "the records of one half go to one partition".into(),
            ));
        }
        let mut builder = BatchBuilder::new(self.inner.config.compression, ProducerStamp::NONE);
        let now = queue::now_ms();
        for record in &records {
            record.with_input(record.timestamp_ms.unwrap_or(now), |input| {
                builder.push(input)
            });
        }
        let batch = builder
            .build()
            .map_err(|e| ClientError::Protocol(format!("cannot encode the records: {e}")))?;
        let timeout = self.inner.cluster.config.request_timeout;
        let request = m::HalfSendRequest {
            group: group.to_string(),
            topic: topic.to_string(),
            partition: partition as i32,
            records: batch,
            check_after_ms: u32::try_from(check_after.as_millis()).unwrap_or(u32::MAX),
            timeout_ms: timeout.as_millis() as u32,
            // The same for every retry of this send: the coordinator answers a retry with the
            // half the first attempt stored.
            request_id: request_id(),
        };
        let response = self
            .half_call(group, &request, timeout, |r| r.error.as_ref())
            .await?;
        Ok(HalfMessage {
            producer: self.clone(),
            group: group.to_string(),
            id: response.half_id,
            topic: topic.to_string(),
            partition: response.partition,
        })
    }

    /// Commits (`commit`) or rolls back half `id` of `group`, whose records go to `topic`:
    /// what [`HalfMessage`] does, for a half known only by its id (a checked one, the CLI).
    /// Returns the commit's first offset (-1 for a rollback).
    pub async fn end_half(
        &self,
        group: &str,
        topic: &str,
        id: i64,
        commit: bool,
    ) -> Result<i64, ClientError> {
        self.end_half_as(group, topic, (id, commit), false).await
    }

    async fn end_half_as(
        &self,
        group: &str,
        topic: &str,
        (id, commit): (i64, bool),
        checked: bool,
    ) -> Result<i64, ClientError> {
        let request = m::HalfEndRequest {
            group: group.to_string(),
            half_id: id,
            topic: topic.to_string(),
            commit,
            checked,
        };
        // A commit waits for the append on the coordinator (up to 30 s there).
        let timeout = self.inner.cluster.config.request_timeout + Duration::from_secs(30);
        let response = self
            .half_call(group, &request, timeout, |r| r.error.as_ref())
            .await?;
        Ok(response.base_offset)
    }

    /// Makes this process a live member of producer group `group`: a background task asks
    /// the group's coordinator for halves whose check is due and resolves each as `listener`
    /// answers. Runs until the returned [`HalfChecker`] is dropped or stopped.
    pub fn check_halves<F, Fut>(&self, group: &str, listener: F) -> HalfChecker
    where
        F: Fn(HalfCheck) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HalfDecision> + Send,
    {
        let producer = self.clone();
        let group = group.to_string();
        let task = tokio::spawn(async move {
            loop {
                match producer.poll_checks(&group).await {
                    Ok(checks) => {
                        for check in checks {
                            producer.answer(&group, check, &listener).await;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(group = %group, error = %e, "half check poll failed; retrying");
                        tokio::time::sleep(POLL_RETRY_PAUSE).await;
                    }
                }
            }
        });
        HalfChecker { task }
    }

    async fn poll_checks(&self, group: &str) -> Result<Vec<m::HalfCheck>, ClientError> {
        let request = m::HalfCheckPollRequest {
            group: group.to_string(),
            max_wait_ms: POLL_WAIT.as_millis() as u32,
            max_checks: 0,
        };
        let timeout = self.inner.cluster.config.request_timeout + POLL_WAIT;
        let response = self
            .half_call(group, &request, timeout, |r| r.error.as_ref())
            .await?;
        Ok(response.checks)
    }

    async fn answer<F, Fut>(&self, group: &str, check: m::HalfCheck, listener: &F)
    where
        F: Fn(HalfCheck) -> Fut,
        Fut: Future<Output = HalfDecision>,
    {
        let (id, topic) = (check.half_id, check.topic.clone());
        let check = match decode(group, check) {
            Ok(check) => check,
            Err(e) => {
                tracing::warn!(group = %group, half_id = id, error = %e, "an unreadable half check; left to the next one");
                return;
            }
        };
        let commit = match listener(check).await {
            HalfDecision::Commit => true,
            HalfDecision::Rollback => false,
            HalfDecision::Unknown => return,
        };
        if let Err(e) = self.end_half_as(group, &topic, (id, commit), true).await {
            tracing::warn!(group = %group, half_id = id, error = %e, "resolving a checked half failed; it is offered again");
        }
    }
}
