//! ShareFetch (docs/protocol.md, op 50): checks the request, applies its piggy-backed
//! acknowledgements, then acquires records for the member in each partition and reads the
//! whole batches that hold them, long-polling up to `max_wait_ms` when nothing can be
//! acquired (woken by new records and by released or expired records). The acquisitions'
//! delivery counts are fsynced in the state log before the records are handed out
//! (the acquisition itself is `acquire`).

use std::sync::Arc;

use tinymq_auth::{AclOperation, Principal};
use tinymq_meta::authorize::Access;
use tinymq_protocol::{messages as m, ErrorCode};

use super::acquire::{acquire_partition, Asked};
use super::lookup::share_partition;
use super::registry::{check_ids, storage_error, SharedPartition};
use crate::service::leader_hint;
use crate::state::BrokerState;

/// Longest long poll (`max_wait_ms` above it is cut to it).
pub const SHARE_FETCH_WAIT_MS_MAX: u32 = 30_000;
/// Records acquired per partition when `max_records` is 0.
pub const SHARE_FETCH_RECORDS_DEFAULT: u32 = 500;
// `max_records` and `lock_ms` bounds and the default lock: `tinymq_protocol::names`.
pub use tinymq_protocol::names::{
    SHARE_FETCH_RECORDS_MAX, SHARE_LOCK_MS_DEFAULT, SHARE_LOCK_MS_MAX,
};
// A fetch never asks for more than a share partition holds in flight.
const _: () = assert!(SHARE_FETCH_RECORDS_MAX as i64 <= tinymq_share::SHARE_IN_FLIGHT_RECORDS_MAX);
/// Response bytes when `max_bytes` is 0 (at most the broker's `fetch_bytes_max`).
pub const SHARE_FETCH_BYTES_DEFAULT: u32 = 1 << 20;
/// Most partitions one share request may name.
pub const SHARE_REQUEST_PARTITIONS_MAX: usize = 1_000;
/// Most acknowledgements one share request may carry.
pub const SHARE_ACKNOWLEDGEMENTS_MAX: usize = 10_000;

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
    check_ids(&req.group_id, &req.member_id)?;
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
    let filter = match req.filter.as_str() {
        "" => None,
        text => Some(Arc::new(tinymq_filter::Filter::parse(text).map_err(
            |e| ErrorCode::INVALID_FILTER.with_message(e.to_string()),
        )?)),
    };
    let or_default = |asked: u32, default: u32| if asked == 0 { default } else { asked };
    Ok(Asked {
        member: Arc::from(req.member_id.as_str()),
        max_records: or_default(req.max_records, SHARE_FETCH_RECORDS_DEFAULT),
        lock_ms: or_default(req.lock_ms, SHARE_LOCK_MS_DEFAULT),
        filter,
    })
}

pub async fn share_fetch(
    state: Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    mut req: m::ShareFetchRequest,
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
        std::mem::take(&mut req.acknowledgements),
    )
    .await;
    // Loading share state reads (and on creation fsyncs) the disk: on the blocking pool.
    let (s, a, p) = (state.clone(), access.clone(), principal.clone());
    let (group, partitions) = (req.group_id.clone(), std::mem::take(&mut req.partitions));
    let resolved =
        tokio::task::spawn_blocking(move || resolve(&s, &a, &p, &group, &partitions)).await;
    let (mut results, mut targets) = match resolved {
        Ok(resolved) => resolved,
        Err(e) => return refuse(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())),
    };
    merge_acknowledgements(&mut results, acks);
    let budget = match req.max_bytes {
        0 => SHARE_FETCH_BYTES_DEFAULT,
        asked => asked,
    }
    .min(state.config.fetch_bytes_max) as usize;
    let wait_ms = req.max_wait_ms.min(SHARE_FETCH_WAIT_MS_MAX);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms.into());
    loop {
        // A long poll re-resolves instances retired meanwhile (leadership moved and came
        // back, or a log failed), so it never acquires through a stale one.
        if targets.iter().any(|(_, shared)| !shared.still_led(&state)) {
            let (s, group) = (state.clone(), req.group_id.clone());
            let (mut t, mut r) = (std::mem::take(&mut targets), std::mem::take(&mut results));
            let refreshed = tokio::task::spawn_blocking(move || {
                refresh_targets(&s, &group, &mut t, &mut r);
                (t, r)
            })
            .await;
            match refreshed {
                Ok((t, r)) => (targets, results) = (t, r),
                Err(e) => {
                    return refuse(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
                }
            }
        }
        // Subscribed before acquiring, so a release or append meanwhile is not missed.
        let mut watches: Vec<tokio::sync::watch::Receiver<i64>> = targets
            .iter()
            .flat_map(|(_, s)| [s.partition.watch_high_watermark(), s.watch_released()])
            .collect();
        for w in &mut watches {
            w.borrow_and_update();
        }
        let acquired = acquire_all(&state, &targets, &asked, budget, &mut results).await;
        if acquired > 0 || targets.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        crate::service::fetch::wait_for_any(watches, deadline).await;
    }
    m::ShareFetchResponse {
        error: None,
        partitions: results,
    }
}

/// Each named partition's result and, where this broker leads it and the principal may read
/// it, its share partition (loaded or created: blocking).
#[allow(clippy::type_complexity)]
fn resolve(
    state: &BrokerState,
    access: &Access,
    principal: &Principal,
    group: &str,
    partitions: &[m::ShareFetchPartition],
) -> (
    Vec<m::ShareFetchPartitionResult>,
    Vec<(usize, Arc<SharedPartition>)>,
) {
    let mut results: Vec<m::ShareFetchPartitionResult> = Vec::new();
    let mut targets: Vec<(usize, Arc<SharedPartition>)> = Vec::new();
    let mut last_auth = None;
    for fp in partitions {
        let mut result = m::ShareFetchPartitionResult {
            topic: fp.topic.clone(),
            partition: fp.partition,
            ..Default::default()
        };
        let found = access
            .check_topic_cached(principal, &fp.topic, AclOperation::Read, &mut last_auth)
            .and_then(|()| share_partition(state, group, &fp.topic, fp.partition, true));
        match found {
            Ok(Some(shared)) => targets.push((results.len(), shared)),
            Ok(None) => {}
            Err(e) => {
                result.current_leader = leader_hint(state, &fp.topic, fp.partition, &e);
                result.error = Some(e);
            }
        }
        results.push(result);
    }
    (results, targets)
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
            // The acquisitions may not be durable: the instance is reloaded from disk (its
            // acquired records come back available there).
            shared.retire();
            result.error = Some(storage_error(&shared.key, &e));
            continue;
        }
        // An error of an earlier try of this long poll (a reloaded instance) is outdated.
        result.error = None;
        left = left.saturating_sub(acquisition.records.len());
        total += acquisition
            .acquired
            .iter()
            .map(|r| tinymq_share::range_len(r.first_offset, r.last_offset))
            .sum::<u64>();
        if !acquisition.acquired.is_empty() {
            result.lock_deadline_ms = acquisition.lock_deadline_ms;
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

/// Replaces each target whose instance is retired or no longer led in its epoch with the
/// live one; a target that cannot be resolved any more gets the error on its result.
fn refresh_targets(
    state: &BrokerState,
    group: &str,
    targets: &mut Vec<(usize, Arc<SharedPartition>)>,
    results: &mut [m::ShareFetchPartitionResult],
) {
    targets.retain_mut(|(index, shared)| {
        if shared.still_led(state) {
            return true;
        }
        let (topic, partition) = (shared.key.topic.clone(), shared.key.partition);
        let error = match share_partition(state, group, &topic, partition, true) {
            Ok(Some(live)) => {
                *shared = live;
                return true;
            }
            Ok(None) => shared.not_live(),
            Err(e) => e,
        };
        if let Some(result) = results.get_mut(*index) {
            result.current_leader = leader_hint(state, &topic, partition, &error);
            result.error = Some(error);
        }
        false
    });
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
