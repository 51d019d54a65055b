//! Data handlers: produce, fetch, list offsets, producer ids; each from a decoded request to
//! its response. Only a partition's leader serves it (others answer `NOT_LEADER` naming the
//! leader). Slow disk work runs on blocking threads (a produce's page-cache write does not:
//! see [`write_partition_async`]); no lock is held across an `.await`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::batch::field;
use tokio::sync::OwnedSemaphorePermit;

use crate::topic::TOPIC_MESSAGE_BYTES_MAX;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::fetch_frame::{read_records, Records};
use crate::partition::{Partition, PartitionError, PendingAppend, ProduceContext};
use crate::state::BrokerState;

/// Most partitions one produce, fetch or list-offsets request may name: each costs the
/// broker a result (and a watch while a fetch waits), so the count is bounded, not only the
/// frame's bytes.
pub const REQUEST_PARTITIONS_MAX: usize = 10_000;

fn ok() -> Option<m::Error> {
    None
}

/// The refusal of a request naming more than [`REQUEST_PARTITIONS_MAX`] partitions.
fn too_many_partitions(count: usize) -> Option<m::Error> {
    (count > REQUEST_PARTITIONS_MAX).then(|| {
        ErrorCode::INVALID_REQUEST.with_message(format!(
            "{count} partitions in one request; at most {REQUEST_PARTITIONS_MAX}"
        ))
    })
}

fn err(code: ErrorCode, message: impl Into<String>) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// Runs blocking disk work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, m::Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("worker failed: {e}")))
}

/// One partition of a produce request after its write: where to wait, or why it failed.
/// Topic, partition, the leader to name with a `NOT_LEADER` (0 otherwise), and the outcome.
type PartitionWrite = (
    String,
    u32,
    u32,
    Result<(Arc<Partition>, PendingAppend), m::Error>,
);

/// The current leader to name in a result carrying `error` (only with `NOT_LEADER`).
fn leader_hint(state: &BrokerState, topic: &str, partition: u32, error: &m::Error) -> u32 {
    if error.code == u32::from(ErrorCode::NOT_LEADER.code()) {
        state.current_leader(topic, partition)
    } else {
        0
    }
}

/// A produce request whose batches are written and that waits for the flush policy.
pub struct PreparedProduce {
    state: Arc<BrokerState>,
    acks: i32,
    timeout: Duration,
    partitions: Vec<PartitionWrite>,
}

impl PreparedProduce {
    pub fn acks(&self) -> i32 {
        self.acks
    }
}

/// The first half of a produce: checks and writes every partition's batches, in request order.
/// The connection runs this before reading its next frame, so the produce requests of one
/// connection are stored in the order they were sent, whatever their `acks`.
pub async fn produce_write(
    state: Arc<BrokerState>,
    req: m::ProduceRequest,
) -> Result<PreparedProduce, m::ProduceResponse> {
    if !matches!(req.acks, -1..=1) {
        return Err(m::ProduceResponse {
            error: err(
                ErrorCode::INVALID_REQUIRED_ACKS,
                format!("acks must be -1, 0 or 1, got {}", req.acks),
            ),
            partitions: vec![],
        });
    }
    // 0 (proto3's "absent") is the default wait, not an instant timeout.
    let timeout = match req.timeout_ms {
        0 => PRODUCE_TIMEOUT_DEFAULT,
        ms => Duration::from_millis(u64::from(ms)),
    }
    .min(state.config.produce_timeout_max);
    let acks = req.acks;
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return Err(m::ProduceResponse {
            error: Some(refusal),
            partitions: vec![],
        });
    }
    await_producer_ids(&state, &req).await;
    let producer_id_end = state.cluster.image().next_producer_id;
    let mut partitions = Vec::with_capacity(req.partitions.len());
    for p in req.partitions {
        let outcome = match state.led_partition(&p.topic, p.partition) {
            Err(e) => Err(e),
            Ok((partition, epoch))
                if !state.cluster.session_current() || partition.leading_epoch() != Some(epoch) =>
            {
                Err(session_lost(&p.topic, p.partition))
            }
            Ok((partition, _)) if acks == -1 && !state.enough_in_sync(&partition) => {
                Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
                    "{}/{}: fewer in-sync replicas than min_insync_replicas",
                    p.topic, p.partition
                )))
            }
            Ok((partition, leader_epoch)) => {
                let context = ProduceContext {
                    leader_epoch,
                    producer_id_end,
                    now_ms: crate::partition::now_ms(),
                };
                write_partition_async(&partition, p.records, context)
                    .await
                    .map(|pending| (partition, pending))
            }
        };
        let hint = match &outcome {
            Err(e) => leader_hint(&state, &p.topic, p.partition, e),
            Ok(_) => 0,
        };
        partitions.push((p.topic, p.partition, hint, outcome));
    }
    Ok(PreparedProduce {
        state,
        acks,
        timeout,
        partitions,
    })
}

/// [`write_partition`] from the connection's task: the checks and the page-cache write run
/// right here, with no hop to the blocking pool, unless they may block (a compressed batch's
/// decompression slot, a segment roll's fsyncs, a writer holding the partition across one);
/// then the rest of the work goes to a blocking thread.
async fn write_partition_async(
    partition: &Arc<Partition>,
    records: Bytes,
    context: ProduceContext,
) -> Result<PendingAppend, m::Error> {
    let batch_max = partition.log.batch_bytes_max();
    if crate::partition::check_may_block(&records) {
        let p = partition.clone();
        return blocking(move || write_partition(&p, records, context)).await?;
    }
    let to_wire = |PartitionError { code, message }| code.with_message(message);
    let checked = partition
        .check(records, batch_max, &context)
        .map_err(to_wire)?;
    if let Some(pending) = partition.try_append(&checked, context).map_err(to_wire)? {
        return Ok(pending);
    }
    let p = partition.clone();
    blocking(move || p.append(&checked, context))
        .await?
        .map_err(to_wire)
}

/// The second half: waits (concurrently across partitions) for each write to meet its flush
/// policy, and builds the response.
pub async fn produce_finish(prepared: PreparedProduce) -> m::ProduceResponse {
    let (timeout, acks) = (prepared.timeout, prepared.acks);
    let state = prepared.state;
    let mut results = Vec::with_capacity(prepared.partitions.len());
    if prepared.partitions.len() == 1 {
        // Nothing to wait for concurrently: no task to spawn and hand the wait to.
        for (topic, partition, hint, written) in prepared.partitions {
            let outcome = finish_partition(state.clone(), acks, timeout, written).await;
            results.push(partition_result(topic, partition, hint, outcome));
        }
    } else {
        let waits: Vec<_> = prepared
            .partitions
            .into_iter()
            .map(|(topic, partition, hint, written)| {
                let task = tokio::spawn(finish_partition(state.clone(), acks, timeout, written));
                (topic, partition, hint, task)
            })
            .collect();
        for (topic, partition, hint, task) in waits {
            let outcome = task.await.unwrap_or_else(|e| {
                Err(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
            });
            results.push(partition_result(topic, partition, hint, outcome));
        }
    }
    for result in &results {
        if let Some(error) = &result.error {
            let requests = &state.connections.requests;
            requests.record_error(tinymq_protocol::OpCode::Produce, error.code);
        }
    }
    m::ProduceResponse {
        error: ok(),
        partitions: results,
    }
}

/// One partition's wait for its flush policy (and, with `acks = -1`, its in-sync replicas),
/// within `timeout`: its base offset and log start offset, or why not.
async fn finish_partition(
    state: Arc<BrokerState>,
    acks: i32,
    timeout: Duration,
    written: Result<(Arc<Partition>, PendingAppend), m::Error>,
) -> Result<(i64, i64), m::Error> {
    let (p, pending) = written?;
    let log_start = p.log.log_start_offset();
    let partition = p.clone();
    let work = async move {
        let offset = p.finish_async(pending).await;
        if acks == -1 && offset.is_ok() {
            await_replicas(&partition, pending.end_offset, pending.leader_epoch).await?;
            // The ISR may have shrunk below the minimum while waiting: the write is then on
            // too few disks to acknowledge.
            if !state.enough_in_sync(&partition) {
                return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
                    "{}/{}: written, but fewer in-sync replicas than min_insync_replicas hold it",
                    partition.topic, partition.index
                )));
            }
        }
        // A leader that lost its MetaServer session may have been replaced.
        if offset.is_ok() && !state.cluster.session_current() {
            return Err(session_lost(&partition.topic, partition.index));
        }
        Ok(offset)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(Ok(offset))) => Ok((offset, log_start)),
        Ok(Ok(Err(PartitionError { code, message }))) => Err(code.with_message(message)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
            "append not confirmed within {} ms; it may still complete",
            timeout.as_millis()
        ))),
    }
}

fn partition_result(
    topic: String,
    partition: u32,
    current_leader: u32,
    outcome: Result<(i64, i64), m::Error>,
) -> m::ProducePartitionResult {
    let (error, base_offset, log_start_offset) = match outcome {
        Ok((offset, log_start)) => (None, offset, log_start),
        Err(e) => (Some(e), -1, -1),
    };
    m::ProducePartitionResult {
        topic,
        partition,
        error,
        base_offset,
        log_append_time_ms: -1,
        log_start_offset,
        current_leader,
    }
}

/// A leader whose MetaServer session is not confirmed (cut off, or paused and resumed) neither
/// takes nor acknowledges writes: another broker may already lead the partition.
fn session_lost(topic: &str, partition: u32) -> m::Error {
    ErrorCode::NOT_LEADER.with_message(format!(
        "{topic}/{partition}: this broker cannot confirm its MetaServer session, or has not taken the leadership its metadata names yet; retry"
    ))
}

/// Waits until the high watermark passes `end_offset` (every in-sync replica holds the write
/// durably) while this broker still leads the partition in `leader_epoch`, the epoch the write
/// was taken in; fails once it does not: the write may then be lost, and the producer retries
/// against the new leader (idempotence makes that safe). Leadership is checked after the high
/// watermark too: a broker deposed meanwhile learns its high watermark from the new leader,
/// whose records may sit where this write was.
pub(crate) async fn await_replicas(
    partition: &Partition,
    end_offset: i64,
    leader_epoch: u32,
) -> Result<(), m::Error> {
    let mut hw = partition.watch_high_watermark();
    loop {
        let reached = *hw.borrow_and_update() >= end_offset;
        // Roles only move to higher epochs, so leading in `leader_epoch` now means leading in
        // it all along: the high watermark seen is this leadership's.
        if partition.leading_epoch() != Some(leader_epoch) {
            return Err(ErrorCode::NOT_LEADER.with_message(format!(
                "{}/{}: leadership moved before the in-sync replicas confirmed the write; retry",
                partition.topic, partition.index
            )));
        }
        if reached {
            return Ok(());
        }
        // Woken by the high watermark, and at least every 100 ms to notice a lost leadership.
        let _ = tokio::time::timeout(Duration::from_millis(100), hw.changed()).await;
    }
}

/// How long a produce waits for its flush policy when its `timeout_ms` is 0: like Kafka's
/// `request.timeout.ms`.
pub const PRODUCE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// How long a produce naming a producer id this broker's image does not cover yet waits for
/// the image to catch up: the id may come from a block another broker was just given, and the
/// image here follows the MetaServer by a long poll.
const PRODUCER_ID_VISIBLE_WAIT: Duration = Duration::from_secs(2);

/// Waits (up to [`PRODUCER_ID_VISIBLE_WAIT`]) until this broker's image covers the largest
/// producer id the request's batches carry, so that an id handed out a moment ago is not
/// refused as never handed out; an id that really never was is refused after the wait.
async fn await_producer_ids(state: &BrokerState, req: &m::ProduceRequest) {
    let newest = req
        .partitions
        .iter()
        .filter_map(|p| p.records.get(field::PRODUCER_ID..field::PRODUCER_ID + 8))
        .filter_map(|b| b.try_into().ok().map(i64::from_be_bytes))
        .max();
    let Some(newest) = newest.filter(|id| *id >= state.cluster.image().next_producer_id) else {
        return;
    };
    state
        .cluster
        .wait_until(PRODUCER_ID_VISIBLE_WAIT, |image| {
            image.next_producer_id > newest
        })
        .await;
}

/// The produce path of one partition once its leadership is checked: every check, then the
/// write (the wait for the flush policy is [`Partition::finish`]).
pub(crate) fn write_partition(
    partition: &Partition,
    records: Bytes,
    context: ProduceContext,
) -> Result<PendingAppend, m::Error> {
    let batch_max = partition.log.batch_bytes_max();
    partition
        .write(records, batch_max, context)
        .map_err(|PartitionError { code, message }| code.with_message(message))
}

/// The fetch path of one partition once its leadership is checked: whole batches from
/// `offset` below the high watermark, within `bytes_max` (one batch at least).
pub(crate) fn read_partition(
    partition: &Partition,
    offset: i64,
    bytes_max: usize,
) -> Result<Bytes, m::Error> {
    // The fetch path's own read (`fetch_frame::read_records`) without its `sendfile` form,
    // which needs the partition shared.
    let limit = Some(partition.high_watermark());
    let read = partition
        .log
        .read_slice(offset, bytes_max, limit)
        .map_err(|e| e.error_code().with_message(e.to_string()))?;
    match read.slice {
        Some(slice) => crate::fetch_frame::copy_slice(partition, &slice, offset, bytes_max, limit),
        None => Ok(Bytes::new()),
    }
}

/// The list-offsets path of one partition: `-1` latest (the high watermark), `-2` earliest,
/// otherwise the first record at or after the timestamp, with its timestamp (`-1, -1` when
/// none is visible). Other negative timestamps are refused.
pub(crate) fn list_partition_offset(
    partition: &Partition,
    timestamp: i64,
) -> Result<(i64, i64), m::Error> {
    match timestamp {
        -1 => Ok((partition.high_watermark(), -1)),
        -2 => Ok((partition.log.log_start_offset(), -1)),
        // Kafka gives other negative values meanings tinymq does not have (-3: the record with
        // the largest timestamp, …): refused rather than searched for as times.
        ts if ts < 0 => Err(ErrorCode::INVALID_REQUEST.with_message(format!(
            "timestamp {ts}: the negative timestamps are -1 (latest) and -2 (earliest)"
        ))),
        // A lookup may decompress a batch: it takes one of the broker's decompression slots.
        ts => match crate::partition::with_decompression_slot(|| {
            partition.log.offset_for_timestamp(ts)
        }) {
            Ok(Some((offset, timestamp))) if offset < partition.high_watermark() => {
                Ok((offset, timestamp))
            }
            Ok(_) => Ok((-1, -1)),
            Err(e) => Err(e.error_code().with_message(e.to_string())),
        },
    }
}

/// One partition's answer to a fetch and its records (`records` of the result stays empty).
pub(crate) type PartitionRead = (m::FetchPartitionResult, Records);

/// Reads every requested partition once, within the byte budgets. No per-record work: each
/// partition's batches are located by walking batch headers from the nearest index entry,
/// and then either left in the file (sent later with `sendfile`) or copied out in one read.
/// A filtered fetch (`filter`, with each partition's scan position) reads through
/// [`crate::filtered_fetch`] instead, which does look at every record.
fn read_partitions(
    state: &BrokerState,
    req: &m::FetchRequest,
    filter: Option<(&tinymq_filter::Filter, &[i64])>,
) -> (Vec<PartitionRead>, usize) {
    let mut budget = fetch_budget(state, req);
    let mut scan_left = crate::filtered_fetch::FILTERED_FETCH_SCAN_BYTES_MAX;
    let mut total = 0;
    let results = req
        .partitions
        .iter()
        .enumerate()
        .map(|(i, fp)| {
            let read = match filter {
                _ if req.replica_id != 0 => {
                    crate::replica::serve::read_for_follower(state, fp, budget)
                }
                Some((filter, positions)) => {
                    let position = positions.get(i).copied().unwrap_or(fp.offset);
                    crate::filtered_fetch::read_filtered(
                        state,
                        fp,
                        position,
                        budget,
                        filter,
                        &mut scan_left,
                    )
                }
                None => read_for_consumer(state, fp, budget),
            };
            budget = budget.saturating_sub(read.1.len());
            total += read.1.len();
            read
        })
        .collect();
    (results, total)
}

/// The head of a consumer's fetch result (high watermark, log start) and the led partition it
/// names; no partition (and the result finished with the error) when it is not led here.
pub(crate) fn consumer_partition(
    state: &BrokerState,
    fp: &m::FetchPartition,
) -> (m::FetchPartitionResult, Option<Arc<Partition>>) {
    let mut result = m::FetchPartitionResult {
        topic: fp.topic.clone(),
        partition: fp.partition,
        error: ok(),
        high_watermark: -1,
        log_start_offset: -1,
        records: Bytes::new(),
        current_leader: 0,
        ..Default::default()
    };
    let partition = match state.led_partition(&fp.topic, fp.partition) {
        Ok((partition, _)) => partition,
        Err(e) => {
            result.current_leader = leader_hint(state, &fp.topic, fp.partition, &e);
            result.error = Some(e);
            return (result, None);
        }
    };
    result.high_watermark = partition.high_watermark();
    result.log_start_offset = partition.log.log_start_offset();
    (result, Some(partition))
}

/// One partition of a consumer's fetch: batches below the high watermark, within `budget`
/// and the partition's own bound.
fn read_for_consumer(state: &BrokerState, fp: &m::FetchPartition, budget: usize) -> PartitionRead {
    let empty = Records::Bytes(Bytes::new());
    let (mut result, partition) = match consumer_partition(state, fp) {
        (result, Some(partition)) => (result, partition),
        (refused, None) => return (refused, empty),
    };
    if budget == 0 {
        return (result, empty);
    }
    let limit = match fp.partition_bytes_max {
        0 => budget,
        asked => (asked as usize).min(budget),
    };
    match read_records(&partition, fp.offset, limit, Some(result.high_watermark)) {
        Ok(records) => (result, records),
        Err(e) => {
            result.error = Some(e);
            (result, empty)
        }
    }
}

/// Waits until any of the high watermarks moves, or until `deadline`.
async fn wait_for_any(
    mut watches: Vec<tokio::sync::watch::Receiver<i64>>,
    deadline: tokio::time::Instant,
) {
    let mut changes: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = watches
        .iter_mut()
        .map(|w| {
            let mut w = w.clone();
            Box::pin(async move {
                let _ = w.changed().await;
            }) as Pin<Box<dyn Future<Output = ()> + Send>>
        })
        .collect();
    let any = std::future::poll_fn(|cx| {
        if changes.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let _ = tokio::time::timeout_at(deadline, any).await;
}

/// A fetch's answer before encoding: the response's error and each partition's result with
/// its records (see [`crate::fetch_frame::encode`]).
pub(crate) struct FetchAnswer {
    pub error: Option<m::Error>,
    pub partitions: Vec<PartitionRead>,
}

/// What a fetch's answer holds: its share of the broker's fetch memory (release it once the
/// response is encoded) and the connection's turn for fetch responses (hold it until the
/// response is written).
pub struct FetchHold {
    pub memory: OwnedSemaphorePermit,
    pub turn: OwnedSemaphorePermit,
}

/// The record bytes one fetch may return: its `max_bytes` (0 = the cap) within the broker's
/// `fetch_bytes_max`.
fn fetch_budget(state: &BrokerState, req: &m::FetchRequest) -> usize {
    let fetch_bytes_max = state.config.fetch_bytes_max as usize;
    match req.max_bytes {
        0 => fetch_bytes_max,
        asked => (asked as usize).min(fetch_bytes_max),
    }
}

/// Answers a fetch, with the reservation of the broker's fetch memory its records were read
/// under (hold it until the response is encoded). The reservation is taken for each read (not
/// while a long poll waits) and covers the budget plus one whole batch, the most a read
/// returns; it is cut to the bytes actually read.
///
/// `turns` is the connection's one-at-a-time permit for fetch responses (see
/// `connection.rs`): taken before each read, given back while a long poll waits, and returned
/// in the [`FetchHold`], to be held until the response is written.
pub(crate) async fn fetch(
    state: Arc<BrokerState>,
    req: m::FetchRequest,
    turns: Arc<tokio::sync::Semaphore>,
) -> (FetchAnswer, Option<FetchHold>) {
    let failed = |error| {
        let answer = FetchAnswer {
            error: Some(error),
            partitions: vec![],
        };
        (answer, None)
    };
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return failed(refusal);
    }
    let mut filter_scan = match crate::filtered_fetch::request_filter(&req) {
        Ok(scan) => scan,
        Err(refusal) => return failed(refusal),
    };
    let wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(state.config.fetch_wait_max);
    let deadline = tokio::time::Instant::from_std(Instant::now() + wait);
    let min_bytes = req.min_bytes.max(1) as usize;
    let reserve = fetch_budget(&state, &req)
        .saturating_add(TOPIC_MESSAGE_BYTES_MAX as usize)
        .min(state.config.fetch_memory_bytes_max as usize);
    if req.replica_id != 0 {
        for fp in &req.partitions {
            crate::replica::serve::note_follower(&state, req.replica_id, fp);
        }
    }
    let req = Arc::new(req);
    let mut woken = false;
    loop {
        // Subscribe before reading, so an append between the read and the wait is not missed.
        // Consumers wait for the high watermark, followers for the log end.
        let watches: Vec<_> = req
            .partitions
            .iter()
            .filter_map(|fp| {
                if req.replica_id != 0 {
                    state.led_partition_any(&fp.topic, fp.partition).ok()
                } else {
                    state.led_partition(&fp.topic, fp.partition).ok()
                }
            })
            .map(|(p, _)| p)
            .map(|p| {
                let mut w = if req.replica_id != 0 {
                    p.watch_log_end()
                } else {
                    p.watch_high_watermark()
                };
                w.borrow_and_update();
                w
            })
            .collect();
        let Ok(turn) = turns.clone().acquire_owned().await else {
            return failed(ErrorCode::SHUTTING_DOWN.to_wire());
        };
        let Ok(mut reservation) = state
            .fetch_memory
            .clone()
            .acquire_many_owned(u32::try_from(reserve).unwrap_or(u32::MAX))
            .await
        else {
            return failed(ErrorCode::SHUTTING_DOWN.to_wire());
        };
        // A read after a wake-up runs inline: it reads only what was appended during the
        // wait, written through the page cache a moment ago, so it costs a few `pread`s of
        // cached pages, less than the hop to a blocking thread and back (which on two busy
        // cores is what the e2e tail was made of). The first read may reach old, cold data
        // anywhere in the log and goes to the blocking pool.
        // A filtered read looks at every record it scans: always on a blocking thread.
        let (results, total) = if woken && filter_scan.is_none() {
            read_partitions(&state, &req, None)
        } else {
            let (s, r) = (state.clone(), req.clone());
            let filter = filter_scan
                .as_ref()
                .map(|scan| (scan.filter.clone(), scan.positions.clone()));
            let read = move || {
                let filter = filter.as_ref().map(|(f, p)| (f.as_ref(), p.as_slice()));
                read_partitions(&s, &r, filter)
            };
            match blocking(read).await {
                Ok(read) => read,
                Err(e) => return failed(e),
            }
        };
        let any_error = results
            .iter()
            .any(|(r, _)| r.error.is_some() || r.diverging_epoch.is_some());
        let filtered_answer = match filter_scan.as_mut() {
            Some(scan) => {
                scan.advance(&results);
                crate::filtered_fetch::answer_now(&results)
            }
            None => false,
        };
        if total >= min_bytes
            || filtered_answer
            || any_error
            || watches.is_empty()
            || tokio::time::Instant::now() >= deadline
        {
            // Keep only what the records hold (a read never exceeds the reservation).
            drop(reservation.split(reservation.num_permits().saturating_sub(total)));
            if req.replica_id == 0 {
                count_consumed(&state, &results);
            }
            let answer = FetchAnswer {
                error: ok(),
                partitions: results,
            };
            let hold = FetchHold {
                memory: reservation,
                turn,
            };
            return (answer, Some(hold));
        }
        drop((reservation, turn));
        wait_for_any(watches, deadline).await;
        woken = true;
    }
}

/// A consumer's fetch answer, for metrics: records and bytes out, and each partition's error.
fn count_consumed(state: &BrokerState, results: &[PartitionRead]) {
    for (result, records) in results {
        if let Some(error) = &result.error {
            let requests = &state.connections.requests;
            requests.record_error(tinymq_protocol::OpCode::Fetch, error.code);
        }
        let bytes = records.len() as u64;
        if bytes > 0 {
            let partition = state.local_partition(&result.topic, result.partition);
            let traffic = partition.as_deref().map(|p| &p.traffic);
            crate::stats::consumed(traffic, bytes, records.record_count());
        }
    }
}

pub async fn list_offsets(
    state: Arc<BrokerState>,
    req: m::ListOffsetsRequest,
) -> m::ListOffsetsResponse {
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return m::ListOffsetsResponse {
            error: Some(refusal),
            partitions: vec![],
        };
    }
    let result = blocking(move || {
        req.partitions
            .into_iter()
            .map(|lp| {
                let mut out = m::ListOffsetsPartitionResult {
                    topic: lp.topic.clone(),
                    partition: lp.partition,
                    error: ok(),
                    offset: -1,
                    timestamp: -1,
                    current_leader: 0,
                };
                let p = match state.led_partition(&lp.topic, lp.partition) {
                    Ok((p, _)) => p,
                    Err(e) => {
                        out.current_leader = leader_hint(&state, &lp.topic, lp.partition, &e);
                        out.error = Some(e);
                        return out;
                    }
                };
                match list_partition_offset(&p, lp.timestamp) {
                    Ok((offset, timestamp)) => (out.offset, out.timestamp) = (offset, timestamp),
                    Err(e) => out.error = Some(e),
                }
                out
            })
            .collect()
    })
    .await;
    match result {
        Ok(partitions) => m::ListOffsetsResponse {
            error: ok(),
            partitions,
        },
        Err(e) => m::ListOffsetsResponse {
            error: Some(e),
            partitions: vec![],
        },
    }
}

pub async fn init_producer_id(
    state: Arc<BrokerState>,
    req: m::InitProducerIdRequest,
) -> m::InitProducerIdResponse {
    if !req.transactional_id.is_empty() {
        return m::InitProducerIdResponse {
            error: err(
                ErrorCode::INVALID_REQUEST,
                "transactions are not supported yet",
            ),
            producer_id: -1,
            producer_epoch: -1,
        };
    }
    match state.cluster.allocate_producer_id().await {
        Ok(producer_id) => m::InitProducerIdResponse {
            error: ok(),
            producer_id,
            producer_epoch: 0,
        },
        Err(e) => m::InitProducerIdResponse {
            error: Some(e),
            producer_id: -1,
            producer_epoch: -1,
        },
    }
}
