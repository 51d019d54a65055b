//! `tinymq group list|describe|reset-offsets|delete`. `describe` shows per partition the
//! group's committed offset, the high watermark its leader reports (the end a consumer can
//! read to) and the lag between them, and the group's total lag. A high watermark (and so a
//! lag) that cannot be known — the partition's leader is offline or unreachable — is `null` in
//! JSON and `-` in text, never a number; offsets are not reset from positions that are not
//! known. A share group (queue semantics, docs/queues.md) is described by `group/share.rs`;
//! `list` is in `group/list.rs`, `reset-offsets` in `group/reset.rs`.

mod list;
mod reset;
mod share;

use clap::Subcommand;
use tinymq_client::Admin;

use crate::args::count;
use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List every group — consumer groups, Kafka-protocol groups and share groups — with its
    /// type, state, members and total lag (`-` when a partition's lag is not known).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Show members, their partitions, and per partition the committed offset, the high
    /// watermark (from the partition's leader) and the lag; then the total lag. For a share
    /// group: per partition its start and end offsets, acquired, available, accepted and
    /// dead-lettered records, and the first in-flight records with their delivery counts.
    Describe {
        /// The group's id.
        group: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Lag of a group that reads read-committed: up to each partition's last stable
        /// offset (open transactions are not counted), instead of the high watermark.
        #[arg(long)]
        read_committed: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Plan new committed offsets for a group's partitions of a topic and print the plan;
    /// only with --execute are they committed (the group must then have no members).
    ResetOffsets {
        /// The group's id.
        group: String,
        /// The topic whose partitions are reset [required].
        #[arg(long)]
        topic: String,
        /// Only this partition (repeat, or give a list: --partition 0,2); default: every
        /// partition of the topic.
        #[arg(long = "partition", value_name = "N", value_delimiter = ',')]
        partitions: Vec<u32>,
        /// To each partition's first stored offset.
        #[arg(long, group = "to")]
        to_earliest: bool,
        /// To each partition's end (the group skips what is stored now).
        #[arg(long, group = "to")]
        to_latest: bool,
        /// To this offset, moved into each partition's stored range.
        #[arg(long, group = "to", value_name = "N")]
        to_offset: Option<i64>,
        /// The first offset at or after this time (ms since the Unix epoch).
        #[arg(long, group = "to", value_name = "MS")]
        to_timestamp: Option<i64>,
        /// The first offset at or after this time, RFC 3339 (2026-12-01T18:30:00Z).
        #[arg(long, group = "to", value_name = "RFC3339", value_parser = parse_datetime)]
        to_datetime: Option<i64>,
        /// Move each committed offset by N (negative: back), kept in the stored range; a
        /// partition without a committed offset is refused.
        #[arg(long, group = "to", value_name = "N", allow_negative_numbers = true)]
        shift_by: Option<i64>,
        /// Commit the plan (without it nothing changes).
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Delete a group without members, with its committed offsets.
    Delete {
        /// The group's id.
        group: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

pub async fn run(command: GroupCommand) -> anyhow::Result<()> {
    match command {
        GroupCommand::List { json, bootstrap } => {
            list::run(Admin::new(bootstrap.client_config()?)?, json).await?
        }
        GroupCommand::Describe {
            group,
            json,
            read_committed,
            bootstrap,
        } => describe(&group, json, read_committed, &bootstrap).await?,
        GroupCommand::ResetOffsets {
            group,
            topic,
            partitions,
            to_earliest,
            to_latest,
            to_offset,
            to_timestamp,
            to_datetime,
            shift_by,
            execute,
            bootstrap,
        } => {
            use reset::Target;
            let target = match (to_earliest, to_latest, to_offset, to_timestamp.or(to_datetime), shift_by) {
                (true, ..) => Target::Earliest,
                (_, true, ..) => Target::Latest,
                (_, _, Some(o), ..) => Target::Offset(o),
                (_, _, _, Some(ts), _) => Target::Timestamp(ts),
                (.., Some(by)) => Target::ShiftBy(by),
                _ => anyhow::bail!(
                    "say where to: --to-earliest, --to-latest, --to-offset N, --to-timestamp MS, --to-datetime RFC3339 or --shift-by N"
                ),
            };
            let admin = Admin::new(bootstrap.client_config()?)?;
            reset::run(&admin, &group, &topic, &partitions, target, execute).await?;
        }
        GroupCommand::Delete { group, bootstrap } => {
            Admin::new(bootstrap.client_config()?)?
                .delete_group(&group)
                .await?;
            outln!("deleted group {group}")?;
        }
    }
    Ok(())
}

/// `--to-datetime`: an RFC 3339 time, in ms since the Unix epoch.
fn parse_datetime(text: &str) -> Result<i64, String> {
    crate::produce::when::rfc3339_ms(text.trim())
        .ok_or_else(|| format!("{text}: expected an RFC 3339 time such as 2026-12-01T18:30:00Z"))
}

async fn describe(
    group: &str,
    json: bool,
    read_committed: bool,
    bootstrap: &Bootstrap,
) -> anyhow::Result<()> {
    // A share group has state on the partition leaders; a group without any is described as
    // a regular group (as before share groups existed).
    let shared =
        tinymq_client::share::describe_share_group(bootstrap.client_config()?, group).await?;
    if shared.exists() {
        return share::print(&shared, json);
    }
    let admin = Admin::new(bootstrap.client_config()?)?;
    let d = admin.describe_group(group).await?;
    let mut owner = std::collections::BTreeMap::new();
    for m in &d.members {
        for tp in &m.assignment {
            for p in &tp.partitions {
                owner.insert((tp.topic.clone(), *p), m.member_id.clone());
            }
        }
    }
    let mut rows = Vec::new();
    let mut topics: Vec<String> = d
        .offsets
        .iter()
        .map(|o| o.topic.clone())
        .chain(owner.keys().map(|k| k.0.clone()))
        .collect();
    topics.sort();
    topics.dedup();
    for topic in topics {
        // Per partition, its log end when known. A topic that cannot be described still
        // shows the partitions the group has offsets or owners in, with the log end unknown.
        let ends: Vec<(u32, Option<i64>)> = match admin.describe_topic(&topic).await {
            Ok(t) => t
                .partitions
                .iter()
                .map(|p| {
                    let known = crate::topic::offsets_known(p);
                    // A broker from before transactions says -1: its high watermark is it.
                    let end = match (read_committed, p.last_stable_offset) {
                        (true, lso) if lso >= 0 => lso,
                        _ => p.high_watermark,
                    };
                    (p.partition, known.then_some(end))
                })
                .collect(),
            Err(e) => {
                eprintln!("topic {topic}: log ends unknown: {e}");
                let mut seen: Vec<u32> = d
                    .offsets
                    .iter()
                    .filter(|o| o.topic == topic)
                    .map(|o| o.partition)
                    .chain(owner.keys().filter(|k| k.0 == topic).map(|k| k.1))
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                seen.into_iter().map(|p| (p, None)).collect()
            }
        };
        for (partition, log_end) in ends {
            let committed = d
                .offsets
                .iter()
                .find(|o| o.topic == topic && o.partition == partition)
                .map(|o| o.offset);
            let lag = committed
                .zip(log_end)
                .map(|(c, end)| end.saturating_sub(c).max(0));
            // `log_end_offset` is the same value, under the name it had before issue 15.
            rows.push(serde_json::json!({
                "topic": topic, "partition": partition,
                "member": owner.get(&(topic.clone(), partition)),
                "committed_offset": committed, "high_watermark": log_end,
                "log_end_offset": log_end, "lag": lag,
            }));
        }
    }
    // The lags known; a partition without a committed offset or a known high watermark adds
    // nothing, and `lag_unknown` counts the partitions with a committed offset but no lag.
    let lag_total: i64 = rows.iter().filter_map(|r| r["lag"].as_i64()).sum();
    let lag_unknown = rows
        .iter()
        .filter(|r| !r["committed_offset"].is_null() && r["lag"].is_null())
        .count();
    if json {
        let members: Vec<_> = d
            .members
            .iter()
            .map(|m| serde_json::json!({
                "member_id": m.member_id, "client_id": m.client_id, "topics": m.topics,
                "partitions": m.assignment.iter().map(|tp| serde_json::json!({"topic": tp.topic, "partitions": tp.partitions})).collect::<Vec<_>>(),
            }))
            .collect();
        let out = serde_json::json!({
            "group": d.group_id, "state": d.state, "generation": d.generation, "strategy": d.strategy,
            "members": members, "partitions": rows,
            // What "high_watermark" and "lag" are measured against.
            "lag_to": if read_committed { "last_stable_offset" } else { "high_watermark" },
            "lag_total": lag_total, "lag_unknown_partitions": lag_unknown,
        });
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    // An empty group has no strategy: none is shown rather than "strategy ,".
    let strategy = if d.strategy.is_empty() {
        String::new()
    } else {
        format!(", strategy {}", d.strategy)
    };
    outln!(
        "group {}: {} (generation {}{strategy}, {})",
        d.group_id,
        d.state,
        d.generation,
        count(d.members.len() as u64, "member")
    )?;
    outln!(
        "{:<20} {:>9} {:>12} {:>14} {:>8}  member",
        "topic",
        "partition",
        "committed",
        "high watermark",
        "lag"
    )?;
    let dash = |v: &serde_json::Value| {
        if v.is_null() {
            "-".to_string()
        } else {
            v.to_string().trim_matches('"').to_string()
        }
    };
    for r in rows {
        outln!(
            "{:<20} {:>9} {:>12} {:>14} {:>8}  {}",
            dash(&r["topic"]),
            dash(&r["partition"]),
            dash(&r["committed_offset"]),
            dash(&r["log_end_offset"]),
            dash(&r["lag"]),
            dash(&r["member"])
        )?;
    }
    // A sum that leaves partitions out is not the total: it is said to be unknown.
    match lag_unknown {
        0 => outln!("total lag {lag_total}")?,
        n => outln!(
            "total lag unknown: {} with an unknown high watermark (the others add up to {lag_total})",
            count(n as u64, "partition")
        )?,
    }
    Ok(())
}
