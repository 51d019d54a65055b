//! `tinymq consume TOPIC`: print messages one per line (or as JSON).

use std::io::Write;
use std::time::{Duration, Instant};

use tinymq_client::{Consumer, ConsumerConfig, ConsumerRecord, StartFrom};

use crate::Bootstrap;

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    topic: String,
    /// Start at the earliest stored message instead of new ones only (with --group: where
    /// the group has no committed offset).
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Consume as a member of this group: partitions are shared with the group's other
    /// members, and positions are committed (at-least-once) and resumed from.
    #[arg(long, conflicts_with_all = ["offset", "partition"])]
    group: Option<String>,
    /// Start at this offset (in every consumed partition).
    #[arg(long)]
    offset: Option<i64>,
    /// Consume only this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// Exit after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Exit after this long with nothing new, ms.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// text (the value) or json (key, partition, offset, timestamp, headers, value).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    #[command(flatten)]
    bootstrap: Bootstrap,
}

fn text(bytes: &Option<bytes::Bytes>) -> serde_json::Value {
    match bytes {
        Some(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
        None => serde_json::Value::Null,
    }
}

fn print(out: &mut impl Write, record: &ConsumerRecord, json: bool) -> std::io::Result<()> {
    if json {
        let headers: serde_json::Map<String, serde_json::Value> = record
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), text(v)))
            .collect();
        let line = serde_json::json!({
            "partition": record.partition, "offset": record.offset, "timestamp": record.timestamp_ms,
            "key": text(&record.key), "headers": headers, "value": text(&record.value),
        });
        writeln!(out, "{line}")
    } else {
        let value = record.value.as_deref().unwrap_or_default();
        out.write_all(value)?;
        out.write_all(b"\n")
    }
}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut config = ConsumerConfig::new(&args.bootstrap.bootstrap);
    config.start_from = if args.from_beginning {
        StartFrom::Earliest
    } else {
        StartFrom::Latest
    };
    let mut consumer = Consumer::new(config)?;
    match &args.group {
        Some(group) => consumer.subscribe(group, &[&args.topic]).await?,
        None => {
            consumer
                .assign(&args.topic, args.partition.map(|p| vec![p]))
                .await?
        }
    }
    if let Some(offset) = args.offset {
        // Every assigned partition (one with --partition) starts at the same offset.
        for (topic, partition) in consumer.assignment() {
            consumer.seek(&topic, partition, offset);
        }
    }
    let result = print_until_done(&mut consumer, &args).await;
    // In a group: commit what was printed and leave, so the partitions move at once.
    let closed = consumer.close().await;
    result?;
    closed?;
    Ok(())
}

async fn print_until_done(consumer: &mut Consumer, args: &ConsumeArgs) -> anyhow::Result<()> {
    let json = args.format == "json";
    let stdout = std::io::stdout();
    let mut printed = 0u64;
    let mut last_new = Instant::now();
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        let wait = match args.timeout_ms {
            Some(ms) => {
                let left = Duration::from_millis(ms).saturating_sub(last_new.elapsed());
                if left.is_zero() {
                    return Ok(());
                }
                left.min(Duration::from_millis(500))
            }
            None => Duration::from_millis(500),
        };
        let records = consumer.poll(wait).await?;
        if !records.is_empty() {
            last_new = Instant::now();
        }
        let mut out = stdout.lock();
        let written = records
            .iter()
            .take(args.count.map_or(usize::MAX, |c| (c - printed) as usize))
            .try_for_each(|record| {
                printed += 1;
                print(&mut out, record, json)
            })
            .and_then(|()| out.flush());
        match written {
            Ok(()) => {}
            // The reader went away (e.g. `| head`): that is a normal way to stop.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}
