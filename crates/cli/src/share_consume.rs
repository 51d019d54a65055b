//! `tinymq consume TOPIC --share-group G`: a share-group member that prints each record it is
//! handed and then accepts it (docs/queues.md, "Share groups").
//!
//! Each polled batch is printed and stdout flushed before its records are accepted (the
//! accepts go with the next fetch), so a record is accepted only once printed: a member killed
//! in between leaves its records locked, and they are delivered again once the lock expires.
//! With `--count`, records acquired beyond the count are released at once. On exit — the
//! count reached, `--timeout-ms` passed, the reader gone, Ctrl-C (exit 130) or SIGTERM (exit
//! 0) — the accepts are sent and every record handed out but not printed is released. A
//! second Ctrl-C exits at once (the unsent accepts' records come back after their locks).

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use tinymq_client::share::{AckKind, ShareConsumer, ShareConsumerConfig};

use crate::consume::{watch_signals, ConsumeArgs, Interrupted};

/// Longest one poll waits, so a signal is noticed within about this long.
const POLL_WAIT_MAX: Duration = Duration::from_millis(500);

/// The flags that only a share-group member reads.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// How long each record handed to this member stays locked to it, ms [default: 30000].
    #[arg(long, value_parser = crate::args::positive_u32)]
    lock_ms: Option<u32>,
    /// Most records acquired per partition per fetch (at most 10000) [default: 500].
    #[arg(long, value_parser = crate::args::positive_u32)]
    max_records: Option<u32>,
    /// This member's id, 1..=255 bytes of [A-Za-z0-9._-] [default: random].
    #[arg(long)]
    member_id: Option<String>,
}

pub async fn run(args: &ConsumeArgs, group: &str) -> anyhow::Result<()> {
    let stop = watch_signals()?;
    let mut config = ShareConsumerConfig::new(&args.bootstrap.bootstrap, group);
    config.client = args.bootstrap.client_config()?;
    if let Some(ms) = args.share.lock_ms {
        config.lock_ms = ms;
    }
    if let Some(n) = args.share.max_records {
        config.max_records = n;
    }
    if let Some(id) = &args.share.member_id {
        config.member_id = id.clone();
    }
    config.filter = args.filter.clone();
    let mut consumer = ShareConsumer::new(config)?;
    consumer.subscribe(&[&args.topic]).await?;
    let result = print_until_done(&mut consumer, args, &stop).await;
    // Sends the accepts and releases what was handed out and not printed.
    let closed = consumer.close().await;
    match &closed {
        Ok(failures) => report_failures(failures, 0, args.format == "json"),
        Err(e) => eprintln!("closing the share-group member: {e}"),
    }
    result?;
    closed?;
    if stop.load(Ordering::SeqCst) == libc::SIGINT {
        return Err(Interrupted.into());
    }
    Ok(())
}

async fn print_until_done(
    consumer: &mut ShareConsumer,
    args: &ConsumeArgs,
    stop: &AtomicI32,
) -> anyhow::Result<()> {
    let json = args.format == "json";
    let stdout = std::io::stdout();
    let mut printed = 0u64;
    // Time with nothing handed out; `--timeout-ms 0` ends at the first empty poll.
    let mut idle = Duration::ZERO;
    while stop.load(Ordering::SeqCst) == 0 {
        let left = args.count.map_or(u64::MAX, |c| c.saturating_sub(printed));
        if left == 0 {
            return Ok(());
        }
        let wait = match args.timeout_ms {
            Some(0) | None => POLL_WAIT_MAX,
            Some(ms) => {
                let left = Duration::from_millis(ms).saturating_sub(idle);
                if left.is_zero() {
                    return Ok(());
                }
                left.min(POLL_WAIT_MAX)
            }
        };
        let started = Instant::now();
        let mut records = consumer.poll(wait).await?;
        let (failures, dropped) = consumer.take_acknowledgement_failures();
        report_failures(&failures, dropped, json);
        if records.is_empty() {
            if args.timeout_ms == Some(0) {
                return Ok(());
            }
            idle += started.elapsed();
            continue;
        }
        idle = Duration::ZERO;
        // Beyond the count: not printed, so released for other members at once.
        let keep = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(records.len());
        for extra in records.split_off(keep) {
            consumer.acknowledge(&extra, AckKind::Release)?;
        }
        let written = {
            let mut out = stdout.lock();
            records
                .iter()
                .try_for_each(|r| {
                    crate::consume::print(
                        &mut out,
                        &r.record,
                        json,
                        args.value_format,
                        Some(r.delivery_count),
                    )
                })
                .and_then(|()| out.flush())
        };
        match written {
            Ok(()) => {
                for record in &records {
                    consumer.acknowledge(record, AckKind::Accept)?;
                }
                printed += records.len() as u64;
            }
            Err(e) => {
                // Which lines reached the reader is unknown: none is accepted; `close`
                // releases them all (at least once, never lost).
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(());
                }
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// Acknowledgements not applied go to stderr (a WARN line each is logged by the client); with
/// `--format json` as status lines, e.g.
/// `{"status":{"ack_failed":{"topic":"t","partition":0,"first_offset":5,"last_offset":9,"kind":"accept","error":"…"}}}`.
fn report_failures(failures: &[tinymq_client::share::AckFailure], dropped: u64, json: bool) {
    for f in failures {
        let r = &f.range;
        if json {
            let status = serde_json::json!({"status": {"ack_failed": {
                "topic": r.topic, "partition": r.partition, "first_offset": r.first_offset,
                "last_offset": r.last_offset, "kind": r.kind.name(), "error": f.error.to_string(),
            }}});
            eprintln!("{status}");
        } else {
            eprintln!(
                "{} of {}/{} offsets {}..={} not applied: {}",
                r.kind.name(),
                r.topic,
                r.partition,
                r.first_offset,
                r.last_offset,
                f.error
            );
        }
    }
    if dropped > 0 {
        eprintln!("{dropped} more acknowledgements were not applied");
    }
}
