//! The cluster's processes: three MetaServer nodes and three brokers started from the `tinymq`
//! binary, each logging (`TINYMQ_LOG=info`) to its own file in the run directory, and the
//! signals faults send them (SIGKILL, SIGSTOP, SIGCONT). Addresses stay fixed for the run so a
//! restarted process comes back where the others expect it.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};

use crate::proxy::{self, Net, Route};

/// Cluster size: MetaServer nodes and brokers alike.
pub const NODES: u32 = 3;

/// Where everything listens.
pub struct Layout {
    pub dir: PathBuf,
    pub bin: PathBuf,
    /// MetaServer node `k` listens on `meta[k - 1]`.
    pub meta: Vec<SocketAddr>,
    /// Broker `i` listens on `broker_listen[i - 1]`...
    pub broker_listen: Vec<SocketAddr>,
    /// ...and is reached through (and advertises) `broker_front[i - 1]`.
    pub broker_front: Vec<SocketAddr>,
    /// Broker `i`'s own proxies to the MetaServer nodes.
    pub broker_meta: Vec<Vec<SocketAddr>>,
    pub replica_lag_time_max_ms: u64,
}

impl Layout {
    /// Picks ports and starts every proxy.
    pub async fn new(dir: &Path, bin: &Path, net: &Arc<Net>, lag_ms: u64) -> Result<Layout> {
        let meta: Vec<SocketAddr> = (0..NODES).map(|_| free_addr()).collect::<Result<_>>()?;
        let broker_listen: Vec<SocketAddr> =
            (0..NODES).map(|_| free_addr()).collect::<Result<_>>()?;
        let mut broker_front = Vec::new();
        let mut broker_meta = Vec::new();
        for (i, listen) in (1..=NODES).zip(&broker_listen) {
            broker_front.push(proxy::start(net.clone(), Route::ToBroker(i), *listen).await?);
            let mut links = Vec::new();
            for m in &meta {
                links.push(proxy::start(net.clone(), Route::BrokerToMeta(i), *m).await?);
            }
            broker_meta.push(links);
        }
        Ok(Layout {
            dir: dir.to_path_buf(),
            bin: bin.to_path_buf(),
            meta,
            broker_listen,
            broker_front,
            broker_meta,
            replica_lag_time_max_ms: lag_ms,
        })
    }

    /// What clients bootstrap from: every broker's front proxy.
    pub fn bootstrap(&self) -> String {
        join(&self.broker_front)
    }
}

fn idx(id: u32) -> usize {
    assert!((1..=NODES).contains(&id), "node ids are 1..={NODES}");
    id as usize - 1
}

fn join(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A loopback address free now, for a process restarted on it. Below the kernel's
/// ephemeral range (32768 and up by default): a released `bind(0)` port is in that range,
/// where any `connect()` on the machine (a test run alongside, or this run's own proxies) may
/// take it as its local port before the process meant to listen on it starts. Each run starts
/// at its own place in 22000–32767.
fn free_addr() -> Result<SocketAddr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 22_000;
    const SPAN: u32 = 32_768 - LOW;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..SPAN {
        let port = LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if std::net::TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The running processes.
pub struct Procs {
    pub layout: Layout,
    net: Arc<Net>,
    metas: Vec<Option<Child>>,
    brokers: Vec<Option<Child>>,
    /// Brokers stopped with SIGSTOP and not yet continued.
    stopped: Vec<bool>,
}

impl Procs {
    pub fn new(layout: Layout, net: Arc<Net>) -> Procs {
        let n = NODES as usize;
        Procs {
            layout,
            net,
            metas: (0..n).map(|_| None).collect(),
            brokers: (0..n).map(|_| None).collect(),
            stopped: vec![false; n],
        }
    }

    pub async fn start_meta(&mut self, id: u32) -> Result<()> {
        let l = &self.layout;
        let peers: Vec<String> = (1..=NODES)
            .zip(&l.meta)
            .map(|(k, a)| format!("{k}={a}"))
            .collect();
        let mut cmd = Command::new(&l.bin);
        cmd.arg("meta")
            .args(["--id", &id.to_string()])
            .args(["--listen", &l.meta[idx(id)].to_string()])
            .args(["--peers", &peers.join(",")])
            .arg("--data")
            .arg(l.dir.join(format!("meta-{id}")));
        let child = spawn(cmd, &l.dir.join(format!("meta-{id}.log")))?;
        self.metas[idx(id)] = Some(child);
        wait_listening(l.meta[idx(id)]).await
    }

    pub async fn start_broker(&mut self, id: u32) -> Result<()> {
        let l = &self.layout;
        let mut cmd = Command::new(&l.bin);
        cmd.arg("broker")
            .args(["--id", &id.to_string()])
            .args(["--listen", &l.broker_listen[idx(id)].to_string()])
            .args(["--advertise", &l.broker_front[idx(id)].to_string()])
            .args(["--meta", &join(&l.broker_meta[idx(id)])])
            .args([
                "--replica-lag-time-max-ms",
                &l.replica_lag_time_max_ms.to_string(),
            ])
            .arg("--data")
            .arg(l.dir.join(format!("broker-{id}")));
        let child = spawn(cmd, &l.dir.join(format!("broker-{id}.log")))?;
        self.net.set_pid(id, child.id());
        self.brokers[idx(id)] = Some(child);
        self.stopped[idx(id)] = false;
        wait_listening(l.broker_listen[idx(id)]).await
    }

    pub async fn kill_meta(&mut self, id: u32) {
        if let Some(child) = self.metas[idx(id)].take() {
            kill(child).await;
        }
    }

    pub async fn kill_broker(&mut self, id: u32) {
        self.net.set_pid(id, None);
        self.stopped[idx(id)] = false;
        if let Some(child) = self.brokers[idx(id)].take() {
            kill(child).await;
        }
    }

    /// SIGSTOP (`stop`) or SIGCONT a broker.
    pub fn pause_broker(&mut self, id: u32, stop: bool) -> Result<()> {
        let pid = self.brokers[idx(id)]
            .as_ref()
            .and_then(Child::id)
            .context("broker not running")?;
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on a child we started and have not reaped; no memory is involved.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            bail!("kill({pid}, {signal}): {}", std::io::Error::last_os_error());
        }
        self.stopped[idx(id)] = stop;
        Ok(())
    }

    /// Continues stopped brokers and starts every process that is down.
    pub async fn heal(&mut self) -> Result<()> {
        for id in 1..=NODES {
            if self.stopped[idx(id)] {
                self.pause_broker(id, false)?;
            }
            if self.metas[idx(id)].is_none() {
                self.start_meta(id).await?;
            }
        }
        for id in 1..=NODES {
            if self.brokers[idx(id)].is_none() {
                self.start_broker(id).await?;
            }
        }
        Ok(())
    }

    /// Reports processes that exited on their own (a crash the schedule did not cause).
    pub fn crashed(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, list) in [("meta", &mut self.metas), ("broker", &mut self.brokers)] {
            for (i, slot) in list.iter_mut().enumerate() {
                if let Some(status) = slot.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    out.push(format!("{kind} {} exited by itself: {status}", i + 1));
                    *slot = None;
                }
            }
        }
        out
    }

    pub async fn stop_all(&mut self) {
        for id in 1..=NODES {
            self.kill_broker(id).await;
            self.kill_meta(id).await;
        }
    }
}

fn spawn(mut cmd: Command, log: &Path) -> Result<Child> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    cmd.env("TINYMQ_LOG", "info")
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .kill_on_drop(true);
    // The cluster dies with the tool even when the tool is killed outright (SIGKILL, a test
    // timeout), instead of leaving brokers behind on the machine. The signal follows the
    // spawning thread: a runtime worker, alive as long as the tool.
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().context("start tinymq (see --tinymq)")
}

async fn kill(mut child: Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Waits until something accepts connections at `addr` (bounded).
async fn wait_listening(addr: SocketAddr) -> Result<()> {
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("nothing listens at {addr} after 30 s")
}
