//! The broker's settings: where it listens and stores data, and a named limit on everything a
//! client can make it hold.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tinymq_net::ListenerLimits;

use crate::topic::TopicSettings;

/// The port `tinymq server` listens on by default ("TM" in ASCII is 0x544D = 21581).
pub const DEFAULT_PORT: u16 = 21581;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub listen: SocketAddr,
    /// The address clients are told to connect to, as the operator wrote it (a host name
    /// stays a name, so clients verify TLS against it); defaults to the bound listen address.
    pub advertise: Option<Advertised>,
    pub data_dir: PathBuf,
    /// This broker's id in the cluster (1 for the standalone server).
    pub node_id: u32,
    /// MetaServer node addresses; empty = the standalone server, which runs a single-node
    /// MetaServer in its own process.
    pub meta: Vec<String>,
    /// The client port's limits: connections, frame size, requests in flight, handshake
    /// deadline, idle timeout and shutdown grace.
    pub listener: ListenerLimits,
    /// Cap on a fetch's `max_wait_ms`.
    pub fetch_wait_max: Duration,
    /// Cap on a produce's `timeout_ms` (the time allowed for the flush policy to be met).
    pub produce_timeout_max: Duration,
    /// How often retention runs over every partition.
    pub retention_check_interval: Duration,
    /// How often the cleaner looks for compacted partitions to clean (`cleaner.rs`).
    pub cleaner_check_interval: Duration,
    /// Memory for the cleaner's key map, which bounds the keys one pass can compact.
    pub cleaner_key_map_bytes_max: usize,
    /// Bytes per second the cleaner reads and writes together; 0 = no limit.
    pub cleaner_io_bytes_per_sec_max: u64,
    /// Settings for topics created without them.
    pub topic_defaults: TopicSettings,
    /// Most record bytes one fetch response carries (a request's `max_bytes` is capped to
    /// it; one batch larger than what is left is still returned whole, so a consumer always
    /// progresses). Like Kafka's `fetch.max.bytes`.
    pub fetch_bytes_max: u32,
    /// Record bytes all fetches of this broker read at once (until their responses are
    /// encoded); a fetch waits for room. Each connection also has at most one fetch response
    /// not yet written to its peer.
    pub fetch_memory_bytes_max: u32,
    /// A follower that has not caught up with the leader for this long leaves the ISR (like
    /// Kafka's `replica.lag.time.max.ms`, scaled to tinymq's heartbeats).
    pub replica_lag_time_max: Duration,
    /// Segment files held open between reads and writes, over all partitions (the process's
    /// LRU of open files, [`tinymq_log::OpenFiles`]); index files are never held open. Keeps
    /// the broker's file descriptors bounded however many partitions and segments it holds.
    pub open_segment_files_max: usize,
    /// Principals whose quota limiters this broker keeps at once (the least recently used
    /// is forgotten past it).
    pub quota_principals_max: usize,
    /// What the client port asks of connections (TLS, authentication).
    pub security: tinymq_net::ListenerSecurity,
    /// TLS and login of this broker's own connections: to the MetaServer nodes and, as a
    /// follower, to partition leaders.
    pub links: tinymq_client::Security,
    /// Whether requests are authorized against the image's ACLs (`--auth`), and the super
    /// users; off by default.
    pub authorization: tinymq_meta::authorize::AuthorizationConfig,
    /// Where Kafka clients reach this broker's Kafka listener (`--kafka-advertise`, else the
    /// address `--kafka-listen` bound), registered with the cluster so every broker's Kafka
    /// Metadata answer names it; `None` when this broker has no Kafka listener.
    pub kafka_advertised: Option<(String, u16)>,
    /// The first super user's credentials (`TINYMQ_ADMIN_PASSWORD`), created at the first
    /// start of the standalone server before its port accepts anyone, so a login right after
    /// the start succeeds; ignored once the cluster has users, and by a cluster broker.
    pub admin_bootstrap: Option<Vec<tinymq_auth::StoredCredential>>,
    /// How long after a half message's check its next one comes (`half_check_interval_ms`).
    pub half_check_interval: Duration,
    /// Checks of a half message before it is rolled back by default (`half_checks_max`).
    pub half_checks_max: u32,
}

/// Where clients and other nodes reach a broker: a host (a DNS name or an IP address, never
/// resolved here) and a port. Registered with the cluster as written, so a client connects
/// to the name, resolving it then, and checks the server's certificate against the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub host: String,
    pub port: u16,
}

impl Advertised {
    /// `HOST:PORT` (an IPv6 address in brackets: `[::1]:21581`), with a host and a port
    /// other than 0.
    pub fn parse(text: &str) -> Result<Advertised, String> {
        let bad = || format!("{text:?} is not HOST:PORT");
        let (host, port) = text.trim().rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = match host.strip_prefix('[') {
            Some(inner) => inner.strip_suffix(']').ok_or_else(bad)?,
            None if host.contains(':') => {
                return Err(format!(
                    "{text:?}: put an IPv6 address in brackets, [ADDRESS]:PORT"
                ))
            }
            None => host,
        };
        if host.is_empty() || port == 0 {
            return Err(format!("{text:?} must name a host and a port other than 0"));
        }
        Ok(Advertised {
            host: host.to_string(),
            port,
        })
    }
}

impl From<SocketAddr> for Advertised {
    fn from(addr: SocketAddr) -> Advertised {
        Advertised {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl std::fmt::Display for Advertised {
    /// `host:port`, the form clients connect to (`[::1]:port` for an IPv6 address).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Default of `replica_lag_time_max`: 10 s.
pub const REPLICA_LAG_TIME_MAX_DEFAULT: Duration = Duration::from_secs(10);

/// Default of `fetch_memory_bytes_max`: 256 MiB.
pub const FETCH_MEMORY_BYTES_MAX_DEFAULT: u32 = 256 << 20;

/// Default of `fetch_bytes_max`: 50 MiB.
pub const FETCH_BYTES_MAX_DEFAULT: u32 = 50 << 20;

/// Default of `cleaner_check_interval`: 15 s, Kafka's `log.cleaner.backoff.ms`.
pub const CLEANER_CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(15);
/// Default of `cleaner_io_bytes_per_sec_max`: 128 MiB/s of reads and writes together.
pub const CLEANER_IO_BYTES_PER_SEC_MAX_DEFAULT: u64 = 128 << 20;

/// Default of `half_check_interval_ms`: 10 s.
pub const HALF_CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(10);
/// Default of `half_checks_max` (RocketMQ's `transactionCheckMax`).
pub const HALF_CHECKS_MAX_DEFAULT: u32 = 15;

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            advertise: None,
            data_dir: PathBuf::from("tinymq-data"),
            node_id: 1,
            meta: Vec::new(),
            listener: ListenerLimits::default(),
            fetch_wait_max: Duration::from_secs(30),
            produce_timeout_max: Duration::from_secs(60),
            retention_check_interval: Duration::from_secs(300),
            cleaner_check_interval: CLEANER_CHECK_INTERVAL_DEFAULT,
            cleaner_key_map_bytes_max: tinymq_log::KEY_MAP_BYTES_MAX_DEFAULT,
            cleaner_io_bytes_per_sec_max: CLEANER_IO_BYTES_PER_SEC_MAX_DEFAULT,
            topic_defaults: TopicSettings::default(),
            fetch_bytes_max: FETCH_BYTES_MAX_DEFAULT,
            fetch_memory_bytes_max: FETCH_MEMORY_BYTES_MAX_DEFAULT,
            replica_lag_time_max: REPLICA_LAG_TIME_MAX_DEFAULT,
            open_segment_files_max: tinymq_log::OPEN_SEGMENT_FILES_MAX_DEFAULT,
            quota_principals_max: crate::quota::QUOTA_PRINCIPALS_MAX_DEFAULT,
            security: tinymq_net::ListenerSecurity::default(),
            links: tinymq_client::Security::default(),
            authorization: Default::default(),
            kafka_advertised: None,
            admin_bootstrap: None,
            half_check_interval: HALF_CHECK_INTERVAL_DEFAULT,
            half_checks_max: HALF_CHECKS_MAX_DEFAULT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Advertised;

    #[test]
    fn an_advertised_address_keeps_its_host_as_written() {
        let named = Advertised::parse("mq1.example.com:21581").unwrap();
        assert_eq!(
            (named.host.as_str(), named.port),
            ("mq1.example.com", 21581)
        );
        assert_eq!(named.to_string(), "mq1.example.com:21581");
        let v6 = Advertised::parse("[::1]:9000").unwrap();
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.to_string(), "[::1]:9000");
        for bad in [
            "localhost",
            "localhost:0",
            ":21581",
            "::1:9000",
            "[::1:9000",
            "h:port",
        ] {
            assert!(Advertised::parse(bad).is_err(), "{bad}");
        }
    }
}
