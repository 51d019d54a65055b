//! One partition's sender: gathers queued records into a batch, sends it, retries it, and
//! resolves each record's delivery future. One batch in flight at a time keeps order.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tinymq_protocol::batch::{BatchBuilder, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode};
use tokio::sync::{mpsc, oneshot};

use super::{Acks, ProducerConfig, ProducerRecord, RecordMetadata};
use crate::cluster::Cluster;
use crate::error::{check, ClientError};

pub(crate) enum WorkerMessage {
    Record(Queued),
    /// Reply once every record queued before this is done.
    Flush(oneshot::Sender<()>),
}

pub(crate) struct Queued {
    record: ProducerRecord,
    reply: oneshot::Sender<Result<RecordMetadata, ClientError>>,
    enqueued: Instant,
}

impl Queued {
    pub fn new(
        record: ProducerRecord,
        reply: oneshot::Sender<Result<RecordMetadata, ClientError>>,
    ) -> Queued {
        Queued {
            record,
            reply,
            enqueued: Instant::now(),
        }
    }
}

/// The producer id and epoch shared by all partitions; `generation` changes whenever a new
/// id is taken, which restarts every partition's sequence at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    producer_id: i64,
    producer_epoch: i16,
    generation: u64,
}

#[derive(Debug)]
pub(crate) struct ProducerIdentity {
    enabled: bool,
    current: tokio::sync::Mutex<Option<Identity>>,
}

impl ProducerIdentity {
    pub fn new(enabled: bool) -> ProducerIdentity {
        ProducerIdentity {
            enabled,
            current: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self, cluster: &Cluster) -> Result<Option<Identity>, ClientError> {
        if !self.enabled {
            return Ok(None);
        }
        let mut current = self.current.lock().await;
        if let Some(identity) = *current {
            return Ok(Some(identity));
        }
        let response = cluster
            .request(&m::InitProducerIdRequest {
                transactional_id: String::new(),
                producer_id: -1,
                producer_epoch: -1,
            })
            .await?;
        check(response.error.as_ref())?;
        let generation = current.map_or(0, |i| i.generation + 1);
        let identity = Identity {
            producer_id: response.producer_id,
            producer_epoch: response.producer_epoch as i16,
            generation,
        };
        *current = Some(identity);
        Ok(Some(identity))
    }

    /// Drops the id of `generation` after a batch failed for good (its sequence would leave a
    /// gap); the next batch of any partition takes a fresh id and restarts at sequence 0.
    async fn reset(&self, generation: u64) {
        let mut current = self.current.lock().await;
        if current.is_some_and(|i| i.generation == generation) {
            *current = None;
        }
    }
}

pub(crate) struct PartitionWorker {
    topic: String,
    partition: u32,
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    identity: Arc<ProducerIdentity>,
    next_sequence: i32,
    generation: Option<u64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl PartitionWorker {
    pub fn new(
        topic: String,
        partition: u32,
        config: ProducerConfig,
        cluster: Arc<Cluster>,
        identity: Arc<ProducerIdentity>,
    ) -> PartitionWorker {
        PartitionWorker {
            topic,
            partition,
            config,
            cluster,
            identity,
            next_sequence: 0,
            generation: None,
        }
    }

    pub async fn run(mut self, mut queue: mpsc::Receiver<WorkerMessage>) {
        while let Some(first) = queue.recv().await {
            let first = match first {
                WorkerMessage::Record(q) => q,
                WorkerMessage::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let deadline = tokio::time::Instant::from_std(first.enqueued + self.config.linger);
            let mut bytes = first.record.size_estimate();
            let mut batch = vec![first];
            let mut flushes = Vec::new();
            while bytes < self.config.batch_bytes {
                match tokio::time::timeout_at(deadline, queue.recv()).await {
                    Ok(Some(WorkerMessage::Record(q))) => {
                        bytes += q.record.size_estimate();
                        batch.push(q);
                    }
                    Ok(Some(WorkerMessage::Flush(done))) => {
                        flushes.push(done);
                        break;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            self.send_batch(batch).await;
            for done in flushes {
                let _ = done.send(());
            }
        }
    }

    fn build(&self, batch: &[Queued], identity: Option<Identity>) -> Result<Bytes, ClientError> {
        let stamp = match identity {
            Some(i) => ProducerStamp {
                producer_id: i.producer_id,
                producer_epoch: i.producer_epoch,
                base_sequence: self.next_sequence,
            },
            None => ProducerStamp::NONE,
        };
        let mut builder = BatchBuilder::new(self.config.compression, stamp);
        let now = now_ms();
        for q in batch {
            let r = &q.record;
            let headers: Vec<(&str, Option<&[u8]>)> = r
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect();
            builder.push(&RecordInput {
                timestamp_ms: r.timestamp_ms.unwrap_or(now),
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers: &headers,
            });
        }
        Ok(builder.build()?)
    }

    fn finish(&mut self, batch: Vec<Queued>, outcome: Result<i64, ClientError>) {
        match outcome {
            Ok(base_offset) => {
                let count = batch.len() as i32;
                self.next_sequence = self
                    .next_sequence
                    .checked_add(count)
                    .unwrap_or(count - (i32::MAX - self.next_sequence) - 1);
                for (i, q) in batch.into_iter().enumerate() {
                    let offset = if base_offset < 0 {
                        -1
                    } else {
                        base_offset + i as i64
                    };
                    let _ = q.reply.send(Ok(RecordMetadata {
                        topic: self.topic.clone(),
                        partition: self.partition,
                        offset,
                    }));
                }
            }
            Err(e) => {
                for q in batch {
                    let _ = q.reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Sends one batch until it is acknowledged, fails for good, or its delivery time runs out.
    async fn send_batch(&mut self, batch: Vec<Queued>) {
        let created = batch[0].enqueued;
        let mut backoff = self.config.retry_backoff;
        let mut built: Option<Bytes> = None;
        let mut last_error = String::from("none");
        loop {
            if created.elapsed() > self.config.delivery_timeout {
                let error = ClientError::DeliveryTimeout {
                    timeout_ms: self.config.delivery_timeout.as_millis() as u64,
                    last_error,
                };
                self.abandon_identity().await;
                return self.finish(batch, Err(error));
            }
            let attempt = self.attempt(&batch, &mut built).await;
            match attempt {
                Ok(base_offset) => return self.finish(batch, Ok(base_offset)),
                Err(e) if e.is_retriable() => {
                    if e.needs_metadata_refresh() {
                        self.cluster.invalidate(&self.topic);
                    }
                    tracing::debug!(topic = %self.topic, partition = self.partition, error = %e, "retrying batch");
                    last_error = e.to_string();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_backoff_max);
                }
                Err(e) => {
                    if matches!(
                        e.code(),
                        Some(ErrorCode::OUT_OF_ORDER_SEQUENCE | ErrorCode::INVALID_PRODUCER_EPOCH)
                    ) {
                        self.abandon_identity().await;
                    }
                    return self.finish(batch, Err(e));
                }
            }
        }
    }

    async fn abandon_identity(&mut self) {
        if let Some(generation) = self.generation {
            self.identity.reset(generation).await;
        }
    }

    /// One try: build the batch if needed (the same bytes, hence the same sequence, on every
    /// retry of one identity), send it, and read the partition's result.
    async fn attempt(
        &mut self,
        batch: &[Queued],
        built: &mut Option<Bytes>,
    ) -> Result<i64, ClientError> {
        let identity = self.identity.get(&self.cluster).await?;
        let generation = identity.map(|i| i.generation);
        if generation != self.generation {
            self.generation = generation;
            self.next_sequence = 0;
            *built = None;
        }
        let records = match built {
            Some(bytes) => bytes.clone(),
            None => built.insert(self.build(batch, identity)?).clone(),
        };
        let request = m::ProduceRequest {
            acks: self.config.acks.wire(),
            timeout_ms: self.config.client.request_timeout.as_millis() as u32,
            partitions: vec![m::ProducePartition {
                topic: self.topic.clone(),
                partition: self.partition,
                records,
            }],
        };
        let connection = self.cluster.leader(&self.topic, self.partition).await?;
        if self.config.acks == Acks::None {
            connection.send_only(&request).await?;
            return Ok(-1);
        }
        // The broker's own timeout is the request's; allow a little more for the round trip.
        let timeout = self.config.client.request_timeout + Duration::from_secs(1);
        let response = connection.request(&request, timeout).await?;
        let result = response
            .partitions
            .into_iter()
            .find(|p| p.topic == self.topic && p.partition == self.partition)
            .ok_or_else(|| ClientError::Protocol("produce response lacks the partition".into()))?;
        check(result.error.as_ref())?;
        Ok(result.base_offset)
    }
}
