//! `tinymq server` and `tinymq broker`: settings from a TOML file, `TINYMQ_*` variables and
//! flags (later ones win), then run until SIGTERM or SIGINT. `server` is the standalone form (a
//! single-node MetaServer inside the broker's process); `broker` joins the cluster of the
//! MetaServer nodes given with `--meta`.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use tinymq_broker::topic::TopicSettings;
use tinymq_broker::{Advertised, BrokerConfig};
use tinymq_node::{BrokerNodeConfig, KafkaListenerConfig, Node, NodeConfig};

use crate::http::HttpArgs;
use crate::limits::{read_file, LimitArgs};
use crate::server_security::ServerSecurityArgs;
use crate::tls::{NodeTls, ServerTlsArgs};

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
    /// Address to listen on, HOST:PORT (a host name is resolved at start) [default:
    /// 127.0.0.1:21581].
    #[arg(long, env = "TINYMQ_LISTEN", value_parser = crate::args::socket_addr)]
    listen: Option<SocketAddr>,
    /// Address clients are told to connect to, HOST:PORT, as written: a host name is sent to
    /// clients, which resolve it and check the TLS certificate against it [default: the
    /// listen address].
    #[arg(long, env = "TINYMQ_ADVERTISE", value_parser = Advertised::parse)]
    advertise: Option<Advertised>,
    /// Data directory [default: ./tinymq-data].
    #[arg(long, env = "TINYMQ_DATA")]
    data: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    http: HttpArgs,
    #[command(flatten)]
    security: ServerSecurityArgs,
    #[command(flatten)]
    tls: crate::tls::ServerTlsArgs,
    /// Default flush policy of new topics: always, interval:MS or os [default: always].
    #[arg(long, env = "TINYMQ_FLUSH")]
    flush: Option<String>,
    /// Default partitions of new topics [default: 1].
    #[arg(long, env = "TINYMQ_PARTITIONS")]
    partitions: Option<u32>,
    /// Default retention of new topics in ms, -1 = forever [default: 604800000].
    #[arg(long, env = "TINYMQ_RETENTION_MS")]
    retention_ms: Option<i64>,
    /// Most record bytes in one fetch response (one batch larger than what is left is still
    /// sent whole) [default: 52428800].
    #[arg(long, env = "TINYMQ_FETCH_BYTES_MAX")]
    fetch_bytes_max: Option<u32>,
    /// Record bytes all fetches hold at once until written to their peers; a fetch waits for
    /// room [default: 268435456].
    #[arg(long, env = "TINYMQ_FETCH_MEMORY_BYTES_MAX")]
    fetch_memory_bytes_max: Option<u32>,
    /// A follower that has not caught up with its leader for this long (ms) leaves the
    /// in-sync replicas [default: 10000].
    #[arg(long, env = "TINYMQ_REPLICA_LAG_TIME_MAX_MS")]
    replica_lag_time_max_ms: Option<u64>,
    /// Segment files kept open between reads and writes, over all partitions; the least
    /// recently used is closed past it and opened again on its next use [default: 4096].
    #[arg(long, env = "TINYMQ_OPEN_SEGMENT_FILES_MAX", value_parser = crate::args::positive_usize)]
    open_segment_files_max: Option<usize>,
    /// Principals whose quota limiters one broker keeps at once; the least recently used is
    /// forgotten past it [default: 10000].
    #[arg(long, env = "TINYMQ_QUOTA_PRINCIPALS_MAX", value_parser = crate::args::positive_usize)]
    quota_principals_max: Option<usize>,
    /// A file with the password of user `admin`, created at the cluster's first start (also
    /// TINYMQ_ADMIN_PASSWORD); ignored once the cluster has users (`tinymq server` only).
    #[arg(long)]
    admin_password_file: Option<PathBuf>,
    /// How long after a half message's check (ms) its next one comes (docs/transactions.md,
    /// "Half messages") [default: 10000].
    #[arg(long, env = "TINYMQ_HALF_CHECK_INTERVAL_MS")]
    half_check_interval_ms: Option<u64>,
    /// Checks of a half message before it is rolled back by default [default: 15].
    #[arg(long, env = "TINYMQ_HALF_CHECKS_MAX")]
    half_checks_max: Option<u32>,
    /// How often (ms) the log cleaner looks for compacted partitions to clean
    /// (docs/storage.md, "Compaction") [default: 15000].
    #[arg(long, env = "TINYMQ_CLEANER_CHECK_INTERVAL_MS")]
    cleaner_check_interval_ms: Option<u64>,
    /// Memory for the cleaner's key map, which bounds the keys one pass compacts; at least
    /// 1 MiB [default: 67108864].
    #[arg(long, env = "TINYMQ_CLEANER_KEY_MAP_BYTES_MAX")]
    cleaner_key_map_bytes_max: Option<usize>,
    /// Bytes per second the cleaner reads and writes together; 0 = no limit
    /// [default: 134217728].
    #[arg(long, env = "TINYMQ_CLEANER_IO_BYTES_PER_SEC_MAX")]
    cleaner_io_bytes_per_sec_max: Option<u64>,
    /// Also serve Kafka clients on HOST:PORT (docs/kafka.md) [default: off].
    #[arg(long, env = "TINYMQ_KAFKA_LISTEN", value_parser = crate::args::socket_addr)]
    kafka_listen: Option<SocketAddr>,
    /// HOST:PORT Kafka clients are told to connect to (not resolved here) [default: the Kafka
    /// listen address, with --advertise's host when it listens on all addresses].
    #[arg(long, env = "TINYMQ_KAFKA_ADVERTISE")]
    kafka_advertise: Option<String>,
    /// Kafka Metadata requests naming an unknown topic create it, with the topic defaults
    /// (Kafka's auto.create.topics.enable) [default: false].
    #[arg(long, env = "TINYMQ_KAFKA_AUTO_CREATE_TOPICS", num_args = 0..=1, default_missing_value = "true")]
    kafka_auto_create_topics: Option<bool>,
    /// Kafka fetch sessions (KIP-227) kept at once; 0 turns them off (Kafka's
    /// max.incremental.fetch.session.cache.slots) [default: 1000].
    #[arg(long, env = "TINYMQ_KAFKA_FETCH_SESSIONS_MAX")]
    kafka_fetch_sessions_max: Option<usize>,
}

/// The TOML file: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    id: Option<u32>,
    meta: Option<String>,
    listen: Option<String>,
    advertise: Option<String>,
    data: Option<PathBuf>,
    flush: Option<String>,
    partitions: Option<u32>,
    retention_ms: Option<i64>,
    fetch_bytes_max: Option<u32>,
    fetch_memory_bytes_max: Option<u32>,
    replica_lag_time_max_ms: Option<u64>,
    open_segment_files_max: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_client_auth: Option<String>,
    quota_principals_max: Option<usize>,
    auth: Option<String>,
    cluster_secret_file: Option<PathBuf>,
    super_users: Option<String>,
    insecure: Option<bool>,
    admin_password_file: Option<PathBuf>,
    kafka_listen: Option<String>,
    kafka_advertise: Option<String>,
    kafka_auto_create_topics: Option<bool>,
    kafka_fetch_sessions_max: Option<usize>,
    half_check_interval_ms: Option<u64>,
    half_checks_max: Option<u32>,
    cleaner_check_interval_ms: Option<u64>,
    cleaner_key_map_bytes_max: Option<usize>,
    cleaner_io_bytes_per_sec_max: Option<u64>,
}

/// The file's security settings: the flags' keys, and `admin_password_file`.
struct FileSecurity {
    flags: ServerSecurityArgs,
    admin_password_file: Option<PathBuf>,
}

/// The broker's settings, and the HTTP settings of the file (flags apply over them).
fn build_config(
    args: ServerArgs,
) -> anyhow::Result<(
    BrokerConfig,
    HttpArgs,
    NodeTls,
    FileSecurity,
    KafkaListenerConfig,
)> {
    let (file, file_limits, file_http) = read_file::<FileConfig>(args.config.as_deref())?;
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
    let resolve = |text: Option<String>| {
        text.map(|t| crate::args::socket_addr(&t).map_err(anyhow::Error::msg))
            .transpose()
    };
    if let Some(v) = args.listen.or(resolve(file.listen)?) {
        c.listen = v;
    }
    let file_advertise = file.advertise.as_deref().map(Advertised::parse);
    c.advertise = args
        .advertise
        .or(file_advertise.transpose().map_err(anyhow::Error::msg)?);
    let kafka = KafkaListenerConfig {
        listen: args.kafka_listen.or(resolve(file.kafka_listen)?),
        advertise: pick!(kafka_advertise),
        auto_create_topics: pick!(kafka_auto_create_topics).unwrap_or(false),
        fetch_sessions_max: pick!(kafka_fetch_sessions_max),
    };
    c.data_dir = pick!(data).unwrap_or(c.data_dir);
    c.listener = args.limits.merge(file_limits, c.listener)?;
    c.fetch_bytes_max = pick!(fetch_bytes_max).unwrap_or(c.fetch_bytes_max);
    anyhow::ensure!(c.fetch_bytes_max >= 1, "fetch_bytes_max must be at least 1");
    c.fetch_memory_bytes_max = pick!(fetch_memory_bytes_max).unwrap_or(c.fetch_memory_bytes_max);
    anyhow::ensure!(
        c.fetch_memory_bytes_max >= 1 << 20,
        "fetch_memory_bytes_max must be at least 1 MiB"
    );
    if let Some(ms) = pick!(replica_lag_time_max_ms) {
        anyhow::ensure!(
            ms >= 1000,
            "replica_lag_time_max_ms must be at least 1000 (an idle follower's fetch waits up to 500 ms at the leader)"
        );
        c.replica_lag_time_max = std::time::Duration::from_millis(ms);
    }
    if let Some(ms) = pick!(half_check_interval_ms) {
        anyhow::ensure!(
            (100..=600_000).contains(&ms),
            "half_check_interval_ms must be from 100 to 600000 (ten minutes)"
        );
        c.half_check_interval = std::time::Duration::from_millis(ms);
    }
    c.half_checks_max = pick!(half_checks_max).unwrap_or(c.half_checks_max);
    anyhow::ensure!(
        (1..=100).contains(&c.half_checks_max),
        "half_checks_max must be from 1 to 100"
    );
    if let Some(ms) = pick!(cleaner_check_interval_ms) {
        anyhow::ensure!(
            (100..=3_600_000).contains(&ms),
            "cleaner_check_interval_ms must be from 100 to 3600000 (an hour)"
        );
        c.cleaner_check_interval = std::time::Duration::from_millis(ms);
    }
    c.cleaner_key_map_bytes_max =
        pick!(cleaner_key_map_bytes_max).unwrap_or(c.cleaner_key_map_bytes_max);
    anyhow::ensure!(
        c.cleaner_key_map_bytes_max >= tinymq_broker::cleaner::KEY_MAP_BYTES_MIN,
        "cleaner_key_map_bytes_max must be at least 1 MiB"
    );
    c.cleaner_io_bytes_per_sec_max =
        pick!(cleaner_io_bytes_per_sec_max).unwrap_or(c.cleaner_io_bytes_per_sec_max);
    c.open_segment_files_max = pick!(open_segment_files_max).unwrap_or(c.open_segment_files_max);
    anyhow::ensure!(
        c.open_segment_files_max >= 1,
        "open_segment_files_max must be at least 1"
    );
    c.quota_principals_max = pick!(quota_principals_max).unwrap_or(c.quota_principals_max);
    anyhow::ensure!(
        c.quota_principals_max >= 1,
        "quota_principals_max must be at least 1"
    );
    topics.flush = pick!(flush).unwrap_or(topics.flush);
    topics.partitions = pick!(partitions).unwrap_or(topics.partitions);
    topics.retention_ms = pick!(retention_ms).unwrap_or(topics.retention_ms);
    topics
        .validate()
        .map_err(|(_, msg)| anyhow::anyhow!("topic defaults: {msg}"))?;
    c.topic_defaults = topics;
    let file_tls = ServerTlsArgs::from_file(
        file.tls_cert,
        file.tls_key,
        file.tls_ca,
        file.tls_client_auth,
    )?;
    let tls = args.tls.load(file_tls)?;
    c.security = tls.listener();
    c.links = tls.links();
    let file_security = FileSecurity {
        flags: ServerSecurityArgs::from_file(
            file.auth,
            file.cluster_secret_file,
            file.super_users,
            file.insecure,
        ),
        admin_password_file: file.admin_password_file,
    };
    Ok((c, file_http, tls, file_security, kafka))
}

/// Runs the standalone server (`cluster_member` false) or a cluster broker (true).
pub async fn run(mut args: ServerArgs, cluster_member: bool) -> anyhow::Result<()> {
    let http_flags = std::mem::take(&mut args.http);
    let admin_flag = args.admin_password_file.take();
    let security_flags = std::mem::take(&mut args.security);
    let (mut config, file_http, tls, file_security, kafka) = build_config(args)?;
    let admin_file = admin_flag.or(file_security.admin_password_file);
    anyhow::ensure!(
        !(cluster_member && admin_file.is_some()),
        "--admin-password-file (admin_password_file) is for `tinymq server` and `tinymq meta`; brokers keep no users"
    );
    let admin = if cluster_member {
        None
    } else {
        crate::user::admin_credentials(admin_file.as_deref())?
    };
    let security_flags = security_flags.over(file_security.flags);
    let http_args = http_flags.over(file_http);
    let standalone_data = (!cluster_member).then(|| config.data_dir.clone());
    let security =
        tokio::task::spawn_blocking(move || security_flags.resolve(standalone_data.as_deref()))
            .await??;
    let has_tls = tls.server.is_some();
    security.check_exposure("client", config.listen, has_tls)?;
    if let Some(addr) = http_args.explicit_addr() {
        security.check_exposure("HTTP", addr, has_tls)?;
    }
    if let Some(addr) = kafka.listen {
        security.check_exposure("Kafka", addr, has_tls)?;
    }
    config.security = tinymq_net::ListenerSecurity {
        tls: tls.server.clone(),
        ..security.listener.clone()
    };
    config.authorization = security.authorization.clone();
    let node = u64::from(config.node_id);
    let node_login = security.node_login(tinymq_auth::NodeKind::Broker, node);
    config.links.login = node_login.clone();
    let role = if cluster_member { "broker" } else { "server" };
    crate::logging::set_node(format!("{role}-{}", config.node_id));
    let mut signals = crate::stop::StopSignals::install()?;
    tls.reload_on_sighup()?;
    // HTTPS with the native port's certificate: the same ServerTls, so SIGHUP reloads both.
    let auth_on = security.listener.auth != tinymq_net::AuthMode::None;
    let secret = security.listener.cluster_secret.as_deref();
    let http_security = http_args.security(tls.server.clone(), auth_on, secret)?;
    let mut api_links = tls.links();
    api_links.login = node_login;
    let http = http_args.listener(!cluster_member, http_security, api_links)?;
    // Created before the port accepts anyone: a login right after "listening" succeeds.
    config.admin_bootstrap = admin;
    let node_config = BrokerNodeConfig {
        broker: config,
        http,
        kafka: Some(kafka),
    };
    let node = Node::start(if cluster_member {
        NodeConfig::Broker(node_config)
    } else {
        NodeConfig::Standalone(node_config)
    })
    .await?;
    // A plain line for scripts and tests that start the server on port 0.
    println!("tinymq listening on {}", node.local_addr());
    if let Some(kafka) = node.kafka_addr() {
        println!("tinymq kafka listening on {kafka}");
    }
    crate::http::announce(&node);
    let stop = tokio::select! {
        signal = signals.next() => signal,
        fatal = node.fatal() => {
            // The metadata can no longer change; a restart recovers from the data directory.
            tracing::error!(error = %fatal, "the embedded MetaServer stopped; exiting");
            std::process::exit(70);
        }
    };
    tracing::info!(signal = stop, "stopping");
    crate::stop::shut_down(node, &mut signals).await;
    Ok(())
}
