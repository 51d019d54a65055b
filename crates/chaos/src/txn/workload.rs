//! The transactional producers: each its own transactional id, looping begin; K records
//! (K seeded in 1..=`records_max`) spread over the topic's partitions, each value naming its
//! transaction (`p{producer}-t{txn}-{index}/{K}`); `send_offsets_to_transaction` of offset
//! txn + 1 on `chaos-in`/0 for group `chaos-txn-{producer}`; then commit, or abort with the
//! seeded probability. The ledger records what became of each transaction: committed,
//! aborted, uncertain (commit or abort failed or timed out) or abandoned (`producer-kill`).
//! After any failure of the coordinator's calls the producer is recreated with the same id
//! (`init_transactions` fences the old instance and aborts its open transaction).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_client::{Admin, ClientConfig, ClientError, Producer, ProducerConfig, ProducerRecord};
use tokio::task::JoinSet;

use crate::rng::Rng;

/// The input topic whose partition 0 the transactions commit offsets on.
pub const INPUT_TOPIC: &str = "chaos-in";
/// Longest one step of a transaction (a send, the offsets, commit, abort, init) may take
/// before it counts as failed (timed out).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between transactions, leaving the machine's cores some room.
const TXN_PAUSE: Duration = Duration::from_millis(10);
const INIT_BACKOFF: Duration = Duration::from_millis(500);
const DESCRIBE_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Begun and not ended (the workload stopped inside it).
    Open,
    Committed {
        at: Instant,
    },
    Aborted,
    /// Commit or abort failed or timed out: either outcome is allowed, all or nothing.
    /// `commit_sent`: whether commit was asked for (if not, only abort is allowed).
    Uncertain {
        commit_sent: bool,
        why: String,
    },
    /// The producer was dropped inside it; `aborted_after`: when the coordinator was seen
    /// to have aborted it (CompleteAbort), if within the timeout and slack.
    Abandoned {
        at: Instant,
        aborted_after: Option<Duration>,
    },
}

impl Outcome {
    /// The outcome's name, for violation reports.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Open => "open at stop",
            Outcome::Committed { .. } => "committed",
            Outcome::Aborted => "aborted",
            Outcome::Uncertain { .. } => "uncertain",
            Outcome::Abandoned { .. } => "abandoned",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Txn {
    pub k: u32,
    /// The partition of each record, by index.
    pub partitions: Vec<u32>,
    pub outcome: Outcome,
}

/// Every transaction begun, by (producer, transaction number), and producer instances.
#[derive(Default)]
pub struct Ledger {
    pub txns: Mutex<BTreeMap<(u32, u64), Txn>>,
    pub instances: AtomicU64,
}

impl Ledger {
    fn set(&self, key: (u32, u64), outcome: Outcome) {
        if let Some(t) = self.txns.lock().get_mut(&key) {
            t.outcome = outcome;
        }
    }

    /// When a committed transaction touched each partition (for the unavailability).
    pub fn commit_times(&self) -> BTreeMap<u32, Vec<Instant>> {
        let mut out: BTreeMap<u32, Vec<Instant>> = BTreeMap::new();
        for t in self.txns.lock().values() {
            if let Outcome::Committed { at } = t.outcome {
                for p in &t.partitions {
                    out.entry(*p).or_default().push(at);
                }
            }
        }
        out
    }
}

pub fn value_of(producer: u32, txn: u64, index: u32, k: u32) -> String {
    format!("p{producer}-t{txn}-{index}/{k}")
}

/// `p{producer}-t{txn}-{index}/{k}` back into its parts.
pub fn parse_value(value: &[u8]) -> Option<(u32, u64, u32, u32)> {
    let text = std::str::from_utf8(value).ok()?;
    let (p, rest) = text.strip_prefix('p')?.split_once("-t")?;
    let (t, rest) = rest.split_once('-')?;
    let (i, k) = rest.split_once('/')?;
    Some((
        p.parse().ok()?,
        t.parse().ok()?,
        i.parse().ok()?,
        k.parse().ok()?,
    ))
}

pub fn transactional_id(producer: u32) -> String {
    format!("chaos-producer-{producer}")
}

pub fn group_of(producer: u32) -> String {
    format!("chaos-txn-{producer}")
}

/// Requests to drop a producer mid-transaction (`producer-kill`), and its restarts.
pub struct Kills {
    requested: Vec<AtomicBool>,
    restarts: Vec<AtomicU64>,
}

impl Kills {
    fn new(producers: u32) -> Kills {
        Kills {
            requested: (0..producers).map(|_| AtomicBool::new(false)).collect(),
            restarts: (0..producers).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Asks `producer` to drop itself inside its next transaction and waits (up to `limit`)
    /// until it took the request and started again; false if it never took it.
    pub async fn kill(&self, producer: u32, limit: Duration) -> bool {
        let i = producer as usize;
        let before = self.restarts[i].load(Ordering::SeqCst);
        self.requested[i].store(true, Ordering::SeqCst);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.restarts[i].load(Ordering::SeqCst) > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Withdrawn if still untaken; taken meanwhile: it happened.
        !self.requested[i].swap(false, Ordering::SeqCst)
    }

    fn take(&self, producer: u32) -> bool {
        self.requested[producer as usize].swap(false, Ordering::SeqCst)
    }
}

#[derive(Clone)]
pub struct WorkloadConfig {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: u32,
    pub producers: u32,
    pub records_max: u32,
    pub abort_percent: u32,
    pub transaction_timeout: Duration,
    /// How long past its timeout an abandoned transaction may take to be aborted.
    pub abandon_slack: Duration,
    pub delivery_timeout: Duration,
    pub seed: u64,
}

pub struct Workload {
    pub ledger: Arc<Ledger>,
    pub kills: Arc<Kills>,
    stop: Arc<AtomicBool>,
    loops: JoinSet<()>,
}

impl Workload {
    pub fn start(c: &WorkloadConfig) -> anyhow::Result<Workload> {
        let ledger = Arc::new(Ledger::default());
        let kills = Arc::new(Kills::new(c.producers));
        let stop = Arc::new(AtomicBool::new(false));
        let mut loops = JoinSet::new();
        for producer in 0..c.producers {
            let run = Loop {
                producer,
                config: c.clone(),
                ledger: ledger.clone(),
                kills: kills.clone(),
                stop: stop.clone(),
                rng: Rng::new(c.seed ^ (u64::from(producer) + 1).wrapping_mul(0x2545_F491)),
                admin: Admin::new(ClientConfig::new(&c.bootstrap))?,
                next_txn: 0,
            };
            loops.spawn(run.run());
        }
        Ok(Workload {
            ledger,
            kills,
            stop,
            loops,
        })
    }

    /// Lets each producer end its transaction and stop; those still busy after `wait` are
    /// dropped (their transaction stays `Open`, allowed either way).
    pub async fn stop(mut self, wait: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let all = async { while self.loops.join_next().await.is_some() {} };
        if tokio::time::timeout(wait, all).await.is_err() {
            self.loops.abort_all();
            while self.loops.join_next().await.is_some() {}
        }
    }
}

/// How a producer instance's run of transactions ended.
enum End {
    /// Stopping.
    Stop,
    /// A failure: make a new instance.
    Recreate,
    /// Dropped inside transaction `txn` at `at` (`producer-kill`).
    Killed { txn: u64, at: Instant },
}

/// One producer's loop over its instances.
struct Loop {
    producer: u32,
    config: WorkloadConfig,
    ledger: Arc<Ledger>,
    kills: Arc<Kills>,
    stop: Arc<AtomicBool>,
    rng: Rng,
    admin: Admin,
    next_txn: u64,
}

impl Loop {
    async fn run(mut self) {
        while !self.stopping() {
            let Some(producer) = self.instance().await else {
                return;
            };
            let end = self.transactions(&producer).await;
            drop(producer);
            match end {
                End::Stop => return,
                End::Recreate => {}
                End::Killed { txn, at } => self.abandoned(txn, at).await,
            }
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A new instance of the producer's transactional id, initialized (retried until it is,
    /// or the workload stops).
    async fn instance(&self) -> Option<Producer> {
        while !self.stopping() {
            let mut config = ProducerConfig::new(&self.config.bootstrap);
            config.transactional_id = Some(transactional_id(self.producer));
            config.transaction_timeout = self.config.transaction_timeout;
            config.delivery_timeout = self.config.delivery_timeout;
            config.client.request_timeout = Duration::from_secs(10);
            let producer = match Producer::new(config) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("producer {}: {e}", self.producer);
                    return None;
                }
            };
            if let Ok(Ok(())) =
                tokio::time::timeout(STEP_TIMEOUT, producer.init_transactions()).await
            {
                self.ledger.instances.fetch_add(1, Ordering::Relaxed);
                return Some(producer);
            }
            tokio::time::sleep(INIT_BACKOFF).await;
        }
        None
    }

    /// Transactions on one instance until it must be replaced or the workload stops.
    async fn transactions(&mut self, producer: &Producer) -> End {
        loop {
            if self.stopping() {
                return End::Stop;
            }
            if let Some(end) = self.one(producer).await {
                return end;
            }
            tokio::time::sleep(TXN_PAUSE).await;
        }
    }

    /// One transaction; `Some` when the instance is done.
    async fn one(&mut self, producer: &Producer) -> Option<End> {
        let txn = self.next_txn;
        self.next_txn += 1;
        let k = self
            .rng
            .between(1, u64::from(self.config.records_max.max(1))) as u32;
        let abort = self.rng.below(100) < u64::from(self.config.abort_percent);
        if producer.begin_transaction().is_err() {
            return Some(End::Recreate);
        }
        let parts = self.config.partitions.max(1);
        let partitions: Vec<u32> = (0..k)
            .map(|i| ((txn + u64::from(i)) % u64::from(parts)) as u32)
            .collect();
        let key = (self.producer, txn);
        let entry = Txn {
            k,
            partitions: partitions.clone(),
            outcome: Outcome::Open,
        };
        self.ledger.txns.lock().insert(key, entry);
        // A kill lands after half the records (even transactions) or after all of them and
        // the offsets (odd ones): always after the first partition was added.
        let kill_at = if txn.is_multiple_of(2) {
            (k / 2).max(1)
        } else {
            k
        };
        let mut failure = None;
        for (i, partition) in (0..k).zip(&partitions) {
            if i == kill_at && self.kills.take(self.producer) {
                return Some(End::Killed {
                    txn,
                    at: Instant::now(),
                });
            }
            let mut record = ProducerRecord::value(value_of(self.producer, txn, i, k));
            record.partition = Some(*partition);
            if let Err(e) = step(producer.send(&self.config.topic, record)).await {
                failure = Some(e);
                break;
            }
        }
        if failure.is_none() {
            if kill_at == k && self.kills.take(self.producer) {
                return Some(End::Killed {
                    txn,
                    at: Instant::now(),
                });
            }
            let offsets = [(INPUT_TOPIC.to_string(), 0, txn as i64 + 1)];
            let group = group_of(self.producer);
            failure = step(producer.send_offsets_to_transaction(&group, &offsets))
                .await
                .err();
        }
        self.end(producer, key, failure.is_some() || abort).await
    }

    /// Commits or aborts the open transaction and records how it went.
    async fn end(&self, producer: &Producer, key: (u32, u64), abort: bool) -> Option<End> {
        let result = if abort {
            step(producer.abort_transaction()).await
        } else {
            step(producer.commit_transaction()).await
        };
        let outcome = match (&result, abort) {
            (Ok(()), true) => Outcome::Aborted,
            (Ok(()), false) => Outcome::Committed { at: Instant::now() },
            (Err(e), _) => Outcome::Uncertain {
                commit_sent: !abort,
                why: e.clone(),
            },
        };
        self.ledger.set(key, outcome);
        result.err().map(|_| End::Recreate)
    }

    /// After a kill: watches the coordinator abort the transaction (until its timeout and
    /// the slack), then waits out that time before the producer starts again.
    async fn abandoned(&self, txn: u64, at: Instant) {
        let deadline = at + self.config.transaction_timeout + self.config.abandon_slack;
        let id = transactional_id(self.producer);
        let mut aborted_after = None;
        while Instant::now() < deadline {
            let ask = self.admin.describe_transaction(&id);
            let left = deadline.saturating_duration_since(Instant::now());
            if let Ok(Ok(state)) = tokio::time::timeout(left, ask).await {
                if state.state == "CompleteAbort" {
                    aborted_after = Some(at.elapsed());
                    break;
                }
            }
            tokio::time::sleep(DESCRIBE_INTERVAL).await;
        }
        self.ledger.set(
            (self.producer, txn),
            Outcome::Abandoned { at, aborted_after },
        );
        tokio::time::sleep_until(deadline.into()).await;
        self.kills.restarts[self.producer as usize].fetch_add(1, Ordering::SeqCst);
    }
}

/// One step of a transaction, bounded by [`STEP_TIMEOUT`]; the error as text.
async fn step<T>(
    f: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, String> {
    match tokio::time::timeout(STEP_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("timed out after {STEP_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_transaction_and_parse_back() {
        let v = value_of(3, 17, 2, 5);
        assert_eq!(v, "p3-t17-2/5");
        assert_eq!(parse_value(v.as_bytes()), Some((3, 17, 2, 5)));
        assert_eq!(parse_value(b"p3-17"), None);
        assert_eq!(parse_value(b"p3-t17-2"), None);
        assert_eq!(parse_value(&[0xff, 0xfe]), None);
    }
}
