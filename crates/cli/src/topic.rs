//! `tinymq topic create|alter|list|describe|delete`. What is not known (no leader; offsets of a
//! partition whose leader cannot be reached; a setting an older broker does not report) is
//! `null` in JSON and `-` in text, never a number. `topic create --config KEY=VALUE` takes the
//! names and values `topic alter --set` takes: parsed by the same code and applied right after
//! the create by the request `alter` sends (`AlterTopicConfig`), so the brokers check them the
//! same way; a refused one deletes the topic just created (`flush`, which an alter cannot
//! change, goes into the create itself).

use clap::Subcommand;
use tinymq_client::{Admin, ErrorCode, TopicConfig};
use tinymq_protocol::messages::{DescribeTopicResponse, PartitionState, TopicShareSettings};

use crate::args::count;
use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// The topic's name.
        name: String,
        /// Number of partitions [default: the server's, normally 1].
        #[arg(long, value_parser = crate::args::positive_u32)]
        partitions: Option<u32>,
        /// Copies of each partition, on different brokers [default: min(3, live brokers); 1
        /// for the standalone server].
        #[arg(long, value_parser = crate::args::positive_u32)]
        replicas: Option<u32>,
        /// In-sync replicas an acks=all write needs; fewer refuse writes with
        /// NOT_ENOUGH_REPLICAS (1 to --replicas) [default: 2 with 3 or more replicas, else 1].
        #[arg(long, value_parser = crate::args::positive_u32)]
        min_insync_replicas: Option<u32>,
        /// Let a replica outside the ISR lead when no in-sync one is left: the partition comes
        /// back sooner, but acknowledged records may be lost [default: off].
        #[arg(long)]
        unclean_leader_election: bool,
        /// Delete segments older than this, ms; -1 keeps forever [default: the server's,
        /// normally 604800000, 7 days].
        #[arg(long, value_parser = crate::args::positive_or_unbounded, allow_hyphen_values = true)]
        retention_ms: Option<i64>,
        /// Keep at most about this many bytes per partition; -1 = no limit [default: no limit].
        #[arg(long, value_parser = crate::args::positive_or_unbounded, allow_hyphen_values = true)]
        retention_bytes: Option<i64>,
        /// Segment file size in bytes [default: 1073741824, 1 GiB].
        #[arg(long, value_parser = crate::args::positive_u64)]
        segment_bytes: Option<u64>,
        /// always, interval:MS or os [default: the server's, normally always].
        #[arg(long)]
        flush: Option<String>,
        /// Largest record batch accepted, bytes [default: 1048576].
        #[arg(long, value_parser = crate::args::positive_u32)]
        message_bytes_max: Option<u32>,
        /// Refuse records timestamped more than this many ms ahead of the broker's clock;
        /// -1 = no bound [default: 3600000, one hour].
        #[arg(long, value_parser = crate::args::positive_or_unbounded, allow_hyphen_values = true)]
        message_timestamp_after_max_ms: Option<i64>,
        /// Refuse records timestamped more than this many ms behind the broker's clock;
        /// -1 = no bound [default: no bound].
        #[arg(long, value_parser = crate::args::positive_or_unbounded, allow_hyphen_values = true)]
        message_timestamp_before_max_ms: Option<i64>,
        /// Give a setting a value at creation, KEY=VALUE with the keys and checks of `topic
        /// alter --set` (e.g. cleanup_policy=compact, max_delivery_attempts=3,
        /// dead_letter_topic=failed); repeat for more. Applied after the flags above; a
        /// refused one leaves no topic behind.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_setting, allow_hyphen_values = true)]
        config: Vec<(String, String)>,
        /// Succeed, changing nothing, when the topic exists already (its settings are left
        /// as they are, --config included).
        #[arg(long)]
        if_not_exists: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Grow a topic to more partitions (never fewer) and/or change its settings, live. Keys
    /// map to partitions by count, so keyed records go to new partitions from now on.
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["partitions", "set", "unset"])))]
    Alter {
        /// The topic's name.
        name: String,
        /// The new partition count (more than the topic has now).
        #[arg(long, value_parser = crate::args::positive_u32)]
        partitions: Option<u32>,
        /// Give a setting a new value, KEY=VALUE with the keys `topic describe --json` shows
        /// (retention_ms, retention_bytes, segment_bytes, segment_ms, message_bytes_max,
        /// message_timestamp_after_max_ms, message_timestamp_before_max_ms,
        /// min_insync_replicas, unclean_leader_election; for compaction cleanup_policy
        /// (delete, compact or compact,delete; default delete), delete_retention_ms (default
        /// 86400000), min_compaction_lag_ms (default 0), max_compaction_lag_ms (-1 = no bound,
        /// the default) and min_cleanable_dirty_ratio (0 to 1, default 0.5); and for share
        /// groups max_delivery_attempts (1 to 100, default 5) and dead_letter_topic (default
        /// TOPIC.dlq)); repeat for more. It takes effect without a restart; flush cannot
        /// change.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_setting, allow_hyphen_values = true)]
        set: Vec<(String, String)>,
        /// Remove a setting so the brokers' default applies again; repeat for more.
        #[arg(long, value_name = "KEY")]
        unset: Vec<String>,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List topic names; with --long (or --json) each with its partitions, replication factor
    /// and size on disk.
    List {
        /// A table: name, partitions, replication factor and bytes on disk (summed over the
        /// partitions' leaders; `-` when a leader cannot be asked).
        #[arg(long, short = 'l')]
        long: bool,
        /// Print JSON: {"topics":[{"name","partitions","replication_factor","size_bytes"}]},
        /// size_bytes null when not known.
        #[arg(long, conflicts_with = "long")]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Show a topic's settings and partitions.
    Describe {
        /// The topic's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Delete a topic and its data.
    Delete {
        /// The topic's name.
        name: String,
        /// Succeed, doing nothing, when there is no such topic.
        #[arg(long)]
        if_exists: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

/// `KEY=VALUE` of `topic alter --set` and `topic create --config`.
fn parse_setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

pub async fn run(command: TopicCommand) -> anyhow::Result<()> {
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replicas,
            min_insync_replicas,
            unclean_leader_election,
            retention_ms,
            retention_bytes,
            segment_bytes,
            flush,
            message_bytes_max,
            message_timestamp_after_max_ms,
            message_timestamp_before_max_ms,
            config: settings,
            if_not_exists,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            let (flush, settings) = split_flush(flush, settings)?;
            // 0 (and "") on the wire: the server's default.
            let config = TopicConfig {
                partitions: partitions.unwrap_or(0),
                replication_factor: replicas.unwrap_or(0),
                retention_ms: retention_ms.unwrap_or(0),
                retention_bytes: retention_bytes.unwrap_or(0),
                segment_bytes: segment_bytes.unwrap_or(0),
                flush: flush.unwrap_or_default(),
                message_bytes_max: message_bytes_max.unwrap_or(0),
                segment_ms: 0,
                message_timestamp_after_max_ms: message_timestamp_after_max_ms.unwrap_or(0),
                message_timestamp_before_max_ms: message_timestamp_before_max_ms.unwrap_or(0),
                min_insync_replicas: min_insync_replicas.unwrap_or(0),
                unclean_leader_election,
                // The compaction settings have no flags: --config gives them.
                ..TopicConfig::default()
            };
            let mut got = match admin.create_topic(&name, config).await {
                Ok(got) => got,
                Err(e) if if_not_exists && e.code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {
                    return outln!("topic {name} exists already; left as it is");
                }
                Err(e) => return Err(e.into()),
            };
            if !settings.is_empty() {
                got = apply_at_create(&admin, &name, &settings).await?;
            }
            // Created through a MetaServer node, the storage settings are the brokers' own.
            let flush = if got.flush.is_empty() {
                String::new()
            } else {
                format!(", flush {}", got.flush)
            };
            outln!(
                "created topic {name} with {}, {} (min_insync_replicas {}{flush})",
                count(got.partitions, "partition"),
                count(got.replication_factor, "replica"),
                got.min_insync_replicas,
            )?;
            if !settings.is_empty() {
                outln!("{}", settings_now(&admin, &name, got).await)?;
            }
        }
        TopicCommand::Alter {
            name,
            partitions,
            set,
            unset,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            if let Some(partitions) = partitions {
                admin.alter_partitions(&name, partitions).await?;
                outln!("topic {name} now has {}", count(partitions, "partition"))?;
            }
            if !set.is_empty() || !unset.is_empty() {
                let altered = admin.alter_topic_config(&name, &set, &unset).await?;
                outln!("{}", settings_now(&admin, &name, altered).await)?;
            }
        }
        TopicCommand::List {
            long,
            json,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            let names = admin.list_topics().await?;
            if !long && !json {
                for name in names {
                    outln!("{name}")?;
                }
                return Ok(());
            }
            list_details(&admin, names, json).await?;
        }
        TopicCommand::Describe {
            name,
            json,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            let d = admin.describe_topic(&name).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&describe_json(&d))?)?;
            } else {
                describe_text(&d)?;
            }
        }
        TopicCommand::Delete {
            name,
            if_exists,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            match admin.delete_topic(&name).await {
                Ok(()) => outln!("deleted topic {name}")?,
                Err(e) if if_exists && e.code() == Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) => {
                    outln!("no topic {name}; nothing deleted")?
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// `KEY=VALUE` pairs, as `--set` and `--config` give them.
type Settings = Vec<(String, String)>;

/// `--config flush=…` goes into the create request (an alter may not change it): the flush
/// policy and the settings left for the alter.
fn split_flush(
    flag: Option<String>,
    settings: Settings,
) -> anyhow::Result<(Option<String>, Settings)> {
    let (flushes, rest): (Vec<_>, Vec<_>) = settings.into_iter().partition(|(k, _)| k == "flush");
    match (flag, flushes.as_slice()) {
        (flag, []) => Ok((flag, rest)),
        (None, [(_, value)]) => Ok((Some(value.clone()), rest)),
        _ => anyhow::bail!("flush is given more than once (--flush and --config flush=…)"),
    }
}

/// Applies `topic create --config` to the topic just created, with the request `topic alter
/// --set` sends; when it is refused the topic is deleted again, so a create with a wrong
/// setting leaves nothing behind.
async fn apply_at_create(
    admin: &Admin,
    name: &str,
    settings: &[(String, String)],
) -> anyhow::Result<TopicConfig> {
    match admin.alter_topic_config(name, settings, &[]).await {
        Ok(config) => Ok(config),
        Err(refused) => {
            if let Err(e) = admin.delete_topic(name).await {
                tracing::warn!(topic = name, error = %e, "could not delete the topic again");
                anyhow::bail!("{refused} (the topic was created with its other settings and could not be deleted again: {e})");
            }
            anyhow::bail!("topic {name} not created: {refused}")
        }
    }
}

/// `topic list --long` / `--json`: each topic with its partitions, replication factor and
/// bytes on disk (described one by one; a topic deleted meanwhile is left out).
async fn list_details(admin: &Admin, names: Vec<String>, json: bool) -> anyhow::Result<()> {
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        let d = match admin.describe_topic(&name).await {
            Ok(d) => d,
            Err(e) if e.code() == Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) => continue,
            Err(e) => return Err(e.into()),
        };
        let c = d.config.clone().unwrap_or_default();
        rows.push((name, c.partitions, c.replication_factor, size_bytes(&d)));
    }
    if json {
        let topics: Vec<_> = rows
            .iter()
            .map(|(name, partitions, rf, size)| {
                serde_json::json!({"name": name, "partitions": partitions,
                    "replication_factor": rf, "size_bytes": size})
            })
            .collect();
        return outln!("{}", serde_json::json!({ "topics": topics }));
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(4);
    outln!(
        "{:<width$} {:>10} {:>8} {:>14}",
        "NAME",
        "PARTITIONS",
        "REPLICAS",
        "BYTES"
    )?;
    for (name, partitions, rf, size) in &rows {
        outln!(
            "{name:<width$} {partitions:>10} {rf:>8} {:>14}",
            or_dash(*size)
        )?;
    }
    Ok(())
}

/// Bytes on disk of a topic, summed over its partitions' leaders; unknown when any leader
/// could not be asked.
fn size_bytes(d: &DescribeTopicResponse) -> Option<u64> {
    d.partitions
        .iter()
        .map(|p| offsets_known(p).then_some(p.size_bytes))
        .sum()
}

/// The share-group settings, when the broker reported them (older ones do not).
fn share_settings(d: &DescribeTopicResponse) -> Option<&TopicShareSettings> {
    d.share.as_ref().filter(|s| s.max_delivery_attempts != 0)
}

/// Every setting of a topic as [`settings_line`] prints it, described now (the share-group
/// settings are only in a describe); `answered`, without those, when the describe fails (a
/// MetaServer node answers alters but not describes).
async fn settings_now(admin: &Admin, name: &str, answered: TopicConfig) -> String {
    match admin.describe_topic(name).await {
        Ok(d) => settings_line(&d),
        Err(e) => {
            tracing::debug!(topic = name, error = %e, "describe after the change failed");
            settings_line(&DescribeTopicResponse {
                name: name.to_string(),
                config: Some(answered),
                ..Default::default()
            })
        }
    }
}

/// Whether the answer has the compaction settings: an older broker (or a MetaServer node, for
/// a topic never given them) reports no cleanup policy, and then none of them is known.
fn compaction_known(c: &TopicConfig) -> bool {
    !c.cleanup_policy.is_empty()
}

/// Every setting of a topic on one line, as `describe` and `alter` print it.
fn settings_line(d: &DescribeTopicResponse) -> String {
    let c = d.config.clone().unwrap_or_default();
    let share = share_settings(d);
    let known = compaction_known(&c);
    format!(
        "topic {}: {}, {}, min_insync_replicas {}, unclean_leader_election {}, flush {}, \
         retention_ms {}, retention_bytes {}, segment_bytes {}, segment_ms {}, \
         message_bytes_max {}, message_timestamp_after_max_ms {}, \
         message_timestamp_before_max_ms {}, cleanup_policy {}, delete_retention_ms {}, \
         min_compaction_lag_ms {}, max_compaction_lag_ms {}, min_cleanable_dirty_ratio {}, \
         max_delivery_attempts {}, dead_letter_topic {}",
        d.name,
        count(c.partitions, "partition"),
        count(c.replication_factor, "replica"),
        c.min_insync_replicas,
        c.unclean_leader_election,
        c.flush,
        c.retention_ms,
        c.retention_bytes,
        c.segment_bytes,
        c.segment_ms,
        c.message_bytes_max,
        c.message_timestamp_after_max_ms,
        c.message_timestamp_before_max_ms,
        or_dash(known.then_some(&c.cleanup_policy)),
        or_dash(c.delete_retention_ms.filter(|_| known)),
        or_dash(known.then_some(c.min_compaction_lag_ms)),
        or_dash(known.then_some(c.max_compaction_lag_ms)),
        or_dash(c.min_cleanable_dirty_ratio.filter(|_| known)),
        or_dash(share.map(|s| s.max_delivery_attempts)),
        or_dash(share.map(|s| &s.dead_letter_topic)),
    )
}

fn describe_json(d: &DescribeTopicResponse) -> serde_json::Value {
    let c = d.config.clone().unwrap_or_default();
    let share = share_settings(d);
    let known = compaction_known(&c);
    let partitions: Vec<_> = d
        .partitions
        .iter()
        .map(|p| {
            let known = offsets_known(p);
            serde_json::json!({
                "partition": p.partition, "leader": leader(p), "leader_epoch": p.leader_epoch,
                "replicas": p.replicas, "isr": p.isr,
                "log_start_offset": known.then_some(p.log_start_offset),
                "log_end_offset": known.then_some(p.log_end_offset),
                "high_watermark": known.then_some(p.high_watermark),
                "size_bytes": known.then_some(p.size_bytes),
                "adding_replicas": p.adding_replicas,
                "removing_replicas": p.removing_replicas,
            })
        })
        .collect();
    serde_json::json!({
        "name": d.name,
        "config": {
            "partitions": c.partitions, "replication_factor": c.replication_factor,
            "retention_ms": c.retention_ms, "retention_bytes": c.retention_bytes,
            "segment_bytes": c.segment_bytes, "flush": c.flush,
            "message_bytes_max": c.message_bytes_max, "segment_ms": c.segment_ms,
            "message_timestamp_after_max_ms": c.message_timestamp_after_max_ms,
            "message_timestamp_before_max_ms": c.message_timestamp_before_max_ms,
            "min_insync_replicas": c.min_insync_replicas,
            "unclean_leader_election": c.unclean_leader_election,
            "cleanup_policy": known.then_some(&c.cleanup_policy),
            "delete_retention_ms": c.delete_retention_ms.filter(|_| known),
            "min_compaction_lag_ms": known.then_some(c.min_compaction_lag_ms),
            "max_compaction_lag_ms": known.then_some(c.max_compaction_lag_ms),
            "min_cleanable_dirty_ratio": c.min_cleanable_dirty_ratio.filter(|_| known),
            "max_delivery_attempts": share.map(|s| s.max_delivery_attempts),
            "dead_letter_topic": share.map(|s| &s.dead_letter_topic),
        },
        "partitions": partitions,
    })
}

fn describe_text(d: &DescribeTopicResponse) -> anyhow::Result<()> {
    outln!("{}", settings_line(d))?;
    outln!(
        "{:>9} {:>6} {:>12} {:>12} {:>12} {:>12}  replicas / isr",
        "partition",
        "leader",
        "start",
        "end",
        "hw",
        "bytes"
    )?;
    for p in &d.partitions {
        let known = offsets_known(p);
        let moving = if p.adding_replicas.is_empty() && p.removing_replicas.is_empty() {
            String::new()
        } else {
            format!(
                "  (reassigning: adding {:?}, removing {:?})",
                p.adding_replicas, p.removing_replicas
            )
        };
        outln!(
            "{:>9} {:>6} {:>12} {:>12} {:>12} {:>12}  {:?} / {:?}{moving}",
            p.partition,
            or_dash(leader(p)),
            or_dash(known.then_some(p.log_start_offset)),
            or_dash(known.then_some(p.log_end_offset)),
            or_dash(known.then_some(p.high_watermark)),
            or_dash(known.then_some(p.size_bytes)),
            p.replicas,
            p.isr
        )?;
    }
    Ok(())
}

/// The partition's leader; none while it is offline (0 on the wire).
fn leader(p: &PartitionState) -> Option<u32> {
    (p.leader != 0).then_some(p.leader)
}

/// Whether the partition's offsets and size came from its leader (-1 on the wire when the
/// leader is offline or could not be asked).
pub fn offsets_known(p: &PartitionState) -> bool {
    p.log_end_offset >= 0 && p.log_start_offset >= 0 && p.high_watermark >= 0
}

/// A value for a text table: `-` when unknown.
pub fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}
