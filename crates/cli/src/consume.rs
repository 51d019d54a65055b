//! `tinymq consume TOPIC`: print messages one per line (or as JSON).
//!
//! In a group it commits exactly what it printed: `--count` takes no more records from the
//! consumer than it prints, and on exit — the count reached, `--timeout-ms` passed, the reader
//! gone, Ctrl-C (exit 130) or SIGTERM (exit 0) — it commits the position after the last
//! printed record and leaves the group. A second Ctrl-C exits at once without committing;
//! signals within [`SIGNAL_REPEAT_WINDOW`] of the first count as one (`timeout -s INT` signals
//! the process and its process group).
//! `--timeout-ms 0` reads each partition up to the end it had when the consumer got it, then
//! exits.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_client::{
    Consumer, ConsumerConfig, ConsumerRecord, Isolation, StartFrom, UnavailablePartition,
};

/// `--isolation`: Kafka's `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum IsolationArg {
    ReadUncommitted,
    ReadCommitted,
}

use crate::codec::{self, Encoding};
use crate::Bootstrap;

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    /// The topic to read.
    pub(crate) topic: String,
    /// Start at the earliest stored message instead of new ones only (with --group: where
    /// the group has no committed offset).
    #[arg(long, conflicts_with = "offset")]
    pub(crate) from_beginning: bool,
    /// Start each partition at its first record timestamped at or after this time (RFC 3339,
    /// 2026-12-01T18:30:00Z, or ms since the Unix epoch; ListOffsets by timestamp), at its end
    /// when none is that recent (with --group: where the group has no committed offset).
    #[arg(long, value_parser = crate::produce::when::parse_from_time,
          conflicts_with_all = ["offset", "from_beginning", "share_group"])]
    pub(crate) from_time: Option<i64>,
    /// Consume as a member of this group: partitions are shared with the group's other
    /// members, and positions are committed (at-least-once) and resumed from.
    #[arg(long, conflicts_with_all = ["offset", "partition"])]
    pub(crate) group: Option<String>,
    /// Start at this offset (in every consumed partition) [default: the end, or the start
    /// with --from-beginning].
    #[arg(long)]
    pub(crate) offset: Option<i64>,
    /// Consume only this partition [default: every partition].
    #[arg(long)]
    pub(crate) partition: Option<u32>,
    /// Exit after this many messages [default: no limit].
    #[arg(long, value_parser = crate::args::positive_u64)]
    pub(crate) count: Option<u64>,
    /// Exit after holding partitions this long with nothing new to read, ms (time without
    /// partitions, e.g. while a group rebalances, does not count). 0: do not wait; print what
    /// the partitions held when consuming started, then exit [default: never exit].
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,
    /// text (the value, one per line) or json (one object per line: partition, offset,
    /// timestamp, key, headers, value; see the README).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub(crate) format: String,
    /// In text, print these fields of each record, tab-separated, in this order:
    /// comma-separated names of key, partition, offset, timestamp (ms), headers
    /// (k=v,k2=v2) and value; the value comes last when not named (kcat's -f idea). A null
    /// key or value prints as nothing [default: the value only].
    #[arg(long, value_name = "FIELDS", value_parser = parse_fields,
          conflicts_with_all = ["share_group"])]
    pub(crate) print: Option<Fields>,
    /// How keys, values and header values are written. In JSON, utf8 writes bytes that are not
    /// UTF-8 as base64, and each `*_encoding` field names what was used; in text, utf8 writes
    /// the value's raw bytes.
    #[arg(long, value_enum, default_value = "utf8")]
    pub(crate) value_format: Encoding,
    /// Receive only records matching this filter expression, e.g. "tag = 'red'" or
    /// "header.region IN ('eu', 'us') AND header.priority > 3" (docs/queues.md). The broker
    /// skips the others; positions still move past them.
    #[arg(long)]
    pub(crate) filter: Option<String>,
    /// read-uncommitted: every record (open and aborted transactions' too); read-committed:
    /// only records of committed transactions (and outside any), up to the last stable offset.
    /// Transaction markers are never printed.
    #[arg(long, value_enum, default_value = "read-uncommitted",
          conflicts_with_all = ["share_group"])]
    pub(crate) isolation: IsolationArg,
    /// Consume as a member of this share group (queue semantics, docs/queues.md): records are
    /// handed out one by one under a lock, and each printed record is accepted.
    #[arg(long, conflicts_with_all = ["group", "offset", "partition", "from_beginning"])]
    pub(crate) share_group: Option<String>,
    #[command(flatten)]
    pub(crate) share: crate::share_consume::ShareArgs,
    #[command(flatten)]
    pub(crate) bootstrap: Bootstrap,
}

/// One record as a line: its value, or with `json` an object (a share-group member's lines
/// add its `delivery_count`).
pub(crate) fn print(
    out: &mut impl Write,
    record: &ConsumerRecord,
    json: bool,
    encoding: Encoding,
    delivery_count: Option<u32>,
) -> std::io::Result<()> {
    if json {
        let headers: Vec<_> = record
            .headers
            .iter()
            .map(|(k, v)| {
                let (value, used) = codec::to_json(v.as_deref(), encoding);
                serde_json::json!({"key": k, "value": value, "value_encoding": used})
            })
            .collect();
        let (key, key_encoding) = codec::to_json(record.key.as_deref(), encoding);
        let (value, value_encoding) = codec::to_json(record.value.as_deref(), encoding);
        let line = serde_json::json!({
            "partition": record.partition, "offset": record.offset, "timestamp": record.timestamp_ms,
            "key": key, "key_encoding": key_encoding, "headers": headers,
            "value": value, "value_encoding": value_encoding,
        });
        let mut line = line;
        if let (Some(count), Some(fields)) = (delivery_count, line.as_object_mut()) {
            fields.insert("delivery_count".into(), count.into());
        }
        writeln!(out, "{line}")
    } else {
        let value = record.value.as_deref().unwrap_or_default();
        match encoding {
            Encoding::Utf8 => out.write_all(value)?,
            other => out.write_all(codec::encode(value, other).0.as_bytes())?,
        }
        out.write_all(b"\n")
    }
}

/// A record field `--print` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Key,
    Partition,
    Offset,
    Timestamp,
    Headers,
    Value,
}

/// The fields `--print` names, in order (a newtype: clap would take a `Vec` for a repeated
/// flag).
#[derive(Debug, Clone)]
pub(crate) struct Fields(Vec<Field>);

/// `--print key,partition,…`: the fields in order, each once, with `value` last when not named.
fn parse_fields(text: &str) -> Result<Fields, String> {
    let mut fields = Vec::new();
    for name in text.split(',').map(str::trim) {
        let field = match name {
            "key" => Field::Key,
            "partition" => Field::Partition,
            "offset" => Field::Offset,
            "timestamp" => Field::Timestamp,
            "headers" => Field::Headers,
            "value" => Field::Value,
            other => {
                return Err(format!(
                    "unknown field {other:?}: expected key, partition, offset, timestamp, headers or value"
                ))
            }
        };
        if fields.contains(&field) {
            return Err(format!("{name} is named twice"));
        }
        fields.push(field);
    }
    if !fields.contains(&Field::Value) {
        fields.push(Field::Value);
    }
    Ok(Fields(fields))
}

/// Bytes as `consume` writes them in text: raw with utf8, else encoded; nothing for null.
fn write_bytes(
    out: &mut impl Write,
    bytes: Option<&[u8]>,
    encoding: Encoding,
) -> std::io::Result<()> {
    let bytes = bytes.unwrap_or_default();
    match encoding {
        Encoding::Utf8 => out.write_all(bytes),
        other => out.write_all(codec::encode(bytes, other).0.as_bytes()),
    }
}

/// One record as a `--print` line: the chosen fields, tab-separated.
fn print_fields(
    out: &mut impl Write,
    record: &ConsumerRecord,
    fields: &[Field],
    encoding: Encoding,
) -> std::io::Result<()> {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.write_all(b"\t")?;
        }
        match field {
            Field::Key => write_bytes(out, record.key.as_deref(), encoding)?,
            Field::Partition => write!(out, "{}", record.partition)?,
            Field::Offset => write!(out, "{}", record.offset)?,
            Field::Timestamp => write!(out, "{}", record.timestamp_ms)?,
            Field::Headers => {
                for (j, (key, value)) in record.headers.iter().enumerate() {
                    if j > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{key}=")?;
                    write_bytes(out, value.as_deref(), encoding)?;
                }
            }
            Field::Value => write_bytes(out, record.value.as_deref(), encoding)?,
        }
    }
    out.write_all(b"\n")
}

/// Exit status after Ctrl-C (128 + SIGINT), as shells report it.
pub struct Interrupted;

impl std::fmt::Debug for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = &args.share_group {
        return crate::share_consume::run(&args, group).await;
    }
    let stop = watch_signals(None)?;
    let mut config = ConsumerConfig::new(&args.bootstrap.bootstrap);
    config.client = args.bootstrap.client_config()?;
    config.start_from = match (args.from_time, args.from_beginning) {
        (Some(ms), _) => StartFrom::Timestamp(ms),
        (None, true) => StartFrom::Earliest,
        (None, false) => StartFrom::Latest,
    };
    anyhow::ensure!(
        args.print.is_none() || args.format == "text",
        "--print chooses the fields of text lines; --format json prints every field"
    );
    // Broker-side: the consumer checks it (a refusal names the column) and sends it with
    // every fetch; positions and group commits move past the records it skips.
    config.filter = args.filter.clone();
    config.isolation = match args.isolation {
        IsolationArg::ReadUncommitted => Isolation::ReadUncommitted,
        IsolationArg::ReadCommitted => Isolation::ReadCommitted,
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
            consumer.seek(&topic, partition, offset)?;
        }
    }
    let result = print_until_done(&mut consumer, &args, &stop).await;
    // In a group: commit what was printed and leave, so the partitions move at once.
    let closed = consumer.close().await;
    result?;
    closed?;
    if stop.load(Ordering::SeqCst) == libc::SIGINT {
        return Err(Interrupted.into());
    }
    Ok(())
}

/// Signals that arrive within this long of the first count as that one: GNU `timeout -s INT`
/// (and a terminal's Ctrl-C) signals the process and its process group, so one interrupt can
/// arrive twice in the same instant, and must not be taken for a second Ctrl-C.
pub(crate) const SIGNAL_REPEAT_WINDOW: Duration = Duration::from_millis(500);

/// The first SIGINT or SIGTERM is published for the print loop, which stops after the poll in
/// progress (at most half a second, or half a session while the group coordinator does not
/// answer) and decides the exit status; a SIGINT more than [`SIGNAL_REPEAT_WINDOW`] after the
/// first signal exits at once (nothing more is committed), one sooner is the same interrupt.
/// `note`, when given, is printed on stderr (after the signal's name) when the first signal
/// is taken, to say what happens next.
pub(crate) fn watch_signals(note: Option<&'static str>) -> anyhow::Result<Arc<AtomicI32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let stop = Arc::new(AtomicI32::new(0));
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let first = stop.clone();
    tokio::spawn(async move {
        let mut first_at: Option<Instant> = None;
        loop {
            let (got, name) = tokio::select! {
                _ = interrupt.recv() => (libc::SIGINT, "SIGINT"),
                _ = terminate.recv() => (libc::SIGTERM, "SIGTERM"),
            };
            let earlier = first.compare_exchange(0, got, Ordering::SeqCst, Ordering::SeqCst);
            if let (Ok(_), Some(note)) = (earlier, note) {
                eprintln!("interrupted by {name}: {note}");
            }
            let first_at = *first_at.get_or_insert_with(Instant::now);
            if earlier.is_err() && got == libc::SIGINT && first_at.elapsed() >= SIGNAL_REPEAT_WINDOW
            {
                std::process::exit(130);
            }
        }
    });
    Ok(stop)
}

async fn print_until_done(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    stop: &AtomicI32,
) -> anyhow::Result<()> {
    let json = args.format == "json";
    let stdout = std::io::stdout();
    let mut printed = 0u64;
    // Time spent holding partitions with nothing new to read.
    let mut idle = Duration::ZERO;
    let mut reported: Vec<UnavailablePartition> = Vec::new();
    // With --timeout-ms 0: each assigned partition's end, taken when first seen.
    let mut ends = BTreeMap::new();
    while stop.load(Ordering::SeqCst) == 0 {
        let left = args.count.map_or(u64::MAX, |c| c.saturating_sub(printed));
        if left == 0 {
            return Ok(());
        }
        let wait = match args.timeout_ms {
            Some(0) => {
                if caught_up(consumer, &mut ends).await? {
                    return Ok(());
                }
                Duration::from_millis(500)
            }
            Some(ms) => {
                let left = Duration::from_millis(ms).saturating_sub(idle);
                if left.is_zero() {
                    return Ok(());
                }
                left.min(Duration::from_millis(500))
            }
            None => Duration::from_millis(500),
        };
        let started = Instant::now();
        let max = usize::try_from(left).unwrap_or(usize::MAX);
        // Not raced against the signal: a group request dropped half-way could leave a
        // member the coordinator still counts, or a commit landing after the final one.
        let records = consumer.poll_up_to(wait, max).await?;
        if !records.is_empty() {
            idle = Duration::ZERO;
        } else if !consumer.assignment().is_empty() {
            idle += started.elapsed();
        }
        report_unavailable(consumer, json, &mut reported);
        let mut out = stdout.lock();
        for (i, record) in records.iter().enumerate() {
            let printed_one = match &args.print {
                Some(Fields(fields)) => print_fields(&mut out, record, fields, args.value_format),
                None => print(&mut out, record, json, args.value_format, None),
            };
            match printed_one.and_then(|()| out.flush()) {
                Ok(()) => printed += 1,
                Err(e) => {
                    // Not printed: not consumed, so the group delivers them again.
                    unconsume(consumer, &records[i..]);
                    // The reader went away (e.g. `| head`): that is a normal way to stop.
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return Ok(());
                    }
                    return Err(e.into());
                }
            }
        }
    }
    Ok(())
}

/// Whether the consumer holds partitions and has read each up to the end it had when first
/// seen. A partition that cannot be read now (its leader is unreachable) has nothing to print
/// now, so it does not hold the exit back.
async fn caught_up(
    consumer: &mut Consumer,
    ends: &mut BTreeMap<(String, u32), Option<i64>>,
) -> anyhow::Result<bool> {
    let assigned = consumer.assignment();
    if assigned.is_empty() {
        return Ok(false);
    }
    consumer.resolve_positions().await?;
    let unavailable = consumer.unavailable();
    for (topic, partition) in assigned {
        if unavailable
            .iter()
            .any(|u| u.topic == topic && u.partition == partition)
        {
            continue;
        }
        let key = (topic, partition);
        let end = match ends.get(&key) {
            Some(end) => *end,
            None => {
                let end = match consumer.list_offset(&key.0, partition, -1).await {
                    Ok(end) => Some(end),
                    Err(e) if e.is_retriable() => {
                        tracing::warn!(topic = %key.0, partition, error = %e,
                            "cannot learn the partition's end; not waiting for it");
                        None
                    }
                    Err(e) => return Err(e.into()),
                };
                ends.insert(key.clone(), end);
                end
            }
        };
        let Some(end) = end else { continue };
        if consumer.position(&key.0, partition).is_none_or(|p| p < end) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Moves each partition back to its first record in `records`.
fn unconsume(consumer: &mut Consumer, records: &[ConsumerRecord]) {
    let mut first: BTreeMap<(&str, u32), i64> = BTreeMap::new();
    for r in records {
        first.entry((&r.topic, r.partition)).or_insert(r.offset);
    }
    for ((topic, partition), offset) in first {
        // Assigned: poll just returned its records.
        let _ = consumer.seek(topic, partition, offset);
    }
}

/// Says on stderr when the set of unreadable partitions changes: the client logs a WARN line
/// per partition; with `--format json` a status line follows, e.g.
/// `{"status":{"unavailable":[{"topic":"t","partition":2,"error":"…"}]}}`.
fn report_unavailable(consumer: &Consumer, json: bool, reported: &mut Vec<UnavailablePartition>) {
    let now = consumer.unavailable();
    let same = now.len() == reported.len()
        && now
            .iter()
            .zip(reported.iter())
            .all(|(a, b)| (&a.topic, a.partition) == (&b.topic, b.partition));
    if same {
        return;
    }
    if json {
        let list: Vec<_> = now
            .iter()
            .map(|u| serde_json::json!({"topic": u.topic, "partition": u.partition, "error": u.error}))
            .collect();
        eprintln!("{}", serde_json::json!({"status": {"unavailable": list}}));
    }
    *reported = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_fields_keep_their_order_put_the_value_last_and_refuse_unknown_or_repeated_names() {
        let Fields(fields) = parse_fields("offset,key").unwrap();
        assert_eq!(fields, [Field::Offset, Field::Key, Field::Value]);
        let Fields(fields) = parse_fields("value, partition").unwrap();
        assert_eq!(fields, [Field::Value, Field::Partition]);
        assert!(parse_fields("key,colour").unwrap_err().contains("colour"));
        assert!(parse_fields("key,key").unwrap_err().contains("twice"));
        assert!(parse_fields("").is_err());
    }

    #[test]
    fn a_print_line_is_the_fields_tab_separated_with_null_as_nothing() {
        let record = ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 7,
            timestamp_ms: 1000,
            key: None,
            value: Some(bytes::Bytes::from_static(b"v")),
            headers: vec![
                ("a".into(), Some(bytes::Bytes::from_static(b"1"))),
                ("b".into(), None),
            ],
        };
        let Fields(fields) = parse_fields("key,partition,offset,timestamp,headers").unwrap();
        let mut out = Vec::new();
        print_fields(&mut out, &record, &fields, Encoding::Utf8).unwrap();
        assert_eq!(out, b"\t2\t7\t1000\ta=1,b=\tv\n");
    }
}
