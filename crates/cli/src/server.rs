//! `tinymq server` and `tinymq broker`: settings from a TOML file, `TINYMQ_*` variables and
//! flags (later ones win), then run until SIGTERM or SIGINT. `server` is the standalone form (a
//! single-node MetaServer inside the broker's process); `broker` joins the cluster of the
//! MetaServer nodes given with `--meta`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use tinymq_broker::topic::TopicSettings;
use tinymq_broker::{Broker, BrokerConfig};

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// TOML file with any of the settings below (flags and TINYMQ_* variables override it).
    #[arg(long, env = "TINYMQ_CONFIG")]
    config: Option<PathBuf>,
    /// This broker's id, unique in the cluster, ≥ 1 [default: 1].
    #[arg(long, env = "TINYMQ_BROKER_ID")]
    id: Option<u32>,
    /// MetaServer node addresses, comma-separated (`tinymq broker` only).
    #[arg(long, env = "TINYMQ_META")]
    meta: Option<String>,
    /// Address to listen on [default: 127.0.0.1:21581].
    #[arg(long, env = "TINYMQ_LISTEN")]
    listen: Option<SocketAddr>,
    /// Address clients are told to connect to [default: the listen address].
    #[arg(long, env = "TINYMQ_ADVERTISE")]
    advertise: Option<SocketAddr>,
    /// Data directory [default: ./tinymq-data].
    #[arg(long, env = "TINYMQ_DATA")]
    data: Option<PathBuf>,
    /// Most open client connections [default: 10000].
    #[arg(long, env = "TINYMQ_CONNECTIONS_MAX")]
    connections_max: Option<usize>,
    /// Largest frame body in bytes after the handshake [default: 16777216].
    #[arg(long, env = "TINYMQ_FRAME_BYTES_MAX")]
    frame_bytes_max: Option<u32>,
    /// Requests processed at once per connection [default: 32].
    #[arg(long, env = "TINYMQ_REQUESTS_IN_FLIGHT_MAX")]
    requests_in_flight_max: Option<usize>,
    /// Close connections that do not finish the handshake in time, ms [default: 10000].
    #[arg(long, env = "TINYMQ_HANDSHAKE_TIMEOUT_MS")]
    handshake_timeout_ms: Option<u64>,
    /// Close idle connections after, ms [default: 600000].
    #[arg(long, env = "TINYMQ_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,
    /// Default flush policy of new topics: always, interval:MS or os [default: always].
    #[arg(long, env = "TINYMQ_FLUSH")]
    flush: Option<String>,
    /// Default partitions of new topics [default: 1].
    #[arg(long, env = "TINYMQ_PARTITIONS")]
    partitions: Option<u32>,
    /// Default retention of new topics in ms, -1 = forever [default: 604800000].
    #[arg(long, env = "TINYMQ_RETENTION_MS")]
    retention_ms: Option<i64>,
}

/// The TOML file: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u32>,
    meta: Option<String>,
    listen: Option<SocketAddr>,
    advertise: Option<SocketAddr>,
    data: Option<PathBuf>,
    connections_max: Option<usize>,
    frame_bytes_max: Option<u32>,
    requests_in_flight_max: Option<usize>,
    handshake_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    flush: Option<String>,
    partitions: Option<u32>,
    retention_ms: Option<i64>,
}

fn build_config(args: ServerArgs) -> anyhow::Result<BrokerConfig> {
    let file: FileConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let mut c = BrokerConfig::default();
    let mut topics = TopicSettings::default();
    macro_rules! pick {
        ($field:ident) => {
            args.$field.or(file.$field)
        };
    }
    c.node_id = pick!(id).unwrap_or(c.node_id);
    anyhow::ensure!(c.node_id >= 1, "the broker id must be at least 1");
    c.meta = pick!(meta)
        .unwrap_or_default()
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    if let Some(v) = pick!(listen) {
        c.listen = v;
    }
    c.advertise = pick!(advertise);
    c.data_dir = pick!(data).unwrap_or(c.data_dir);
    c.connections_max = pick!(connections_max).unwrap_or(c.connections_max);
    c.frame_bytes_max = pick!(frame_bytes_max).unwrap_or(c.frame_bytes_max);
    c.requests_in_flight_max = pick!(requests_in_flight_max).unwrap_or(c.requests_in_flight_max);
    if let Some(ms) = pick!(handshake_timeout_ms) {
        c.handshake_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = pick!(idle_timeout_ms) {
        c.idle_timeout = Duration::from_millis(ms);
    }
    topics.flush = pick!(flush).unwrap_or(topics.flush);
    topics.partitions = pick!(partitions).unwrap_or(topics.partitions);
    topics.retention_ms = pick!(retention_ms).unwrap_or(topics.retention_ms);
    topics
        .validate()
        .map_err(|(_, msg)| anyhow::anyhow!("topic defaults: {msg}"))?;
    anyhow::ensure!(c.connections_max > 0, "connections_max must be > 0");
    anyhow::ensure!(
        c.requests_in_flight_max > 0,
        "requests_in_flight_max must be > 0"
    );
    anyhow::ensure!(
        c.frame_bytes_max >= tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE,
        "frame_bytes_max must be at least 65536"
    );
    c.topic_defaults = topics;
    Ok(c)
}

async fn shutdown_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// Runs the standalone server (`cluster_member` false) or a cluster broker (true).
pub async fn run(args: ServerArgs, cluster_member: bool) -> anyhow::Result<()> {
    let config = build_config(args)?;
    if cluster_member {
        anyhow::ensure!(
            !config.meta.is_empty(),
            "tinymq broker needs --meta with the MetaServer addresses"
        );
    } else {
        anyhow::ensure!(
            config.meta.is_empty(),
            "--meta is for `tinymq broker`; `tinymq server` runs its own MetaServer"
        );
    }
    let broker = Broker::start(config).await?;
    // A plain line for scripts and tests that start the server on port 0.
    println!("tinymq listening on {}", broker.local_addr);
    let stop = tokio::select! {
        signal = shutdown_signal() => signal?,
        fatal = broker.embedded_meta_failed() => {
            // The metadata can no longer change; a restart recovers from the data directory.
            tracing::error!(error = %fatal, "the embedded MetaServer stopped; exiting");
            std::process::exit(70);
        }
    };
    tracing::info!(signal = stop, "stopping");
    broker.shutdown().await;
    Ok(())
}
