//! The `tinymq` binary: every role and every tool behind one command. This file only parses
//! arguments and hands off; the roles live in the library crates.

mod acl;
mod args;
mod bench;
mod client_security;
mod cluster;
mod cluster_status;
mod codec;
mod consume;
mod dlq;
mod group;
mod half;
mod http;
mod limits;
mod logging;
mod out;
mod produce;
mod quota;
mod reassign;
mod route;
mod scrape;
mod server;
mod server_security;
mod share_consume;
mod stop;
mod tls;
mod top;
mod topic;
mod transaction;
mod user;

use clap::{Parser, Subcommand};

/// See `tinymq_node::alloc_guard`: the Kafka decoder's lying-array-count allocations must
/// not abort.
#[global_allocator]
static ALLOCATOR: tinymq_node::alloc_guard::GuardedAllocator =
    tinymq_node::alloc_guard::GuardedAllocator;

#[derive(Parser)]
#[command(
    name = "tinymq",
    version,
    about = "tinymq: a distributed, persistent message queue"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: logging::LogArgs,
}

/// Where the tools find the cluster.
#[derive(clap::Args, Debug, Clone)]
pub struct Bootstrap {
    /// Node addresses to bootstrap from, comma-separated.
    #[arg(long, env = "TINYMQ_BOOTSTRAP", default_value = "127.0.0.1:21581")]
    pub bootstrap: String,
    #[command(flatten)]
    pub security: tls::ClientSecurityArgs,
}

impl Bootstrap {
    /// Client settings for these addresses, with the TLS (and login) flags applied.
    pub fn client_config(&self) -> anyhow::Result<tinymq_client::ClientConfig> {
        let mut config = tinymq_client::ClientConfig::new(&self.bootstrap);
        config.security = self.security.security()?;
        Ok(config)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a standalone server: one MetaServer and one broker in one process.
    Server(server::ServerArgs),
    /// Run a broker of a cluster: registers with the MetaServer nodes of --meta and serves the
    /// partitions placed on it. `tinymq broker drain ID` moves every replica off a broker;
    /// `tinymq broker decommission ID` removes a stopped broker.
    Broker(cluster::BrokerCli),
    /// Run a MetaServer node: cluster metadata replicated with Raft.
    Meta(cluster::MetaArgs),
    /// Show the MetaServer nodes, the Raft leader and the brokers; rebalance replicas.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Create, list, describe and delete topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Send stdin to a topic, one message per line.
    Produce(produce::ProduceArgs),
    /// Print messages of a topic, one per line.
    Consume(consume::ConsumeArgs),
    /// List, describe, reset and delete consumer groups.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Create, list, delete users and change their passwords (SCRAM).
    #[command(subcommand)]
    User(user::UserCommand),
    /// Add, list and remove ACLs: who may do what to which resource.
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Set, list and remove produce, fetch and request rate quotas.
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
    /// Add, list and delete content-based routes: copy matching records of one topic into
    /// another, exactly once.
    #[command(subcommand)]
    Route(route::RouteCommand),
    /// List and describe transactions; abort one left hanging on a partition.
    #[command(subcommand)]
    Transaction(transaction::TransactionCommand),
    /// Half messages (transactional messages with check-back): store, commit, roll back,
    /// list, and answer a producer group's checks.
    #[command(subcommand)]
    Half(half::HalfCommand),
    /// Dead-letter topics: move dead-lettered records back to where they came from.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Measure throughput and latency: produce, consume or end-to-end.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Live per-topic throughput (records and bytes per second, in and out), read from the
    /// nodes' /metrics.
    Top(top::TopArgs),
    /// Print the protocol versions and limits this build speaks.
    Info,
}

/// Logging for the server roles, and their file-descriptor limit raised to the hard limit:
/// every open segment holds three files, and the soft limit (often 1,024) is far below what
/// the partition limits allow.
fn init_server(log: &logging::LogArgs) {
    logging::init(log, logging::Role::Server);
    match raise_open_files_limit() {
        Ok(limit) => tracing::debug!(limit, "open files limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open files limit"),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit now in force.
fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(limit.rlim_cur)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let server_role = matches!(
        cli.command,
        Command::Server(_)
            | Command::Meta(_)
            | Command::Broker(cluster::BrokerCli { action: None, .. })
    );
    if server_role {
        init_server(&cli.log);
    } else {
        logging::init(&cli.log, logging::Role::Tool);
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server::run(args, false).await,
            Command::Broker(cluster::BrokerCli {
                action: Some(action),
                ..
            }) => cluster::run_broker_action(action).await,
            Command::Broker(args) => server::run(args.run, true).await,
            Command::Meta(args) => cluster::run_meta(args).await,
            Command::Cluster(cmd) => cluster::run(cmd).await,
            Command::Topic(cmd) => topic::run(cmd).await,
            Command::Produce(args) => produce::run(args).await,
            Command::Consume(args) => consume::run(args).await,
            Command::Group(cmd) => group::run(cmd).await,
            Command::User(cmd) => user::run(cmd).await,
            Command::Acl(cmd) => acl::run(cmd).await,
            Command::Transaction(cmd) => transaction::run(cmd).await,
            Command::Half(cmd) => half::run(cmd).await,
            Command::Quota(cmd) => quota::run(cmd).await,
            Command::Route(cmd) => route::run(cmd).await,
            Command::Dlq(cmd) => dlq::run(cmd).await,
            Command::Bench(cmd) => bench::run(cmd).await,
            Command::Top(args) => top::run(args).await,
            Command::Info => {
                outln!(
                    "tinymq {} protocol {}..={} frame_bytes_max {}",
                    env!("CARGO_PKG_VERSION"),
                    tinymq_protocol::PROTOCOL_VERSION_MIN,
                    tinymq_protocol::PROTOCOL_VERSION_MAX,
                    tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_DEFAULT
                )
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.is::<consume::Interrupted>() => std::process::ExitCode::from(130),
        // The reader of stdout went away (`| head`): a normal end for a listing.
        Err(e) if e.is::<out::Closed>() => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-separated, each said once: many errors' own text already
/// includes their source's, which `{:#}` would then print a second time.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}
