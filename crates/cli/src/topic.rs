//! `tinymq topic create|alter|list|describe|delete`. What is not known (no leader; offsets of a
//! partition whose leader cannot be reached) is `null` in JSON and `-` in text, never a number.

use clap::Subcommand;
use tinymq_client::{Admin, TopicConfig};
use tinymq_protocol::messages::PartitionState;

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
        /// min_insync_replicas, unclean_leader_election); repeat for more. It takes effect
        /// without a restart; flush cannot change.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_setting, allow_hyphen_values = true)]
        set: Vec<(String, String)>,
        /// Remove a setting so the brokers' default applies again; repeat for more.
        #[arg(long, value_name = "KEY")]
        unset: Vec<String>,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List topic names.
    List {
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
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

/// `KEY=VALUE` of `topic alter --set`.
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
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
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
            };
            let got = admin.create_topic(&name, config).await?;
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
                let c = admin.alter_topic_config(&name, &set, &unset).await?;
                outln!(
                    "topic {name} settings: min_insync_replicas {}, unclean_leader_election {}, retention_ms {}, retention_bytes {}, segment_bytes {}, message_bytes_max {}",
                    c.min_insync_replicas, c.unclean_leader_election, c.retention_ms,
                    c.retention_bytes, c.segment_bytes, c.message_bytes_max
                )?;
            }
        }
        TopicCommand::List { bootstrap } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            for name in admin.list_topics().await? {
                outln!("{name}")?;
            }
        }
        TopicCommand::Describe {
            name,
            json,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            let d = admin.describe_topic(&name).await?;
            let c = d.config.clone().unwrap_or_default();
            if json {
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
                let out = serde_json::json!({
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
                    },
                    "partitions": partitions,
                });
                outln!("{}", serde_json::to_string_pretty(&out)?)?;
            } else {
                outln!(
                    "topic {}: {}, {}, min_insync_replicas {}, unclean_leader_election {}, flush {}, retention_ms {}, retention_bytes {}, segment_bytes {}, message_bytes_max {}",
                    d.name, count(c.partitions, "partition"), count(c.replication_factor, "replica"),
                    c.min_insync_replicas, c.unclean_leader_election, c.flush, c.retention_ms,
                    c.retention_bytes, c.segment_bytes, c.message_bytes_max
                )?;
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
            }
        }
        TopicCommand::Delete { name, bootstrap } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            admin.delete_topic(&name).await?;
            outln!("deleted topic {name}")?;
        }
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
