//! `tinymq meta` (a MetaServer node), `tinymq cluster status` (shown by `cluster_status.rs`),
//! `tinymq cluster rebalance`, and `tinymq broker drain|decommission` (plans: `reassign.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use tinymq_node::{MetaNodeConfig, Node, NodeConfig};

use crate::limits::{read_file, LimitArgs};
use crate::{outln, Bootstrap};

#[derive(clap::Args, Debug)]
pub struct MetaArgs {
    /// TOML file with any of the settings below (flags and TINYMQ_* variables override it).
    #[arg(long, env = "TINYMQ_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id (never reuse the id of a removed node) [required].
    #[arg(long, env = "TINYMQ_META_ID")]
    id: Option<u64>,
    /// Address to listen on, HOST:PORT (a host name is resolved at start) [required].
    #[arg(long, env = "TINYMQ_LISTEN", value_parser = crate::args::socket_addr)]
    listen: Option<SocketAddr>,
    /// Every node of the group, this one included: `1=host:port,2=host:port,3=host:port`
    /// [required].
    #[arg(long, env = "TINYMQ_META_PEERS")]
    peers: Option<String>,
    /// Data directory (Raft log, vote and snapshot) [required].
    #[arg(long, env = "TINYMQ_DATA")]
    data: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    http: crate::http::HttpArgs,
    #[command(flatten)]
    security: crate::server_security::ServerSecurityArgs,
    /// A file with the password of user `admin`, created at the cluster's first start (also
    /// TINYMQ_ADMIN_PASSWORD); ignored once the cluster has users.
    #[arg(long)]
    admin_password_file: Option<PathBuf>,
    #[command(flatten)]
    tls: crate::tls::ServerTlsArgs,
}

/// The TOML file of `tinymq meta`: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaFileConfig {
    id: Option<u64>,
    listen: Option<String>,
    peers: Option<String>,
    data: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_client_auth: Option<String>,
    auth: Option<String>,
    cluster_secret_file: Option<PathBuf>,
    super_users: Option<String>,
    insecure: Option<bool>,
    admin_password_file: Option<PathBuf>,
}

fn parse_peers(text: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (id, addr) = entry
                .split_once('=')
                .with_context(|| format!("--peers entry {entry:?}: expected ID=HOST:PORT"))?;
            Ok((
                id.parse().with_context(|| format!("--peers id {id:?}"))?,
                addr.to_string(),
            ))
        })
        .collect()
}

pub async fn run_meta(args: MetaArgs) -> anyhow::Result<()> {
    let (file, file_limits, file_http) = read_file::<MetaFileConfig>(args.config.as_deref())?;
    let missing =
        |what: &str| anyhow::anyhow!("tinymq meta needs --{what} (or `{what}` in --config)");
    let id = args.id.or(file.id).ok_or_else(|| missing("id"))?;
    crate::logging::set_node(format!("meta-{id}"));
    let file_listen = file
        .listen
        .map(|t| crate::args::socket_addr(&t).map_err(anyhow::Error::msg))
        .transpose()?;
    let listen = args
        .listen
        .or(file_listen)
        .ok_or_else(|| missing("listen"))?;
    let peers = args.peers.or(file.peers).ok_or_else(|| missing("peers"))?;
    let data = args.data.or(file.data).ok_or_else(|| missing("data"))?;
    let limits = args
        .limits
        .merge(file_limits, tinymq_meta::server::default_limits())?;
    let peers = parse_peers(&peers)?;
    let file_tls = crate::tls::ServerTlsArgs::from_file(
        file.tls_cert,
        file.tls_key,
        file.tls_ca,
        file.tls_client_auth,
    )?;
    let tls = args.tls.load(file_tls)?;
    let file_security = crate::server_security::ServerSecurityArgs::from_file(
        file.auth,
        file.cluster_secret_file,
        file.super_users,
        file.insecure,
    );
    let security_flags = args.security.over(file_security);
    let admin_password_file = args.admin_password_file.or(file.admin_password_file);
    let security = tokio::task::spawn_blocking(move || security_flags.resolve(None)).await??;
    let has_tls = tls.server.is_some();
    security.check_exposure("MetaServer", listen, has_tls)?;
    let http_args = args.http.over(file_http);
    if let Some(addr) = http_args.explicit_addr() {
        security.check_exposure("HTTP", addr, has_tls)?;
    }
    // Handlers first: a signal sent as soon as the address is printed must stop the node cleanly.
    let mut signals = crate::stop::StopSignals::install()?;
    tls.reload_on_sighup()?;
    // HTTPS with the native port's certificate (the same ServerTls, so SIGHUP reloads both);
    // credentials asked when the node asks them.
    let auth_on = security.listener.auth != tinymq_net::AuthMode::None;
    let secret = security.listener.cluster_secret.as_deref();
    let http_security = http_args.security(tls.server.clone(), auth_on, secret)?;
    let admin = crate::user::admin_credentials(admin_password_file.as_deref())?;
    let node_login = security.node_login(tinymq_auth::NodeKind::Meta, id);
    let mut links = tls.links();
    links.login = node_login.clone();
    let mut api_links = tls.links();
    api_links.login = node_login;
    let http = http_args.listener(false, http_security, api_links)?;
    let node = Node::start(NodeConfig::Meta(MetaNodeConfig {
        id,
        listen,
        peers,
        data: data.clone(),
        limits,
        security: tinymq_meta::server::NodeSecurity {
            listener: tinymq_net::ListenerSecurity {
                tls: tls.server.clone(),
                ..security.listener.clone()
            },
            links,
            authorization: security.authorization.clone(),
        },
        admin,
        http,
    }))
    .await?;
    println!("tinymq meta listening on {}", node.local_addr());
    crate::http::announce(&node);
    tracing::info!(node = id, addr = %node.local_addr(), data = %data.display(), "MetaServer node started");
    tokio::select! {
        signal = signals.next() => tracing::info!(signal, "stopping"),
        fatal = node.fatal() => {
            // This node can no longer vote or apply; a restart recovers from its data.
            tracing::error!(error = %fatal, "the Raft core stopped; exiting");
            std::process::exit(70);
        }
    }
    crate::stop::shut_down(node, &mut signals).await;
    tracing::info!(node = id, "MetaServer node stopped");
    Ok(())
}

/// `tinymq broker`: runs a broker, or (with a subcommand) administers one.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BrokerCli {
    #[command(subcommand)]
    pub action: Option<BrokerAction>,
    #[command(flatten)]
    pub run: crate::server::ServerArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum BrokerAction {
    /// Move every replica off a broker (before removing it): each partition gets a replica on
    /// another live broker, which copies the data; once in sync, the drained one leaves. The
    /// partitions stay writable throughout. Prints the moves.
    Drain {
        /// The broker's id.
        id: u32,
        #[command(flatten)]
        plan: crate::reassign::PlanArgs,
    },
    /// Remove a stopped broker from the cluster for good: nothing is placed on it again and
    /// its id can never register again (a replacement machine gets a new id and an empty data
    /// directory). Refused while the broker runs, and while it holds partitions unless
    /// --move-partitions.
    Decommission {
        /// The broker's id.
        id: u32,
        /// Place the broker's partitions on live brokers. Partition data is not replicated
        /// yet: where this broker held the only copy, the moved partition starts empty and
        /// its records are lost.
        #[arg(long)]
        move_partitions: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

pub async fn run_broker_action(action: BrokerAction) -> anyhow::Result<()> {
    let (id, move_partitions, bootstrap) = match action {
        BrokerAction::Drain { id, plan } => {
            return crate::reassign::run(crate::reassign::Plan::Drain(id), plan).await
        }
        BrokerAction::Decommission {
            id,
            move_partitions,
            bootstrap,
        } => (id, move_partitions, bootstrap),
    };
    let admin = tinymq_client::Admin::new(bootstrap.client_config()?)?;
    admin.decommission_broker(id, move_partitions).await?;
    if move_partitions {
        outln!("decommissioned broker {id}; its partitions are placed on live brokers")
    } else {
        outln!("decommissioned broker {id}")
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// MetaServer nodes with the Raft leader, and each broker with its liveness.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Spread replicas and preferred leaders evenly over the live brokers (after a broker
    /// joins): the new replicas copy the data, and once in sync the old ones leave. The topics
    /// stay writable throughout. Prints the moves.
    Rebalance {
        #[command(flatten)]
        plan: crate::reassign::PlanArgs,
    },
}

pub async fn run(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Status { json, bootstrap } => {
            let security = bootstrap.security.security()?;
            crate::cluster_status::run(json, &bootstrap.bootstrap, &security).await
        }
        ClusterCommand::Rebalance { plan } => {
            crate::reassign::run(crate::reassign::Plan::Rebalance, plan).await
        }
    }
}
