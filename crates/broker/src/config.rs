//! The broker's settings: where it listens and stores data, and a named limit on everything a
//! client can make it hold.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::topic::TopicSettings;

/// The port `tinymq server` listens on by default ("TM" in ASCII is 0x544D = 21581).
pub const DEFAULT_PORT: u16 = 21581;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub listen: SocketAddr,
    /// The address clients are told to connect to; defaults to the bound listen address.
    pub advertise: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// This broker's id in the cluster (1 for the standalone server).
    pub node_id: u32,
    /// MetaServer node addresses; empty = the standalone server, which runs a single-node
    /// MetaServer in its own process.
    pub meta: Vec<String>,
    /// Open client connections at most; further connections are closed at once.
    pub connections_max: usize,
    /// Largest frame body accepted after the handshake.
    pub frame_bytes_max: u32,
    /// Requests of one connection processed at once; the connection is not read further
    /// until one finishes (backpressure). Bounds per-connection memory at about
    /// `requests_in_flight_max × frame_bytes_max` for requests plus as much for responses.
    pub requests_in_flight_max: usize,
    /// A connection that has not completed its handshake by then is closed.
    pub handshake_timeout: Duration,
    /// A connection with no request in flight and no frame received for this long is closed.
    pub idle_timeout: Duration,
    /// Cap on a fetch's `max_wait_ms`.
    pub fetch_wait_max: Duration,
    /// Cap on a produce's `timeout_ms` (the time allowed for the flush policy to be met).
    pub produce_timeout_max: Duration,
    /// How often retention runs over every partition.
    pub retention_check_interval: Duration,
    /// How long shutdown waits for in-flight requests before closing connections anyway.
    pub shutdown_grace: Duration,
    /// Settings for topics created without them.
    pub topic_defaults: TopicSettings,
    /// Most record bytes one fetch response carries (a request's `max_bytes` is capped to
    /// it; one batch larger than what is left is still returned whole, so a consumer always
    /// progresses). Like Kafka's `fetch.max.bytes`.
    pub fetch_bytes_max: u32,
}

/// Default of `fetch_bytes_max`: 50 MiB.
pub const FETCH_BYTES_MAX_DEFAULT: u32 = 50 << 20;

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            advertise: None,
            data_dir: PathBuf::from("tinymq-data"),
            node_id: 1,
            meta: Vec::new(),
            connections_max: 10_000,
            frame_bytes_max: tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_DEFAULT,
            requests_in_flight_max: 32,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            fetch_wait_max: Duration::from_secs(30),
            produce_timeout_max: Duration::from_secs(60),
            retention_check_interval: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            topic_defaults: TopicSettings::default(),
            fetch_bytes_max: FETCH_BYTES_MAX_DEFAULT,
        }
    }
}
