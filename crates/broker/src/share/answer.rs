//! ShareAcknowledge (op 51) and DescribeShareGroup (op 52), and the acknowledgements a
//! ShareFetch carries. Acknowledgements are answered once their outcomes are fsynced in the
//! state logs.

use std::collections::BTreeSet;
use std::sync::Arc;

use tinymq_auth::{AclOperation, Principal};
use tinymq_meta::authorize::Access;
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::{AckKind, RecordState};

use super::fetch::check_counts;
use super::lookup::share_partition;
use super::registry::{
    check_ids, share_error, storage_error, SharedPartition, DESCRIBE_MEMBERS_MAX,
};
use crate::service::leader_hint;
use crate::state::BrokerState;

/// In-flight records DescribeShareGroup lists per partition (the lowest ones).
pub const DESCRIBE_IN_FLIGHT_RECORDS_MAX: usize = 100;

pub async fn share_acknowledge(
    state: Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    req: m::ShareAcknowledgeRequest,
) -> m::ShareAcknowledgeResponse {
    let checked = check_ids(&req.group_id, &req.member_id)
        .and_then(|()| check_counts(0, req.acknowledgements.len()));
    if let Err(e) = checked {
        return m::ShareAcknowledgeResponse {
            error: Some(e),
            results: vec![],
        };
    }
    let results = apply_acknowledgements(
        &state,
        access,
        principal,
        &req.group_id,
        &req.member_id,
        req.acknowledgements,
    )
    .await;
    m::ShareAcknowledgeResponse {
        error: None,
        results,
    }
}

/// Applies each acknowledgement, then waits for the state logs it wrote to be fsynced.
/// Loading share state and taking share-partition locks may wait on the disk (a load, an
/// acquisition reading the log), so that part runs on the blocking pool.
pub(crate) async fn apply_acknowledgements(
    state: &Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    group: &str,
    member: &str,
    acks: Vec<m::ShareAcknowledgement>,
) -> Vec<m::ShareAcknowledgeResult> {
    if acks.is_empty() {
        return Vec::new();
    }
    let acks: Arc<[m::ShareAcknowledgement]> = acks.into();
    let (s, a, p) = (state.clone(), access.clone(), principal.clone());
    let (g, mb, ac) = (group.to_string(), member.to_string(), acks.clone());
    let applied = tokio::task::spawn_blocking(move || apply_now(&s, &a, &p, &g, &mb, &ac)).await;
    let (mut results, to_sync) = match applied {
        Ok(applied) => applied,
        Err(e) => {
            let error = ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string());
            let failed = acks.iter().map(|ack| m::ShareAcknowledgeResult {
                topic: ack.topic.clone(),
                partition: ack.partition,
                first_offset: ack.first_offset,
                last_offset: ack.last_offset,
                error: Some(error.clone()),
                ..Default::default()
            });
            return failed.collect();
        }
    };
    for (index, shared, sequence) in to_sync {
        if let Err(e) = shared.log.sync(sequence).await {
            // The outcome may not be durable: reloaded from disk, it is not claimed.
            shared.retire();
            if let Some(result) = results.get_mut(index) {
                result.error = Some(storage_error(&shared.key, &e));
            }
        }
    }
    results
}

/// The acknowledgements applied (blocking), and the state logs to sync for them.
#[allow(clippy::type_complexity)]
fn apply_now(
    state: &BrokerState,
    access: &Access,
    principal: &Principal,
    group: &str,
    member: &str,
    acks: &[m::ShareAcknowledgement],
) -> (
    Vec<m::ShareAcknowledgeResult>,
    Vec<(usize, Arc<SharedPartition>, u64)>,
) {
    let mut results = Vec::with_capacity(acks.len());
    let mut to_sync: Vec<(usize, Arc<SharedPartition>, u64)> = Vec::new();
    let mut last_auth = None;
    for ack in acks {
        let mut result = m::ShareAcknowledgeResult {
            topic: ack.topic.clone(),
            partition: ack.partition,
            first_offset: ack.first_offset,
            last_offset: ack.last_offset,
            ..Default::default()
        };
        let applied = access
            .check_topic_cached(principal, &ack.topic, AclOperation::Read, &mut last_auth)
            .and_then(|()| check_range(ack))
            .and_then(|()| AckKind::from_wire(ack.kind).map_err(|e| share_error(&e)))
            .and_then(|kind| {
                let (shared, sequence, outcome) = acknowledge_one(state, group, member, ack, kind)?;
                if matches!(kind, AckKind::Release | AckKind::ReleaseUnseen) {
                    shared.notify_released();
                }
                to_sync.push((results.len(), shared, sequence));
                outcome
            });
        if let Err(e) = applied {
            result.current_leader = leader_hint(state, &ack.topic, ack.partition, &e);
            result.error = Some(e);
        }
        results.push(result);
    }
    (results, to_sync)
}

/// Applies one acknowledgement through the live instance (one found retired under its lock
/// is re-resolved once); returns the instance, the log sequence to sync and the outcome.
#[allow(clippy::type_complexity)]
fn acknowledge_one(
    state: &BrokerState,
    group: &str,
    member: &str,
    ack: &m::ShareAcknowledgement,
    kind: AckKind,
) -> Result<(Arc<SharedPartition>, u64, Result<(), m::Error>), m::Error> {
    let mut tries = 0;
    loop {
        let shared =
            share_partition(state, group, &ack.topic, ack.partition, false)?.ok_or_else(|| {
                ErrorCode::INVALID_RECORD_STATE.with_message(format!(
                    "group {group} has no share state on {}/{}",
                    ack.topic, ack.partition
                ))
            })?;
        let max_attempts = shared.settings(state).max_delivery_attempts;
        let range = (ack.first_offset, ack.last_offset);
        let mut share = shared.state.lock();
        if shared.is_retired() {
            drop(share);
            tries += 1;
            if tries < 2 {
                continue;
            }
            return Err(shared.not_live());
        }
        let mut log = Vec::new();
        let outcome = share
            .acknowledge(member, range, kind, max_attempts, &mut log)
            .map(|_| ())
            .map_err(|e| share_error(&e));
        let sequence = shared.append(&log)?;
        drop(share);
        return Ok((shared, sequence, outcome));
    }
}

fn check_range(ack: &m::ShareAcknowledgement) -> Result<(), m::Error> {
    if ack.first_offset > ack.last_offset {
        return Err(ErrorCode::INVALID_REQUEST.with_message(format!(
            "acknowledged offsets {}..={}: first is above last",
            ack.first_offset, ack.last_offset
        )));
    }
    Ok(())
}

pub async fn describe_share_group(
    state: Arc<BrokerState>,
    req: m::DescribeShareGroupRequest,
) -> m::DescribeShareGroupResponse {
    let mut response = m::DescribeShareGroupResponse {
        group_id: req.group_id.clone(),
        ..Default::default()
    };
    if let Err((code, why)) = crate::group::validate_group_id(&req.group_id) {
        response.error = Some(code.with_message(why));
        return response;
    }
    // Loading share state reads the disk: on the blocking pool.
    let (s, group) = (state.clone(), req.group_id.clone());
    match tokio::task::spawn_blocking(move || describe_partitions(&s, &group)).await {
        Ok((partitions, member_ids)) => {
            response.partitions = partitions;
            response.member_ids = member_ids;
        }
        Err(e) => {
            response.error = Some(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
        }
    }
    response
}

/// The group's share partitions led here, and the members holding records in them.
fn describe_partitions(
    state: &BrokerState,
    group: &str,
) -> (Vec<m::SharePartitionState>, Vec<String>) {
    let mut members = BTreeSet::new();
    let mut described = Vec::new();
    let mut partitions = state.all_partitions();
    partitions.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    for partition in partitions {
        // Partitions led elsewhere, internal ones and those without this group's state are
        // not this broker's to describe.
        let Ok(Some(shared)) =
            share_partition(state, group, &partition.topic, partition.index, false)
        else {
            continue;
        };
        described.push(describe_partition(&shared, &mut members));
    }
    (described, members.into_iter().collect())
}

fn describe_partition(
    shared: &SharedPartition,
    members: &mut BTreeSet<String>,
) -> m::SharePartitionState {
    let share = shared.state.lock();
    let counts = share.counts();
    let mut in_flight = Vec::new();
    for (offset, record) in share.in_flight() {
        let (name, holder, deadline) = match &record.state {
            RecordState::Available => ("available", String::new(), 0),
            RecordState::Acquired {
                member,
                lock_deadline_ms,
            } => ("acquired", member.to_string(), *lock_deadline_ms),
            RecordState::DeadLetter(_) => ("dead-letter", String::new(), 0),
        };
        if !holder.is_empty() && members.len() < DESCRIBE_MEMBERS_MAX {
            members.insert(holder.clone());
        }
        if in_flight.len() < DESCRIBE_IN_FLIGHT_RECORDS_MAX {
            in_flight.push(m::ShareInFlightRecord {
                offset,
                state: name.into(),
                delivery_count: record.delivery_count,
                member_id: holder,
                lock_deadline_ms: deadline,
            });
        }
    }
    m::SharePartitionState {
        topic: shared.key.topic.clone(),
        partition: shared.key.partition,
        start_offset: share.start_offset(),
        end_offset: share.end_offset(),
        high_watermark: shared.partition.high_watermark(),
        acquired: counts.acquired,
        available: counts.available,
        accepted: counts.done_above_start,
        dead_lettered_total: share.dead_lettered_total(),
        in_flight,
    }
}
