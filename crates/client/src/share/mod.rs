//! Share-group members (docs/queues.md, "Share groups"): `ShareConsumer` fetches records
//! acquired under a lock from every partition leader of its topics and acknowledges each one
//! (accept, release, reject).
//!
//! Files: `acks.rs` (queued acknowledgements, records handed out), `ack_requests.rs`
//! (ShareAcknowledge requests and their outcomes), `decode.rs` (an answer's
//! batches filtered to the acquired offsets), `fetch.rs` (routing by leader, the background
//! requests and their answers), `describe.rs` (`describe_share_group`, asking every broker).

mod ack_requests;
mod acks;
mod decode;
mod describe;
mod fetch;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::ErrorCode;

use crate::cluster::{ClientConfig, Cluster};
use crate::consumer::ConsumerRecord;
use crate::error::ClientError;
pub use acks::{AckKind, AckRange, PartitionKey, HANDED_OUT_GRACE};
use acks::{AckQueue, HandedOut};
pub use decode::ACQUIRED_RECORDS_PER_PARTITION_MAX;
pub use describe::{describe_share_group, ShareGroupDescription};
pub use tinymq_protocol::messages::{ShareInFlightRecord, SharePartitionState};

/// Longest filter expression, bytes (the filter language's).
pub use tinymq_filter::FILTER_TEXT_BYTES_MAX;
/// The protocol's share-fetch limits (`tinymq_protocol::names`): the longest lock a member may
/// ask for and the lock the broker gives when asked for none (`lock_ms`, ms), the most records
/// one fetch acquires per partition (`max_records`) and the longest member id (bytes).
pub use tinymq_protocol::names::{
    MEMBER_ID_BYTES_MAX, SHARE_FETCH_RECORDS_MAX as MAX_RECORDS_MAX,
    SHARE_LOCK_MS_DEFAULT as LOCK_MS_DEFAULT, SHARE_LOCK_MS_MAX as LOCK_MS_MAX,
};
/// Routes are fetched again this often, so that new partitions and moved leaders are
/// followed without an error first.
pub const ROUTE_REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// Acknowledgement failures kept for [`ShareConsumer::take_acknowledgement_failures`]; more
/// are counted and dropped.
pub const ACK_FAILURES_KEPT_MAX: usize = 1024;

/// Settings of a share-group member.
#[derive(Debug, Clone)]
pub struct ShareConsumerConfig {
    pub client: ClientConfig,
    /// The share group.
    pub group: String,
    /// This member's id: 1..=255 bytes of `[A-Za-z0-9._-]` (default: random).
    pub member_id: String,
    /// How long each acquired record stays locked to this member, ms (default 30,000, at
    /// most [`LOCK_MS_MAX`]).
    pub lock_ms: u32,
    /// Most records acquired per partition per fetch (default 500, at most
    /// [`MAX_RECORDS_MAX`]).
    pub max_records: u32,
    /// Receive only records matching this filter expression; the others are accepted by the
    /// broker without being delivered.
    pub filter: Option<String>,
    /// Longest a fetch waits on the broker for records (long polling).
    pub max_wait: Duration,
    /// Response size bound per fetch (all partitions of one leader).
    pub max_bytes: u32,
}

impl ShareConsumerConfig {
    pub fn new(bootstrap: &str, group: &str) -> ShareConsumerConfig {
        ShareConsumerConfig {
            client: ClientConfig::new(bootstrap),
            group: group.to_string(),
            member_id: random_member_id(),
            lock_ms: LOCK_MS_DEFAULT,
            max_records: 500,
            filter: None,
            max_wait: Duration::from_millis(500),
            max_bytes: 8 << 20,
        }
    }

    fn check(&self) -> Result<(), ClientError> {
        let problem = if self.group.is_empty() {
            "the share group id is empty".to_string()
        } else if let Err(e) = tinymq_protocol::names::validate_member_id(&self.member_id) {
            e.to_string()
        } else if self.lock_ms > LOCK_MS_MAX {
            format!("lock_ms {} is above {LOCK_MS_MAX}", self.lock_ms)
        } else if self.max_records > MAX_RECORDS_MAX {
            format!(
                "max_records {} is above {MAX_RECORDS_MAX}",
                self.max_records
            )
        } else if self
            .filter
            .as_ref()
            .is_some_and(|f| f.len() > FILTER_TEXT_BYTES_MAX)
        {
            format!("the filter is longer than {FILTER_TEXT_BYTES_MAX} bytes")
        } else {
            return Ok(());
        };
        Err(ClientError::Config(problem))
    }

    /// The lock this member's records get (0 stands for the broker's default).
    fn lock(&self) -> Duration {
        Duration::from_millis(u64::from(match self.lock_ms {
            0 => LOCK_MS_DEFAULT,
            ms => ms,
        }))
    }
}

/// A random member id, `member-<pid>-<64 random bits in hex>` (std's hasher keys are random).
fn random_member_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("member-{}-{:016x}", std::process::id(), hasher.finish())
}

/// A record handed to this member, locked to it until acknowledged or until its lock expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    pub record: ConsumerRecord,
    /// How many times the record has been delivered, this delivery included.
    pub delivery_count: u32,
}

/// An acknowledgement the broker did not apply, and why (e.g. `INVALID_RECORD_STATE`: the
/// lock expired and the record went back to the group; a lost connection: unknown, and the
/// record comes back when its lock expires if it was not applied).
#[derive(Debug, Clone)]
pub struct AckFailure {
    pub range: AckRange,
    pub error: ClientError,
}

/// A record fetched and not yet returned by `poll`, with when its lock ends (by this
/// member's clock, from when the fetch was sent: never later than the broker's).
#[derive(Debug)]
struct Buffered {
    record: ShareRecord,
    lock_until: Instant,
}

/// A partition whose leader could not be reached or has none: skipped until `retry_at`.
#[derive(Debug, Clone)]
struct Backoff {
    retry_at: Instant,
    backoff: Duration,
}

/// A member of a share group.
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use std::time::Duration;
/// use tinymq_client::share::{AckKind, ShareConsumer, ShareConsumerConfig};
/// let mut config = ShareConsumerConfig::new("127.0.0.1:21581", "workers");
/// config.lock_ms = 10_000;
/// let mut consumer = ShareConsumer::new(config)?;
/// consumer.subscribe(&["jobs"]).await?;
/// for job in consumer.poll(Duration::from_secs(1)).await? {
///     let ok = job.record.value.is_some(); // do the work
///     let kind = if ok { AckKind::Accept } else { AckKind::Release };
///     consumer.acknowledge(&job, kind)?; // sent with the next poll
/// }
/// for failure in consumer.close().await? {
///     eprintln!("not applied: {:?}: {}", failure.range, failure.error);
/// }
/// # Ok(()) }
/// ```
///
/// Delivery is at least once: a record whose lock expires before it is accepted (the member
/// died, stalled, or its acknowledgement was lost with a connection) is delivered again,
/// possibly to another member, with a higher `delivery_count`. Order is per record, not per
/// partition. `poll` may be cancelled without losing records: requests run in the background
/// and their answers wait for the next `poll` (records whose lock ran out meanwhile are
/// dropped, not handed out). Nothing is fetched ahead: a fetch is started only by a `poll`
/// that has no records to return, so records are locked to this member only once asked for.
pub struct ShareConsumer {
    config: ShareConsumerConfig,
    cluster: Arc<Cluster>,
    topics: Vec<String>,
    routes: HashMap<String, fetch::Leaders>,
    routes_fetched: Instant,
    /// Topics with a route refresh in flight.
    refreshing: HashSet<String>,
    /// Topics whose route must be fetched again (a leader moved, a partition has none).
    stale: HashSet<String>,
    backoff: HashMap<PartitionKey, Backoff>,
    /// Leaders with a share fetch in flight.
    fetching: HashSet<String>,
    acks: AckQueue,
    handed_out: HandedOut,
    buffered: VecDeque<Buffered>,
    failures: Vec<AckFailure>,
    failures_dropped: u64,
    in_flight: tokio::task::JoinSet<fetch::Answer>,
}

impl ShareConsumer {
    pub fn new(config: ShareConsumerConfig) -> Result<ShareConsumer, ClientError> {
        config.check()?;
        Ok(ShareConsumer {
            cluster: Cluster::new_for(config.client.clone(), tinymq_auth::AclOperation::Read)?,
            config,
            topics: Vec::new(),
            routes: HashMap::new(),
            routes_fetched: Instant::now(),
            refreshing: HashSet::new(),
            stale: HashSet::new(),
            backoff: HashMap::new(),
            fetching: HashSet::new(),
            acks: AckQueue::default(),
            handed_out: HandedOut::default(),
            buffered: VecDeque::new(),
            failures: Vec::new(),
            failures_dropped: 0,
            in_flight: tokio::task::JoinSet::new(),
        })
    }

    pub fn member_id(&self) -> &str {
        &self.config.member_id
    }

    /// Changes how many records later fetches acquire per partition (1..=[`MAX_RECORDS_MAX`]),
    /// e.g. to take no more than the application still wants: records acquired beyond that
    /// would only be released again.
    pub fn set_max_records(&mut self, max_records: u32) -> Result<(), ClientError> {
        if !(1..=MAX_RECORDS_MAX).contains(&max_records) {
            return Err(ClientError::Config(format!(
                "max_records {max_records}: 1..={MAX_RECORDS_MAX}"
            )));
        }
        self.config.max_records = max_records;
        Ok(())
    }

    /// Records handed out by `poll` and not yet acknowledged (nor forgotten after their lock
    /// expired).
    pub fn held(&self) -> usize {
        self.handed_out.len()
    }

    /// Adds `topics` (every partition, also those added later) to what this member fetches.
    /// Fails on a topic the cluster does not know.
    pub async fn subscribe(&mut self, topics: &[&str]) -> Result<(), ClientError> {
        for topic in topics {
            let route = self.cluster.refresh(topic).await?;
            self.routes.insert(topic.to_string(), route.leaders.clone());
            if !self.topics.iter().any(|t| t == topic) {
                self.topics.push(topic.to_string());
            }
        }
        self.routes_fetched = Instant::now();
        Ok(())
    }

    /// Returns the records acquired for this member, waiting up to `timeout` for some.
    /// Queued acknowledgements go with the fetches. Each record must be acknowledged (or its
    /// lock left to expire); a record not accepted is delivered again.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ShareRecord>, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Records already here are returned without fetching more: nothing is acquired
            // (and locked) ahead of the application asking for it. The queued acks go now.
            self.drop_stale_buffered();
            if !self.buffered.is_empty() {
                self.send_queued_acks();
                return Ok(self.hand_out());
            }
            let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.start_due(wait.min(self.config.max_wait));
            let answer = if self.in_flight.is_empty() {
                // Nothing to ask (every partition backing off): wait for the first retry.
                let until = self
                    .next_retry()
                    .map_or(deadline, |at| deadline.min(at.into()));
                tokio::time::sleep_until(until).await;
                None
            } else {
                match tokio::time::timeout_at(deadline, self.in_flight.join_next()).await {
                    Ok(Some(joined)) => Some(joined),
                    _ => None,
                }
            };
            if let Some(joined) = answer {
                self.apply_joined(joined)?;
                while let Some(joined) = self.in_flight.try_join_next() {
                    self.apply_joined(joined)?;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                self.drop_stale_buffered();
                return Ok(self.hand_out());
            }
        }
    }

    /// Queues an acknowledgement of a record `poll` returned; it is sent with the next poll
    /// (or by `flush_acknowledgements`). Refused with `INVALID_RECORD_STATE` for a record
    /// this member does not hold: never handed out, already acknowledged, or forgotten well
    /// after its lock expired.
    pub fn acknowledge(&mut self, record: &ShareRecord, kind: AckKind) -> Result<(), ClientError> {
        let key = (record.record.topic.clone(), record.record.partition);
        if !self.handed_out.take(&key, record.record.offset) {
            return Err(ClientError::Server {
                code: ErrorCode::INVALID_RECORD_STATE,
                message: format!(
                    "{}/{} offset {} is not held by this member (never handed out, already acknowledged, or its lock expired)",
                    key.0, key.1, record.record.offset
                ),
            });
        }
        self.acks.push(&key, record.record.offset, kind);
        Ok(())
    }

    /// Acknowledgements the broker refused or that were lost with a connection, since the
    /// last call (at most [`ACK_FAILURES_KEPT_MAX`]; the count of dropped ones follows).
    pub fn take_acknowledgement_failures(&mut self) -> (Vec<AckFailure>, u64) {
        let dropped = std::mem::take(&mut self.failures_dropped);
        (std::mem::take(&mut self.failures), dropped)
    }

    /// Waits for requests in flight (their acknowledgements included), then sends every
    /// queued acknowledgement and waits until the leaders answered (durably). Returns the
    /// acknowledgements not applied, including earlier ones not yet taken.
    pub async fn flush_acknowledgements(&mut self) -> Result<Vec<AckFailure>, ClientError> {
        let limit = self.config.max_wait + self.config.client.request_timeout;
        self.drain_in_flight(limit).await?;
        let acks = self.acks.take_all();
        let failures = self.acknowledge_now(acks).await;
        self.record_failures(failures);
        Ok(std::mem::take(&mut self.failures))
    }

    /// Sends the queued acknowledgements and releases every record handed out and not
    /// acknowledged (counted as a delivery: the application had it), and every record fetched
    /// and not yet handed out (released unseen: not counted), so that other members get them
    /// at once. Returns the acknowledgements not applied.
    pub async fn close(mut self) -> Result<Vec<AckFailure>, ClientError> {
        let limit = self.config.max_wait + fetch::SHARE_FETCH_CHECK_MARGIN;
        let drained = self.drain_in_flight(limit).await;
        self.in_flight.abort_all();
        for b in std::mem::take(&mut self.buffered) {
            let key = (b.record.record.topic.clone(), b.record.record.partition);
            self.acks
                .push(&key, b.record.record.offset, AckKind::ReleaseUnseen);
        }
        for (key, offset) in self.handed_out.take_all() {
            self.acks.push(&key, offset, AckKind::Release);
        }
        let acks = self.acks.take_all();
        let failures = self.acknowledge_now(acks).await;
        self.record_failures(failures);
        drained?;
        Ok(std::mem::take(&mut self.failures))
    }

    /// Hands out every buffered record, remembering each until acknowledged.
    fn hand_out(&mut self) -> Vec<ShareRecord> {
        let grace = HANDED_OUT_GRACE;
        self.buffered
            .drain(..)
            .map(|b| {
                let key = (b.record.record.topic.clone(), b.record.record.partition);
                self.handed_out
                    .insert(&key, b.record.record.offset, b.lock_until + grace);
                b.record
            })
            .collect()
    }

    /// Drops buffered records whose lock ran out (the broker gives them to others), and
    /// forgets handed-out records long expired.
    fn drop_stale_buffered(&mut self) {
        let now = Instant::now();
        let before = self.buffered.len();
        self.buffered.retain(|b| b.lock_until > now);
        if self.buffered.len() < before {
            tracing::warn!(
                dropped = before - self.buffered.len(),
                "records fetched but not polled before their lock expired were dropped"
            );
        }
        self.handed_out.forget_expired(now);
    }

    fn record_failures(&mut self, failures: Vec<AckFailure>) {
        for failure in failures {
            if self.failures.len() < ACK_FAILURES_KEPT_MAX {
                self.failures.push(failure);
            } else {
                self.failures_dropped += 1;
            }
        }
    }

    /// Applies answers in flight until none is left or `limit` has passed.
    async fn drain_in_flight(&mut self, limit: Duration) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut first_error = None;
        while let Ok(Some(joined)) =
            tokio::time::timeout_at(deadline, self.in_flight.join_next()).await
        {
            if let Err(e) = self.apply_joined(joined) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// When the first partition waiting out a backoff may be fetched again.
    fn next_retry(&self) -> Option<Instant> {
        self.backoff.values().map(|b| b.retry_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_against_the_protocol_limits() {
        let ok = ShareConsumerConfig::new("h:1", "g");
        assert!(ok.check().is_ok(), "{}", ok.member_id);
        assert!(ok.member_id.starts_with("member-"));
        let mut c = ok.clone();
        c.member_id = "a b".into();
        assert!(c.check().is_err());
        c.member_id = "x".repeat(MEMBER_ID_BYTES_MAX + 1);
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.lock_ms = LOCK_MS_MAX + 1;
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.max_records = MAX_RECORDS_MAX + 1;
        assert!(c.check().is_err());
        let mut c = ok.clone();
        c.group.clear();
        assert!(c.check().is_err());
        let mut c = ok;
        c.filter = Some("x".repeat(FILTER_TEXT_BYTES_MAX + 1));
        assert!(c.check().is_err());
    }

    #[test]
    fn max_records_can_be_lowered_within_the_protocol_limits() {
        let mut member = ShareConsumer::new(ShareConsumerConfig::new("127.0.0.1:1", "g")).unwrap();
        assert!(
            member.set_max_records(0).is_err(),
            "0 would mean the broker's 500"
        );
        assert!(member.set_max_records(MAX_RECORDS_MAX + 1).is_err());
        member.set_max_records(1).unwrap();
        assert_eq!(member.config.max_records, 1);
    }
}
