//! `tinymq consume TOPIC --share-group G`: a share-group member that prints each record it is
//! handed and then accepts it (docs/queues.md, "Share groups").
//!
//! Each polled batch is printed and stdout flushed before its records are accepted (the
//! accepts go with the next fetch), so a record is accepted only once printed: a member killed
//! in between leaves its records locked, and they are delivered again once the lock expires.
//! With `--count`, a fetch acquires no more than the records still to print (per partition),
//! and any acquired beyond the count are released at once. On exit — the count reached,
//! `--timeout-ms` passed, the reader gone, Ctrl-C (exit 130) or SIGTERM (exit 0) — the
//! accepts are sent and every record handed out but not printed is released. After a signal
//! the member finishes the record it is printing and prints no more. Records never printed
//! are released *unseen* (their delivery does not count toward `max_delivery_attempts`); a
//! record whose printing failed (the reader gone mid-batch) is released as delivered. A second
//! Ctrl-C exits at once (the unsent accepts' records come back after their locks).

use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use tinymq_client::share::{AckKind, ShareConsumer, ShareConsumerConfig, ShareRecord};

use crate::consume::{ConsumeArgs, Interrupted};

/// Longest one poll waits, so a signal is noticed within about this long.
const POLL_WAIT_MAX: Duration = Duration::from_millis(500);

/// The flags that only a share-group member reads.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// How long each record handed to this member stays locked to it, ms [default: 30000].
    #[arg(long, value_parser = crate::args::positive_u32)]
    lock_ms: Option<u32>,
    /// Most records acquired per partition per fetch (at most 10000; with --count, no more
    /// than are still to print) [default: 500].
    #[arg(long, value_parser = crate::args::positive_u32)]
    max_records: Option<u32>,
    /// This member's id, 1..=255 bytes of [A-Za-z0-9._-] [default: random].
    #[arg(long)]
    member_id: Option<String>,
}

pub async fn run(args: &ConsumeArgs, group: &str) -> anyhow::Result<()> {
    let stop = crate::consume::watch_signals(Some(
        "finishing the record being printed, then accepting what was printed and releasing \
         the rest (Ctrl-C again exits at once)",
    ))?;
    let mut config = ShareConsumerConfig::new(&args.bootstrap.bootstrap, group);
    config.client = args.bootstrap.client_config()?;
    if let Some(ms) = args.share.lock_ms {
        config.lock_ms = ms;
    }
    if let Some(n) = args.share.max_records {
        config.max_records = n;
    }
    let max_records = config.max_records;
    if let Some(id) = &args.share.member_id {
        config.member_id = id.clone();
    }
    config.filter = args.filter.clone();
    let mut consumer = ShareConsumer::new(config)?;
    consumer.subscribe(&[&args.topic]).await?;
    let result = print_until_done(&mut consumer, args, max_records, &stop).await;
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
    max_records: u32,
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
        // No more acquired (per partition) than still to print: the rest would only be
        // released again.
        let wanted = u32::try_from(left).unwrap_or(u32::MAX).min(max_records);
        consumer.set_max_records(wanted)?;
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
        // Beyond the count (several partitions answered): never printed, so released unseen
        // for other members at once.
        let keep = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(records.len());
        for extra in records.split_off(keep) {
            consumer.acknowledge(&extra, AckKind::ReleaseUnseen)?;
        }
        let written = print_batch(&stdout, &records, args, stop);
        match written {
            Ok(done) => {
                let unprinted = records.split_off(done);
                for record in &records {
                    consumer.acknowledge(record, AckKind::Accept)?;
                }
                for record in &unprinted {
                    consumer.acknowledge(record, AckKind::ReleaseUnseen)?;
                }
                printed += records.len() as u64;
            }
            Err((handed, e)) => {
                // Which of the lines handed to the writer reached the reader is unknown: they
                // are released counted (at least once, never lost); the rest never left this
                // process, so they are released unseen.
                let unhanded = records.split_off(handed.min(records.len()));
                for record in &records {
                    consumer.acknowledge(record, AckKind::Release)?;
                }
                for record in &unhanded {
                    consumer.acknowledge(record, AckKind::ReleaseUnseen)?;
                }
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(());
                }
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// Prints `records` in order and flushes, stopping early once a signal arrived; returns how
/// many were printed (all of them reached the reader once this returns `Ok`). On a write
/// error it returns how many records were handed to the writer (the failing one included),
/// any of which may or may not have reached the reader.
fn print_batch(
    stdout: &std::io::Stdout,
    records: &[ShareRecord],
    args: &ConsumeArgs,
    stop: &AtomicI32,
) -> Result<usize, (usize, std::io::Error)> {
    let json = args.format == "json";
    let mut out = stdout.lock();
    let mut done = 0;
    for r in records {
        if stop.load(Ordering::SeqCst) != 0 {
            break;
        }
        crate::consume::print(
            &mut out,
            &r.record,
            json,
            args.value_format,
            Some(r.delivery_count),
        )
        .map_err(|e| (done + 1, e))?;
        done += 1;
    }
    out.flush().map_err(|e| (done, e))?;
    Ok(done)
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
