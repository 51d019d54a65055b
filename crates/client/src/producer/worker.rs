//! One partition's sender: takes sealed batches from the partition's queue (`queue.rs`),
//! keeps up to `batches_in_flight_max` of them in flight on the leader's connection, retries
//! failures, and completes each batch's [`Completion`](super::queue::Completion), which every
//! record future of the batch reads.
//!
//! Wire: a batch's records are encoded once, by `send`; the worker writes the 61-byte header
//! (producer id, epoch, sequence, CRC) and puts header and records on the wire as separate
//! pieces of the request (`wire.rs`), so the records are not copied again.
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::batch::{
    encode_batch_header, BatchHeaderFields, Compression, ProducerStamp, BATCH_HEADER_BYTES,
};
use tinymq_protocol::{messages as m, ErrorCode};
use tokio::task::JoinHandle;

use super::queue::{Next, PartitionQueue, SealedBatch};
use super::wire::{produce_body, ProduceTarget};
use super::{Acks, ProducerConfig};
use crate::cluster::{Cluster, LEADER_CHECK_INTERVAL};
use crate::error::{check, ClientError};

/// How long after a batch first fails for want of a leader (the leader died, moved or is not
/// known yet) its retries stay at the first backoff instead of doubling: a dead broker's
/// partitions get a new leader within about the MetaServer's session timeout (1.5 s), and a
/// retry soon after that finds it. Past this window the backoff doubles as for any error, so
/// an offline partition is not asked after ten times a second for long.
const LEADER_CHANGE_WINDOW: Duration = Duration::from_secs(2);

/// The pause before the next retry of a batch that has been failing since `failing_since`
/// with `error`, given the doubling `backoff` so far (which this advances).
fn retry_pause(
    config: &ProducerConfig,
    error: &ClientError,
    failing_since: Instant,
    backoff: &mut Duration,
) -> Duration {
    if error.needs_metadata_refresh() && failing_since.elapsed() < LEADER_CHANGE_WINDOW {
        return config.retry_backoff;
    }
    let pause = *backoff;
    *backoff = (*backoff * 2).min(config.retry_backoff_max);
    pause
}

/// The producer id and epoch shared by all partitions; `generation` changes whenever a new
/// id is taken, which restarts every partition's sequence at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(super) producer_id: i64,
    pub(super) producer_epoch: i16,
    generation: u64,
}

#[derive(Debug)]
pub(crate) struct ProducerIdentity {
    enabled: bool,
    /// A transactional producer: its id and epoch come from `init_transactions` only, its
    /// batches carry the transactional bit, and a failed batch fails the open transaction
    /// (`failed`) instead of bumping the partition's epoch.
    pub(super) transactional: bool,
    /// A batch of the open transaction failed for good.
    pub(super) failed: std::sync::atomic::AtomicBool,
    current: tokio::sync::Mutex<Option<Identity>>,
    /// The generation the next id taken will have: generations are never reused, so a
    /// partition always notices that the id changed.
    next_generation: std::sync::atomic::AtomicU64,
}

impl ProducerIdentity {
    pub fn new(enabled: bool, transactional: bool) -> ProducerIdentity {
        ProducerIdentity {
            enabled: enabled || transactional,
            transactional,
            failed: std::sync::atomic::AtomicBool::new(false),
            current: tokio::sync::Mutex::new(None),
            next_generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub(super) async fn get(&self, cluster: &Cluster) -> Result<Option<Identity>, ClientError> {
        if !self.enabled {
            return Ok(None);
        }
        let mut current = self.current.lock().await;
        if let Some(identity) = *current {
            return Ok(Some(identity));
        }
        if self.transactional {
            return Err(ClientError::Config(
                "a transactional producer needs init_transactions before it sends".into(),
            ));
        }
        let response = cluster
            .request(&m::InitProducerIdRequest {
                transactional_id: String::new(),
                producer_id: -1,
                producer_epoch: -1,
                transaction_timeout_ms: 0,
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

    /// Takes `producer_id` and `epoch` (from the transaction coordinator) as the identity:
    /// every partition restarts its sequence at 0.
    pub(super) async fn set(&self, producer_id: i64, producer_epoch: i16) {
        let generation = self
            .next_generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.current.lock().await = Some(Identity {
            producer_id,
            producer_epoch,
            generation,
        });
    }

    pub(super) async fn current_identity(&self) -> Option<Identity> {
        *self.current.lock().await
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
    topic: Arc<str>,
    partition: u32,
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    identity: Arc<ProducerIdentity>,
    /// The topic's partition count that `send` routes by: refreshed from each route looked up.
    partition_count: Arc<AtomicU32>,
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
}

/// Compression may make incompressible data slightly larger (frame and block headers, a
/// checksum): a compressed batch is cut this much below the limit (far more than lz4 or zstd
/// add to a batch of at most 16 MiB).
pub(crate) fn compression_room(limit: usize) -> usize {
    256 + limit / 1024
}

/// A batch in flight: its records and, once built, its header under one identity generation
/// and sequence round.
struct Batch {
    sealed: SealedBatch,
    /// The records section as sent: `sealed.records`, compressed if the producer compresses.
    payload: Option<Bytes>,
    header: Option<([u8; BATCH_HEADER_BYTES], BuiltUnder)>,
}

/// The identity generation and sequence round a header was built under.
type BuiltUnder = (Option<u64>, u64);

type Attempt = JoinHandle<Result<i64, ClientError>>;

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
    (header, payload): (&[u8], &Bytes),
) -> Result<Attempt, ClientError> {
    let target = ProduceTarget {
        acks: config.acks.wire(),
        timeout_ms: config.client.request_timeout.as_millis() as u32,
        topic,
        partition,
        transactional_id: config.transactional_id.as_deref().unwrap_or(""),
    };
    let body = produce_body(&target, header, payload);
    let connection = cluster.leader(topic, partition).await?;
    if config.acks == Acks::None {
        connection
            .send_only_split::<m::ProduceRequest>(&body)
            .await?;
        return Ok(tokio::spawn(async { Ok(-1) }));
    }
    let pending = connection
        .start_split_request::<m::ProduceRequest>(&body)
        .await?;
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

/// The batch that failed, and where its sequence stands among those in flight.
enum Failed {
    /// The oldest in flight: its answer was an error.
    Oldest(Batch, ClientError),
    /// Not yet in flight (its send could not start): every batch in flight comes before it.
    Newest(Batch, ClientError),
}

impl PartitionWorker {
    pub fn new(
        topic: Arc<str>,
        partition: u32,
        config: ProducerConfig,
        cluster: Arc<Cluster>,
        identity: Arc<ProducerIdentity>,
        partition_count: Arc<AtomicU32>,
    ) -> PartitionWorker {
        PartitionWorker {
            topic,
            partition,
            config,
            cluster,
            identity,
            partition_count,
            next_sequence: 0,
            generation: None,
            epoch_bump: 0,
            sequence_round: 0,
        }
    }

    fn batches_in_flight_max(&self) -> usize {
        if self.config.idempotence && self.config.acks != Acks::None {
            self.config.batches_in_flight_max.max(1)
        } else {
            1
        }
    }

    pub async fn run(mut self, queue: Arc<PartitionQueue>) {
        let mut in_flight: VecDeque<(Batch, Attempt)> = VecDeque::new();
        loop {
            let mut deadline = None;
            if in_flight.len() < self.batches_in_flight_max() {
                match queue.next() {
                    Next::Send(sealed) => {
                        let batch = Batch {
                            sealed,
                            payload: None,
                            header: None,
                        };
                        self.launch(batch, &mut in_flight, &queue).await;
                        continue;
                    }
                    Next::Wait(until) => deadline = until,
                    Next::Done if in_flight.is_empty() => return,
                    Next::Done => {}
                }
            }
            tokio::select! {
                biased;
                result = async { (&mut in_flight.front_mut().expect("non-empty").1).await }, if !in_flight.is_empty() => {
                    let (batch, _) = in_flight.pop_front().expect("non-empty");
                    let result = result.unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string())));
                    match result {
                        Ok(base_offset) => self.finish(batch, Ok(base_offset), &queue),
                        Err(error) => {
                            let failed = Failed::Oldest(batch, error);
                            self.recover(failed, &mut in_flight, &queue).await
                        }
                    }
                }
                _ = queue.wake_worker.notified() => {}
                _ = tokio::time::sleep_until(deadline.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std)), if deadline.is_some() => {}
            }
        }
    }

    /// Builds a batch (assigning its sequence) and starts sending it.
    async fn launch(
        &mut self,
        mut batch: Batch,
        in_flight: &mut VecDeque<(Batch, Attempt)>,
        queue: &PartitionQueue,
    ) {
        let started = self.build_and_start(&mut batch).await;
        match started {
            Ok(task) => in_flight.push_back((batch, task)),
            // Its sequence follows every batch in flight, so it is settled after them.
            Err(error) => {
                self.recover(Failed::Newest(batch, error), in_flight, queue)
                    .await
            }
        }
    }

    /// Builds the batch if needed and puts it on the wire.
    async fn build_and_start(&mut self, batch: &mut Batch) -> Result<Attempt, ClientError> {
        let header = self.ensure_built(batch).await?;
        // The leader is looked up per batch anyway: keep `send`'s partition count current.
        let route = self.cluster.route(&self.topic).await?;
        let count = route.partition_count();
        if count > 0 {
            self.partition_count.store(count, Ordering::Relaxed);
        }
        let payload = batch.payload.as_ref().expect("built above");
        start_send(
            &self.cluster,
            &self.config,
            &self.topic,
            self.partition,
            (&header, payload),
        )
        .await
    }

    /// The batch's header under the current identity, building it (and taking a sequence) if
    /// it has none yet or was built under an identity that has since been replaced.
    async fn ensure_built(
        &mut self,
        batch: &mut Batch,
    ) -> Result<[u8; BATCH_HEADER_BYTES], ClientError> {
        let identity = self.identity.get(&self.cluster).await?;
        let generation = identity.map(|i| i.generation);
        if generation != self.generation {
            self.generation = generation;
            self.next_sequence = 0;
            self.epoch_bump = 0;
        }
        let built_under_now = (generation, self.sequence_round);
        if let Some((header, built_under)) = &batch.header {
            if *built_under == built_under_now {
                return Ok(*header);
            }
        }
        let header = self.build(batch, identity)?;
        let count = batch.sealed.count;
        self.next_sequence = self
            .next_sequence
            .checked_add(count)
            .unwrap_or(count - (i32::MAX - self.next_sequence) - 1);
        batch.header = Some((header, built_under_now));
        Ok(header)
    }

    /// After a batch failed: waits for every batch in flight, then settles them all in
    /// sequence order, resending each failed one alone until it succeeds, fails for good, or
    /// runs out of delivery time. The order matters: a batch resent before an earlier one is
    /// refused as out of order, and that (final) refusal restarts the sequence under a new
    /// epoch, under which the earlier batches, possibly already written, would be written
    /// again.
    async fn recover(
        &mut self,
        failed: Failed,
        in_flight: &mut VecDeque<(Batch, Attempt)>,
        queue: &PartitionQueue,
    ) {
        let mut settled = Vec::with_capacity(in_flight.len() + 1);
        let newest = match failed {
            Failed::Oldest(batch, error) => {
                settled.push((batch, Err(error)));
                None
            }
            Failed::Newest(batch, error) => Some((batch, Err(error))),
        };
        while let Some((batch, task)) = in_flight.pop_front() {
            let result = task
                .await
                .unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string())));
            settled.push((batch, result));
        }
        settled.extend(newest);
        for (batch, result) in settled {
            match result {
                Ok(base_offset) => self.finish(batch, Ok(base_offset), queue),
                Err(error) => self.resend(batch, error, queue).await,
            }
        }
    }

    /// Sends one batch alone until it is acknowledged, fails for good, or times out.
    async fn resend(&mut self, mut batch: Batch, mut error: ClientError, queue: &PartitionQueue) {
        let mut backoff = self.config.retry_backoff;
        let failing_since = Instant::now();
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
                || batch.sealed.created.elapsed() > self.config.delivery_timeout;
            if fatal {
                if batch.sealed.created.elapsed() > self.config.delivery_timeout {
                    error = ClientError::DeliveryTimeout {
                        timeout_ms: self.config.delivery_timeout.as_millis() as u64,
                        last_error: error.to_string(),
                    };
                }
                // The batch's sequence will never be written: this partition's later batches
                // start again at sequence 0 (the other partitions are not disturbed).
                self.restart_sequence().await;
                return self.finish(batch, Err(error), queue);
            }
            if error.needs_metadata_refresh() {
                self.cluster.invalidate(&self.topic);
            }
            tracing::debug!(topic = %self.topic, partition = self.partition, %error, "resending batch");
            let pause = retry_pause(&self.config, &error, failing_since, &mut backoff);
            tokio::time::sleep(pause).await;
            let attempt = match self.build_and_start(&mut batch).await {
                Ok(task) => task
                    .await
                    .unwrap_or_else(|e| Err(ClientError::Protocol(e.to_string()))),
                Err(e) => Err(e),
            };
            match attempt {
                Ok(base_offset) => return self.finish(batch, Ok(base_offset), queue),
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
        if self.identity.transactional {
            // The epoch is the coordinator's: the transaction fails, and its abort restarts
            // every partition under a bumped epoch.
            self.identity
                .failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
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

    /// The batch's header under `identity` (compressing its records the first time).
    fn build(
        &self,
        batch: &mut Batch,
        identity: Option<Identity>,
    ) -> Result<[u8; BATCH_HEADER_BYTES], ClientError> {
        let stamp = match identity {
            Some(i) => ProducerStamp {
                producer_id: i.producer_id,
                // Never overflows: `restart_sequence` takes a new id first.
                producer_epoch: i.producer_epoch.saturating_add(self.epoch_bump),
                base_sequence: self.next_sequence,
            },
            None => ProducerStamp::NONE,
        };
        let compression = self.config.compression;
        let payload = match &batch.payload {
            Some(payload) => payload.clone(),
            None => {
                let payload = match compression {
                    Compression::None => batch.sealed.records.clone(),
                    codec => Bytes::from(codec.compress(&batch.sealed.records)?),
                };
                batch.payload = Some(payload.clone());
                payload
            }
        };
        let fields = BatchHeaderFields {
            compression,
            record_count: batch.sealed.count,
            base_timestamp: batch.sealed.base_timestamp,
            max_timestamp: batch.sealed.max_timestamp,
            producer: stamp,
            transactional: self.identity.transactional,
        };
        Ok(encode_batch_header(&fields, &payload)?)
    }

    fn finish(&mut self, batch: Batch, outcome: Result<i64, ClientError>, queue: &PartitionQueue) {
        if outcome.is_err() && self.identity.transactional {
            self.identity
                .failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        batch.sealed.completion.complete(outcome);
        drop(batch);
        queue.finished_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_for_want_of_a_leader_stay_fast_through_a_failover_then_back_off() {
        let config = ProducerConfig::new("127.0.0.1:1");
        let no_leader = ClientError::Server {
            code: ErrorCode::NOT_LEADER,
            message: String::new(),
        };
        let other = ClientError::Server {
            code: ErrorCode::REQUEST_TIMED_OUT,
            message: String::new(),
        };
        let mut backoff = config.retry_backoff;
        let now = Instant::now();
        for _ in 0..5 {
            let pause = retry_pause(&config, &no_leader, now, &mut backoff);
            assert_eq!(pause, config.retry_backoff);
        }
        assert_eq!(backoff, config.retry_backoff, "no doubling meanwhile");
        let pauses: Vec<Duration> = (0..6)
            .map(|_| retry_pause(&config, &other, now, &mut backoff))
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(
            pauses,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        let Some(long_ago) = now.checked_sub(LEADER_CHANGE_WINDOW) else {
            return; // The clock started less than the window ago: nothing to check.
        };
        let mut backoff = config.retry_backoff;
        retry_pause(&config, &no_leader, long_ago, &mut backoff);
        assert_eq!(
            backoff,
            ms(200),
            "past the window a missing leader backs off too"
        );
    }
}
