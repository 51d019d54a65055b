//! `tinymq bench produce|consume|e2e`: flags to a `BenchConfig`, and the report.

use std::time::Duration;

use anyhow::Context;
use tinymq_bench::{Api, BenchConfig, Limit, Mode};
use tinymq_client::{Acks, Compression};

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Producers only: throughput and send-to-acknowledgement latency.
    Produce(BenchArgs),
    /// Consumers only, reading `--count` messages from the start (the topic is filled first if
    /// it holds fewer).
    Consume(BenchArgs),
    /// Producers and consumers at once: send-to-receipt latency.
    E2e(BenchArgs),
    /// Open many handshaken connections and keep them idle (to measure their memory cost).
    IdleConnections {
        /// Connections to open.
        #[arg(long, default_value_t = 10_000, value_parser = crate::args::positive_usize)]
        count: usize,
        /// Seconds to hold them.
        #[arg(long, default_value_t = 10.0, value_parser = crate::args::positive_secs)]
        hold_s: f64,
        #[command(flatten)]
        bootstrap: crate::Bootstrap,
    },
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Producer tasks, each with its own connection.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive_usize)]
    producers: usize,
    /// Consumer tasks, each with its own connection (partitions are split among them).
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive_usize)]
    consumers: usize,
    /// The topic; created if missing, and then deleted after the run unless --keep-topic.
    #[arg(long, default_value = "bench")]
    topic: String,
    /// Keep the topic after the run if the bench created it.
    #[arg(long)]
    keep_topic: bool,
    /// Consumers fetch with this filter expression (docs/queues.md, "Filters").
    #[arg(long)]
    filter: Option<String>,
    /// Producers tag every Nth message `match` and the others `other` (header `tag`), so
    /// `--filter "tag = 'match'"` selects 1 in N.
    #[arg(long, value_parser = crate::args::positive_u64)]
    tag_every: Option<u64>,
    /// consume: the consumers are members of this share group, accepting every record.
    #[arg(long)]
    share_group: Option<String>,
    /// Partitions, if the bench creates the topic.
    #[arg(long, default_value_t = 1, value_parser = crate::args::positive_u32)]
    partitions: u32,
    /// Flush policy, if the bench creates the topic: always, interval:MS or os [default: the
    /// server's].
    #[arg(long)]
    flush: Option<String>,
    /// Size of each message's value, bytes.
    #[arg(long, default_value_t = 1024, value_parser = crate::args::positive_usize)]
    message_bytes: usize,
    /// Producers' target batch size, bytes.
    #[arg(long, default_value_t = 1024 * 1024, value_parser = crate::args::positive_usize)]
    batch_bytes: usize,
    /// Producers wait this long for more messages before sending a batch, ms (0: at once).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Messages to send (consume: to read) [default: 1000000, unless --duration].
    #[arg(long, conflicts_with = "duration", value_parser = crate::args::positive_u64)]
    count: Option<u64>,
    /// Seconds to send for, instead of --count.
    #[arg(long, value_parser = crate::args::positive_secs)]
    duration: Option<f64>,
    /// Messages per second over all producers (fixed rate; latency from the intended send
    /// time) [default: as fast as possible].
    #[arg(long, value_parser = crate::args::positive_secs)]
    rate: Option<f64>,
    /// Producer API: record (`Producer::send` per message) or batch (`Producer::send_batch`
    /// per --batch-records messages; latency is then per batch).
    #[arg(long, default_value = "record")]
    api: String,
    /// Messages per `send_batch` call (with --api batch).
    #[arg(long, default_value_t = 1000, value_parser = crate::args::positive_usize)]
    batch_records: usize,
    /// Sends (messages, or batches with --api batch) awaiting acknowledgement per producer, at
    /// most: a closed loop. `--api batch --batch-records 1 --in-flight 1` sends one message
    /// per request with one request in flight [default: no bound but the producer's queue].
    #[arg(long, value_parser = crate::args::positive_usize)]
    in_flight: Option<usize>,
    /// Producers send in transactions (KIP-98), each with its own transactional id: begin,
    /// --records-per-txn sends, commit. Latency is per record from send to the commit's
    /// return, and per transaction from begin to the commit's return. With --api record only,
    /// without --rate or --in-flight (a producer has one transaction open at a time).
    #[arg(long)]
    transactional: bool,
    /// Producers send half messages (transactional messages with check-back) instead, each
    /// with its own producer group: `send_half` of --records-per-txn records, then commit.
    /// Latency is per record and per half from `send_half` to the commit's return.
    #[arg(long, conflicts_with = "transactional")]
    half: bool,
    /// Records per transaction (with --transactional) or per half (with --half).
    #[arg(long, default_value_t = 10, value_parser = crate::args::positive_usize)]
    records_per_txn: usize,
    /// consume, e2e: read-uncommitted (every record, open transactions' too) or
    /// read-committed (up to the last stable offset, aborted transactions' records skipped).
    #[arg(long, default_value = "read-uncommitted")]
    isolation: String,
    /// Print one JSON object instead of text (and no progress on stderr).
    #[arg(long)]
    json: bool,
    /// Start a server in this process with data in DIR, instead of using --bootstrap.
    #[arg(long, value_name = "DIR")]
    embedded: Option<std::path::PathBuf>,
    #[command(flatten)]
    bootstrap: crate::Bootstrap,
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    let (mode, args) = match command {
        BenchCommand::Produce(a) => (Mode::Produce, a),
        BenchCommand::Consume(a) => (Mode::Consume, a),
        BenchCommand::E2e(a) => (Mode::E2e, a),
        BenchCommand::IdleConnections {
            count,
            hold_s,
            bootstrap,
        } => {
            tinymq_bench::hold_idle_connections(
                &bootstrap.bootstrap,
                &bootstrap.security.security()?,
                count,
                Duration::from_secs_f64(hold_s),
            )
            .await?;
            return Ok(());
        }
    };
    let limit = match (args.count, args.duration) {
        (Some(c), _) => Limit::Count(c),
        (None, Some(s)) => Limit::Duration(Duration::from_secs_f64(s)),
        (None, None) => Limit::Count(1_000_000),
    };
    let embedded = match &args.embedded {
        Some(dir) => {
            let config = tinymq_broker::BrokerConfig {
                listen: "127.0.0.1:0".parse().expect("literal address"),
                data_dir: dir.clone(),
                ..tinymq_broker::BrokerConfig::default()
            };
            Some(tinymq_broker::Broker::start(config).await?)
        }
        None => None,
    };
    let bootstrap = match &embedded {
        Some(b) => b.local_addr.to_string(),
        None => args.bootstrap.bootstrap.clone(),
    };
    let config = BenchConfig {
        bootstrap,
        security: args.bootstrap.security.security()?,
        topic: args.topic,
        partitions: args.partitions,
        flush: args.flush.unwrap_or_default(),
        producers: args.producers,
        consumers: args.consumers,
        message_bytes: args.message_bytes,
        batch_bytes: args.batch_bytes,
        linger: Duration::from_millis(args.linger_ms),
        acks: Acks::parse(&args.acks)
            .with_context(|| format!("--acks {}: expected 0, 1 or all", args.acks))?,
        compression: Compression::from_name(&args.compression).with_context(|| {
            format!(
                "--compression {}: expected none, gzip, snappy, lz4 or zstd",
                args.compression
            )
        })?,
        limit,
        api: Api::parse(&args.api)
            .with_context(|| format!("--api {}: expected record or batch", args.api))?,
        batch_records: args.batch_records,
        in_flight: args.in_flight,
        rate: args.rate,
        progress: !args.json,
        keep_topic: args.keep_topic,
        filter: args.filter,
        tag_every: args.tag_every,
        share_group: args.share_group,
        records_per_txn: (args.transactional || args.half).then_some(args.records_per_txn),
        half: args.half,
        isolation: tinymq_bench::parse_isolation(&args.isolation).with_context(|| {
            format!(
                "--isolation {}: expected read-committed or read-uncommitted",
                args.isolation
            )
        })?,
    };
    let result = tinymq_bench::run(mode, config).await;
    if let Some(broker) = embedded {
        broker.shutdown().await;
    }
    let result = result?;
    let text = if args.json {
        serde_json::to_string(&result)?
    } else {
        result.text()
    };
    // A reader that went away (`| head`) is not an error of the bench.
    match crate::outln!("{text}") {
        Err(e) if !e.is::<crate::out::Closed>() => return Err(e),
        _ => {}
    }
    anyhow::ensure!(result.failed == 0, "{} messages failed", result.failed);
    Ok(())
}
