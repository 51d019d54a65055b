//! One partition's sender: gathers queued records into batches, keeps up to
//! `batches_in_flight_max` of them in flight on the leader's connection, retries failures, and
//! resolves each record's delivery future.
//!
//! Size: a batch is sent once it reaches `batch_bytes`, and is closed earlier when the next
//! record would take it past the topic's `message_bytes_max` (that record starts the next
//! batch), so a batch the producer builds is never refused for its size.
//!
//! Order: batches are sent in order on one connection, and the broker writes a connection's
//! produce requests in arrival order. When a batch fails, every batch after it is drained and
//! then resent one at a time, in order, each with the same bytes (and so the same sequence):
//! the broker drops any that it already had. Without idempotence only one batch is in flight,
//! since a resend could otherwise land after a later batch.
//!
//! A stalled leader (stopped, hung) answers nothing: with idempotence each attempt also
//! watches the route and fails as retriable `LeaderMoved` once other nodes name another
//! leader (see `start_send`), so the recovery above resends to the new leader without
//! waiting out the request timeout. A batch's sequence changes only when it is rebuilt after a
//! restart of the partition's sequence (`restart_sequence`, under a higher epoch): once a
//! leader has the new epoch it refuses any late attempt of the old one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tinymq_protocol::batch::{
    BatchBuilder, Compression, ProducerStamp, RecordInput, BATCH_HEADER_BYTES,
};
use tinymq_protocol::{messages as m, ErrorCode};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Acks, ProducerConfig, ProducerRecord, RecordMetadata};
use crate::cluster::{Cluster, LEADER_CHECK_INTERVAL};
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
    /// The generation the next id taken will have: generations are never reused, so a
    /// partition always notices that the id changed.
    next_generation: std::sync::atomic::AtomicU64,
}

impl ProducerIdentity {
    pub fn new(enabled: bool) -> ProducerIdentity {
        ProducerIdentity {
            enabled,
            current: tokio::sync::Mutex::new(None),
            next_generation: std::sync::atomic::AtomicU64::new(0),
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
        let generation = self
            .next_generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let identity = Identity {
            producer_id: response.producer_id,
            producer_epoch: response.producer_epoch as i16,
            generation,
        };
        *current = Some(identity);
        Ok(Some(identity))
    }

    /// The epoch of the identity of `generation`, if it is still the current one.
    async fn current_epoch(&self, generation: u64) -> Option<i16> {
        self.current
            .lock()
            .await
            .filter(|i| i.generation == generation)
            .map(|i| i.producer_epoch)
    }

    /// Drops the id of `generation` once a partition has used up its epochs; the next batch
    /// of any partition takes a fresh id and restarts at sequence 0.
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
    /// Largest batch (uncompressed bytes) to build: the topic's `message_bytes_max`, less
    /// room for what compression may add to incompressible data. None: no known limit.
    batch_bytes_cap: Option<usize>,
    /// Sequence for the next batch built under `generation` and `sequence_round`.
    next_sequence: i32,
    generation: Option<u64>,
    /// Added to the identity's epoch for this partition: raised when this partition's
    /// sequence must start again at 0 (a batch failed for good and left a gap, or the broker
    /// forgot the producer), so that only this partition's batches are rebuilt. The broker
    /// keeps epochs per partition, and a higher epoch starts at sequence 0.
    epoch_bump: i16,
    /// Counts those restarts; a batch built in an earlier round is rebuilt.
    sequence_round: u64,
    /// Batches handed to the wire so far, and how many of them are done; flushes wait on these.
    launched: u64,
    completed: u64,
    flushes: Vec<(u64, oneshot::Sender<()>)>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Records gathered for the next batch.
#[derive(Default)]
struct Accumulator {
    records: Vec<Queued>,
    /// The batch's exact size if built now, uncompressed (0 while empty).
    bytes: usize,
    /// The first record's timestamp: the batch's base.
    base_timestamp: i64,
    /// A record that would have taken the batch past the size cap: it starts the next batch.
    held: Option<Queued>,
    deadline: Option<tokio::time::Instant>,
    /// A flush arrived: send what is here without waiting for linger.
    flush_requested: bool,
    /// The producer is gone: send what is here, then stop.
    closed: bool,
    linger_passed: bool,
}

impl Accumulator {
    fn is_ready(&self, batch_bytes: usize) -> bool {
        !self.records.is_empty()
            && (self.is_full(batch_bytes)
                || self.flush_requested
                || self.closed
                || self.linger_passed)
    }

    /// Takes no more records: big enough, or a record is already waiting for the next batch.
    fn is_full(&self, batch_bytes: usize) -> bool {
        self.bytes >= batch_bytes || self.held.is_some()
    }
}

/// Compression may make incompressible data slightly larger (frame and block headers, a
/// checksum): a compressed batch is cut this much below the limit (far more than lz4 or zstd
/// add to a batch of at most 16 MiB).
fn compression_room(limit: usize) -> usize {
    256 + limit / 1024
}

/// A batch: its records and, once built, its bytes under one identity generation and
/// sequence round.
struct Batch {
    records: Vec<Queued>,
    bytes: Option<(Bytes, (Option<u64>, u64))>,
    created: Instant,
}

type Attempt = JoinHandle<Result<i64, ClientError>>;

fn produce_request(
    config: &ProducerConfig,
    topic: &str,
    partition: u32,
    records: Bytes,
) -> m::ProduceRequest {
    m::ProduceRequest {
        acks: config.acks.wire(),
        timeout_ms: config.client.request_timeout.as_millis() as u32,
        partitions: vec![m::ProducePartition {
            topic: topic.to_string(),
            partition,
            records,
        }],
    }
}

/// Puts built bytes on the wire to the partition's leader and returns a task awaiting the
/// answer. The send itself happens before this returns, so batches launched one after another
/// reach the broker in that order.
///
/// With idempotence, an attempt unanswered for [`LEADER_CHECK_INTERVAL`] watches the route
/// and is given up (as retriable `LeaderMoved`) once other nodes name a new leader: the
/// leader it went to is stalled or deposed. The batch is then resent with the same bytes and
/// so the same sequence: the new leader either has it (replicated: answered as a duplicate
/// with its original offset) or not, and the old leader's copy, if it ever writes one, is
/// truncated away when it rejoins as a follower. Without idempotence the attempt waits out
/// the request timeout, since a resend could write the batch twice.
async fn start_send(
    cluster: &Arc<Cluster>,
    config: &ProducerConfig,
    topic: &str,
    partition: u32,
    records: Bytes,
) -> Result<Attempt, ClientError> {
    let request = produce_request(config, topic, partition, records);
    let connection = cluster.leader(topic, partition).await?;
    if config.acks == Acks::None {
        connection.send_only(&request).await?;
        return Ok(tokio::spawn(async { Ok(-1) }));
    }
    let pending = connection.start_request(&request).await?;
    // The broker's own timeout is the request's; allow a little more for the round trip.
    let timeout = config.client.request_timeout + Duration::from_secs(1);
    let watch = config.idempotence.then(|| {
        (
            cluster.clone(),
            [(topic.to_string(), partition)],
            connection.addr().to_string(),
        )
    });
    let (topic, partition) = (topic.to_string(), partition);
    Ok(tokio::spawn(async move {
        let response = match watch {
            Some((cluster, watched, leader)) => tokio::select! {
                r = pending.wait(timeout) => r?,
                moved = cluster.leader_moved(&watched, &leader, LEADER_CHECK_INTERVAL) => {
                    return Err(moved)
                }
            },
            None => pending.wait(timeout).await?,
        };
        let result = response
            .partitions
            .into_iter()
            .find(|p| p.topic == topic && p.partition == partition)
            .ok_or_else(|| ClientError::Protocol("produce response lacks the partition".into()))?;
        check(result.error.as_ref())?;
        Ok(result.base_offset)
    }))
}

impl PartitionWorker {
    pub fn new(
        topic: String,
        partition: u32,
        config: ProducerConfig,
        cluster: Arc<Cluster>,
        identity: Arc<ProducerIdentity>,
        message_bytes_max: Option<usize>,
    ) -> PartitionWorker {
        let batch_bytes_cap = message_bytes_max.map(|limit| match config.compression {
            Compression::None => limit,
            _ => limit.saturating_sub(compression_room(limit)),
        });
        PartitionWorker {
            batch_bytes_cap,
            topic,
            partition,
            config,
            cluster,
            identity,
            next_sequence: 0,
            generation: None,
            epoch_bump: 0,
            sequence_round: 0,
            launched: 0,
            completed: 0,
            flushes: Vec::new(),
        }
    }

    fn batches_in_flight_max(&self) -> usize {
        if self.config.idempotence && self.config.acks != Acks::None {
            self.config.batches_in_flight_max.max(1)
        } else {
            1
        }
    }

    pub async fn run(mut self, mut queue: mpsc::Receiver<WorkerMessage>) {
        let mut acc = Accumulator::default();
        let mut in_flight: VecDeque<(Batch, Attempt)> = VecDeque::new();
        loop {
            if acc.closed && acc.records.is_empty() && in_flight.is_empty() {
                self.answer_flushes();
                return;
            }
            if acc.is_ready(self.config.batch_bytes)
                && in_flight.len() < self.batches_in_flight_max()
            {
                let records = std::mem::take(&mut acc.records);
                let held = acc.held.take();
                acc = Accumulator {
                    closed: acc.closed,
                    ..Accumulator::default()
                };
                if let Some(next) = held {
                    self.accept(&mut acc, WorkerMessage::Record(next));
                }
                self.launch(records, &mut in_flight).await;
                continue;
            }
            // A linger already over needs no timer (tokio's timers tick in whole milliseconds,
            // which would add up to 1 ms to every batch sent with a short or zero linger): take
            // what is already queued, up to a full batch, and the batch is ready.
            if acc
                .deadline
                .is_some_and(|d| d <= tokio::time::Instant::now())
                && !acc.linger_passed
            {
                while !acc.is_full(self.config.batch_bytes) && !acc.closed {
                    match queue.try_recv() {
                        Ok(message) => self.accept(&mut acc, message),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => acc.closed = true,
                    }
                }
                acc.linger_passed = true;
                continue;
            }
            let full = acc.is_full(self.config.batch_bytes);
            let deadline = acc.deadline;
            tokio::select! {
                biased;
                result = async { (&mut in_flight.front_mut().expect("non-empty").1).await }, if !in_flight.is_empty() => {
                    let (batch, _) = in_flight.pop_front().expect("non-empty");
                    let result = result.unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string())));
                    match result {
                        Ok(base_offset) => self.finish(batch, Ok(base_offset)),
                        Err(error) => self.recover(batch, error, &mut in_flight).await,
                    }
                }
                message = queue.recv(), if !acc.closed && !full => match message {
                    Some(message) => self.accept(&mut acc, message),
                    None => acc.closed = true,
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() && !acc.linger_passed => {
                    acc.linger_passed = true;
                }
            }
        }
    }

    /// Adds a queued message to the batch being gathered.
    fn accept(&mut self, acc: &mut Accumulator, message: WorkerMessage) {
        match message {
            WorkerMessage::Record(q) => {
                // Stamped by `send`; a record without a timestamp is sized as at the base.
                let timestamp = q.record.timestamp_ms.unwrap_or(acc.base_timestamp);
                if acc.records.is_empty() {
                    acc.bytes = BATCH_HEADER_BYTES;
                    acc.base_timestamp = timestamp;
                }
                let offset_delta = i32::try_from(acc.records.len()).unwrap_or(i32::MAX);
                let size = q
                    .record
                    .encoded_bytes(offset_delta, timestamp.saturating_sub(acc.base_timestamp));
                // A record alone is sent whatever its size: `send` refused those too large.
                let over_cap = self
                    .batch_bytes_cap
                    .is_some_and(|cap| acc.bytes.saturating_add(size) > cap);
                if over_cap && !acc.records.is_empty() {
                    acc.held = Some(q);
                    return;
                }
                acc.bytes = acc.bytes.saturating_add(size);
                let linger = self.config.linger;
                acc.deadline
                    .get_or_insert_with(|| tokio::time::Instant::from_std(q.enqueued + linger));
                acc.records.push(q);
            }
            WorkerMessage::Flush(done) => {
                acc.flush_requested = true;
                let upto = self.launched
                    + u64::from(!acc.records.is_empty())
                    + u64::from(acc.held.is_some());
                self.flushes.push((upto, done));
                self.answer_flushes();
            }
        }
    }

    fn answer_flushes(&mut self) {
        let completed = self.completed;
        let (done, waiting): (Vec<_>, Vec<_>) = self
            .flushes
            .drain(..)
            .partition(|(upto, _)| *upto <= completed);
        self.flushes = waiting;
        for (_, tx) in done {
            let _ = tx.send(());
        }
    }

    /// Builds a batch (assigning its sequence) and starts sending it.
    async fn launch(&mut self, records: Vec<Queued>, in_flight: &mut VecDeque<(Batch, Attempt)>) {
        self.launched += 1;
        let created = records[0].enqueued;
        let mut batch = Batch {
            records,
            bytes: None,
            created,
        };
        let started = self.build_and_start(&mut batch).await;
        match started {
            Ok(task) => in_flight.push_back((batch, task)),
            Err(error) => self.recover(batch, error, in_flight).await,
        }
    }

    /// Builds the batch if needed and puts it on the wire.
    async fn build_and_start(&mut self, batch: &mut Batch) -> Result<Attempt, ClientError> {
        let bytes = self.ensure_built(batch).await?;
        start_send(
            &self.cluster,
            &self.config,
            &self.topic,
            self.partition,
            bytes,
        )
        .await
    }

    /// The batch's bytes under the current identity, building (and taking a sequence) if it
    /// has none yet or was built under an identity that has since been replaced.
    async fn ensure_built(&mut self, batch: &mut Batch) -> Result<Bytes, ClientError> {
        let identity = self.identity.get(&self.cluster).await?;
        let generation = identity.map(|i| i.generation);
        if generation != self.generation {
            self.generation = generation;
            self.next_sequence = 0;
            self.epoch_bump = 0;
        }
        let built_under_now = (generation, self.sequence_round);
        if let Some((bytes, built_under)) = &batch.bytes {
            if *built_under == built_under_now {
                return Ok(bytes.clone());
            }
        }
        let bytes = self.build(&batch.records, identity)?;
        let count = batch.records.len() as i32;
        self.next_sequence = self
            .next_sequence
            .checked_add(count)
            .unwrap_or(count - (i32::MAX - self.next_sequence) - 1);
        batch.bytes = Some((bytes.clone(), built_under_now));
        Ok(bytes)
    }

    /// After `failed` (the oldest in flight) failed with `error`: waits for every later batch,
    /// then settles them all in order, resending each failed one alone until it succeeds,
    /// fails for good, or runs out of delivery time.
    async fn recover(
        &mut self,
        failed: Batch,
        error: ClientError,
        in_flight: &mut VecDeque<(Batch, Attempt)>,
    ) {
        let mut settled = vec![(failed, Err(error))];
        while let Some((batch, task)) = in_flight.pop_front() {
            let result = task
                .await
                .unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string())));
            settled.push((batch, result));
        }
        for (batch, result) in settled {
            match result {
                Ok(base_offset) => self.finish(batch, Ok(base_offset)),
                Err(error) => self.resend(batch, error).await,
            }
        }
    }

    /// Sends one batch alone until it is acknowledged, fails for good, or times out.
    async fn resend(&mut self, mut batch: Batch, mut error: ClientError) {
        let mut backoff = self.config.retry_backoff;
        // An out-of-order answer to the pipelined send is expected when an earlier batch
        // failed; after a resend in order it means the broker lost track, which is final.
        let mut first = true;
        loop {
            let out_of_order_expected =
                first && error.code() == Some(ErrorCode::OUT_OF_ORDER_SEQUENCE);
            first = false;
            // The broker forgot this producer on this partition (expired or evicted) and
            // refused the batch without writing it: it goes again from sequence 0.
            let state_lost = error.code() == Some(ErrorCode::UNKNOWN_PRODUCER_ID);
            if state_lost {
                self.restart_sequence().await;
            }
            let fatal = (!error.is_retriable() && !out_of_order_expected && !state_lost)
                || batch.created.elapsed() > self.config.delivery_timeout;
            if fatal {
                if batch.created.elapsed() > self.config.delivery_timeout {
                    error = ClientError::DeliveryTimeout {
                        timeout_ms: self.config.delivery_timeout.as_millis() as u64,
                        last_error: error.to_string(),
                    };
                }
                // The batch's sequence will never be written: this partition's later batches
                // start again at sequence 0 (the other partitions are not disturbed).
                self.restart_sequence().await;
                return self.finish(batch, Err(error));
            }
            if error.needs_metadata_refresh() {
                self.cluster.invalidate(&self.topic);
            }
            tracing::debug!(topic = %self.topic, partition = self.partition, %error, "resending batch");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.config.retry_backoff_max);
            let attempt = match self.build_and_start(&mut batch).await {
                Ok(task) => task
                    .await
                    .unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string()))),
                Err(e) => Err(e),
            };
            match attempt {
                Ok(base_offset) => return self.finish(batch, Ok(base_offset)),
                Err(e) => error = e,
            }
        }
    }

    /// Starts this partition's sequence again at 0 under the next epoch; when the epoch is
    /// used up, takes a fresh producer id instead (which restarts every partition).
    async fn restart_sequence(&mut self) {
        let Some(generation) = self.generation else {
            return;
        };
        let epoch = self.identity.current_epoch(generation).await;
        match epoch.and_then(|e| e.checked_add(self.epoch_bump + 1)) {
            Some(_) => {
                self.epoch_bump += 1;
                self.next_sequence = 0;
                self.sequence_round += 1;
            }
            None => self.identity.reset(generation).await,
        }
    }

    fn build(&self, batch: &[Queued], identity: Option<Identity>) -> Result<Bytes, ClientError> {
        let stamp = match identity {
            Some(i) => ProducerStamp {
                producer_id: i.producer_id,
                // Never overflows: `restart_sequence` takes a new id first.
                producer_epoch: i.producer_epoch.saturating_add(self.epoch_bump),
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

    fn finish(&mut self, batch: Batch, outcome: Result<i64, ClientError>) {
        self.completed += 1;
        match outcome {
            Ok(base_offset) => {
                for (i, q) in batch.records.into_iter().enumerate() {
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
                for q in batch.records {
                    let _ = q.reply.send(Err(e.clone()));
                }
            }
        }
        self.answer_flushes();
    }
}
