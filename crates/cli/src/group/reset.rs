//! `tinymq group reset-offsets`: works out the new committed offset of each partition (all of
//! the topic's, or those `--partition` names), prints the plan, and commits it only with
//! `--execute` (as kafka-consumer-groups does). Targets: the log's start or end, an offset,
//! a time (ms or RFC 3339), or a shift of the committed offset; every new offset is moved
//! into the partition's stored range. Offsets that are not known (an offline leader) are
//! never planned from.

use std::collections::{BTreeMap, BTreeSet};

use tinymq_client::{Admin, ClientError, ErrorCode};

use crate::args::count;
use crate::outln;

/// Where to move each partition's committed offset.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Earliest,
    Latest,
    Offset(i64),
    /// The first offset at or after this time (ms since the Unix epoch); the end if none.
    Timestamp(i64),
    /// The committed offset plus this (negative: back).
    ShiftBy(i64),
}

/// One partition's line of the plan.
struct Step {
    partition: u32,
    committed: Option<i64>,
    new: i64,
}

/// Plans the reset of `group`'s offsets of `topic` and, with `execute`, commits it.
pub async fn run(
    admin: &Admin,
    group: &str,
    topic: &str,
    partitions: &[u32],
    target: Target,
    execute: bool,
) -> anyhow::Result<()> {
    let described = admin.describe_topic(topic).await?;
    let chosen = chosen_partitions(topic, described.partitions.len() as u32, partitions)?;
    let (committed, members) = committed_offsets(admin, group, topic).await?;
    let mut plan = Vec::new();
    for p in described
        .partitions
        .iter()
        .filter(|p| chosen.contains(&p.partition))
    {
        if !crate::topic::offsets_known(p) {
            anyhow::bail!(
                "{topic}/{}: its leader is offline or unreachable, so its offsets are not known; nothing was reset",
                p.partition
            );
        }
        let current = committed.get(&p.partition).copied();
        let (low, high) = (p.log_start_offset, p.high_watermark);
        let new = match target {
            Target::Earliest => low,
            Target::Latest => high,
            Target::Offset(o) => o.clamp(low, high.max(low)),
            Target::Timestamp(ts) => match admin.list_offset(topic, p.partition, ts).await? {
                -1 => high,
                o => o,
            },
            Target::ShiftBy(by) => {
                let Some(from) = current else {
                    anyhow::bail!(
                        "{topic}/{}: group {group} has no committed offset there to shift from; \
                         nothing was reset (name the partitions with --partition, or use \
                         --to-earliest, --to-latest or --to-offset)",
                        p.partition
                    );
                };
                from.saturating_add(by).clamp(low, high.max(low))
            }
        };
        plan.push(Step {
            partition: p.partition,
            committed: current,
            new,
        });
    }
    print_plan(group, topic, &plan)?;
    if !execute {
        if members > 0 {
            eprintln!(
                "note: group {group} has {}: --execute is refused until they stop",
                count(members as u64, "member")
            );
        }
        return outln!(
            "dry run: nothing changed; run again with --execute to commit these offsets"
        );
    }
    let offsets = plan
        .iter()
        .map(|s| (topic.to_string(), s.partition, s.new))
        .collect();
    admin.commit_group_offsets(group, offsets).await?;
    outln!(
        "committed: group {group} now reads {} of {topic} from the new offsets",
        count(plan.len() as u64, "partition")
    )
}

/// The partitions `--partition` names (every one when it names none), each checked to exist.
fn chosen_partitions(
    topic: &str,
    partition_count: u32,
    named: &[u32],
) -> anyhow::Result<BTreeSet<u32>> {
    if named.is_empty() {
        return Ok((0..partition_count).collect());
    }
    if let Some(p) = named.iter().find(|p| **p >= partition_count) {
        anyhow::bail!(
            "topic {topic} has no partition {p} (it has {}); nothing was reset",
            count(partition_count, "partition")
        );
    }
    Ok(named.iter().copied().collect())
}

/// The group's committed offsets of `topic` by partition and its member count (a group not
/// seen yet has neither).
async fn committed_offsets(
    admin: &Admin,
    group: &str,
    topic: &str,
) -> Result<(BTreeMap<u32, i64>, usize), ClientError> {
    match admin.describe_group(group).await {
        Ok(d) => Ok((
            d.offsets
                .iter()
                .filter(|o| o.topic == topic && o.offset >= 0)
                .map(|o| (o.partition, o.offset))
                .collect(),
            d.members.len(),
        )),
        Err(e) if e.code() == Some(ErrorCode::GROUP_ID_NOT_FOUND) => Ok((BTreeMap::new(), 0)),
        Err(e) => Err(e),
    }
}

fn print_plan(group: &str, topic: &str, plan: &[Step]) -> anyhow::Result<()> {
    outln!("group {group}, topic {topic}:")?;
    outln!("{:>9} {:>12} {:>12}", "partition", "committed", "new")?;
    for s in plan {
        outln!(
            "{:>9} {:>12} {:>12}",
            s.partition,
            crate::topic::or_dash(s.committed),
            s.new
        )?;
    }
    Ok(())
}
