//! The fault proxy: a TCP forwarder in front of every broker listener, and one per (broker,
//! MetaServer node) pair for each broker's MetaServer link, so that one broker can be cut off.
//!
//! Broker `i` advertises the address of its front proxy, so other brokers and clients reach it
//! only through that proxy, and its `--meta` list names only its own MetaServer proxies. A cut
//! of broker `i` closes, and keeps closing, every connection that carries its traffic: all
//! through its front proxy and its MetaServer proxies, and those that broker `i` itself opened
//! to another broker's front proxy. That last kind is told apart from clients by finding which
//! process owns the connecting socket (Linux `/proc`), since every process connects from
//! 127.0.0.1. MetaServer nodes talk to each other directly: cuts are about brokers.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Whose traffic a proxy carries.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// Anyone (clients, other brokers) to this broker.
    ToBroker(u32),
    /// This broker to one MetaServer node.
    BrokerToMeta(u32),
}

/// The network state every proxy obeys.
pub struct Net {
    cut: Mutex<BTreeSet<u32>>,
    /// Broker id of each running broker process, by pid.
    pids: Mutex<HashMap<u32, u32>>,
    changed: watch::Sender<u64>,
    /// Connections a cut broker opened to another broker, closed or refused: shows that the
    /// cut reaches its follower fetches too.
    outbound_blocked: AtomicU64,
}

impl Net {
    pub fn new() -> Arc<Net> {
        Arc::new(Net {
            cut: Mutex::new(BTreeSet::new()),
            pids: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            outbound_blocked: AtomicU64::new(0),
        })
    }

    pub fn cut(&self, broker: u32) {
        self.cut.lock().insert(broker);
        self.changed.send_modify(|g| *g += 1);
    }

    pub fn heal_all(&self) {
        self.cut.lock().clear();
        self.changed.send_modify(|g| *g += 1);
    }

    /// Records the process now running `broker` (`None`: it is down).
    pub fn set_pid(&self, broker: u32, pid: Option<u32>) {
        let mut pids = self.pids.lock();
        pids.retain(|_, b| *b != broker);
        if let Some(pid) = pid {
            pids.insert(pid, broker);
        }
    }

    /// Connections from a cut broker to another broker closed or refused so far.
    pub fn outbound_blocked(&self) -> u64 {
        self.outbound_blocked.load(Ordering::Relaxed)
    }

    fn blocked(&self, route: Route, source: Option<u32>) -> bool {
        let cut = self.cut.lock();
        match route {
            Route::ToBroker(b) if cut.contains(&b) => true,
            Route::ToBroker(_) => {
                let from_cut = source.is_some_and(|s| cut.contains(&s));
                if from_cut {
                    self.outbound_blocked.fetch_add(1, Ordering::Relaxed);
                }
                from_cut
            }
            Route::BrokerToMeta(b) => cut.contains(&b),
        }
    }

    fn broker_pids(&self) -> Vec<(u32, u32)> {
        self.pids.lock().iter().map(|(p, b)| (*p, *b)).collect()
    }
}

/// Starts a proxy to `target` on a fresh loopback port and returns that port's address.
pub async fn start(net: Arc<Net>, route: Route, target: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(forward(net.clone(), route, stream, peer, addr, target));
        }
    });
    Ok(addr)
}

async fn forward(
    net: Arc<Net>,
    route: Route,
    mut inbound: TcpStream,
    peer: SocketAddr,
    me: SocketAddr,
    target: SocketAddr,
) {
    let source = match route {
        Route::BrokerToMeta(b) => Some(b),
        Route::ToBroker(_) => {
            let pids = net.broker_pids();
            tokio::task::spawn_blocking(move || owner_of(peer, me, &pids))
                .await
                .ok()
                .flatten()
        }
    };
    let mut changes = net.changed.subscribe();
    if net.blocked(route, source) {
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
    tokio::pin!(copy);
    loop {
        tokio::select! {
            _ = &mut copy => return,
            changed = changes.changed() => {
                if changed.is_err() || net.blocked(route, source) {
                    // Dropping both streams closes them: the cut is felt at once.
                    return;
                }
            }
        }
    }
}

/// The broker whose process owns the socket connected from `peer` to `me`, if any.
fn owner_of(peer: SocketAddr, me: SocketAddr, pids: &[(u32, u32)]) -> Option<u32> {
    let inode = socket_inode(peer, me)?;
    let wanted = format!("socket:[{inode}]");
    pids.iter().find_map(|(pid, broker)| {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()))
            .then_some(*broker)
    })
}

/// The inode of the IPv4 socket whose local end is `local` and remote end `remote`.
fn socket_inode(local: SocketAddr, remote: SocketAddr) -> Option<String> {
    let (local, remote) = (proc_addr(local)?, proc_addr(remote)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.get(1) == Some(&local.as_str()) && cols.get(2) == Some(&remote.as_str()))
            .then(|| cols.get(9).map(|s| s.to_string()))
            .flatten()
    })
}

/// An address as `/proc/net/tcp` writes it: the IPv4 address as a little-endian hex word.
fn proc_addr(addr: SocketAddr) -> Option<String> {
    match addr {
        SocketAddr::V4(a) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        )),
        SocketAddr::V6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_addresses_are_written_like_the_kernel_does() {
        let a: SocketAddr = "127.0.0.1:21581".parse().unwrap();
        assert_eq!(proc_addr(a).unwrap(), "0100007F:544D");
    }

    #[tokio::test]
    async fn a_connection_is_traced_to_the_process_that_opened_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let me = listener.local_addr().unwrap();
        let _client = TcpStream::connect(me).await.unwrap();
        let (_server, peer) = listener.accept().await.unwrap();
        let pid = std::process::id();
        let found = tokio::task::spawn_blocking(move || owner_of(peer, me, &[(pid, 7)]))
            .await
            .unwrap();
        assert_eq!(found, Some(7));
        let other = tokio::task::spawn_blocking(move || owner_of(peer, me, &[(1, 7)]))
            .await
            .unwrap();
        assert_eq!(other, None);
    }
}
