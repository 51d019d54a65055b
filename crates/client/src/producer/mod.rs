//! The producer: `send` a record to a topic and get back a future of its partition and offset,
//! or `send_batch` many records and get back one future for all of them.
//!
//! Records go into a bounded queue per partition (a full queue makes `send` wait:
//! backpressure): `send` encodes each record straight into the partition's open batch (see
//! `queue.rs`), which is sealed at `batch_bytes` or when its `linger` is over. One worker task
//! per partition sends sealed batches to the partition's leader (up to
//! `batches_in_flight_max` at once), and retries failures on retriable errors until the
//! delivery timeout, keeping the partition's order. With idempotence (the default) every batch
//! carries the producer id, epoch and sequence, so a retried batch is never written twice.
//!
//! Size: the producer learns each topic's `message_bytes_max` (the largest batch its brokers
//! take) the first time it sends to it. A record too large for a batch of its own fails alone
//! with `MESSAGE_TOO_LARGE`, and a batch is sealed before the next record would take it past
//! the limit, so records never sink with a neighbour.
//!
//! Routes: a topic's partition count is read from the cache that the workers refresh each
//! time they send a batch (routes older than the cluster's metadata age are fetched again), so
//! `send` itself reads no clock and makes no request once a topic is known.

mod delayed;
mod half;
mod partitioner;
mod queue;
mod txn;
mod wire;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tinymq_protocol::batch::{Compression, RecordInput, BATCH_HEADER_BYTES};
use tinymq_protocol::messages as m;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::ClientError;
pub use delayed::{DelayedDelivery, DelayedMetadata};
pub use half::{HalfCheck, HalfChecker, HalfDecision, HalfMessage};
use partitioner::Sticky;
pub use partitioner::{murmur2, partition_for_key};
pub use queue::{BatchDelivery, DeliveryFuture};
use queue::{PartitionQueue, QueueLimits};
use worker::{PartitionWorker, ProducerIdentity};

/// Acknowledgement level asked of the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// No response; offsets are unknown (-1). Fastest; a lost request is not noticed.
    None,
    /// The leader appended the batch (and fsynced it under the `always` flush policy).
    Leader,
    /// Every in-sync replica has it.
    All,
}

impl Acks {
    pub fn wire(self) -> i32 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// Parses `0`, `1` or `all` (also `-1`).
    pub fn parse(s: &str) -> Option<Acks> {
        match s {
            "0" => Some(Acks::None),
            "1" => Some(Acks::Leader),
            "all" | "-1" => Some(Acks::All),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub client: ClientConfig,
    pub acks: Acks,
    /// How long a worker waits for more records before sending a batch that is not full.
    pub linger: Duration,
    /// Target batch size (uncompressed).
    pub batch_bytes: usize,
    pub compression: Compression,
    /// Producer id, epoch and sequences on every batch, so retries never duplicate.
    pub idempotence: bool,
    /// Give up on a record this long after `send` accepted it.
    pub delivery_timeout: Duration,
    /// First wait before a retry; doubles up to `retry_backoff_max`. Retries for want of a
    /// leader (`NOT_LEADER`, no leader, the connection refused or closed) stay at this for the
    /// first 2 s of a batch's failures, which covers a failover.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Records queued per partition before `send` waits.
    pub queue_records_max: usize,
    /// Batches of one partition sent and not yet acknowledged, at most (with idempotence;
    /// without it, 1, so that a resent batch cannot land after a later one).
    pub batches_in_flight_max: usize,
    /// Makes the producer transactional (`init_transactions`, `begin_transaction`, ...;
    /// implies idempotence). One live producer per id: a new one fences the old.
    pub transactional_id: Option<String>,
    /// A transaction open longer than this is aborted by its coordinator (and this producer
    /// fenced); at most the cluster's `transaction_timeout_ms_max` (15 min).
    pub transaction_timeout: Duration,
}

impl ProducerConfig {
    pub fn new(bootstrap: &str) -> ProducerConfig {
        ProducerConfig {
            client: ClientConfig::new(bootstrap),
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_bytes: 64 * 1024,
            compression: Compression::None,
            idempotence: true,
            delivery_timeout: Duration::from_secs(120),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            queue_records_max: 10_000,
            batches_in_flight_max: 5,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
        }
    }
}

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Send to this partition instead of choosing one.
    pub partition: Option<u32>,
    /// Milliseconds since the Unix epoch; if absent, the time its batch was opened (`send`) or
    /// of the `send_batch` call.
    pub timestamp_ms: Option<i64>,
}

impl ProducerRecord {
    pub fn value(value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    pub fn with_key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Calls `f` with the record as the batch codec takes it, at `timestamp_ms`.
    pub(crate) fn with_input<T>(
        &self,
        timestamp_ms: i64,
        f: impl FnOnce(&RecordInput<'_>) -> T,
    ) -> T {
        // Collecting no headers allocates nothing.
        let headers: Vec<(&str, Option<&[u8]>)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        f(&RecordInput {
            timestamp_ms,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &headers,
        })
    }

    pub(crate) fn size_estimate(&self) -> usize {
        let field = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        16 + field(&self.key)
            + field(&self.value)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + field(v) + 4)
                .sum::<usize>()
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: Arc<str>,
    pub partition: u32,
    /// -1 with `Acks::None`.
    pub offset: i64,
}

/// Where a batch given to [`Producer::send_batch`] landed: its records have the offsets
/// `base_offset .. base_offset + record_count`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchMetadata {
    pub topic: Arc<str>,
    pub partition: u32,
    /// -1 with `Acks::None`.
    pub base_offset: i64,
    pub record_count: u32,
}

/// An asynchronous producer. Clone it freely: clones share queues, workers and connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use tinymq_client::{Producer, ProducerConfig, ProducerRecord};
/// let producer = Producer::new(ProducerConfig::new("127.0.0.1:21581"))?;
/// let delivery = producer.send("orders", ProducerRecord::value("hello").with_key("customer-7")).await?;
/// let meta = delivery.await?;
/// println!("stored at {}/{}", meta.partition, meta.offset);
/// let batch = vec![ProducerRecord::value("a"), ProducerRecord::value("b")];
/// let meta = producer.send_batch("orders", batch).await?.await?;
/// println!("stored at {}/{}..+{}", meta.partition, meta.base_offset, meta.record_count);
/// producer.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    identity: Arc<ProducerIdentity>,
    /// With a transactional id.
    transactions: Option<Arc<txn::Transactions>>,
    topics: Mutex<Topics>,
    /// The sequence of the next delayed send (`send_at`), across partitions.
    delayed_sequence: AtomicI32,
    /// Coordinators of the producer groups whose half messages this producer sent.
    halves: half::HalfLinks,
}

#[derive(Default)]
struct Topics {
    map: HashMap<String, Arc<TopicState>>,
    /// The topic sent to last.
    last: Option<Arc<TopicState>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: workers send what is queued, then stop.
        for topic in self.topics.get_mut().map.values() {
            for queue in topic.parts.lock().queues.iter().flatten() {
                queue.close();
            }
        }
    }
}

/// What the producer knows of one topic.
struct TopicState {
    name: Arc<str>,
    /// The topic's `message_bytes_max` (None: the broker did not say), learned at its first
    /// send.
    message_bytes_max: Option<usize>,
    /// From the route cache; workers update it as they look up leaders.
    partition_count: Arc<AtomicU32>,
    /// The partition of the next keyless `send_batch`.
    next_batch_partition: AtomicU32,
    parts: Mutex<TopicParts>,
}

impl TopicState {
    fn partition_count(&self) -> Result<u32, ClientError> {
        match self.partition_count.load(Ordering::Relaxed) {
            0 => Err(ClientError::Protocol(format!(
                "topic {} has no partitions",
                self.name
            ))),
            count => Ok(count),
        }
    }
}

#[derive(Default)]
struct TopicParts {
    sticky: Sticky,
    /// Each partition's queue, created (with its worker) at its first record.
    queues: Vec<Option<Arc<PartitionQueue>>>,
}

impl Producer {
    pub fn new(config: ProducerConfig) -> Result<Producer, ClientError> {
        if config.batch_bytes == 0 || config.queue_records_max == 0 {
            return Err(ClientError::Config(
                "batch_bytes and queue_records_max must be > 0".into(),
            ));
        }
        let cluster = Cluster::new_for(config.client.clone(), tinymq_auth::AclOperation::Write)?;
        Ok(Producer {
            inner: Arc::new(Inner {
                identity: Arc::new(ProducerIdentity::new(
                    config.idempotence,
                    config.transactional_id.is_some(),
                )),
                transactions: config
                    .transactional_id
                    .clone()
                    .map(|id| Arc::new(txn::Transactions::new(id, config.transaction_timeout))),
                config,
                cluster,
                topics: Mutex::new(Topics::default()),
                delayed_sequence: AtomicI32::new(0),
                halves: Default::default(),
            }),
        })
    }

    /// Queues a record for `topic`. Waits while the partition's queue is full; the returned
    /// future resolves when the record is acknowledged. A record too large for the topic
    /// even in a batch of its own is not queued: its future resolves at once with
    /// [`ClientError::RecordTooLarge`] (`MESSAGE_TOO_LARGE`).
    ///
    /// A record without a timestamp gets the time its batch was opened (at most `linger`
    /// before it is sent), so that the clock is read once per batch rather than per record.
    pub async fn send(
        &self,
        topic: &str,
        record: ProducerRecord,
    ) -> Result<DeliveryFuture, ClientError> {
        // The usual case completes without awaiting: the future stays small (the slow paths
        // are boxed), which matters when it is polled once per record.
        let state = match self.cached_topic(topic) {
            Some(state) => state,
            None => Box::pin(self.topic(topic)).await?,
        };
        let queue = {
            let count = state.partition_count()?;
            let mut parts = state.parts.lock();
            let partition = match (record.partition, &record.key) {
                (Some(p), _) => self.check_partition(&state, p, count)?,
                (None, Some(key)) => partition_for_key(key, count),
                (None, None) => {
                    parts
                        .sticky
                        .next(count, record.size_estimate(), self.inner.config.batch_bytes)
                }
            };
            self.queue(&state, &mut parts, partition)
        };
        if let Some(txns) = &self.inner.transactions {
            if txns.needs_registering(&state.name, queue.partition())? {
                Box::pin(self.register_partition(&state.name, queue.partition())).await?;
            }
        }
        match queue.try_push(&record)? {
            Some(delivery) => Ok(delivery),
            None => Box::pin(queue.push(&record)).await,
        }
    }

    /// Queues `records` as one batch of their own, sent as one request after everything
    /// queued before it for the same partition, and returns one future for all of them. It
    /// keeps what `send` promises: idempotence, retries, order within the partition, and the
    /// producer's `acks`.
    ///
    /// Routing: the whole batch goes to one partition, chosen by its first record (its
    /// `partition`, else the hash of its key, else the next partition in turn for each keyless
    /// batch); the keys of the other records do not move them, and a record naming another
    /// partition is refused with [`ClientError::Config`]. The batch is not merged with other
    /// records nor split: it is refused with [`ClientError::RecordTooLarge`] (in the future)
    /// when it would be larger than the topic's `message_bytes_max`. `batch_bytes` and
    /// `linger` do not apply. Records without a timestamp get the time of this call.
    pub async fn send_batch(
        &self,
        topic: &str,
        records: Vec<ProducerRecord>,
    ) -> Result<BatchDelivery, ClientError> {
        let Some(first) = records.first() else {
            return Err(ClientError::Config(
                "send_batch needs at least one record".into(),
            ));
        };
        if i32::try_from(records.len()).is_err() {
            return Err(ClientError::Config("too many records for one batch".into()));
        }
        let state = self.topic(topic).await?;
        let count = state.partition_count()?;
        let partition = match (first.partition, &first.key) {
            (Some(p), _) => self.check_partition(&state, p, count)?,
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => state.next_batch_partition.fetch_add(1, Ordering::Relaxed) % count,
        };
        if let Some(other) = records
            .iter()
            .find_map(|r| r.partition.filter(|p| *p != partition))
        {
            return Err(ClientError::Config(format!(
                "send_batch: a batch goes to one partition, but records name {partition} and {other}"
            )));
        }
        let batch = queue::encode_batch(&state.name, partition, &records, queue::now_ms());
        drop(records);
        let bytes = BATCH_HEADER_BYTES + batch.records.len();
        if let Some(limit) = state.message_bytes_max.filter(|limit| bytes > *limit) {
            return Ok(BatchDelivery::failed(
                state.name.clone(),
                partition,
                ClientError::RecordTooLarge {
                    topic: topic.to_string(),
                    bytes,
                    limit,
                },
            ));
        }
        if let Some(txns) = &self.inner.transactions {
            if txns.needs_registering(&state.name, partition)? {
                self.register_partition(&state.name, partition).await?;
            }
        }
        let queue = self.queue(&state, &mut state.parts.lock(), partition);
        queue.push_sealed(batch).await
    }

    fn check_partition(&self, state: &TopicState, p: u32, count: u32) -> Result<u32, ClientError> {
        if p < count {
            return Ok(p);
        }
        Err(ClientError::Server {
            code: tinymq_protocol::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            message: format!("{} has {count} partitions; {p} does not exist", state.name),
        })
    }

    /// What is known of `topic`; the first time, its `message_bytes_max` (`DescribeTopic`)
    /// and routes.
    async fn topic(&self, topic: &str) -> Result<Arc<TopicState>, ClientError> {
        if let Some(state) = self.cached_topic(topic) {
            return Ok(state);
        }
        let response = self
            .inner
            .cluster
            .request(&m::DescribeTopicRequest { name: topic.into() })
            .await
            .and_then(|r| crate::error::check(r.error.as_ref()).map(|()| r))
            .map_err(|e| self.inner.cluster.naming_needed(e))?;
        let limit = response
            .config
            .map(|c| c.message_bytes_max as usize)
            .filter(|l| *l > 0);
        let count = self.inner.cluster.route(topic).await?.partition_count();
        if count == 0 {
            return Err(ClientError::Protocol(format!(
                "topic {topic} has no partitions"
            )));
        }
        let mut topics = self.inner.topics.lock();
        let state = topics.map.entry(topic.to_string()).or_insert_with(|| {
            Arc::new(TopicState {
                name: topic.into(),
                message_bytes_max: limit,
                partition_count: Arc::new(AtomicU32::new(count)),
                next_batch_partition: AtomicU32::new(std::process::id()),
                parts: Mutex::new(TopicParts::default()),
            })
        });
        Ok(state.clone())
    }

    /// The topic's state if known: the topic sent to last is checked first (a string
    /// comparison is cheaper than hashing the name).
    fn cached_topic(&self, topic: &str) -> Option<Arc<TopicState>> {
        let mut topics = self.inner.topics.lock();
        if let Some(last) = topics.last.as_ref().filter(|t| &*t.name == topic) {
            return Some(last.clone());
        }
        // Looked up by &str: allocates nothing.
        let state = topics.map.get(topic)?.clone();
        topics.last = Some(state.clone());
        Some(state)
    }

    /// The queue of `partition`, with its worker started the first time.
    fn queue(
        &self,
        state: &TopicState,
        parts: &mut TopicParts,
        partition: u32,
    ) -> Arc<PartitionQueue> {
        let index = partition as usize;
        if let Some(Some(queue)) = parts.queues.get(index) {
            return queue.clone();
        }
        if parts.queues.len() <= index {
            parts.queues.resize(index + 1, None);
        }
        let config = &self.inner.config;
        let batch_bytes_cap = state
            .message_bytes_max
            .map(|limit| match config.compression {
                Compression::None => limit,
                _ => limit.saturating_sub(worker::compression_room(limit)),
            });
        let queue = Arc::new(PartitionQueue::new(
            state.name.clone(),
            partition,
            QueueLimits {
                batch_bytes: config.batch_bytes,
                queue_records_max: config.queue_records_max,
                batch_bytes_cap,
                message_bytes_max: state.message_bytes_max,
                linger: config.linger,
            },
        ));
        let worker = PartitionWorker::new(
            state.name.clone(),
            partition,
            config.clone(),
            self.inner.cluster.clone(),
            self.inner.identity.clone(),
            state.partition_count.clone(),
        );
        tokio::spawn(worker.run(queue.clone()));
        parts.queues[index] = Some(queue.clone());
        queue
    }

    fn queues(&self) -> Vec<Arc<PartitionQueue>> {
        let topics: Vec<_> = self.inner.topics.lock().map.values().cloned().collect();
        topics
            .iter()
            .flat_map(|t| {
                t.parts
                    .lock()
                    .queues
                    .iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Waits until every record sent before this call has been acknowledged or has failed.
    pub async fn flush(&self) {
        let waits: Vec<_> = self.queues().iter().map(|q| q.flush()).collect();
        for rx in waits {
            let _ = rx.await;
        }
    }

    /// Flushes, then stops the workers.
    pub async fn close(self) {
        self.flush().await;
        for queue in self.queues() {
            queue.close();
        }
        // Clones that send later start afresh, as after the first send.
        *self.inner.topics.lock() = Topics::default();
    }
}
