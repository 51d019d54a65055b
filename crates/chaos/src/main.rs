//! `tinymq-chaos`: starts three MetaServer nodes and three brokers from the `tinymq` binary
//! behind fault proxies, creates a topic with three replicas, runs producers for the whole
//! run, applies a seeded schedule of faults (leader kills, zombie pauses, network cuts,
//! MetaServer leader kills; with transactions also coordinator kills and producer kills),
//! heals, reads everything back and checks it. The `idempotent` workload (`acks=all`) checks
//! that no acknowledged value was lost, duplicated, invented or reordered; the `txn` workload
//! (`txn/`) that committed transactions are whole, aborted ones invisible, abandoned ones
//! aborted by the coordinator in time and committed offsets those of committed transactions.
//!
//! Exit status: 0 when the checker finds nothing, 1 when it finds a violation (or a process
//! exits by itself), 2 when the run itself fails. The run directory (logs, data) is kept on
//! anything but a pass, or always with `--dir`/`--keep`.

mod check;
mod procs;
mod proxy;
mod report;
mod rng;
mod schedule;
mod txn;
mod view;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

use procs::{Layout, Procs, NODES};
use schedule::{Bounds, Durations};

/// What the producers do.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum WorkloadKind {
    /// Idempotent `acks=all` producers of unique values.
    Idempotent,
    /// Transactional producers (KIP-98): transactions committed, aborted and abandoned.
    Txn,
}

#[derive(Parser, Debug)]
#[command(
    name = "tinymq-chaos",
    about = "Drive a real 3-MetaServer, 3-broker tinymq cluster through a seeded schedule of faults and check every acknowledged write"
)]
struct Args {
    /// The `tinymq` binary [default: next to this executable]
    #[arg(long)]
    tinymq: Option<PathBuf>,
    /// Run directory (kept) [default: a temporary directory, kept unless the run passes]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the temporary run directory even when the run passes.
    #[arg(long)]
    keep: bool,
    /// Seed of the fault schedule [default: from the clock; printed]
    #[arg(long)]
    seed: Option<u64>,
    /// Number of faults.
    #[arg(long, default_value_t = 8)]
    faults: u32,
    /// Fault kinds with optional weights, e.g. `leader-kill:10,zombie:3,cut:3,meta-kill:1`;
    /// the faults are shared among them by weight (exactly).
    #[arg(long, default_value = "leader-kill,zombie,cut,meta-kill")]
    kinds: String,
    #[arg(long, default_value = "chaos")]
    topic: String,
    #[arg(long, default_value_t = 3)]
    partitions: u32,
    /// What the producers do: `idempotent` values, or `txn` transactions (which also allows
    /// the fault kinds coordinator-kill and producer-kill).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Idempotent)]
    workload: WorkloadKind,
    /// Producers (each idempotent, acks=all, its own producer id; with `txn`, each its own
    /// transactional id).
    #[arg(long, default_value_t = 2)]
    producers: u32,
    /// txn: most records in one transaction (each has 1..=this, seeded).
    #[arg(long, default_value_t = 10)]
    txn_records_max: u32,
    /// txn: the share of transactions aborted on purpose, percent.
    #[arg(long, default_value_t = 20)]
    abort_percent: u32,
    /// txn: every producer's transaction timeout, ms.
    #[arg(long, default_value_t = 5000)]
    transaction_timeout_ms: u64,
    /// txn: how long past its timeout an abandoned transaction may take to be aborted by its
    /// coordinator, ms (the coordinator's timer runs every second; markers are fsynced).
    #[arg(long, default_value_t = 5000)]
    abandon_slack_ms: u64,
    /// Values per second per producer (idempotent).
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// How long a leader kill or MetaServer kill keeps the process down, ms (min..max).
    #[arg(long, default_value_t = 1000)]
    down_min_ms: u64,
    #[arg(long, default_value_t = 5000)]
    down_max_ms: u64,
    /// How long a zombie stays stopped, ms; the MetaServer fences a silent broker after 1.5 s,
    /// so the default range has zombies deposed while stopped and zombies that are not.
    #[arg(long, default_value_t = 500)]
    zombie_min_ms: u64,
    #[arg(long, default_value_t = 30000)]
    zombie_max_ms: u64,
    /// How long a cut lasts, ms.
    #[arg(long, default_value_t = 5000)]
    cut_min_ms: u64,
    #[arg(long, default_value_t = 20000)]
    cut_max_ms: u64,
    /// Pause after a fault has healed and the cluster settled, ms.
    #[arg(long, default_value_t = 1000)]
    gap_min_ms: u64,
    #[arg(long, default_value_t = 3000)]
    gap_max_ms: u64,
    /// The brokers' `--replica-lag-time-max-ms`.
    #[arg(long, default_value_t = 3000)]
    replica_lag_time_max_ms: u64,
    /// Longest wait for the cluster to settle (every partition led, full ISR), ms.
    #[arg(long, default_value_t = 60000)]
    settle_timeout_ms: u64,
    /// The producers' delivery timeout, ms.
    #[arg(long, default_value_t = 60000)]
    delivery_timeout_ms: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tinymq-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tinymq-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The command line that replays this run (the same arguments, the seed fixed).
fn replay_command(seed: u64) -> String {
    let mut out = vec!["tinymq-chaos".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--seed" {
            args.next();
        } else if !a.starts_with("--seed=") && a != "--dir" && !a.starts_with("--dir=") {
            out.push(a);
        } else if a == "--dir" {
            args.next();
        }
    }
    out.push(format!("--seed {seed}"));
    out.join(" ")
}

fn tinymq_binary(args: &Args) -> Result<PathBuf> {
    let bin = match &args.tinymq {
        Some(b) => b.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("executable has no directory")?
            .join("tinymq"),
    };
    if !bin.exists() {
        bail!(
            "no tinymq binary at {} (build it, or pass --tinymq)",
            bin.display()
        );
    }
    Ok(bin)
}

async fn run(args: Args) -> Result<bool> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!("seed {seed}");
    let bin = tinymq_binary(&args)?;
    let kinds = schedule::parse_kinds(&args.kinds)?;
    let txn_only = kinds.iter().find(|(k, w)| *w > 0 && k.needs_transactions());
    if let (Some((kind, _)), WorkloadKind::Idempotent) = (txn_only, args.workload) {
        bail!("fault kind {kind} needs --workload txn");
    }
    let durations = Durations {
        down: Bounds {
            min_ms: args.down_min_ms,
            max_ms: args.down_max_ms,
        },
        zombie: Bounds {
            min_ms: args.zombie_min_ms,
            max_ms: args.zombie_max_ms,
        },
        cut: Bounds {
            min_ms: args.cut_min_ms,
            max_ms: args.cut_max_ms,
        },
        gap: Bounds {
            min_ms: args.gap_min_ms,
            max_ms: args.gap_max_ms,
        },
    };
    let plan = schedule::plan(
        seed,
        args.faults,
        &kinds,
        args.partitions.max(1),
        &durations,
    );
    let (dir, temp) = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new().prefix("tinymq-chaos-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    println!("run directory {}", dir.display());
    let started = Instant::now();
    let net = proxy::Net::new();
    let layout = Layout::new(&dir, &bin, &net, args.replica_lag_time_max_ms).await?;
    let mut procs = Procs::new(layout, net.clone());
    let outcome = tokio::select! {
        outcome = drive(&args, seed, &plan, &mut procs, &net, started) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    procs.stop_all().await;
    let passed = match outcome {
        Ok(p) => p,
        Err(e) => {
            if let Some(t) = temp {
                let _ = t.keep();
            }
            return Err(e.context(format!("run directory kept: {}", dir.display())));
        }
    };
    match temp {
        Some(t) if passed && !args.keep => drop(t),
        Some(t) => {
            let kept = t.keep();
            println!("run directory kept: {}", kept.display());
        }
        None => {}
    }
    Ok(passed)
}

async fn drive(
    args: &Args,
    seed: u64,
    plan: &[schedule::Planned],
    procs: &mut Procs,
    net: &Arc<proxy::Net>,
    started: Instant,
) -> Result<bool> {
    for id in 1..=NODES {
        procs.start_meta(id).await?;
    }
    for id in 1..=NODES {
        procs.start_broker(id).await?;
    }
    let bootstrap = procs.layout.bootstrap();
    let fronts = procs.layout.broker_front.clone();
    create_topic(procs, &bootstrap, &args.topic, args.partitions).await?;
    let settle_limit = Duration::from_millis(args.settle_timeout_ms);
    let (settled, _) = view::settle(
        &fronts,
        &args.topic,
        args.partitions,
        NODES as usize,
        settle_limit,
    )
    .await;
    if !settled {
        bail!("the new topic never had a leader and {NODES} in-sync replicas per partition");
    }
    println!(
        "cluster up: meta {:?}, brokers via proxies {bootstrap}; topic {} ({} partitions, 3 replicas)",
        procs.layout.meta, args.topic, args.partitions
    );
    match args.workload {
        WorkloadKind::Idempotent => idempotent(args, seed, plan, procs, net, started).await,
        WorkloadKind::Txn => txn::drive(args, seed, plan, procs, net, started).await,
    }
}

async fn idempotent(
    args: &Args,
    seed: u64,
    plan: &[schedule::Planned],
    procs: &mut Procs,
    net: &Arc<proxy::Net>,
    started: Instant,
) -> Result<bool> {
    let bootstrap = procs.layout.bootstrap();
    let workload = workload::Workload::start(&workload::WorkloadConfig {
        bootstrap: bootstrap.clone(),
        topic: args.topic.clone(),
        partitions: args.partitions,
        producers: args.producers,
        rate: args.rate,
        delivery_timeout: Duration::from_millis(args.delivery_timeout_ms),
    })?;
    let ledger = workload.ledger.clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (applied, crashes) = run_schedule(args, plan, procs, net, started, None).await?;
    println!("schedule done; stopping the producers");
    workload
        .stop(Duration::from_millis(args.delivery_timeout_ms) + Duration::from_secs(5))
        .await;
    heal_and_settle(args, procs, net).await?;
    let stored = check::read_all(
        &bootstrap,
        &args.topic,
        args.partitions,
        tinymq_client::Isolation::ReadUncommitted,
        Duration::from_secs(180),
    )
    .await?;
    let verdict = check::check(&ledger, &stored);
    let gaps = report::unavailability(&applied, report::ack_times(&ledger));
    let header = header(seed, procs, started);
    print!(
        "{}",
        report::summary(&header, &applied, &gaps, &verdict, &crashes)
    );
    Ok(verdict.violations() == 0 && crashes.is_empty())
}

/// Applies the plan; returns the faults as applied and the processes that exited by
/// themselves (each restarted).
async fn run_schedule(
    args: &Args,
    plan: &[schedule::Planned],
    procs: &mut Procs,
    net: &Arc<proxy::Net>,
    started: Instant,
    txn: Option<&txn::Hooks>,
) -> Result<(Vec<schedule::Applied>, Vec<String>)> {
    let mut applied = Vec::new();
    let mut crashes = Vec::new();
    let mut runner = schedule::Runner {
        procs,
        net,
        topic: &args.topic,
        partitions: args.partitions,
        settle_limit: Duration::from_millis(args.settle_timeout_ms),
        started,
        txn,
    };
    for (i, p) in plan.iter().enumerate() {
        applied.push(runner.apply(i, p).await?);
        let exited = runner.procs.crashed();
        if !exited.is_empty() {
            println!("  {}", exited.join("; "));
            crashes.extend(exited);
            runner.procs.heal().await?;
        }
    }
    Ok((applied, crashes))
}

/// Ends every fault, starts what is down and waits for the topic to settle.
async fn heal_and_settle(args: &Args, procs: &mut Procs, net: &proxy::Net) -> Result<()> {
    net.heal_all();
    procs.heal().await?;
    let (settled, took) = view::settle(
        &procs.layout.broker_front,
        &args.topic,
        args.partitions,
        NODES as usize,
        Duration::from_millis(args.settle_timeout_ms),
    )
    .await;
    println!(
        "final settle: {} after {} ms; reading everything back",
        if settled { "settled" } else { "NOT settled" },
        took.as_millis()
    );
    Ok(())
}

fn header(seed: u64, procs: &Procs, started: Instant) -> report::Header {
    report::Header {
        seed,
        command: replay_command(seed),
        elapsed: started.elapsed(),
        dir: procs.layout.dir.display().to_string(),
    }
}

/// `tinymq topic create`, retried while the brokers register.
async fn create_topic(procs: &Procs, bootstrap: &str, topic: &str, partitions: u32) -> Result<()> {
    let mut last = String::new();
    for _ in 0..60 {
        let out = tokio::process::Command::new(&procs.layout.bin)
            .args(["topic", "create", topic])
            .args(["--partitions", &partitions.to_string(), "--replicas", "3"])
            .args(["--bootstrap", bootstrap])
            .output()
            .await?;
        if out.status.success() {
            return Ok(());
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("topic create failed: {last}")
}
