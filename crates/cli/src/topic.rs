//! `tinymq topic create|alter|list|describe|delete`. What is not known (no leader; offsets of a
//! partition whose leader cannot be reached) is `null` in JSON and `-` in text, never a number.

use clap::Subcommand;
use tinymq_client::{Admin, ClientConfig, TopicConfig};
use tinymq_protocol::messages::PartitionState;

use crate::Bootstrap;

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Number of partitions [default: the server's, 1].
        #[arg(long, default_value_t = 0)]
        partitions: u32,
        /// Copies of each partition, on different brokers [default: 1].
        #[arg(long, default_value_t = 0)]
        replicas: u32,
        /// Delete segments older than this, ms; -1 keeps forever [default: the server's].
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        retention_ms: i64,
        /// Keep at most about this many bytes per partition; -1 = no limit.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        retention_bytes: i64,
        /// Segment file size in bytes [default: 1 GiB].
        #[arg(long, default_value_t = 0)]
        segment_bytes: u64,
        /// always, interval:MS or os [default: the server's, always].
        #[arg(long, default_value = "")]
        flush: String,
        /// Largest record batch accepted, bytes [default: 1048576].
        #[arg(long, default_value_t = 0)]
        message_bytes_max: u32,
        /// Refuse records timestamped more than this many ms ahead of the broker's clock;
        /// -1 = no bound [default: 3600000, one hour].
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        message_timestamp_after_max_ms: i64,
        /// Refuse records timestamped more than this many ms behind the broker's clock;
        /// -1 = no bound [default: no bound].
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        message_timestamp_before_max_ms: i64,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Grow a topic to more partitions (never fewer). Keys map to partitions by count, so
    /// keyed records go to new partitions from now on.
    Alter {
        name: String,
        /// The new partition count.
        #[arg(long)]
        partitions: u32,
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
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Delete a topic and its data.
    Delete {
        name: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

pub async fn run(command: TopicCommand) -> anyhow::Result<()> {
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replicas,
            retention_ms,
            retention_bytes,
            segment_bytes,
            flush,
            message_bytes_max,
            message_timestamp_after_max_ms,
            message_timestamp_before_max_ms,
            bootstrap,
        } => {
            let admin = Admin::new(ClientConfig::new(&bootstrap.bootstrap))?;
            let config = TopicConfig {
                partitions,
                replication_factor: replicas,
                retention_ms,
                retention_bytes,
                segment_bytes,
                flush,
                message_bytes_max,
                segment_ms: 0,
                message_timestamp_after_max_ms,
                message_timestamp_before_max_ms,
            };
            let got = admin.create_topic(&name, config).await?;
            println!(
                "created topic {name} with {} partitions (flush {})",
                got.partitions, got.flush
            );
        }
        TopicCommand::Alter {
            name,
            partitions,
            bootstrap,
        } => {
            let admin = Admin::new(ClientConfig::new(&bootstrap.bootstrap))?;
            admin.alter_partitions(&name, partitions).await?;
            println!("topic {name} now has {partitions} partitions");
        }
        TopicCommand::List { bootstrap } => {
            let admin = Admin::new(ClientConfig::new(&bootstrap.bootstrap))?;
            for name in admin.list_topics().await? {
                println!("{name}");
            }
        }
        TopicCommand::Describe {
            name,
            json,
            bootstrap,
        } => {
            let admin = Admin::new(ClientConfig::new(&bootstrap.bootstrap))?;
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
                        })
                    })
                    .collect();
                let out = serde_json::json!({
                    "name": d.name,
                    "config": {
                        "partitions": c.partitions, "replication_factor": c.replication_factor,
                        "retention_ms": c.retention_ms, "retention_bytes": c.retention_bytes,
                        "segment_bytes": c.segment_bytes, "flush": c.flush,
                        "message_bytes_max": c.message_bytes_max,
                    },
                    "partitions": partitions,
                });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!(
                    "topic {}: {} partitions, flush {}, retention_ms {}, retention_bytes {}, segment_bytes {}, message_bytes_max {}",
                    d.name, c.partitions, c.flush, c.retention_ms, c.retention_bytes, c.segment_bytes, c.message_bytes_max
                );
                println!(
                    "{:>9} {:>6} {:>12} {:>12} {:>12} {:>12}  replicas / isr",
                    "partition", "leader", "start", "end", "hw", "bytes"
                );
                for p in &d.partitions {
                    let known = offsets_known(p);
                    println!(
                        "{:>9} {:>6} {:>12} {:>12} {:>12} {:>12}  {:?} / {:?}",
                        p.partition,
                        or_dash(leader(p)),
                        or_dash(known.then_some(p.log_start_offset)),
                        or_dash(known.then_some(p.log_end_offset)),
                        or_dash(known.then_some(p.high_watermark)),
                        or_dash(known.then_some(p.size_bytes)),
                        p.replicas,
                        p.isr
                    );
                }
            }
        }
        TopicCommand::Delete { name, bootstrap } => {
            let admin = Admin::new(ClientConfig::new(&bootstrap.bootstrap))?;
            admin.delete_topic(&name).await?;
            println!("deleted topic {name}");
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
