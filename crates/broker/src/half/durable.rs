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
    let (s, p) = (state.clone(), partition.clone());
    let written = tokio::task::spawn_blocking(move || -> Result<_, m::Error> {
        let pending = crate::offsets_partitions::write_as_leader(&s, &p, epoch, batch)?;
        p.finish(pending)
            .map_err(|e| e.code.with_message(e.message))?;
        Ok(pending)
    })
    .await
    .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))??;
    crate::offsets_partitions::await_coordination_replicas(&partition, written.end_offset, epoch)
        .await?;
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
