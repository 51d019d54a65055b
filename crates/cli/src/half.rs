//! `tinymq half send|commit|rollback|list|check`: half messages (transactional messages with
//! check-back) from the shell. `send` stores the lines of stdin as one half of a producer
//! group; `commit` and `rollback` resolve it; `list` shows the unresolved ones; `check` is a
//! live member of the group that answers each check by running a command (exit 0 = commit,
//! 1 = roll back, anything else = not known yet).

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use clap::Subcommand;
use tinymq_client::{Admin, HalfCheck, HalfDecision, Producer, ProducerConfig, ProducerRecord};
use tokio::io::AsyncWriteExt;

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum HalfCommand {
    /// Store the lines of stdin (one record each) as one half message; prints its id.
    Send {
        /// The topic the records go to on commit.
        topic: String,
        /// The producer group (its members answer the checks).
        #[arg(long)]
        group: String,
        /// The key of every record (also what chooses the partition).
        #[arg(long)]
        key: Option<String>,
        /// First offered for a check this long after it is stored (ms, at most 3600000).
        #[arg(long, default_value_t = 6000)]
        check_after_ms: u64,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Commit a half: its records are appended to their partition; prints the first offset.
    Commit {
        /// The topic the half's records go to.
        topic: String,
        /// The half's id, as `half send` printed it.
        id: i64,
        /// The producer group that stored it.
        #[arg(long)]
        group: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Roll a half back: its records never appear.
    Rollback {
        /// The topic the half's records would have gone to.
        topic: String,
        /// The half's id, as `half send` printed it.
        id: i64,
        /// The producer group that stored it.
        #[arg(long)]
        group: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// The unresolved halves of the cluster (of one group with --group).
    List {
        /// Only this producer group's halves.
        #[arg(long)]
        group: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Answer the group's checks until interrupted: for each, run COMMAND with `sh -c`, the
    /// records' values on stdin (one per line) and TINYMQ_HALF_ID, TINYMQ_HALF_TOPIC,
    /// TINYMQ_HALF_PARTITION, TINYMQ_HALF_KEY (the first record's) and TINYMQ_HALF_CHECK (1 for
    /// the first check) set. Exit 0 commits, 1 rolls back, anything else answers "not known".
    Check {
        /// The producer group whose checks to answer.
        #[arg(long)]
        group: String,
        /// The command that looks up the local transaction's outcome.
        #[arg(long)]
        command: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

fn producer(bootstrap: &Bootstrap) -> anyhow::Result<Producer> {
    let mut config = ProducerConfig::new("");
    config.client = bootstrap.client_config()?;
    Ok(Producer::new(config)?)
}

pub async fn run(command: HalfCommand) -> anyhow::Result<()> {
    match command {
        HalfCommand::Send {
            topic,
            group,
            key,
            check_after_ms,
            bootstrap,
        } => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input)?;
            let records: Vec<ProducerRecord> = input
                .lines()
                .map(|line| {
                    let record = ProducerRecord::value(line.to_string());
                    match &key {
                        Some(k) => record.with_key(k.clone()),
                        None => record,
                    }
                })
                .collect();
            anyhow::ensure!(!records.is_empty(), "no input lines: a half needs a record");
            let after = Duration::from_millis(check_after_ms);
            let half = producer(&bootstrap)?
                .send_half(&group, &topic, records, after)
                .await?;
            outln!("{}", half.id)?;
            eprintln!(
                "half {} of group {group} stored for {topic}/{}: commit or roll it back",
                half.id, half.partition
            );
            Ok(())
        }
        HalfCommand::Commit {
            topic,
            id,
            group,
            bootstrap,
        } => {
            let offset = producer(&bootstrap)?
                .end_half(&group, &topic, id, true)
                .await?;
            outln!("{offset}")
        }
        HalfCommand::Rollback {
            topic,
            id,
            group,
            bootstrap,
        } => {
            producer(&bootstrap)?
                .end_half(&group, &topic, id, false)
                .await?;
            eprintln!("half {id} of group {group} rolled back");
            Ok(())
        }
        HalfCommand::List {
            group,
            json,
            bootstrap,
        } => list(group, json, bootstrap).await,
        HalfCommand::Check {
            group,
            command,
            bootstrap,
        } => {
            let producer = producer(&bootstrap)?;
            let checker = producer.check_halves(&group, move |check| {
                let command = command.clone();
                async move { decide(&command, check).await }
            });
            eprintln!("answering checks of group {group}; interrupt to stop");
            tokio::signal::ctrl_c().await?;
            checker.stop();
            Ok(())
        }
    }
}

async fn list(group: Option<String>, json: bool, bootstrap: Bootstrap) -> anyhow::Result<()> {
    let halves = Admin::new(bootstrap.client_config()?)?
        .list_halves(group.as_deref())
        .await?;
    if json {
        let out: Vec<_> = halves
            .iter()
            .map(|h| {
                serde_json::json!({
                    "group": h.group, "id": h.half_id, "topic": h.topic,
                    "partition": h.partition, "records": h.records, "state": h.state,
                    "checks": h.checks, "stored_ms": h.stored_ms,
                    "next_check_ms": h.next_check_ms,
                })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    outln!("GROUP\tID\tTOPIC\tPARTITION\tRECORDS\tSTATE\tCHECKS")?;
    for h in &halves {
        outln!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            h.group,
            h.half_id,
            h.topic,
            h.partition,
            h.records,
            h.state,
            h.checks
        )?;
    }
    Ok(())
}

/// Runs `command` for `check`: its exit status is the answer.
async fn decide(command: &str, check: HalfCheck) -> HalfDecision {
    let key = check
        .records
        .first()
        .and_then(|r| r.key.as_ref())
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .unwrap_or_default();
    let mut stdin = Vec::new();
    for r in &check.records {
        stdin.extend_from_slice(r.value.as_deref().unwrap_or_default());
        stdin.push(b'\n');
    }
    let spawned = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("TINYMQ_HALF_ID", check.id.to_string())
        .env("TINYMQ_HALF_TOPIC", &check.topic)
        .env("TINYMQ_HALF_PARTITION", check.partition.to_string())
        .env("TINYMQ_HALF_KEY", key)
        .env("TINYMQ_HALF_CHECK", check.check_number.to_string())
        .stdin(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            eprintln!("half {}: cannot run the check command: {e}", check.id);
            return HalfDecision::Unknown;
        }
    };
    if let Some(mut pipe) = child.stdin.take() {
        // A command that does not read its input closes the pipe: that is not a failure.
        let _ = pipe.write_all(&stdin).await;
    }
    let decision = match child.wait().await.map(|s| s.code()) {
        Ok(Some(0)) => HalfDecision::Commit,
        Ok(Some(1)) => HalfDecision::Rollback,
        _ => HalfDecision::Unknown,
    };
    let said = match decision {
        HalfDecision::Commit => "commit",
        HalfDecision::Rollback => "roll back",
        HalfDecision::Unknown => "not known yet",
    };
    eprintln!(
        "half {} of {} (check {}): {said}",
        check.id, check.topic, check.check_number
    );
    decision
}
