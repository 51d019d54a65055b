//! `tinymq produce TOPIC`: records from stdin — one per line (any bytes; a line's `\n` or
//! `\r\n` is not part of it), the whole input as one record, or one JSON object per line in
//! the form `consume --format json` prints. Exits 0 only after every record is acknowledged.
//! A record that fails (e.g. too large for the topic, or a JSON line that does not parse) is
//! reported on stderr with its line number while the others are still delivered; the exit
//! status is then non-zero. With `--deliver-at` or `--delay` the records are delayed
//! (`Producer::send_at`): acknowledged once the leader's timer log has them, visible to
//! consumers at that time.

pub(crate) mod when;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use anyhow::Context;
use bytes::Bytes;
use serde::Deserialize;
use tinymq_client::{Acks, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

use crate::codec::{self, Encoding};
use crate::Bootstrap;

/// Deliveries awaited at most at once; further lines wait (bounded memory for any input size).
const DELIVERIES_PENDING_MAX: usize = 50_000;
/// Failed lines reported one by one; past this only their count is (a broker that is down
/// would otherwise print a line per message).
const FAILED_LINES_REPORTED_MAX: u64 = 100;
/// Largest record read from stdin, bytes: no request can carry more (the default
/// `frame_bytes_max`), so a longer line is refused without being held in memory.
const RECORD_BYTES_MAX: usize = tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_DEFAULT as usize;
/// Largest JSON line: a record's bytes as base64 (4/3) or hex (2×) plus the field names.
const JSON_LINE_BYTES_MAX: usize = 2 * RECORD_BYTES_MAX + 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum InputFormat {
    /// One record per line; the value is the line's bytes (UTF-8 or not).
    Lines,
    /// The whole input is one record's value.
    Binary,
    /// One JSON object per line, as `consume --format json` prints (see the README).
    Json,
}

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    /// The topic to send to.
    topic: String,
    /// How stdin is read.
    #[arg(long, value_enum, default_value = "lines")]
    input_format: InputFormat,
    /// Split each line at the first SEP into key and value (--input-format lines only)
    /// [default: no key].
    #[arg(long)]
    key_separator: Option<String>,
    /// A header for every message, `key=value`; repeatable (added after a JSON line's own).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// Send every message to this partition [default: by key, or spread when there is none].
    #[arg(long)]
    partition: Option<u32>,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Wait this long for more messages before sending a batch, ms (0: send at once).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Target batch size, bytes.
    #[arg(long, default_value_t = 64 * 1024, value_parser = crate::args::positive_usize)]
    batch_bytes: usize,
    /// Set the header `tag` (what `--filter "tag = '…'"` matches) on every message.
    #[arg(long)]
    tag: Option<String>,
    /// Deliver the messages at this time: RFC 3339 (2026-12-01T18:30:00Z) or ms since the
    /// Unix epoch; at most 7 days ahead.
    #[arg(long, value_parser = when::parse_deliver_at, conflicts_with = "delay")]
    deliver_at: Option<i64>,
    /// Deliver each message this long after it is sent: 1500ms, 30s, 2m, 1h, 7d.
    #[arg(long, value_parser = when::parse_delay)]
    delay: Option<i64>,
    /// Print where each record landed, once acknowledged: one line per input record, in
    /// input order, PARTITION<TAB>OFFSET; the offset is `-` with --acks 0 and for delayed
    /// records (it is given at delivery), and both are `-` for a record not produced.
    #[arg(long)]
    print_offsets: bool,
    /// Produce the whole input as one transaction of this transactional id: it commits only
    /// if every record is acknowledged, else it is aborted (read-committed consumers then see
    /// none of it). A second producer with the same id fences this one.
    #[arg(long, conflicts_with_all = ["deliver_at", "delay"])]
    transactional_id: Option<String>,
    /// With --transactional-id: abort the transaction instead of committing it (for trying
    /// out read-committed consumers).
    #[arg(long, requires = "transactional_id")]
    abort: bool,
    #[command(flatten)]
    bootstrap: Bootstrap,
}

/// A `--input-format json` line; `partition` and `offset` (printed by `consume`) are
/// accepted and ignored: the record goes where `--partition` or its key sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    key_encoding: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_encoding: Option<String>,
    #[serde(default)]
    headers: Vec<JsonHeader>,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    #[allow(dead_code)]
    partition: Option<u32>,
    #[serde(default)]
    #[allow(dead_code)]
    offset: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonHeader {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_encoding: Option<String>,
}

/// A record read from stdin: key, value, headers and timestamp (absent: now).
type Parts = (
    Option<Bytes>,
    Option<Bytes>,
    Vec<(String, Option<Bytes>)>,
    Option<i64>,
);

/// One field's bytes from its text and the name of its encoding (absent: utf8).
fn field(
    what: &str,
    text: Option<String>,
    encoding: Option<&str>,
) -> Result<Option<Bytes>, String> {
    let encoding = encoding.unwrap_or("utf8");
    let encoding = Encoding::from_name(encoding).ok_or_else(|| {
        format!("{what}_encoding {encoding:?}: expected \"utf8\", \"base64\" or \"hex\"")
    })?;
    match text {
        None => Ok(None),
        Some(t) => codec::decode(&t, encoding)
            .map(|b| Some(Bytes::from(b)))
            .map_err(|e| format!("{what}: {e}")),
    }
}

/// A JSON line as a record (its headers before `extra`).
fn json_record(line: &[u8], extra: &[(String, Option<Bytes>)]) -> Result<Parts, String> {
    let r: JsonRecord = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let key = field("key", r.key, r.key_encoding.as_deref())?;
    let value = field("value", r.value, r.value_encoding.as_deref())?;
    let mut headers = Vec::with_capacity(r.headers.len() + extra.len());
    for h in r.headers {
        let what = format!("header {:?}", h.key);
        let value = field(&what, h.value, h.value_encoding.as_deref())?;
        headers.push((h.key, value));
    }
    headers.extend_from_slice(extra);
    Ok((key, value, headers, r.timestamp))
}

/// What [`next_line`] read.
enum Line {
    Read,
    /// Longer than allowed: skipped to its end, not kept.
    TooLong,
    End,
}

/// Reads the next line into `line`, without its `\n` (or `\r\n`), holding at most `max` bytes.
async fn next_line(
    input: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            break;
        }
        any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        if !too_long && line.len().saturating_add(chunk.len()) > max {
            too_long = true;
            line.clear();
        } else if !too_long {
            line.extend_from_slice(chunk);
        }
        let used = newline.map_or(buf.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    if !any {
        return Ok(Line::End);
    }
    if too_long {
        return Ok(Line::TooLong);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Line::Read)
}

/// Splits `line` at the first `sep` into key and value.
fn split_key(line: &[u8], sep: &[u8]) -> (Option<Bytes>, Bytes) {
    if !sep.is_empty() {
        if let Some(i) = line.windows(sep.len()).position(|w| w == sep) {
            return (
                Some(Bytes::copy_from_slice(&line[..i])),
                Bytes::copy_from_slice(&line[i + sep.len()..]),
            );
        }
    }
    (None, Bytes::copy_from_slice(line))
}

/// When records become visible.
#[derive(Debug, Clone, Copy)]
enum Timing {
    Now,
    At(i64),
    After(i64),
}

/// A delayed record's delivery: boxed, the less usual case.
type DelayedFuture = Pin<Box<dyn Future<Output = Result<Landed, String>> + Send>>;

/// A record's delivery, awaited in order.
enum Pending {
    Now(DeliveryFuture),
    Delayed(DelayedFuture),
}

/// Where an acknowledged record landed: its partition, and its offset when known.
type Landed = (u32, Option<i64>);

impl Pending {
    async fn settle(self) -> Result<Landed, String> {
        match self {
            Pending::Now(delivery) => delivery
                .await
                // -1: not known with acks=0.
                .map(|m| (m.partition, (m.offset >= 0).then_some(m.offset)))
                .map_err(|e| e.to_string()),
            Pending::Delayed(delivery) => delivery.await,
        }
    }
}

/// Sends records and settles their deliveries, counting and reporting failures by line.
struct Sender {
    producer: Producer,
    topic: String,
    partition: Option<u32>,
    timing: Timing,
    /// Each delivery with its line number (from 1).
    pending: VecDeque<(u64, Pending)>,
    records: u64,
    failed: u64,
    first_error: Option<String>,
    /// `--print-offsets`: a line on stdout per settled record.
    print_offsets: bool,
    /// `--transactional-id`: the transaction is open; `--abort`: end it by aborting.
    transaction: Option<bool>,
}

impl Sender {
    async fn send(
        &mut self,
        line: u64,
        (key, value, headers, timestamp_ms): Parts,
    ) -> anyhow::Result<()> {
        let record = ProducerRecord {
            key,
            value,
            headers,
            partition: self.partition,
            timestamp_ms,
        };
        self.records += 1;
        let deliver_at_ms = match self.timing {
            Timing::Now => None,
            Timing::At(ms) => Some(ms),
            Timing::After(ms) => Some(now_ms().saturating_add(ms)),
        };
        let delivery = match deliver_at_ms {
            None => Pending::Now(self.producer.send(&self.topic, record).await?),
            Some(at) => {
                let delivery = self.producer.send_at(&self.topic, record, at).await?;
                Pending::Delayed(Box::pin(async move {
                    // Its offset is given when it is delivered, at its time.
                    delivery
                        .await
                        .map(|m| (m.partition, None))
                        .map_err(|e| e.to_string())
                }))
            }
        };
        self.pending.push_back((line, delivery));
        if self.pending.len() >= DELIVERIES_PENDING_MAX {
            self.settle_oldest().await;
        }
        Ok(())
    }

    /// Waits for the oldest pending delivery and settles it; false when none is pending.
    async fn settle_oldest(&mut self) -> bool {
        let Some((line, delivery)) = self.pending.pop_front() else {
            return false;
        };
        let result = delivery.settle().await;
        self.settle(line, result);
        true
    }

    /// A line that is not sent at all (it cannot be read as a record). Settled after the
    /// records before it, so `--print-offsets` lines stay in input order.
    async fn refuse(&mut self, line: u64, why: String) {
        if self.print_offsets {
            while self.settle_oldest().await {}
        }
        self.records += 1;
        self.settle(line, Err(why));
    }

    fn settle(&mut self, line: u64, result: Result<Landed, String>) {
        let landed = match result {
            Ok(landed) => Some(landed),
            Err(e) => {
                self.failed += 1;
                if self.failed <= FAILED_LINES_REPORTED_MAX {
                    eprintln!("line {line}: not produced: {e}");
                }
                self.first_error.get_or_insert(format!("line {line}: {e}"));
                None
            }
        };
        if self.print_offsets {
            let partition = crate::topic::or_dash(landed.map(|(p, _)| p));
            let offset = crate::topic::or_dash(landed.and_then(|(_, o)| o));
            // A reader gone (`| head`) stops the lines, not the produce: the records still
            // in flight are still delivered and the exit status still says so.
            if let Err(e) = crate::outln!("{partition}\t{offset}") {
                tracing::debug!(error = %e, "no more --print-offsets lines");
                self.print_offsets = false;
            }
        }
    }

    async fn finish(mut self) -> anyhow::Result<()> {
        while self.settle_oldest().await {}
        if let Some(abort) = self.transaction {
            if abort || self.first_error.is_some() {
                self.producer
                    .abort_transaction()
                    .await
                    .context("aborting the transaction")?;
                eprintln!("transaction aborted: none of its {} records is visible to read-committed consumers", self.records);
            } else {
                self.producer
                    .commit_transaction()
                    .await
                    .context("committing the transaction")?;
            }
        }
        self.producer.close().await;
        match self.first_error {
            None => Ok(()),
            Some(e) => {
                let unlisted = self.failed.saturating_sub(FAILED_LINES_REPORTED_MAX);
                if unlisted > 0 {
                    eprintln!("… and {unlisted} more lines not produced");
                }
                anyhow::bail!(
                    "{} of {} messages were not produced; first error: {e}",
                    self.failed,
                    self.records
                )
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut config = ProducerConfig::new(&args.bootstrap.bootstrap);
    config.client = args.bootstrap.client_config()?;
    config.acks = Acks::parse(&args.acks)
        .with_context(|| format!("--acks {}: expected 0, 1 or all", args.acks))?;
    config.compression = Compression::from_name(&args.compression).with_context(|| {
        format!(
            "--compression {}: expected none, gzip, snappy, lz4 or zstd",
            args.compression
        )
    })?;
    config.linger = std::time::Duration::from_millis(args.linger_ms);
    config.batch_bytes = args.batch_bytes;
    anyhow::ensure!(
        args.key_separator.is_none() || args.input_format == InputFormat::Lines,
        "--key-separator is for --input-format lines"
    );
    let mut headers: Vec<(String, Option<Bytes>)> = args
        .headers
        .iter()
        .map(|h| {
            let (k, v) = h
                .split_once('=')
                .with_context(|| format!("--header {h}: expected key=value"))?;
            Ok((k.to_string(), Some(Bytes::copy_from_slice(v.as_bytes()))))
        })
        .collect::<anyhow::Result<_>>()?;
    if let Some(tag) = &args.tag {
        headers.push((
            "tag".to_string(),
            Some(Bytes::copy_from_slice(tag.as_bytes())),
        ));
    }
    let timing = match (args.deliver_at, args.delay) {
        (Some(at), _) => Timing::At(at),
        (None, Some(ms)) => Timing::After(ms),
        (None, None) => Timing::Now,
    };
    config.transactional_id = args.transactional_id.clone();
    let producer = Producer::new(config)?;
    if args.transactional_id.is_some() {
        producer
            .init_transactions()
            .await
            .context("initializing the transactional id")?;
        producer.begin_transaction()?;
    }
    let mut sender = Sender {
        producer,
        topic: args.topic.clone(),
        partition: args.partition,
        timing,
        pending: VecDeque::new(),
        records: 0,
        failed: 0,
        first_error: None,
        print_offsets: args.print_offsets,
        transaction: args.transactional_id.as_ref().map(|_| args.abort),
    };
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    if args.input_format == InputFormat::Binary {
        let mut value = Vec::new();
        let limit = RECORD_BYTES_MAX as u64 + 1;
        (&mut stdin)
            .take(limit)
            .read_to_end(&mut value)
            .await
            .context("reading stdin")?;
        anyhow::ensure!(
            value.len() <= RECORD_BYTES_MAX,
            "stdin holds more than {RECORD_BYTES_MAX} bytes, more than one record can"
        );
        let record = (None, Some(Bytes::from(value)), headers, None);
        sender.send(1, record).await?;
        return sender.finish().await;
    }
    let (json, max) = match args.input_format {
        InputFormat::Json => (true, JSON_LINE_BYTES_MAX),
        _ => (false, RECORD_BYTES_MAX),
    };
    let separator = args.key_separator.as_deref().unwrap_or("").as_bytes();
    let (mut number, mut line) = (0u64, Vec::new());
    loop {
        let read = next_line(&mut stdin, &mut line, max)
            .await
            .context("reading stdin")?;
        number += 1;
        match read {
            Line::End => break,
            Line::TooLong => {
                sender
                    .refuse(number, format!("longer than {max} bytes"))
                    .await
            }
            // JSON Lines: a blank line (e.g. a trailing one) holds no record.
            Line::Read if json && line.trim_ascii().is_empty() => {}
            Line::Read if json => match json_record(&line, &headers) {
                Ok(record) => sender.send(number, record).await?,
                Err(e) => sender.refuse(number, e).await,
            },
            Line::Read => {
                let (key, value) = split_key(&line, separator);
                sender
                    .send(number, (key, Some(value), headers.clone(), None))
                    .await?;
            }
        }
    }
    sender.finish().await
}
