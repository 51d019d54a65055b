//! `tinymq cluster rebalance` and `tinymq broker drain`: ask for a reassignment plan (the
//! MetaServer computes it and, unless a dry run, starts it), print it as a table or JSON, and
//! with `--wait` follow the moves until none is under way.

use std::collections::BTreeSet;
use std::time::Duration;

use tinymq_client::{Admin, PartitionMove};

use crate::{outln, Bootstrap};

/// Default of `--wait-timeout-ms`: 10 minutes (a new replica copies the whole partition).
const WAIT_TIMEOUT_MS_DEFAULT: u64 = 600_000;
/// How often `--wait` looks at the partitions again.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// Flags shared by both commands.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Only print the plan; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Wait until every move has completed (its new replicas in sync, the old ones gone).
    #[arg(long, conflicts_with = "dry_run")]
    wait: bool,
    /// Give up waiting after this many ms (exit status 1) [default: 600000, 10 minutes].
    #[arg(long, requires = "wait", value_parser = crate::args::positive_u64)]
    wait_timeout_ms: Option<u64>,
    #[command(flatten)]
    bootstrap: Bootstrap,
}

/// Which plan to ask for.
pub enum Plan {
    Rebalance,
    Drain(u32),
}

pub async fn run(plan: Plan, args: PlanArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.bootstrap.client_config()?)?;
    let moves = match plan {
        Plan::Rebalance => admin.rebalance(args.dry_run).await?,
        Plan::Drain(id) => admin.drain_broker(id, args.dry_run).await?,
    };
    print_plan(&moves, args.dry_run, args.json)?;
    if args.wait && !moves.is_empty() {
        let timeout = args.wait_timeout_ms.unwrap_or(WAIT_TIMEOUT_MS_DEFAULT);
        wait_until_done(&admin, &moves, Duration::from_millis(timeout)).await?;
        if !args.json {
            outln!("every move completed")?;
        }
    }
    Ok(())
}

fn print_plan(moves: &[PartitionMove], dry_run: bool, json: bool) -> anyhow::Result<()> {
    if json {
        let moves: Vec<_> = moves
            .iter()
            .map(|m| {
                serde_json::json!({
                    "topic": m.topic, "partition": m.partition,
                    "from": m.from_replicas, "to": m.to_replicas,
                })
            })
            .collect();
        let out = serde_json::json!({ "dry_run": dry_run, "moves": moves });
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    if moves.is_empty() {
        return outln!("nothing to move: replicas and leaders are already spread evenly");
    }
    let verb = if dry_run { "would move" } else { "moving" };
    outln!("{verb} {} partition(s):", moves.len())?;
    let width = moves
        .iter()
        .map(|m| m.topic.len())
        .max()
        .unwrap_or(0)
        .max(5);
    outln!("{:<width$} {:>9}  from -> to", "topic", "partition")?;
    for m in moves {
        outln!(
            "{:<width$} {:>9}  {} -> {}",
            m.topic,
            m.partition,
            list(&m.from_replicas),
            list(&m.to_replicas)
        )?;
    }
    Ok(())
}

/// Replicas as `1,2,3` (preferred leader first).
fn list(replicas: &[u32]) -> String {
    let ids: Vec<String> = replicas.iter().map(u32::to_string).collect();
    ids.join(",")
}

/// Polls the topics of `moves` until no partition of them is being reassigned, or `timeout`.
async fn wait_until_done(
    admin: &Admin,
    moves: &[PartitionMove],
    timeout: Duration,
) -> anyhow::Result<()> {
    let topics: BTreeSet<&str> = moves.iter().map(|m| m.topic.as_str()).collect();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut pending = Vec::new();
        for topic in &topics {
            let described = match admin.describe_topic(topic).await {
                Ok(d) => d,
                // Deleted meanwhile: nothing left to move.
                Err(e)
                    if e.code() == Some(tinymq_protocol::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) =>
                {
                    continue
                }
                Err(e) => return Err(e.into()),
            };
            pending.extend(
                described
                    .partitions
                    .iter()
                    .filter(|p| !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty())
                    .map(|p| format!("{topic}/{}", p.partition)),
            );
        }
        if pending.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "{} partition(s) still being reassigned after {} ms (their new replicas are not \
                 in sync yet; the moves go on): {}",
                pending.len(),
                timeout.as_millis(),
                pending.join(", ")
            );
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}
