//! How a half's events become durable: [`persist`] writes one record to the group's
//! `__half_messages` partition as its leader and waits for every in-sync replica; [`finished`]
//! then forgets a resolved half, remembering its outcome for retried HalfEnds.

use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};

use super::store::Outcome;
use super::{log, HALF_TOPIC};
use crate::partition::now_ms;
use crate::state::BrokerState;

/// Writes `entry` to partition `index` as its leader in `epoch` and waits until every
/// in-sync replica holds it; returns its offset.
pub(super) async fn persist(
    state: &Arc<BrokerState>,
    (index, epoch): (u32, u32),
    group: &str,
    entry: m::half_log_record::Entry,
) -> Result<i64, m::Error> {
    let (partition, led_epoch) =
        crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, index)?;
    if led_epoch != epoch {
        return Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{HALF_TOPIC}/{index} is led in a new epoch; find the coordinator again"
        )));
    }
    let batch = log::encode_batch(group, entry, now_ms())
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
    let written =
        crate::offsets_partitions::write_replicated(state, &partition, epoch, batch).await?;
    Ok(written.base_offset)
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
        p.halves.remove(&id);
        p.remember(id, group.to_string(), outcome);
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
    let entry = m::half_log_record::Entry::Resolved(m::HalfResolved {
        half_id: id,
        commit: false,
        reason: reason.clone(),
        ..Default::default()
    });
    if let Err(e) = persist(state, at, &half.group, entry).await {
        let _ = state.halves.with(at.0, Some(at.1), |p| {
            if let Some(h) = p.halves.get_mut(&id) {
                h.busy = false;
            }
        });
        return e;
    }
    let outcome = Outcome::RolledBack { reason };
    let error = resolved_other(id, &outcome);
    finished(state, at, id, &half.group, outcome);
    error
}
