//! The transactional workload (`--workload txn`): transactional producers on the shared
//! cluster and fault schedule (plus `coordinator-kill` and `producer-kill`, through
//! [`Hooks`]), then, after healing, the checks of `check.rs` on what a read_committed and a
//! read_uncommitted consumer read, the groups' committed offsets and the partitions' last
//! stable offsets.

mod check;
mod probe;
mod report;
mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tinymq_client::{Admin, ClientConfig, Isolation};

use crate::procs::{Procs, NODES};
use crate::{proxy, schedule, view, Args};
use workload::{transactional_id, Kills, Workload, WorkloadConfig, INPUT_TOPIC};

/// Longest wait for a coordinator's answer when picking a `coordinator-kill` target.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a producer may take to reach the kill point of a transaction, beyond its timeout
/// and slack (its steps may each take up to 30 s while a fault is healing).
const KILL_TAKE_LIMIT: Duration = Duration::from_secs(120);
/// How long stopping the producers may take (each ends its transaction).
const STOP_WAIT: Duration = Duration::from_secs(120);
/// Longest wait after healing, beyond the transaction timeout and slack, for every
/// partition's LSO to reach its HW.
const STABLE_WAIT: Duration = Duration::from_secs(60);
const READ_LIMIT: Duration = Duration::from_secs(180);

/// What the transactional fault kinds need of the workload.
pub struct Hooks {
    admin: Admin,
    producers: u32,
    kills: Arc<Kills>,
    kill_limit: Duration,
    /// The transaction timeout and the slack: how long a killed producer stays down.
    restart_after: Duration,
}

impl Hooks {
    /// The producer a transactional fault planned on `partition` aims at.
    pub fn producer_of(&self, partition: u32) -> u32 {
        partition % self.producers.max(1)
    }

    /// The broker coordinating that producer's transactional id now.
    pub async fn coordinator_of(&self, partition: u32) -> Option<u32> {
        let id = transactional_id(self.producer_of(partition));
        let ask = self.admin.describe_transaction(&id);
        let state = tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()?.ok()?;
        Some(state.coordinator).filter(|c| (1..=NODES).contains(c))
    }

    pub fn restart_after(&self) -> Duration {
        self.restart_after
    }

    /// Drops `producer` inside its next transaction; returns once it started again (after
    /// its transaction timeout and the slack); false if it never reached the kill point.
    pub async fn kill_producer(&self, producer: u32) -> bool {
        self.kills.kill(producer, self.kill_limit).await
    }
}

pub async fn drive(
    args: &Args,
    seed: u64,
    plan: &[schedule::Planned],
    procs: &mut Procs,
    net: &Arc<proxy::Net>,
    started: Instant,
) -> Result<bool> {
    let bootstrap = procs.layout.bootstrap();
    crate::create_topic(procs, &bootstrap, INPUT_TOPIC, 1).await?;
    let settle_limit = Duration::from_millis(args.settle_timeout_ms);
    let fronts = &procs.layout.broker_front;
    if !view::settle(fronts, INPUT_TOPIC, 1, NODES as usize, settle_limit)
        .await
        .0
    {
        bail!("topic {INPUT_TOPIC} never had a leader and {NODES} in-sync replicas");
    }
    let timeout = Duration::from_millis(args.transaction_timeout_ms);
    let slack = Duration::from_millis(args.abandon_slack_ms);
    let config = WorkloadConfig {
        bootstrap: bootstrap.clone(),
        topic: args.topic.clone(),
        partitions: args.partitions,
        producers: args.producers.max(1),
        records_max: args.txn_records_max.max(1),
        abort_percent: args.abort_percent.min(100),
        transaction_timeout: timeout,
        abandon_slack: slack,
        delivery_timeout: Duration::from_millis(args.delivery_timeout_ms),
        seed,
    };
    println!(
        "transactional workload: {} producers, 1..={} records a transaction, {}% aborted, timeout {} ms",
        config.producers, config.records_max, config.abort_percent, args.transaction_timeout_ms
    );
    let workload = Workload::start(&config)?;
    let ledger = workload.ledger.clone();
    let hooks = Hooks {
        admin: Admin::new(ClientConfig::new(&bootstrap))?,
        producers: config.producers,
        kills: workload.kills.clone(),
        kill_limit: timeout + slack + KILL_TAKE_LIMIT,
        restart_after: timeout + slack,
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (applied, crashes) =
        crate::run_schedule(args, plan, procs, net, started, Some(&hooks)).await?;
    println!("schedule done; stopping the producers");
    workload.stop(STOP_WAIT).await;
    crate::heal_and_settle(args, procs, net).await?;
    let (topic, parts) = (&args.topic, args.partitions);
    let stable_limit = timeout + slack + STABLE_WAIT;
    let (stable_after, hanging) =
        probe::wait_stable(&bootstrap, topic, parts, stable_limit).await?;
    println!(
        "LSO = HW on every partition after {} ms",
        stable_after.as_millis()
    );
    let read_started = Instant::now();
    let committed_read = crate::check::read_all(
        &bootstrap,
        topic,
        parts,
        Isolation::ReadCommitted,
        READ_LIMIT,
    )
    .await?;
    let uncommitted_read = crate::check::read_all(
        &bootstrap,
        topic,
        parts,
        Isolation::ReadUncommitted,
        READ_LIMIT,
    )
    .await?;
    let groups = probe::group_offsets(&bootstrap, config.producers).await?;
    let read_took = read_started.elapsed();
    let verdict = check::check(
        &ledger,
        check::Observed {
            committed_read: &committed_read,
            uncommitted_read: &uncommitted_read,
            group_offsets: &groups,
            hanging,
            abandon_limit: timeout + slack,
        },
    );
    let gaps = crate::report::unavailability(&applied, ledger.commit_times());
    let header = crate::header(seed, procs, started);
    let mut out = crate::report::faults_section(&header, &applied, &gaps);
    out.push_str(&report::verdict(&verdict, &ledger, stable_after, read_took));
    out.push_str(&crate::report::crashes_and_verdict(
        &crashes,
        verdict.violations(),
    ));
    print!("{out}");
    Ok(verdict.violations() == 0 && crashes.is_empty())
}
