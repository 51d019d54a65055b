//! One partition's queue, shared by the callers of `send` and the partition's worker, and the
//! futures that deliveries resolve through.
//!
//! `send` encodes a record straight into the open batch's buffer under a short lock; the batch
//! is sealed (handed to the worker) when it reaches `batch_bytes`, when the next record would
//! take it past the topic's size limit, when its linger is over, or on a flush. Every record
//! of a batch shares the batch's [`Completion`]; a record's future is that completion and its
//! index. So a record costs no channel send, no oneshot and no clock read: the clock is read
//! when a batch opens (its linger starts then, and records without a timestamp take that time).
//!
//! The worker is woken only when there is something new for it: a batch opened (to start its
//! linger) or sealed, a flush, or the producer closing.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tinymq_protocol::batch::{encode_record, record_bytes, BATCH_HEADER_BYTES};
use tokio::sync::{oneshot, Notify};

use super::{BatchMetadata, ProducerRecord, RecordMetadata};
use crate::error::ClientError;

/// The smallest buffer a batch opens with; it starts at the size the partition's previous
/// batch ended with (up to `batch_bytes`), so a steady stream never regrows it.
const BATCH_BUFFER_BYTES_MIN: usize = 4096;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The outcome of one batch, shared by the futures of all its records.
pub(crate) struct Completion {
    topic: Arc<str>,
    partition: u32,
    /// The batch's base offset (-1 with `acks = 0`), or why it failed.
    outcome: OnceLock<Result<i64, ClientError>>,
    wakers: Mutex<Vec<Waker>>,
}

impl Completion {
    pub fn new(topic: Arc<str>, partition: u32) -> Arc<Completion> {
        Arc::new(Completion {
            topic,
            partition,
            outcome: OnceLock::new(),
            wakers: Mutex::new(Vec::new()),
        })
    }

    /// Sets the outcome (the first one set wins) and wakes every waiting future.
    pub fn complete(&self, outcome: Result<i64, ClientError>) {
        let _ = self.outcome.set(outcome);
        let wakers = std::mem::take(&mut *self.wakers.lock());
        for waker in wakers {
            waker.wake();
        }
    }

    /// The outcome once set; until then registers the task (once: `slot` remembers where).
    fn poll(&self, cx: &Context<'_>, slot: &mut Option<usize>) -> Poll<&Result<i64, ClientError>> {
        if let Some(outcome) = self.outcome.get() {
            return Poll::Ready(outcome);
        }
        let mut wakers = self.wakers.lock();
        // `complete` sets the outcome before it takes the wakers: seen unset under the lock,
        // this waker will be taken and woken.
        if let Some(outcome) = self.outcome.get() {
            return Poll::Ready(outcome);
        }
        match slot {
            Some(i) if wakers.get(*i).is_some_and(|w| w.will_wake(cx.waker())) => {}
            Some(i) if *i < wakers.len() => wakers[*i] = cx.waker().clone(),
            _ => {
                *slot = Some(wakers.len());
                wakers.push(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

enum DeliveryState {
    Waiting {
        completion: Arc<Completion>,
        index: u32,
        slot: Option<usize>,
    },
    Ready(Option<Result<RecordMetadata, ClientError>>),
}

/// Resolves when the record is acknowledged (or has failed for good).
pub struct DeliveryFuture(DeliveryState);

impl DeliveryFuture {
    pub(crate) fn failed(error: ClientError) -> DeliveryFuture {
        DeliveryFuture(DeliveryState::Ready(Some(Err(error))))
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ClientError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            DeliveryState::Ready(outcome) => {
                Poll::Ready(outcome.take().unwrap_or(Err(ClientError::Closed)))
            }
            DeliveryState::Waiting {
                completion,
                index,
                slot,
            } => completion.poll(cx, slot).map(|outcome| match outcome {
                Ok(base) => Ok(RecordMetadata {
                    topic: completion.topic.clone(),
                    partition: completion.partition,
                    offset: if *base < 0 {
                        -1
                    } else {
                        base + i64::from(*index)
                    },
                }),
                Err(e) => Err(e.clone()),
            }),
        }
    }
}

/// Resolves when a batch given to [`Producer::send_batch`](super::Producer::send_batch) is
/// acknowledged (or has failed for good).
pub struct BatchDelivery {
    completion: Arc<Completion>,
    record_count: u32,
    slot: Option<usize>,
}

impl BatchDelivery {
    pub(crate) fn failed(topic: Arc<str>, partition: u32, error: ClientError) -> BatchDelivery {
        let completion = Completion::new(topic, partition);
        completion.complete(Err(error));
        BatchDelivery {
            completion,
            record_count: 0,
            slot: None,
        }
    }
}

impl Future for BatchDelivery {
    type Output = Result<BatchMetadata, ClientError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (completion, count) = (&this.completion, this.record_count);
        completion
            .poll(cx, &mut this.slot)
            .map(|outcome| match outcome {
                Ok(base) => Ok(BatchMetadata {
                    topic: completion.topic.clone(),
                    partition: completion.partition,
                    base_offset: *base,
                    record_count: count,
                }),
                Err(e) => Err(e.clone()),
            })
    }
}

/// Encoded records waiting to become a batch.
struct OpenBatch {
    records: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    /// The wall clock when the batch opened: the timestamp of its records that have none.
    opened_ms: i64,
    created: Instant,
    completion: Arc<Completion>,
}

impl OpenBatch {
    fn bytes(&self) -> usize {
        BATCH_HEADER_BYTES + self.records.len()
    }

    fn seal(self) -> SealedBatch {
        SealedBatch {
            records: self.records.freeze(),
            count: self.count,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            created: self.created,
            completion: self.completion,
        }
    }
}

/// A batch's records, encoded uncompressed, with what its header says about them.
pub(crate) struct SealedBatch {
    pub records: Bytes,
    pub count: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// When its first record was accepted: the delivery timeout runs from here.
    pub created: Instant,
    pub completion: Arc<Completion>,
}

impl Drop for SealedBatch {
    fn drop(&mut self) {
        // A batch dropped without an outcome (the worker stopped): its futures fail.
        self.completion.complete(Err(ClientError::Closed));
    }
}

/// Encodes `records` as the records section of one batch; records without a timestamp take
/// `now_ms`.
pub(crate) fn encode_batch(
    topic: &Arc<str>,
    partition: u32,
    records: &[ProducerRecord],
    now_ms: i64,
) -> SealedBatch {
    let base_timestamp = records[0].timestamp_ms.unwrap_or(now_ms);
    let mut max_timestamp = i64::MIN;
    let sizes: usize = records.iter().map(|r| r.size_estimate()).sum();
    let mut buf = BytesMut::with_capacity(sizes);
    for (i, record) in records.iter().enumerate() {
        let timestamp = record.timestamp_ms.unwrap_or(now_ms);
        record.with_input(timestamp, |input| {
            encode_record(
                &mut buf,
                input,
                i as i32,
                timestamp.saturating_sub(base_timestamp),
            )
        });
        max_timestamp = max_timestamp.max(timestamp);
    }
    SealedBatch {
        records: buf.freeze(),
        count: records.len() as i32,
        base_timestamp,
        max_timestamp,
        created: Instant::now(),
        completion: Completion::new(topic.clone(), partition),
    }
}

/// Limits of one partition's queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueLimits {
    pub batch_bytes: usize,
    pub queue_records_max: usize,
    /// Largest uncompressed batch to build (None: no known limit).
    pub batch_bytes_cap: Option<usize>,
    /// The topic's `message_bytes_max`: a record larger than this in a batch of its own is
    /// refused.
    pub message_bytes_max: Option<usize>,
    pub linger: Duration,
}

#[derive(Default)]
struct QueueState {
    open: Option<OpenBatch>,
    ready: VecDeque<SealedBatch>,
    /// Records in `open` and `ready`: what `send` waits on when it reaches the limit.
    queued_records: usize,
    /// Batches sealed so far, and how many of them the worker has finished.
    sealed: u64,
    finished: u64,
    /// Flushes waiting for `finished` to reach their count.
    flushes: Vec<(u64, oneshot::Sender<()>)>,
    /// Size the last batch reached: the next one's starting buffer.
    last_batch_bytes: usize,
    closed: bool,
}

impl Drop for QueueState {
    fn drop(&mut self) {
        // The producer and the worker are both gone with records unsent: their futures fail
        // (sealed batches fail as they drop).
        if let Some(open) = &self.open {
            open.completion.complete(Err(ClientError::Closed));
        }
    }
}

impl QueueState {
    fn seal_open(&mut self) {
        if let Some(open) = self.open.take() {
            self.last_batch_bytes = open.records.len();
            self.ready.push_back(open.seal());
            self.sealed += 1;
        }
    }
}

/// What the worker should do next.
pub(crate) enum Next {
    Send(SealedBatch),
    /// Nothing to send before this instant (or before a wake-up, if `None`).
    Wait(Option<Instant>),
    /// Closed and empty.
    Done,
}

pub(crate) struct PartitionQueue {
    topic: Arc<str>,
    partition: u32,
    limits: QueueLimits,
    state: Mutex<QueueState>,
    /// Wakes the worker (a stored permit, so a wake-up between its look and its wait is kept).
    pub wake_worker: Notify,
    /// Wakes senders waiting for room.
    room: Notify,
}

impl PartitionQueue {
    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub fn new(topic: Arc<str>, partition: u32, limits: QueueLimits) -> PartitionQueue {
        PartitionQueue {
            topic,
            partition,
            limits,
            state: Mutex::new(QueueState::default()),
            wake_worker: Notify::new(),
            room: Notify::new(),
        }
    }

    /// Appends a record to the open batch, waiting while the queue is full.
    pub async fn push(&self, record: &ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the look, so a release between the two is not missed.
            room.as_mut().enable();
            if let Some(delivery) = self.try_push(record)? {
                return Ok(delivery);
            }
            room.await;
        }
    }

    /// Appends a record unless the queue is full (`None`).
    pub fn try_push(&self, record: &ProducerRecord) -> Result<Option<DeliveryFuture>, ClientError> {
        let limits = self.limits;
        let mut state = self.state.lock();
        if state.closed {
            return Err(ClientError::Closed);
        }
        if state.queued_records >= limits.queue_records_max {
            return Ok(None);
        }
        let mut wake = false;
        loop {
            let Some(open) = state.open.as_mut() else {
                match self.open_batch(record, state.last_batch_bytes) {
                    Ok(open) => state.open = Some(open),
                    Err(too_large) => return Ok(Some(too_large)),
                }
                wake = true;
                continue;
            };
            let timestamp = record.timestamp_ms.unwrap_or(open.opened_ms);
            let index = open.count;
            let before = open.records.len();
            // Encoded first and measured after: sizing it beforehand would encode it twice.
            record.with_input(timestamp, |input| {
                encode_record(
                    &mut open.records,
                    input,
                    index,
                    timestamp.saturating_sub(open.base_timestamp),
                )
            });
            let over = index > 0 && limits.batch_bytes_cap.is_some_and(|cap| open.bytes() > cap);
            if over {
                // It starts the next batch instead (a record alone goes whatever its size:
                // one too large for the topic was refused when its batch opened).
                open.records.truncate(before);
                state.seal_open();
                wake = true;
                continue;
            }
            open.count += 1;
            open.max_timestamp = open.max_timestamp.max(timestamp);
            break;
        }
        let open = state.open.as_mut().expect("a record was just added");
        let delivery = DeliveryFuture(DeliveryState::Waiting {
            completion: open.completion.clone(),
            index: (open.count - 1) as u32,
            slot: None,
        });
        let full = open.bytes() >= limits.batch_bytes;
        state.queued_records += 1;
        if full {
            state.seal_open();
            wake = true;
        }
        drop(state);
        if wake {
            self.wake_worker.notify_one();
        }
        Ok(Some(delivery))
    }

    /// A new batch for `record`, or its failed future if it is too large for the topic even
    /// alone.
    fn open_batch(
        &self,
        record: &ProducerRecord,
        last_batch_bytes: usize,
    ) -> Result<OpenBatch, DeliveryFuture> {
        let opened_ms = now_ms();
        let timestamp = record.timestamp_ms.unwrap_or(opened_ms);
        let size = record.with_input(timestamp, |input| record_bytes(input, 0, 0));
        if let Some(limit) = self.limits.message_bytes_max {
            let alone = BATCH_HEADER_BYTES + size;
            if alone > limit {
                return Err(DeliveryFuture::failed(ClientError::RecordTooLarge {
                    topic: self.topic.to_string(),
                    bytes: alone,
                    limit,
                }));
            }
        }
        let batch_bytes = self.limits.batch_bytes.max(BATCH_BUFFER_BYTES_MIN);
        let capacity = last_batch_bytes
            .clamp(BATCH_BUFFER_BYTES_MIN, batch_bytes)
            .max(size);
        Ok(OpenBatch {
            records: BytesMut::with_capacity(capacity),
            count: 0,
            base_timestamp: timestamp,
            max_timestamp: timestamp,
            opened_ms,
            created: Instant::now(),
            completion: Completion::new(self.topic.clone(), self.partition),
        })
    }

    /// Queues a batch built by `send_batch` after everything queued before it, waiting while
    /// the queue is full (a batch larger than the whole queue waits for it to empty).
    pub async fn push_sealed(&self, batch: SealedBatch) -> Result<BatchDelivery, ClientError> {
        let count = batch.count as usize;
        let mut batch = Some(batch);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.state.lock();
                if state.closed {
                    return Err(ClientError::Closed);
                }
                let fits = state.queued_records == 0
                    || state.queued_records.saturating_add(count) <= self.limits.queue_records_max;
                if fits {
                    let batch = batch.take().expect("pushed once");
                    let delivery = BatchDelivery {
                        completion: batch.completion.clone(),
                        record_count: count as u32,
                        slot: None,
                    };
                    // Order: what `send` gathered so far goes first.
                    state.seal_open();
                    state.ready.push_back(batch);
                    state.sealed += 1;
                    state.queued_records = state.queued_records.saturating_add(count);
                    drop(state);
                    self.wake_worker.notify_one();
                    return Ok(delivery);
                }
            }
            room.await;
        }
    }

    /// The next batch to send: a sealed one, or the open one once its linger is over (or a
    /// flush or close asks for it).
    pub fn next(&self) -> Next {
        let mut state = self.state.lock();
        if state.ready.is_empty() {
            let Some(open) = &state.open else {
                return if state.closed {
                    Next::Done
                } else {
                    Next::Wait(None)
                };
            };
            let deadline = open.created + self.limits.linger;
            if !state.closed && deadline > Instant::now() {
                return Next::Wait(Some(deadline));
            }
            state.seal_open();
        }
        let batch = state.ready.pop_front().expect("one is ready");
        state.queued_records = state.queued_records.saturating_sub(batch.count as usize);
        drop(state);
        self.room.notify_waiters();
        Next::Send(batch)
    }

    /// The worker finished a batch (in the order they were sealed): answers the flushes it
    /// completes.
    pub fn finished_one(&self) {
        let mut state = self.state.lock();
        state.finished += 1;
        let finished = state.finished;
        let flushes = std::mem::take(&mut state.flushes);
        let (done, waiting): (Vec<_>, Vec<_>) =
            flushes.into_iter().partition(|(upto, _)| *upto <= finished);
        state.flushes = waiting;
        drop(state);
        for (_, tx) in done {
            let _ = tx.send(());
        }
    }

    /// Sends what is gathered now, and resolves once every batch queued so far is finished.
    pub fn flush(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.state.lock();
        state.seal_open();
        let upto = state.sealed;
        if state.finished >= upto {
            let _ = tx.send(());
        } else {
            state.flushes.push((upto, tx));
        }
        drop(state);
        self.wake_worker.notify_one();
        rx
    }

    /// No more records: the worker sends what is queued, then stops.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.wake_worker.notify_one();
        self.room.notify_waiters();
    }
}
