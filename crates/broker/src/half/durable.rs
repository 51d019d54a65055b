//! How a half's events become durable: [`persist`] writes one record to the group's
//! `__half_messages` partition as its leader and waits for every in-sync replica; [`finished`]
//! then forgets a resolved half, remembering its outcome for retried HalfEnds.

use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};

use super::store::{Outcome, Resolved};
use super::{log, HALF_TOPIC};
use crate::partition::now_ms;
use crate::state::BrokerState;

/// Writes `entry` to partition `index` as its leader in `epoch` and waits until every
/// in-sync replica holds it; returns its offset.
pub(super) async fn persist(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    group: &str,
    entry: m::half_log_record::Entry,
) -> Result<i64, m::Error> {
    persist_or_written(state, at, group, entry)
        .await
        .map_err(|(e, _)| e)
}

/// [`persist`], telling on failure whether the record is in this leader's log anyway (its
/// offset): it then counts in this epoch once replicated, and a later record of the
/// partition cannot count without it.
pub(super) async fn persist_or_written(
    state: &Arc<BrokerState>,
    (index, epoch): (u32, u32),
    group: &str,
    entry: m::half_log_record::Entry,
) -> Result<i64, (m::Error, Option<i64>)> {
    let (partition, led_epoch) =
        crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, index)
            .map_err(|e| (e, None))?;
    if led_epoch != epoch {
        return Err((
            ErrorCode::NOT_COORDINATOR.with_message(format!(
                "{HALF_TOPIC}/{index} is led in a new epoch; find the coordinator again"
            )),
            None,
        ));
    }
    let batch = log::encode_batch(group, entry, now_ms()).map_err(|e| {
        (
            ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()),
            None,
        )
    })?;
    crate::offsets_partitions::write_replicated(state, &partition, epoch, batch)
        .await
        .map(|w| w.base_offset)
        .map_err(|e| (e.error, e.written.map(|w| w.base_offset)))
}

/// Forgets resolved half `id`, remembering its outcome.
pub(super) fn finished(
    state: &BrokerState,
    (index, epoch): (u32, u32),
    id: i64,
    group: &str,
    outcome: Outcome,
) {
    let _ = state.halves.with(index, Some(epoch), |p| {
        if let Some(half) = p.remove(id) {
            let resolved = Resolved {
                group: group.to_string(),
                topic: half.topic,
                outcome,
            };
            p.remember(id, resolved);
        }
    });
    state.halves.changed.notify_waiters();
}

/// The refusal of a HalfEnd asking for the other outcome than `outcome`.
pub(super) fn resolved_other(id: i64, outcome: &Outcome) -> m::Error {
    let how = match outcome {
        Outcome::Committed { .. } => "committed".to_string(),
        Outcome::RolledBack { reason } => format!("rolled back ({reason})"),
    };
    ErrorCode::HALF_MESSAGE_RESOLVED.with_message(format!("half {id} was already {how}"))
}

/// Rolls back committed half `id` whose records its partition refused (nothing was written:
/// they can never be appended); returns the error that tells the producer so.
pub(super) async fn roll_back_refused(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    id: i64,
    half: &super::store::Half,
    why: &m::Error,
) -> m::Error {
    let reason = format!("refused by {}: {}", half.topic, why.message);
    tracing::warn!(half_id = id, topic = %half.topic, reason, "a committed half was refused by its partition; rolled back");
    roll_back_decided(state, at, id, half, reason).await
}

/// Rolls back half `id` (marked busy) whose records can never be appended, though a commit
/// may have been decided; returns the error that tells the producer so.
pub(super) async fn roll_back_decided(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    id: i64,
    half: &super::store::Half,
    reason: String,
) -> m::Error {
    let entry = m::half_log_record::Entry::Resolved(m::HalfResolved {
        half_id: id,
        commit: false,
        reason: reason.clone(),
        ..Default::default()
    });
    let outcome = Outcome::RolledBack { reason };
    match persist_or_written(state, at, &half.group, entry).await {
        Ok(_) => {}
        Err((_, Some(_))) => {}
        Err((e, None)) => {
            let _ = state.halves.with(at.0, Some(at.1), |p| {
                if let Some(h) = p.get_mut(id) {
                    h.busy = false;
                }
            });
            return e;
        }
    }
    let error = resolved_other(id, &outcome);
    finished(state, at, id, &half.group, outcome);
    error
}
