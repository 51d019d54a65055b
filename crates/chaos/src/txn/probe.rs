//! What the transactional checker asks the healed cluster: whether every partition's last
//! stable offset (ListOffsets latest under read_committed) reached its high watermark (no
//! transaction left hanging), with the open transactions of those that did not, and each
//! producer's group's committed offset on `chaos-in`/0.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tinymq_client::{Admin, ClientConfig, Cluster, ErrorCode, Isolation};

use crate::check::end_offset;
use crate::txn::workload::{group_of, INPUT_TOPIC};

const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Waits (up to `limit`) until LSO = HW on every partition of `topic`. Returns how long it
/// took and, for each partition still short at the limit, a description of it and of the
/// producers holding a transaction open there.
pub async fn wait_stable(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    limit: Duration,
) -> Result<(Duration, Vec<String>)> {
    let cluster = Cluster::new(ClientConfig::new(bootstrap))?;
    let start = Instant::now();
    let deadline = start + limit;
    loop {
        let mut short = Vec::new();
        for p in 0..partitions {
            let lso = end_offset(&cluster, topic, p, Isolation::ReadCommitted, deadline).await?;
            let hw = end_offset(&cluster, topic, p, Isolation::ReadUncommitted, deadline).await?;
            if lso != hw {
                short.push((p, lso, hw));
            }
        }
        if short.is_empty() {
            return Ok((start.elapsed(), vec![]));
        }
        if Instant::now() > deadline {
            return Ok((
                start.elapsed(),
                describe_short(bootstrap, topic, &short).await,
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn describe_short(bootstrap: &str, topic: &str, short: &[(u32, i64, i64)]) -> Vec<String> {
    let admin = Admin::new(ClientConfig::new(bootstrap)).ok();
    let mut out = Vec::new();
    for (p, lso, hw) in short {
        let open = match &admin {
            Some(a) => match a.describe_producers(topic, *p).await {
                Ok(producers) => producers
                    .iter()
                    .filter(|d| d.current_txn_start_offset >= 0)
                    .map(|d| {
                        format!(
                            "producer {} epoch {} open from {}",
                            d.producer_id, d.producer_epoch, d.current_txn_start_offset
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                Err(e) => format!("describe producers failed: {e}"),
            },
            None => String::new(),
        };
        out.push(format!("{topic}/{p}: LSO {lso} < HW {hw} ({open})"));
    }
    out
}

/// Each producer's group's committed offset on `chaos-in`/0 (None: the group has none).
pub async fn group_offsets(bootstrap: &str, producers: u32) -> Result<Vec<(u32, Option<i64>)>> {
    let admin = Admin::new(ClientConfig::new(bootstrap))?;
    let mut out = Vec::new();
    for producer in 0..producers {
        let group = group_of(producer);
        let offset = match admin.describe_group(&group).await {
            Ok(g) => g
                .offsets
                .iter()
                .find(|o| o.topic == INPUT_TOPIC && o.partition == 0)
                .map(|o| o.offset),
            Err(e) if e.code() == Some(ErrorCode::GROUP_ID_NOT_FOUND) => None,
            Err(e) => bail!("describe group {group}: {e}"),
        };
        out.push((producer, offset));
    }
    Ok(out)
}
