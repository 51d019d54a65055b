//! `tinymq dlq replay`: move dead-lettered records back to their origin topic
//! (docs/queues.md, "Dead-letter topics").
//!
//! The dead-letter topic is read as a consumer group (default `__dlq-replay.<DLQ_TOPIC>`), so
//! a replay that stops half-way resumes where it stopped. Each record goes to the topic named
//! by its `tinymq.dlq.topic` header (or `--to`), on its original partition when that is known
//! and no `--to` is given, with key, value, timestamp and its other headers kept and the
//! `tinymq.dlq.*` headers removed. The group's offsets are committed only after the records
//! before them were acknowledged by the target's leader (idempotent producer, acks=all): a
//! replay killed in between produces those records again (at least once).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tinymq_client::{
    Acks, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig, ProducerRecord,
    StartFrom,
};

use crate::outln;

/// The prefix of the origin headers the broker adds when it dead-letters a record.
pub const DLQ_HEADER_PREFIX: &str = "tinymq.dlq.";
/// Most records replayed per poll (and so per commit).
const REPLAY_BATCH_RECORDS_MAX: usize = 500;

#[derive(clap::Subcommand, Debug)]
pub enum DlqCommand {
    /// Produce the records of a dead-letter topic back to the topic each came from.
    Replay {
        /// The dead-letter topic.
        topic: String,
        /// Send every record to this topic instead of the one its `tinymq.dlq.topic` header
        /// names.
        #[arg(long)]
        to: Option<String>,
        /// Stop after this many records [default: every record there is].
        #[arg(long, value_parser = crate::args::positive_u64)]
        count: Option<u64>,
        /// The consumer group that keeps the replay's position [default:
        /// __dlq-replay.<TOPIC>].
        #[arg(long)]
        group: Option<String>,
        /// Stop once nothing new arrived for this long, ms.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
        #[command(flatten)]
        bootstrap: crate::Bootstrap,
    },
}

pub async fn run(cmd: DlqCommand) -> anyhow::Result<()> {
    let DlqCommand::Replay {
        topic,
        to,
        count,
        group,
        timeout_ms,
        bootstrap,
    } = cmd;
    let group = group.unwrap_or_else(|| format!("__dlq-replay.{topic}"));
    let client = bootstrap.client_config()?;
    let mut config = ConsumerConfig::new(&bootstrap.bootstrap);
    config.client = client.clone();
    config.start_from = StartFrom::Earliest;
    config.auto_commit_interval = None;
    let mut consumer = Consumer::new(config)?;
    consumer.subscribe(&group, &[&topic]).await?;
    let mut producer_config = ProducerConfig::new(&bootstrap.bootstrap);
    producer_config.client = client;
    producer_config.acks = Acks::All;
    producer_config.idempotence = true;
    let producer = Producer::new(producer_config)?;
    let result = replay(&mut consumer, &producer, to.as_deref(), count, timeout_ms).await;
    producer.close().await;
    let closed = consumer.close().await;
    let per_topic = result?;
    closed?;
    let total: u64 = per_topic.values().sum();
    outln!("replayed {total} records from {topic}")?;
    for (target, n) in per_topic {
        outln!("  {n} to {target}")?;
    }
    Ok(())
}

/// Replays until `count` records, or until nothing arrived for `timeout_ms`; returns the
/// count per target topic.
async fn replay(
    consumer: &mut Consumer,
    producer: &Producer,
    to: Option<&str>,
    count: Option<u64>,
    timeout_ms: u64,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut per_topic = BTreeMap::new();
    let mut replayed = 0u64;
    let idle_max = Duration::from_millis(timeout_ms);
    let mut idle_since = Instant::now();
    loop {
        let left = count.map_or(u64::MAX, |c| c.saturating_sub(replayed));
        if left == 0 || idle_since.elapsed() >= idle_max {
            return Ok(per_topic);
        }
        let max = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(REPLAY_BATCH_RECORDS_MAX);
        let records = consumer.poll_up_to(Duration::from_millis(500), max).await?;
        if records.is_empty() {
            continue;
        }
        idle_since = Instant::now();
        let mut deliveries = Vec::with_capacity(records.len());
        for record in &records {
            let (target, out) = origin_record(record, to)?;
            deliveries.push(producer.send(&target, out).await?);
            *per_topic.entry(target).or_insert(0u64) += 1;
        }
        for delivery in deliveries {
            delivery.await?;
        }
        // Only now: every record before the committed position is in its origin topic.
        consumer.commit().await?;
        replayed += records.len() as u64;
    }
}

/// The record to produce for a dead-lettered one, and its target topic: `to`, else the
/// `tinymq.dlq.topic` header (on the `tinymq.dlq.partition` partition); without the origin
/// headers.
fn origin_record(
    record: &ConsumerRecord,
    to: Option<&str>,
) -> anyhow::Result<(String, ProducerRecord)> {
    let header = |name: &str| {
        record
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let target = match to {
        Some(t) => t.to_string(),
        None => header("tinymq.dlq.topic")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}/{} offset {} has no tinymq.dlq.topic header; say where it goes with --to",
                    record.topic,
                    record.partition,
                    record.offset
                )
            })?
            .to_string(),
    };
    let partition = match to {
        Some(_) => None,
        None => header("tinymq.dlq.partition").and_then(|p| p.parse::<u32>().ok()),
    };
    let out = ProducerRecord {
        key: record.key.clone(),
        value: record.value.clone(),
        headers: record
            .headers
            .iter()
            .filter(|(k, _)| !k.starts_with(DLQ_HEADER_PREFIX))
            .cloned()
            .collect(),
        partition,
        timestamp_ms: Some(record.timestamp_ms),
    };
    Ok((target, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn dead_lettered() -> ConsumerRecord {
        let h = |k: &str, v: &str| (k.to_string(), Some(Bytes::from(v.to_string())));
        ConsumerRecord {
            topic: "orders.dlq".into(),
            partition: 1,
            offset: 7,
            timestamp_ms: 1234,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![
                h("tag", "red"),
                h("tinymq.dlq.topic", "orders"),
                h("tinymq.dlq.partition", "2"),
                h("tinymq.dlq.offset", "40"),
                h("tinymq.dlq.reason", "rejected"),
            ],
        }
    }

    #[test]
    fn a_record_goes_back_to_its_origin_without_the_dlq_headers() {
        let (target, out) = origin_record(&dead_lettered(), None).unwrap();
        assert_eq!(target, "orders");
        assert_eq!(out.partition, Some(2));
        assert_eq!(out.timestamp_ms, Some(1234));
        assert_eq!(out.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out.headers.len(), 1);
        assert_eq!(out.headers[0].0, "tag");
        let (target, out) = origin_record(&dead_lettered(), Some("elsewhere")).unwrap();
        assert_eq!((target.as_str(), out.partition), ("elsewhere", None));
        let mut bare = dead_lettered();
        bare.headers.clear();
        assert!(origin_record(&bare, None).is_err());
    }
}
