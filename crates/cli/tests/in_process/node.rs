//! tinymq nodes started in this test process through `tinymq_node::Node` — the same
//! assembly `tinymq server|broker|meta` runs — on 127.0.0.1 with ephemeral ports. Each node
//! runs on its own thread and runtime, so sync and async tests use them alike, and stopping
//! one (or dropping it) shuts it down cleanly, as SIGTERM does. A test that needs `kill -9` or a
//! signal runs a process instead.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tinymq_broker::BrokerConfig;
use tinymq_http::HttpLimits;
use tinymq_node::{
    BrokerNodeConfig, HttpListenerConfig, KafkaListenerConfig, MetaNodeConfig, Node, NodeConfig,
};

use crate::common::http::Endpoints;
use crate::common::RawClient;

/// One node running on its own thread.
pub struct NodeThread {
    pub addr: SocketAddr,
    /// The HTTP listener's address, when the node runs one.
    pub http: Option<SocketAddr>,
    /// The Kafka listener's address, when the node runs one.
    pub kafka: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeThread {
    /// Starts the node `config` describes; returns once it accepts connections.
    pub fn start(config: NodeConfig) -> NodeThread {
        NodeThread::try_start(config).unwrap_or_else(|e| panic!("the node did not start: {e}"))
    }

    /// [`NodeThread::start`], or why the node did not start.
    pub fn try_start(config: NodeConfig) -> Result<NodeThread, String> {
        let (started, addr) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let node = match Node::start(config).await {
                    Ok(node) => node,
                    Err(e) => {
                        let _ = started.send(Err(e.to_string()));
                        return;
                    }
                };
                let addrs = (node.local_addr(), node.http_addr(), node.kafka_addr());
                let _ = started.send(Ok(addrs));
                let _ = stopped.await;
                node.shutdown().await;
            });
        });
        let (addr, http, kafka) = addr.recv().expect("the node thread answers")?;
        Ok(NodeThread {
            addr,
            http,
            kafka,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Shuts the node down and waits until it has stopped.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for NodeThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A broker's settings on an ephemeral port with its data in `data`.
pub fn broker_config(data: &Path) -> BrokerConfig {
    BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: data.to_path_buf(),
        ..BrokerConfig::default()
    }
}

/// A standalone node (`tinymq server`) running in this process.
pub struct Server {
    pub addr: String,
    _node: NodeThread,
}

impl Server {
    pub fn start(data: &Path) -> Server {
        Server::start_tuned(data, |_| {})
    }

    /// Starts with the default settings as `tune` changes them.
    pub fn start_tuned(data: &Path, tune: impl FnOnce(&mut BrokerConfig)) -> Server {
        let mut broker = broker_config(data);
        tune(&mut broker);
        let node = NodeThread::start(NodeConfig::Standalone(BrokerNodeConfig {
            broker,
            http: None,
            kafka: None,
        }));
        Server {
            addr: node.addr.to_string(),
            _node: node,
        }
    }
}

/// A plain HTTP listener on an ephemeral port with the default limits as `tune` changes them
/// (as `--http 127.0.0.1:0` and the `--http-*` flags give it).
pub fn http_config(tune: impl FnOnce(&mut HttpLimits)) -> HttpListenerConfig {
    let mut limits = HttpLimits::default();
    tune(&mut limits);
    HttpListenerConfig {
        addr: "127.0.0.1:0".parse().expect("an address"),
        optional: false,
        limits,
        security: Default::default(),
        api_links: Default::default(),
    }
}

/// A standalone node with its HTTP listener, in a data directory of its own; its addresses
/// and HTTP requests are [`Endpoints`]' (as a process test's `common::http::Node`).
pub struct HttpNode {
    endpoints: Endpoints,
    _node: NodeThread,
    _data: tempfile::TempDir,
}

impl HttpNode {
    /// `tinymq server --http 127.0.0.1:0` with the broker's and the listener's settings as
    /// `tune` changes them.
    pub fn start(tune: impl FnOnce(&mut BrokerConfig, &mut HttpLimits)) -> HttpNode {
        let data = tempfile::tempdir().expect("a temporary data directory");
        let mut broker = broker_config(data.path());
        let mut limits = HttpLimits::default();
        tune(&mut broker, &mut limits);
        let node = NodeThread::start(NodeConfig::Standalone(BrokerNodeConfig {
            broker,
            http: Some(http_config(|l| *l = limits)),
            kafka: None,
        }));
        HttpNode {
            endpoints: Endpoints {
                native: node.addr.to_string(),
                http: node.http.expect("an HTTP listener").to_string(),
            },
            _node: node,
            _data: data,
        }
    }
}

impl std::ops::Deref for HttpNode {
    type Target = Endpoints;

    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

/// A standalone node with a Kafka listener on an ephemeral port (`tinymq server --kafka-listen
/// 127.0.0.1:0`), in a data directory of its own.
pub struct KafkaNode {
    /// The native address.
    pub native: String,
    /// The Kafka listener's address.
    pub kafka: String,
    _node: NodeThread,
    _data: tempfile::TempDir,
}

impl KafkaNode {
    pub fn start() -> KafkaNode {
        let data = tempfile::tempdir().expect("a temporary data directory");
        let node = NodeThread::start(NodeConfig::Standalone(BrokerNodeConfig {
            broker: broker_config(data.path()),
            http: None,
            kafka: Some(KafkaListenerConfig {
                listen: Some("127.0.0.1:0".parse().expect("an address")),
                ..KafkaListenerConfig::default()
            }),
        }));
        KafkaNode {
            native: node.addr.to_string(),
            kafka: node.kafka.expect("a Kafka listener").to_string(),
            _node: node,
            _data: data,
        }
    }
}

/// A MetaServer group of `metas` nodes and brokers `1..=brokers`, every one in this process,
/// with their data under `dir`.
pub struct Cluster {
    /// Broker `id` at index `id - 1`. Declared first: dropped (stopped) before the group.
    pub brokers: Vec<NodeThread>,
    /// MetaServer node `id` at index `id - 1`.
    pub metas: Vec<NodeThread>,
}

impl Cluster {
    pub fn start(dir: &Path, metas: u64, brokers: u32) -> Cluster {
        Cluster::start_tuned(dir, metas, brokers, |_| {})
    }

    /// [`Cluster::start`] with every broker's settings changed by `tune`.
    pub fn start_tuned(
        dir: &Path,
        metas: u64,
        brokers: u32,
        tune: impl Fn(&mut BrokerConfig),
    ) -> Cluster {
        let (peers, metas) = start_metas(dir, metas);
        let meta: Vec<String> = peers.values().cloned().collect();
        let brokers = (1..=brokers)
            .map(|id| {
                let mut broker = broker_config(&dir.join(format!("broker-{id}")));
                broker.node_id = id;
                broker.meta = meta.clone();
                tune(&mut broker);
                NodeThread::start(NodeConfig::Broker(BrokerNodeConfig {
                    broker,
                    http: None,
                    kafka: None,
                }))
            })
            .collect();
        Cluster { brokers, metas }
    }

    /// MetaServer node `id`'s address.
    pub fn meta(&self, id: u64) -> String {
        self.metas[id as usize - 1].addr.to_string()
    }

    /// Every broker's address, for a client's bootstrap list.
    pub fn bootstrap(&self) -> String {
        let addrs: Vec<String> = self.brokers.iter().map(|b| b.addr.to_string()).collect();
        addrs.join(",")
    }
}

/// MetaServer nodes `1..=count` with their data under `dir`, and their addresses. The group's
/// addresses must be known before its nodes start, so each is a port that was free a moment
/// ago; when another test took one meanwhile (its node cannot listen), the group starts again
/// on other ports, from empty data directories (bounded attempts).
fn start_metas(dir: &Path, count: u64) -> (BTreeMap<u64, String>, Vec<NodeThread>) {
    let mut last = String::new();
    for _ in 0..10 {
        let peers: BTreeMap<u64, String> = (1..=count)
            .map(|id| (id, format!("127.0.0.1:{}", crate::common::free_port())))
            .collect();
        let started: Result<Vec<NodeThread>, String> = (1..=count)
            .map(|id| {
                NodeThread::try_start(NodeConfig::Meta(MetaNodeConfig {
                    id,
                    listen: peers[&id].parse().expect("an address"),
                    peers: peers.clone(),
                    data: dir.join(format!("meta-{id}")),
                    limits: tinymq_meta::server::default_limits(),
                    security: Default::default(),
                    admin: None,
                    http: None,
                }))
            })
            .collect();
        match started {
            Ok(metas) => return (peers, metas),
            Err(e) if e.contains("Address already in use") => {
                // The nodes that started are stopped (dropped) by now: start afresh.
                for id in 1..=count {
                    let _ = std::fs::remove_dir_all(dir.join(format!("meta-{id}")));
                }
                last = e;
            }
            Err(e) => panic!("a MetaServer node did not start: {e}"),
        }
    }
    panic!("the MetaServer group found no free ports: {last}");
}

/// The metadata image and Raft view of the MetaServer node at `addr` (what `tinymq cluster
/// status` reads).
pub fn meta_read(addr: &str) -> tinymq_protocol::messages::MetaReadResponse {
    RawClient::handshaken(addr).call(&tinymq_protocol::messages::MetaReadRequest::default())
}

/// The Raft leader as the node at `addr` knows it, once it knows one (bounded wait).
pub fn meta_leader(addr: &str) -> u64 {
    crate::common::retry(200, Duration::from_millis(50), || {
        Some(meta_read(addr).leader).filter(|l| *l != 0)
    })
    .unwrap_or_else(|| panic!("no leader seen by {addr}"))
}

/// A native (tinymq protocol) member of `group`, as `tinymq consume --group` is: a client
/// consumer subscribed to `topic`, polling on its own thread until dropped.
pub struct NativeMember {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NativeMember {
    pub fn start(bootstrap: &str, group: &str, topic: &str) -> NativeMember {
        let stop = Arc::new(AtomicBool::new(false));
        let (bootstrap, group, topic) =
            (bootstrap.to_string(), group.to_string(), topic.to_string());
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("a runtime");
            runtime.block_on(async {
                let config = tinymq_client::ConsumerConfig::new(&bootstrap);
                let mut consumer = tinymq_client::Consumer::new(config).expect("a consumer");
                consumer
                    .subscribe(&group, &[&topic])
                    .await
                    .expect("subscribed");
                while !stopping.load(Ordering::Relaxed) {
                    consumer
                        .poll(Duration::from_millis(100))
                        .await
                        .expect("a poll");
                }
                let _ = consumer.close().await;
            });
        });
        NativeMember {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for NativeMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
