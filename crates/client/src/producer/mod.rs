//! The producer: `send` a record to a topic and get back a future of its partition and offset.
//!
//! Records go to one worker task per partition, through a bounded queue (a full queue makes
//! `send` wait: backpressure). A worker gathers records into a batch until `batch_bytes` or
//! `linger` is reached, sends it to the partition's leader (up to `batches_in_flight_max` at
//! once), and retries failures on retriable errors until the delivery timeout, keeping the
//! partition's order. With idempotence (the default) every batch carries the producer id, epoch
//! and sequence, so a retried batch is never written twice.
//!
//! Size: the producer learns each topic's `message_bytes_max` (the largest batch its brokers
//! take) the first time it sends to it. A record too large for a batch of its own fails alone
//! in `send` with `MESSAGE_TOO_LARGE`, before batching, and a worker closes a batch before the
//! next record would take it past the limit, so records never sink with a neighbour.

mod partitioner;
mod worker;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tinymq_protocol::batch::{record_bytes, Compression, RecordInput, BATCH_HEADER_BYTES};
use tinymq_protocol::messages as m;
use tokio::sync::{mpsc, oneshot};

use crate::cluster::{ClientConfig, Cluster};
use crate::error::ClientError;
use partitioner::StickyPartitioner;
pub use partitioner::{murmur2, partition_for_key};
use worker::{PartitionWorker, ProducerIdentity, WorkerMessage};

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
    /// First wait before a retry; doubles up to `retry_backoff_max`.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Records queued per partition before `send` waits.
    pub queue_records_max: usize,
    /// Batches of one partition sent and not yet acknowledged, at most (with idempotence;
    /// without it, 1, so that a resent batch cannot land after a later one).
    pub batches_in_flight_max: usize,
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
    /// Milliseconds since the Unix epoch; now if absent.
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

    /// Exact bytes the record takes in an uncompressed batch at `offset_delta`, with
    /// `timestamp_ms` `timestamp_delta` after the batch's first record.
    pub(crate) fn encoded_bytes(&self, offset_delta: i32, timestamp_delta: i64) -> usize {
        let headers: Vec<(&str, Option<&[u8]>)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        let input = RecordInput {
            timestamp_ms: self.timestamp_ms.unwrap_or(0),
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &headers,
        };
        record_bytes(&input, offset_delta, timestamp_delta)
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
    pub topic: String,
    pub partition: u32,
    /// -1 with `Acks::None`.
    pub offset: i64,
}

/// Resolves when the record is acknowledged (or has failed for good).
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata, ClientError>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::Closed)))
    }
}

/// An asynchronous producer. Clone it freely: clones share workers and connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use tinymq_client::{Producer, ProducerConfig, ProducerRecord};
/// let producer = Producer::new(ProducerConfig::new("127.0.0.1:21581"))?;
/// let delivery = producer.send("orders", ProducerRecord::value("hello").with_key("customer-7")).await?;
/// let meta = delivery.await?;
/// println!("stored at {}/{}", meta.partition, meta.offset);
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
    sticky: StickyPartitioner,
    /// Queue of each partition's worker, by topic then partition.
    workers: Mutex<HashMap<String, HashMap<u32, mpsc::Sender<WorkerMessage>>>>,
    /// Each topic's `message_bytes_max` (None: the broker did not say), learned at its first
    /// send.
    message_bytes_max: Mutex<HashMap<String, Option<usize>>>,
}

impl Producer {
    pub fn new(config: ProducerConfig) -> Result<Producer, ClientError> {
        if config.batch_bytes == 0 || config.queue_records_max == 0 {
            return Err(ClientError::Config(
                "batch_bytes and queue_records_max must be > 0".into(),
            ));
        }
        let cluster = Cluster::new(config.client.clone())?;
        Ok(Producer {
            inner: Arc::new(Inner {
                identity: Arc::new(ProducerIdentity::new(config.idempotence)),
                config,
                cluster,
                sticky: StickyPartitioner::default(),
                workers: Mutex::new(HashMap::new()),
                message_bytes_max: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Queues a record for `topic`. Waits while the partition's queue is full; the returned
    /// future resolves when the record is acknowledged. A record too large for the topic
    /// even in a batch of its own is not queued: its future resolves at once with
    /// [`ClientError::RecordTooLarge`] (`MESSAGE_TOO_LARGE`).
    pub async fn send(
        &self,
        topic: &str,
        mut record: ProducerRecord,
    ) -> Result<DeliveryFuture, ClientError> {
        // Stamped now, not when its batch is built, so batches are sized exactly as built.
        record.timestamp_ms.get_or_insert_with(worker::now_ms);
        let limit = self.message_bytes_max(topic).await?;
        let (tx, rx) = oneshot::channel();
        let alone = BATCH_HEADER_BYTES + record.encoded_bytes(0, 0);
        if let Some(limit) = limit.filter(|limit| alone > *limit) {
            let _ = tx.send(Err(ClientError::RecordTooLarge {
                topic: topic.to_string(),
                bytes: alone,
                limit,
            }));
            return Ok(DeliveryFuture { rx });
        }
        let partition = self.choose_partition(topic, &record).await?;
        let queue = self.worker(topic, partition, limit);
        queue
            .send(WorkerMessage::Record(worker::Queued::new(record, tx)))
            .await
            .map_err(|_| ClientError::Closed)?;
        Ok(DeliveryFuture { rx })
    }

    async fn choose_partition(
        &self,
        topic: &str,
        record: &ProducerRecord,
    ) -> Result<u32, ClientError> {
        let route = self.inner.cluster.route(topic).await?;
        let count = route.partition_count();
        if count == 0 {
            return Err(ClientError::Protocol(format!(
                "topic {topic} has no partitions"
            )));
        }
        Ok(match (record.partition, &record.key) {
            (Some(p), _) if p < count => p,
            (Some(p), _) => {
                return Err(ClientError::Server {
                    code: tinymq_protocol::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message: format!("{topic} has {count} partitions; {p} does not exist"),
                })
            }
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => self.inner.sticky.next(
                topic,
                count,
                record.size_estimate(),
                self.inner.config.batch_bytes,
            ),
        })
    }

    /// The topic's `message_bytes_max`, asked of a broker (`DescribeTopic`) the first time.
    async fn message_bytes_max(&self, topic: &str) -> Result<Option<usize>, ClientError> {
        if let Some(known) = self.inner.message_bytes_max.lock().get(topic) {
            return Ok(*known);
        }
        let response = self
            .inner
            .cluster
            .request(&m::DescribeTopicRequest { name: topic.into() })
            .await?;
        crate::error::check(response.error.as_ref())?;
        let limit = response
            .config
            .map(|c| c.message_bytes_max as usize)
            .filter(|l| *l > 0);
        self.inner
            .message_bytes_max
            .lock()
            .insert(topic.to_string(), limit);
        Ok(limit)
    }

    fn worker(
        &self,
        topic: &str,
        partition: u32,
        message_bytes_max: Option<usize>,
    ) -> mpsc::Sender<WorkerMessage> {
        let mut workers = self.inner.workers.lock();
        // Looked up by &str first: the hot path allocates nothing.
        if let Some(queue) = workers.get(topic).and_then(|t| t.get(&partition)) {
            return queue.clone();
        }
        let (tx, rx) = mpsc::channel(self.inner.config.queue_records_max);
        let worker = PartitionWorker::new(
            topic.to_string(),
            partition,
            self.inner.config.clone(),
            self.inner.cluster.clone(),
            self.inner.identity.clone(),
            message_bytes_max,
        );
        tokio::spawn(worker.run(rx));
        workers
            .entry(topic.to_string())
            .or_default()
            .insert(partition, tx.clone());
        tx
    }

    /// Waits until every record sent before this call has been acknowledged or has failed.
    pub async fn flush(&self) {
        let queues: Vec<_> = self
            .inner
            .workers
            .lock()
            .values()
            .flat_map(|t| t.values().cloned())
            .collect();
        let mut waits = Vec::new();
        for queue in queues {
            let (tx, rx) = oneshot::channel();
            if queue.send(WorkerMessage::Flush(tx)).await.is_ok() {
                waits.push(rx);
            }
        }
        for rx in waits {
            let _ = rx.await;
        }
    }

    /// Flushes, then stops the workers.
    pub async fn close(self) {
        self.flush().await;
        self.inner.workers.lock().clear();
    }
}
