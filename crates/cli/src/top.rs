//! `tinymq top`: live per-topic throughput, from the `/metrics` of one node or of several
//! (summed: each broker counts only what it appends as a leader and what it returns to
//! consumers, so a cluster's brokers add up without double counting). Every interval it
//! scrapes each node and prints, per topic, records and bytes per second in and out since the
//! previous scrape, and the totals since each node started.
//!
//! Rates come from counter differences per node, over the time between that node's two
//! scrapes; a node unreachable at either end adds nothing to that refresh's rates. A counter
//! that went down (the node restarted) counts from zero.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crate::outln;
use crate::scrape::{scrape, Sample};

#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// HTTP addresses of the nodes to read (their `--http`), comma-separated; several are
    /// summed.
    #[arg(
        long = "http",
        env = "TINYMQ_TOP_HTTP",
        value_delimiter = ',',
        default_value = "127.0.0.1:21582"
    )]
    nodes: Vec<String>,
    /// Seconds between refreshes.
    #[arg(long, default_value = "1", value_parser = crate::args::positive_secs)]
    interval: f64,
    /// Stop after this many refreshes [default: until interrupted].
    #[arg(long, value_parser = crate::args::positive_u64)]
    count: Option<u64>,
    /// Print one JSON object per refresh, on one line.
    #[arg(long)]
    json: bool,
    /// Include internal topics (`__consumer_offsets`).
    #[arg(long)]
    internal: bool,
}

/// The four traffic counters, in the order of [`COUNTERS`].
type Traffic = [f64; 4];
const COUNTERS: [&str; 4] = ["records_in", "bytes_in", "records_out", "bytes_out"];

/// What one scrape of one node said.
struct Reading {
    at: Instant,
    /// Per topic, summed over its partitions.
    topics: BTreeMap<String, Traffic>,
    /// The node's totals (every topic, whatever the per-partition series cap).
    node: Traffic,
    /// Partitions whose series the node left out (`tinymq_partition_series_omitted`).
    omitted: f64,
}

fn reading(samples: &[Sample], at: Instant) -> Reading {
    let mut r = Reading {
        at,
        topics: BTreeMap::new(),
        node: [0.0; 4],
        omitted: 0.0,
    };
    for s in samples {
        if s.name == "tinymq_partition_series_omitted" {
            r.omitted += s.value;
        }
        for (i, counter) in COUNTERS.iter().enumerate() {
            if s.name == format!("tinymq_{counter}_total") {
                r.node[i] += s.value;
            } else if s.name == format!("tinymq_partition_{counter}_total") {
                if let Some(topic) = s.label("topic") {
                    r.topics.entry(topic.to_string()).or_default()[i] += s.value;
                }
            }
        }
    }
    r
}

/// Per-second rates from `before` to `now`; a counter that went down counts from zero.
fn rates(before: &Traffic, now: &Traffic, secs: f64) -> Traffic {
    let mut out = [0.0; 4];
    for i in 0..4 {
        let delta = if now[i] >= before[i] {
            now[i] - before[i]
        } else {
            now[i]
        };
        out[i] = delta / secs;
    }
    out
}

/// One refresh: per topic (and for all topics) the summed rates and totals.
#[derive(Default)]
struct Refresh {
    topics: BTreeMap<String, (Traffic, Traffic)>,
    all: (Traffic, Traffic),
    /// Per node: `None` when it answered, else the error.
    nodes: Vec<(String, Option<String>)>,
    omitted: f64,
}

fn add(into: &mut Traffic, from: &Traffic) {
    for i in 0..4 {
        into[i] += from[i];
    }
}

pub async fn run(args: TopArgs) -> anyhow::Result<()> {
    let mut previous: Vec<Option<Reading>> = Vec::new();
    let mut first_error = None;
    for node in &args.nodes {
        match scrape(node).await {
            Ok(samples) => previous.push(Some(reading(&samples, Instant::now()))),
            Err(e) => {
                first_error.get_or_insert_with(|| format!("{node}: {e:#}"));
                previous.push(None);
            }
        }
    }
    if previous.iter().all(Option::is_none) {
        // Said at once: a typo in --http should not wait for the first refresh.
        anyhow::bail!(
            "no node answered ({})",
            first_error.unwrap_or_else(|| "no --http address given".into())
        );
    }
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(args.interval));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut done = 0u64;
    while args.count.is_none_or(|n| done < n) {
        ticker.tick().await;
        let mut refresh = Refresh::default();
        // Every node at once: one that does not answer costs its timeout once, not once each.
        let scrapes: Vec<_> = args
            .nodes
            .iter()
            .cloned()
            .map(|node| {
                tokio::spawn(async move {
                    scrape(&node)
                        .await
                        .map(|samples| reading(&samples, Instant::now()))
                })
            })
            .collect();
        for ((node, before), scraped) in args.nodes.iter().zip(previous.iter_mut()).zip(scrapes) {
            let scraped = scraped
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("the scrape stopped: {e}")));
            let now = match scraped {
                Ok(now) => now,
                Err(e) => {
                    refresh.nodes.push((node.clone(), Some(format!("{e:#}"))));
                    *before = None;
                    continue;
                }
            };
            refresh.nodes.push((node.clone(), None));
            refresh.omitted += now.omitted;
            fold(&mut refresh, before.as_ref(), &now, args.internal);
            *before = Some(now);
        }
        done += 1;
        if args.json {
            outln!("{}", serde_json::to_string(&to_json(&refresh))?)?;
        } else {
            print_table(&refresh, &args)?;
        }
    }
    Ok(())
}

/// Adds one node's totals, and its rates since `before` when there is one, to `refresh`.
fn fold(refresh: &mut Refresh, before: Option<&Reading>, now: &Reading, internal: bool) {
    let secs = before.map(|b| now.at.duration_since(b.at).as_secs_f64().max(1e-3));
    for (topic, totals) in &now.topics {
        if !internal && topic.starts_with("__") {
            continue;
        }
        let entry = refresh.topics.entry(topic.clone()).or_default();
        add(&mut entry.1, totals);
        if let (Some(b), Some(secs)) = (before, secs) {
            let was = b.topics.get(topic).copied().unwrap_or_default();
            add(&mut entry.0, &rates(&was, totals, secs));
        }
    }
    add(&mut refresh.all.1, &now.node);
    if let (Some(b), Some(secs)) = (before, secs) {
        add(&mut refresh.all.0, &rates(&b.node, &now.node, secs));
    }
}

fn traffic_json(rates: &Traffic, totals: &Traffic) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (i, c) in COUNTERS.iter().enumerate() {
        m.insert(format!("{c}_per_sec"), rates[i].into());
    }
    for (i, c) in COUNTERS.iter().enumerate() {
        // Counters are whole numbers; f64 holds them exactly up to 2^53.
        m.insert(format!("{c}_total"), (totals[i] as u64).into());
    }
    m.into()
}

fn to_json(r: &Refresh) -> serde_json::Value {
    let topics: Vec<_> = r
        .topics
        .iter()
        .map(|(name, (rates, totals))| {
            let mut t = traffic_json(rates, totals);
            t["topic"] = name.clone().into();
            t
        })
        .collect();
    let nodes: Vec<_> = r
        .nodes
        .iter()
        .map(|(addr, error)| serde_json::json!({"http": addr, "up": error.is_none(), "error": error}))
        .collect();
    serde_json::json!({
        "time_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        "nodes": nodes,
        "topics": topics,
        "all": traffic_json(&r.all.0, &r.all.1),
        "partition_series_omitted": r.omitted as u64,
    })
}

/// `12.3k`, `4.5M`: rates and sizes in a fixed width.
fn human(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.1}G", v / 1e9),
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

fn print_table(r: &Refresh, args: &TopArgs) -> anyhow::Result<()> {
    if std::io::stdout().is_terminal() {
        // Clear and home: the table replaces the previous one.
        print!("\x1b[2J\x1b[H");
    } else {
        outln!("")?;
    }
    let up = r.nodes.iter().filter(|(_, e)| e.is_none()).count();
    outln!(
        "tinymq top: {up} of {} answering, every {} s (rates per second; totals since each node started)",
        crate::args::count(r.nodes.len() as u64, "node"),
        args.interval
    )?;
    for (addr, error) in &r.nodes {
        if let Some(e) = error {
            outln!("  {addr}: {e}")?;
        }
    }
    if r.omitted > 0.0 {
        outln!(
            "  {} partitions have no per-partition series (http_partition_series_max): topic rows are partial, the all row is whole",
            r.omitted
        )?;
    }
    outln!(
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "topic",
        "in rec/s",
        "in B/s",
        "out rec/s",
        "out B/s",
        "records in",
        "records out"
    )?;
    let rows = r.topics.iter().map(|(n, t)| (n.as_str(), t));
    for (name, (rates, totals)) in rows.chain([("(all)", &r.all)]) {
        outln!(
            "{:<24} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}",
            name,
            human(rates[0]),
            human(rates[1]),
            human(rates[2]),
            human(rates[3]),
            totals[0],
            totals[2]
        )?;
    }
    Ok(())
}
