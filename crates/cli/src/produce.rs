//! `tinymq produce TOPIC`: one message per stdin line. Exits 0 only after every line is
//! acknowledged. A line that fails (e.g. too large for the topic) is reported on stderr with
//! its line number while the other lines are still delivered; the exit status is then
//! non-zero.

use std::collections::VecDeque;

use anyhow::Context;
use bytes::Bytes;
use tinymq_client::{Acks, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use tokio::io::AsyncBufReadExt;

use crate::Bootstrap;

/// Deliveries awaited at most at once; further lines wait (bounded memory for any input size).
const DELIVERIES_PENDING_MAX: usize = 50_000;
/// Failed lines reported one by one; past this only their count is (a broker that is down
/// would otherwise print a line per message).
const FAILED_LINES_REPORTED_MAX: u64 = 100;

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    topic: String,
    /// Split each line at the first SEP into key and value.
    #[arg(long)]
    key_separator: Option<String>,
    /// A header for every message, `key=value`; repeatable.
    #[arg(long = "header")]
    headers: Vec<String>,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// Send every message to this partition.
    #[arg(long)]
    partition: Option<u32>,
    /// none, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Wait this long for more messages before sending a batch, ms.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Target batch size, bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    batch_bytes: usize,
    #[command(flatten)]
    bootstrap: Bootstrap,
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut config = ProducerConfig::new(&args.bootstrap.bootstrap);
    config.acks = Acks::parse(&args.acks)
        .with_context(|| format!("--acks {}: expected 0, 1 or all", args.acks))?;
    config.compression = Compression::from_name(&args.compression).with_context(|| {
        format!(
            "--compression {}: expected none, lz4 or zstd",
            args.compression
        )
    })?;
    config.linger = std::time::Duration::from_millis(args.linger_ms);
    config.batch_bytes = args.batch_bytes;
    let headers: Vec<(String, Option<Bytes>)> = args
        .headers
        .iter()
        .map(|h| {
            let (k, v) = h
                .split_once('=')
                .with_context(|| format!("--header {h}: expected key=value"))?;
            Ok((k.to_string(), Some(Bytes::copy_from_slice(v.as_bytes()))))
        })
        .collect::<anyhow::Result<_>>()?;
    let producer = Producer::new(config)?;
    // Each delivery with its line number (from 1).
    let mut pending: VecDeque<(u64, DeliveryFuture)> = VecDeque::new();
    let (mut sent, mut failed) = (0u64, 0u64);
    let mut first_error = None;
    let mut settle = |line: u64, result: Result<_, tinymq_client::ClientError>| {
        if let Err(e) = result {
            failed += 1;
            if failed <= FAILED_LINES_REPORTED_MAX {
                eprintln!("line {line}: not produced: {e}");
            }
            first_error.get_or_insert(e);
        }
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        let (key, value) = match &args.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(Bytes::copy_from_slice(k.as_bytes())), v.to_string()),
                None => (None, line),
            },
            None => (None, line),
        };
        let record = ProducerRecord {
            key,
            value: Some(Bytes::from(value)),
            headers: headers.clone(),
            partition: args.partition,
            timestamp_ms: None,
        };
        sent += 1;
        pending.push_back((sent, producer.send(&args.topic, record).await?));
        if pending.len() >= DELIVERIES_PENDING_MAX {
            let (line, delivery) = pending.pop_front().expect("non-empty");
            settle(line, delivery.await);
        }
    }
    for (line, delivery) in pending {
        settle(line, delivery.await);
    }
    producer.close().await;
    match first_error {
        None => Ok(()),
        Some(e) => {
            let unlisted = failed.saturating_sub(FAILED_LINES_REPORTED_MAX);
            if unlisted > 0 {
                eprintln!("… and {unlisted} more lines not produced");
            }
            anyhow::bail!("{failed} of {sent} messages were not acknowledged; first error: {e}")
        }
    }
}
