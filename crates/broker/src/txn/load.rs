//! Taking over (and giving up) partitions of `__transaction_state` as leadership moves: a
//! newly led partition is replayed before its ids are answered for, then the transactions it
//! found deciding are finished.

use std::sync::Arc;

use super::coordinator::TRANSACTION_PARTITIONS;
use super::log;
use super::markers;
use crate::state::BrokerState;
use tinymq_meta::command::TRANSACTION_TOPIC;

/// Brings the coordinated ids in line with the partitions of `__transaction_state` led here:
/// drops those no longer led (or led in a new epoch) and loads those newly led. Call after
/// every reconciliation; loads run on the blocking pool, and each load then finishes the
/// markers of the transactions it found deciding.
pub fn sync(state: &Arc<BrokerState>) {
    let store = &state.txns;
    for index in 0..TRANSACTION_PARTITIONS {
        let led = state
            .led_partition_any(TRANSACTION_TOPIC, index)
            .ok()
            .filter(|(p, epoch)| p.leading_epoch() == Some(*epoch));
        let Some((partition, epoch)) = led else {
            if store.led().contains_key(&index) {
                tracing::info!(
                    partition = index,
                    "no longer leading this transaction state partition"
                );
                store.drop_partition(index);
            }
            continue;
        };
        if !store.begin_load(index, epoch) {
            continue;
        }
        let s = state.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || match log::read_log(&partition.log) {
            Ok(loaded) => {
                let ids = loaded.len();
                if s.txns.finish_load(index, epoch, loaded) {
                    tracing::info!(
                        partition = index,
                        leader_epoch = epoch,
                        ids,
                        "loaded a transaction state partition; coordinating its transactional ids"
                    );
                    runtime.spawn(markers::resume(s.clone(), index));
                }
            }
            Err(e) => {
                tracing::error!(partition = index, error = %e, "cannot read a transaction state partition; its ids stay unavailable here")
            }
        });
    }
}
