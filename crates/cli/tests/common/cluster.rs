//! A cluster of real processes for replication tests: one MetaServer node and brokers with ids
//! 1, 2, …, each at an address fixed for the test (a restart comes back at the same one), and
//! a short `replica_lag_time_max` so that ISR changes happen within a test's waits. Brokers
//! may join later ([`Cluster::start_broker`] with the next id). Also the tool helpers these
//! tests share: running `tinymq`, reading `topic describe --json`, bounded waits, and a
//! producer that keeps sending unique values until told to stop.

use std::io::Write;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{free_port, start, MetaProc, Server, BIN};

/// Followers leave the ISR after this long without catching up (the default is 10 s).
pub const LAG_MAX_MS: &str = "2000";

pub struct Cluster {
    tmp: tempfile::TempDir,
    _meta: MetaProc,
    pub meta: String,
    /// Broker `id` listens at `addrs[id - 1]`.
    pub addrs: Vec<String>,
    /// Broker `id`'s Kafka listener is at `kafka_addrs[id - 1]`; empty when the brokers have
    /// none ([`Cluster::start_with_kafka`]).
    pub kafka_addrs: Vec<String>,
    brokers: Vec<Option<Server>>,
}

impl Cluster {
    /// A MetaServer node and brokers 1 to `brokers`, all registered.
    pub fn start(brokers: u32) -> Cluster {
        Cluster::start_brokers(brokers, false)
    }

    /// [`Cluster::start`] with a Kafka listener on every broker.
    pub fn start_with_kafka(brokers: u32) -> Cluster {
        Cluster::start_brokers(brokers, true)
    }

    fn start_brokers(brokers: u32, kafka: bool) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let meta_addrs = vec![format!("127.0.0.1:{}", free_port())];
        let meta = start(1, &meta_addrs, tmp.path());
        let mut cluster = Cluster {
            meta: meta_addrs[0].clone(),
            _meta: meta,
            addrs: Vec::new(),
            kafka_addrs: Vec::new(),
            brokers: Vec::new(),
            tmp,
        };
        if kafka {
            let ports = (0..brokers).map(|_| format!("127.0.0.1:{}", free_port()));
            cluster.kafka_addrs = ports.collect();
        }
        for id in 1..=brokers {
            cluster.start_broker(id);
        }
        cluster
    }

    /// Starts (or restarts, at its address and data directory) broker `id`; an id one past
    /// the highest so far is a new broker joining.
    pub fn start_broker(&mut self, id: u32) {
        let i = id as usize - 1;
        assert!(i <= self.addrs.len(), "broker ids are consecutive");
        if i == self.addrs.len() {
            self.addrs.push(format!("127.0.0.1:{}", free_port()));
            self.brokers.push(None);
        }
        let dir = self.tmp.path().join(format!("broker-{id}"));
        let mut extra = vec!["--replica-lag-time-max-ms", LAG_MAX_MS];
        if let Some(kafka) = self.kafka_addrs.get(i) {
            extra.extend(["--kafka-listen", kafka.as_str()]);
        }
        self.brokers[i] = Some(Server::start_broker_with(
            id,
            &self.addrs[i],
            &self.meta,
            &dir,
            &extra,
        ));
    }

    pub fn meta_pid(&self) -> u32 {
        self._meta.pid()
    }

    pub fn broker(&self, id: u32) -> &Server {
        self.brokers[id as usize - 1].as_ref().expect("running")
    }

    pub fn addr(&self, id: u32) -> &str {
        &self.addrs[id as usize - 1]
    }

    /// Every broker address, comma-separated: a bootstrap list that survives any one broker.
    pub fn bootstrap(&self) -> String {
        self.addrs.join(",")
    }

    pub fn kill9(&mut self, id: u32) {
        if let Some(mut b) = self.brokers[id as usize - 1].take() {
            b.kill9();
        }
    }

    /// SIGTERM broker `id` and wait for it to exit.
    pub fn terminate(&mut self, id: u32) -> ExitStatus {
        let mut b = self.brokers[id as usize - 1].take().expect("running");
        b.terminate()
    }

    /// The address of a running broker other than `not`.
    pub fn live_other_than(&self, not: u32) -> &str {
        (1..=self.addrs.len() as u32)
            .find(|&id| id != not && self.brokers[id as usize - 1].is_some())
            .map(|id| self.addr(id))
            .expect("a live broker")
    }
}

pub fn tool(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run tinymq")
}

pub fn tool_ok(args: &[&str]) -> String {
    tool_ok_with_input(args, b"")
}

/// Runs `tinymq ARGS` with `stdin` as its input; fails the test unless it succeeds.
pub fn tool_ok_with_input(args: &[&str], stdin: &[u8]) -> String {
    let out = super::run_with_input(Command::new(BIN).args(args), stdin);
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (bounded: a minute) until `done`, polling.
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

/// One partition as `topic describe --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub leader: u64,
    pub replicas: Vec<u64>,
    pub isr: Vec<u64>,
    pub reassigning: bool,
}

/// Each partition of `topic` (empty when the describe fails, e.g. through a broker that just
/// stopped).
pub fn describe(topic: &str, bootstrap: &str) -> Vec<Described> {
    let out = tool(&[
        "topic",
        "describe",
        topic,
        "--json",
        "--bootstrap",
        bootstrap,
    ]);
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return vec![];
    };
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array()
            .map(|a| a.iter().filter_map(|i| i.as_u64()).collect())
            .unwrap_or_default()
    };
    v["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| Described {
                    leader: p["leader"].as_u64().unwrap_or(0),
                    replicas: ids(&p["replicas"]),
                    isr: ids(&p["isr"]),
                    reassigning: !ids(&p["adding_replicas"]).is_empty()
                        || !ids(&p["removing_replicas"]).is_empty(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every partition of `topic` has a leader and `size` in-sync replicas.
pub fn wait_isr(topic: &str, bootstrap: &str, size: usize) {
    wait_for(&format!("{topic}'s ISR to have {size} replicas"), || {
        let ps = describe(topic, bootstrap);
        !ps.is_empty() && ps.iter().all(|p| p.leader != 0 && p.isr.len() == size)
    });
}

/// Waits until every partition of `topic` has a leader and all its replicas in sync.
pub fn wait_all_in_sync(topic: &str, bootstrap: &str) {
    wait_for(&format!("every replica of {topic} in sync"), || {
        let ps = describe(topic, bootstrap);
        !ps.is_empty()
            && ps
                .iter()
                .all(|p| p.leader != 0 && !p.reassigning && p.isr.len() == p.replicas.len())
    });
}

/// Every value stored in `topic`, sorted: read from the beginning until nothing new comes for
/// a while.
pub fn stored(topic: &str, bootstrap: &str) -> Vec<String> {
    let out = tool_ok(&[
        "consume",
        topic,
        "--from-beginning",
        "--timeout-ms",
        "3000",
        "--bootstrap",
        bootstrap,
    ]);
    let mut values: Vec<String> = out.lines().map(String::from).collect();
    values.sort();
    values
}

/// A `tinymq produce` process (acks=all and idempotence: its defaults) fed unique values
/// `PREFIX-000000`, `PREFIX-000001`, … one every few milliseconds until [`Producer::finish`].
pub struct Producer {
    child: Option<Child>,
    writer: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
    prefix: String,
}

impl Producer {
    pub fn start(topic: &str, bootstrap: &str, prefix: &str) -> Producer {
        let mut child = Command::new(BIN)
            .args(["produce", topic, "--bootstrap", bootstrap])
            .env("TINYMQ_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn produce");
        let mut stdin = child.stdin.take().expect("stdin");
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let (flag, count, p) = (stop.clone(), written.clone(), prefix.to_string());
        let writer = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let n = count.load(Ordering::Relaxed);
                if writeln!(stdin, "{p}-{n:06}").is_err() {
                    return; // The producer exited; `finish` reports why.
                }
                count.store(n + 1, Ordering::Relaxed);
                // Not a wait: paces the producer to a steady trickle of lines.
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        Producer {
            child: Some(child),
            writer: Some(writer),
            stop,
            written,
            prefix: prefix.to_string(),
        }
    }

    pub fn written(&self) -> usize {
        self.written.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until at least `n` values were handed to the producer.
    pub fn wait_written(&self, n: usize) {
        wait_for(&format!("{n} values written to the producer"), || {
            self.written() >= n
        });
    }

    /// Closes the producer's input and waits for it to exit; fails the test unless it exited
    /// 0: every value acknowledged, none failed (a non-retriable error fails its record).
    /// Returns the values sent, sorted.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            w.join().expect("writer");
        }
        let child = self.child.take().expect("running");
        let out = child.wait_with_output().expect("produce");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "produce exited with {}: {stderr}",
            out.status
        );
        let prefix = &self.prefix;
        (0..self.written())
            .map(|n| format!("{prefix}-{n:06}"))
            .collect()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
