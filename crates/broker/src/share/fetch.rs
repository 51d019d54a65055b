//! ShareFetch (docs/protocol.md, op 50): checks the request, applies its piggy-backed
//! acknowledgements, then acquires records for the member in each partition and reads the
//! whole batches that hold them, long-polling up to `max_wait_ms` when nothing can be
//! acquired (woken by new records and by released or expired records). The acquisitions'
//! delivery counts are fsynced in the state log before the records are handed out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use tinymq_auth::{AclOperation, Principal};
use tinymq_meta::authorize::Access;
use tinymq_protocol::batch::{batch_size, BatchHeader};
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::{AcquiredRange, SharePartition, StateRecord};

use super::{share_error, share_partition, SharedPartition};
use crate::state::BrokerState;

/// Longest long poll (`max_wait_ms` above it is cut to it).
pub const SHARE_FETCH_WAIT_MS_MAX: u32 = 30_000;
/// Records acquired per partition when `max_records` is 0.
pub const SHARE_FETCH_RECORDS_DEFAULT: u32 = 500;
/// Largest `max_records`: the in-flight bound of a share partition.
pub const SHARE_FETCH_RECORDS_MAX: u32 = tinymq_share::SHARE_IN_FLIGHT_RECORDS_MAX as u32;
/// Response bytes when `max_bytes` is 0 (at most the broker's `fetch_bytes_max`).
pub const SHARE_FETCH_BYTES_DEFAULT: u32 = 1 << 20;
/// Lock duration when `lock_ms` is 0.
pub const SHARE_LOCK_MS_DEFAULT: u32 = 30_000;
/// Longest lock a member may ask for.
pub const SHARE_LOCK_MS_MAX: u32 = 600_000;
/// Most partitions one share request may name.
pub const SHARE_REQUEST_PARTITIONS_MAX: usize = 1_000;
/// Most acknowledgements one share request may carry.
pub const SHARE_ACKNOWLEDGEMENTS_MAX: usize = 10_000;

/// What a fetch asks of each partition.
#[derive(Clone)]
struct Asked {
    member: Arc<str>,
    max_records: u32,
    lock_ms: u32,
}

/// One partition's acquisition: the batches, the acquired ranges, the log sequence to sync.
struct Acquisition {
    records: Bytes,
    acquired: Vec<AcquiredRange>,
    sequence: u64,
}

fn refuse(error: m::Error) -> m::ShareFetchResponse {
    m::ShareFetchResponse {
        error: Some(error),
        partitions: vec![],
    }
}

fn invalid(message: String) -> m::Error {
    ErrorCode::INVALID_REQUEST.with_message(message)
}

/// The request's own limits, checked before any work.
pub(crate) fn check_counts(partitions: usize, acknowledgements: usize) -> Result<(), m::Error> {
    if partitions > SHARE_REQUEST_PARTITIONS_MAX {
        return Err(invalid(format!(
            "{partitions} partitions in one request; at most {SHARE_REQUEST_PARTITIONS_MAX}"
        )));
    }
    if acknowledgements > SHARE_ACKNOWLEDGEMENTS_MAX {
        return Err(invalid(format!(
            "{acknowledgements} acknowledgements in one request; at most {SHARE_ACKNOWLEDGEMENTS_MAX}"
        )));
    }
    Ok(())
}

fn check(req: &m::ShareFetchRequest) -> Result<Asked, m::Error> {
    super::check_ids(&req.group_id, &req.member_id)?;
    check_counts(req.partitions.len(), req.acknowledgements.len())?;
    if req.max_records > SHARE_FETCH_RECORDS_MAX {
        return Err(invalid(format!(
            "max_records {} is above {SHARE_FETCH_RECORDS_MAX}",
            req.max_records
        )));
    }
    if req.lock_ms > SHARE_LOCK_MS_MAX {
        return Err(invalid(format!(
            "lock_ms {} is above {SHARE_LOCK_MS_MAX}",
            req.lock_ms
        )));
    }
    if !req.filter.is_empty() {
        // Until tinymq-filter lands: refused rather than ignored, so no record is delivered
        // that the member asked not to get.
        return Err(ErrorCode::INVALID_FILTER
            .with_message("filters on share fetches are not served by this broker yet"));
    }
    let or_default = |asked: u32, default: u32| if asked == 0 { default } else { asked };
    Ok(Asked {
        member: Arc::from(req.member_id.as_str()),
        max_records: or_default(req.max_records, SHARE_FETCH_RECORDS_DEFAULT),
        lock_ms: or_default(req.lock_ms, SHARE_LOCK_MS_DEFAULT),
    })
}

pub async fn share_fetch(
    state: Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    req: m::ShareFetchRequest,
) -> m::ShareFetchResponse {
    let asked = match check(&req) {
        Ok(asked) => asked,
        Err(e) => return refuse(e),
    };
    let acks = super::answer::apply_acknowledgements(
        &state,
        access,
        principal,
        &req.group_id,
        &req.member_id,
        &req.acknowledgements,
    )
    .await;
    let mut results: Vec<m::ShareFetchPartitionResult> = Vec::new();
    let mut targets: Vec<(usize, Arc<SharedPartition>)> = Vec::new();
    let mut last_auth = None;
    for fp in &req.partitions {
        let mut result = m::ShareFetchPartitionResult {
            topic: fp.topic.clone(),
            partition: fp.partition,
            ..Default::default()
        };
        let found = access
            .check_topic_cached(principal, &fp.topic, AclOperation::Read, &mut last_auth)
            .and_then(|()| share_partition(&state, &req.group_id, &fp.topic, fp.partition, true));
        match found {
            Ok(Some(shared)) => targets.push((results.len(), shared)),
            Ok(None) => {}
            Err(e) => {
                result.current_leader = leader_hint(&state, &fp.topic, fp.partition, &e);
                result.error = Some(e);
            }
        }
        results.push(result);
    }
    merge_acknowledgements(&mut results, acks);
    let budget = match req.max_bytes {
        0 => SHARE_FETCH_BYTES_DEFAULT,
        asked => asked,
    }
    .min(state.config.fetch_bytes_max) as usize;
    let wait_ms = req.max_wait_ms.min(SHARE_FETCH_WAIT_MS_MAX);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms.into());
    loop {
        // Subscribed before acquiring, so a release or append meanwhile is not missed.
        let mut watches: Vec<tokio::sync::watch::Receiver<i64>> = targets
            .iter()
            .map(|(_, s)| s.partition.watch_high_watermark())
            .collect();
        watches.push(state.share.watch_released());
        for w in &mut watches {
            w.borrow_and_update();
        }
        let acquired = acquire_all(&state, &targets, &asked, budget, &mut results).await;
        if acquired > 0 || targets.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        wait_for_any(watches, deadline).await;
    }
    m::ShareFetchResponse {
        error: None,
        partitions: results,
    }
}

/// Acquires in every target partition (within the shared byte budget) and fsyncs the
/// acquisitions; returns how many records were acquired.
async fn acquire_all(
    state: &Arc<BrokerState>,
    targets: &[(usize, Arc<SharedPartition>)],
    asked: &Asked,
    budget: usize,
    results: &mut [m::ShareFetchPartitionResult],
) -> u64 {
    let mut left = budget;
    let mut total = 0u64;
    for (index, shared) in targets {
        let Some(result) = results.get_mut(*index) else {
            continue;
        };
        if left == 0 {
            break;
        }
        let (s, shared2, asked2) = (state.clone(), shared.clone(), asked.clone());
        let outcome =
            tokio::task::spawn_blocking(move || acquire_partition(&s, &shared2, &asked2, left))
                .await
                .unwrap_or_else(|e| {
                    Err(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
                });
        let acquisition = match outcome {
            Ok(a) => a,
            Err(e) => {
                result.error = Some(e);
                continue;
            }
        };
        if let Err(e) = shared.log.sync(acquisition.sequence).await {
            result.error = Some(super::storage_error(&shared.key, &e));
            continue;
        }
        left = left.saturating_sub(acquisition.records.len());
        total += acquisition
            .acquired
            .iter()
            .map(|r| (r.last_offset - r.first_offset + 1) as u64)
            .sum::<u64>();
        if !acquisition.acquired.is_empty() {
            result.lock_deadline_ms = crate::partition::now_ms() + i64::from(asked.lock_ms);
        }
        result.records = acquisition.records;
        result.acquired = acquisition
            .acquired
            .into_iter()
            .map(|r| m::AcquiredRange {
                first_offset: r.first_offset,
                last_offset: r.last_offset,
                delivery_count: r.delivery_count,
            })
            .collect();
    }
    total
}

/// One partition's acquisition (blocking: it reads the log). Whatever the state machine
/// logged is appended even when reading fails half-way.
fn acquire_partition(
    state: &BrokerState,
    shared: &SharedPartition,
    asked: &Asked,
    budget: usize,
) -> Result<Acquisition, m::Error> {
    let max_attempts = shared.settings(state).max_delivery_attempts;
    let now = crate::partition::now_ms();
    let mut share = shared.state.lock();
    let mut log = Vec::new();
    let outcome = acquire_into(
        shared,
        &mut share,
        asked,
        budget,
        now,
        max_attempts,
        &mut log,
    );
    let sequence = shared.append(&state.share, &log)?;
    let (records, acquired) = outcome?;
    Ok(Acquisition {
        records,
        acquired,
        sequence,
    })
}

/// Follows the state's plan: reads the batches from each planned offset, skips offsets no
/// batch holds, acquires the rest, and keeps the batches holding acquired records.
fn acquire_into(
    shared: &SharedPartition,
    share: &mut SharePartition,
    asked: &Asked,
    budget: usize,
    now: i64,
    max_attempts: u32,
    log: &mut Vec<StateRecord>,
) -> Result<(Bytes, Vec<AcquiredRange>), m::Error> {
    let partition = &shared.partition;
    share.advance_to(partition.log.log_start_offset(), log);
    let lock_deadline_ms = now + i64::from(asked.lock_ms);
    let mut out = BytesMut::new();
    let mut acquired = Vec::new();
    // Two planned ranges may lie in one batch: it is sent once.
    let mut included = std::collections::BTreeSet::new();
    for (first, last) in share.plan(asked.max_records, partition.high_watermark()) {
        let mut next = first;
        while next <= last {
            let left = budget.saturating_sub(out.len());
            if left == 0 {
                return Ok((out.freeze(), acquired));
            }
            let bytes = crate::handlers::read_partition(partition, next, left)?;
            let before = next;
            let mut rest = &bytes[..];
            while let Some(header) = BatchHeader::new(rest) {
                let size = match batch_size(rest) {
                    Ok(Some(size)) if size <= rest.len() => size,
                    _ => break,
                };
                let (base, batch_last) = (header.base_offset(), header.last_offset());
                let batch = &rest[..size];
                rest = &rest[size..];
                if batch_last < next {
                    continue;
                }
                // No batch holds the offsets before `base`: done without delivery.
                let hole_last = (base - 1).min(last);
                if hole_last >= next {
                    share
                        .skip(next, hole_last, log)
                        .map_err(|e| share_error(&e))?;
                    next = hole_last + 1;
                }
                if base > last {
                    break;
                }
                if !out.is_empty() && out.len() + size > budget {
                    return Ok((out.freeze(), acquired));
                }
                let high = batch_last.min(last);
                let ranges = share
                    .acquire(
                        &asked.member,
                        (next, high),
                        lock_deadline_ms,
                        max_attempts,
                        log,
                    )
                    .map_err(|e| share_error(&e))?;
                if !ranges.is_empty() {
                    if included.insert(base) {
                        out.extend_from_slice(batch);
                    }
                    acquired.extend(ranges);
                }
                next = high + 1;
            }
            if next == before {
                // Nothing readable at `next` (below the log start, or not visible yet).
                break;
            }
        }
    }
    Ok((out.freeze(), acquired))
}

/// Puts each acknowledgement's error on its partition's result (adding a result for a
/// partition acknowledged but not fetched).
fn merge_acknowledgements(
    results: &mut Vec<m::ShareFetchPartitionResult>,
    acks: Vec<m::ShareAcknowledgeResult>,
) {
    for ack in acks {
        let at = results
            .iter()
            .position(|r| r.topic == ack.topic && r.partition == ack.partition);
        let index = match at {
            Some(index) => index,
            None => {
                results.push(m::ShareFetchPartitionResult {
                    topic: ack.topic.clone(),
                    partition: ack.partition,
                    ..Default::default()
                });
                results.len() - 1
            }
        };
        if let Some(result) = results.get_mut(index) {
            if result.acknowledge_error.is_none() && ack.error.is_some() {
                result.acknowledge_error = ack.error;
            }
        }
    }
}

/// The leader's node id for a NOT_LEADER answer (0 otherwise).
pub(crate) fn leader_hint(state: &BrokerState, topic: &str, partition: u32, e: &m::Error) -> u32 {
    if e.code == u32::from(ErrorCode::NOT_LEADER.code()) {
        state.current_leader(topic, partition)
    } else {
        0
    }
}

/// Waits until any watch changes, or until `deadline`.
async fn wait_for_any(
    mut watches: Vec<tokio::sync::watch::Receiver<i64>>,
    deadline: tokio::time::Instant,
) {
    type Change = Pin<Box<dyn Future<Output = ()> + Send>>;
    let mut changes: Vec<Change> = watches
        .iter_mut()
        .map(|w| {
            let mut w = w.clone();
            Box::pin(async move {
                let _ = w.changed().await;
            }) as Change
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
