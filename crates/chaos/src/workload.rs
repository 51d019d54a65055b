//! The producers: each an idempotent `acks=all` producer of the client library sending unique
//! values `p{producer}-{seq}` for the whole run, `seq` going round the partitions (value `seq`
//! goes to partition `seq % partitions`). The ledger records what became of every value sent:
//! acknowledged (partition, offset, when), failed, or never answered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_client::{Producer, ProducerConfig, ProducerRecord};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Values of one producer on one partition waiting for their answer, at most.
const IN_FLIGHT_MAX: usize = 200;

#[derive(Debug, Clone)]
pub enum Outcome {
    Pending,
    Acked {
        partition: u32,
        offset: i64,
        at: Instant,
    },
    Failed(String),
}

/// Every value sent, by (producer, seq).
#[derive(Default)]
pub struct Ledger {
    pub values: Mutex<BTreeMap<(u32, u64), Outcome>>,
}

impl Ledger {
    fn set(&self, key: (u32, u64), outcome: Outcome) {
        self.values.lock().insert(key, outcome);
    }
}

pub fn value_of(producer: u32, seq: u64) -> String {
    format!("p{producer}-{seq}")
}

/// `p{producer}-{seq}` back into its parts.
pub fn parse_value(value: &[u8]) -> Option<(u32, u64)> {
    let text = std::str::from_utf8(value).ok()?;
    let (p, seq) = text.strip_prefix('p')?.split_once('-')?;
    Some((p.parse().ok()?, seq.parse().ok()?))
}

pub struct Workload {
    pub ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    loops: JoinSet<()>,
    gates: Vec<Arc<Semaphore>>,
    producers: Vec<Producer>,
}

pub struct WorkloadConfig {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: u32,
    pub producers: u32,
    /// Values per second per producer.
    pub rate: u32,
    pub delivery_timeout: Duration,
}

impl Workload {
    pub fn start(c: &WorkloadConfig) -> anyhow::Result<Workload> {
        let ledger = Arc::new(Ledger::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut loops = JoinSet::new();
        let mut gates = Vec::new();
        let mut producers = Vec::new();
        let per_loop = f64::from(c.rate.max(1)) / f64::from(c.partitions.max(1));
        let pause = Duration::from_secs_f64(1.0 / per_loop);
        for producer in 0..c.producers {
            let mut config = ProducerConfig::new(&c.bootstrap);
            config.delivery_timeout = c.delivery_timeout;
            config.client.request_timeout = Duration::from_secs(10);
            let handle = Producer::new(config)?;
            for partition in 0..c.partitions {
                let gate = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
                gates.push(gate.clone());
                let run = Loop {
                    producer,
                    partition,
                    partitions: c.partitions,
                    topic: c.topic.clone(),
                    handle: handle.clone(),
                    ledger: ledger.clone(),
                    stop: stop.clone(),
                    gate,
                    pause,
                };
                loops.spawn(run.run());
            }
            producers.push(handle);
        }
        Ok(Workload {
            ledger,
            stop,
            loops,
            gates,
            producers,
        })
    }

    /// Stops sending and waits (up to `wait`) for every value sent to be answered.
    pub async fn stop(mut self, wait: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        while self.loops.join_next().await.is_some() {}
        let deadline = Instant::now() + wait;
        for gate in &self.gates {
            let left = deadline.saturating_duration_since(Instant::now());
            let all = gate.acquire_many(IN_FLIGHT_MAX as u32);
            let _ = tokio::time::timeout(left, all).await;
        }
        for p in self.producers {
            let _ = tokio::time::timeout(Duration::from_secs(1), p.close()).await;
        }
    }
}

/// One producer's sending loop for one partition.
struct Loop {
    producer: u32,
    partition: u32,
    partitions: u32,
    topic: String,
    handle: Producer,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    gate: Arc<Semaphore>,
    pause: Duration,
}

impl Loop {
    async fn run(self) {
        let mut tick = tokio::time::interval(self.pause);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = u64::from(self.partition);
        while !self.stop.load(Ordering::SeqCst) {
            tick.tick().await;
            let Ok(permit) = self.gate.clone().acquire_owned().await else {
                return;
            };
            let key = (self.producer, seq);
            self.ledger.set(key, Outcome::Pending);
            let mut record = ProducerRecord::value(value_of(self.producer, seq));
            record.partition = Some(self.partition);
            match self.handle.send(&self.topic, record).await {
                Ok(delivery) => {
                    let ledger = self.ledger.clone();
                    tokio::spawn(async move {
                        let outcome = match delivery.await {
                            Ok(meta) => Outcome::Acked {
                                partition: meta.partition,
                                offset: meta.offset,
                                at: Instant::now(),
                            },
                            Err(e) => Outcome::Failed(e.to_string()),
                        };
                        ledger.set(key, outcome);
                        drop(permit);
                    });
                }
                Err(e) => self.ledger.set(key, Outcome::Failed(e.to_string())),
            }
            seq += u64::from(self.partitions);
        }
    }
}
