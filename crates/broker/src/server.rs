//! The listener: accepts connections up to `connections_max`, runs the background timers
//! (interval flushes, retention), and shuts down gracefully: stop accepting, let requests in
//! flight finish, flush and close every partition.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::BrokerConfig;
use crate::connection::Connection;
use crate::metadata::{LocalMetadata, MetadataStore};
use crate::state::BrokerState;

/// How often partitions with an `interval:<ms>` flush policy are checked.
const FLUSH_TICK: Duration = Duration::from_millis(10);
/// How often group sessions are checked.
const GROUP_TICK: Duration = Duration::from_millis(500);
/// Offsets of long-empty groups are looked for every this many group ticks (10 minutes).
const OFFSETS_EXPIRY_EVERY_TICKS: u64 = 1200;
/// Directory under the data directory that holds the standalone metadata.
pub const META_DIR: &str = "__meta";

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open metadata: {0}")]
    Metadata(#[from] crate::metadata::MetadataError),
    #[error("cannot open partitions: {0}")]
    Log(#[from] tinymq_log::LogError),
    #[error("startup worker failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// A running broker.
pub struct Broker {
    pub local_addr: SocketAddr,
    state: Arc<BrokerState>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Broker {
    /// Opens the data directory (recovering every partition), binds the listener, and starts
    /// serving: the standalone server, with its metadata in `<data>/__meta`.
    pub async fn start(config: BrokerConfig) -> Result<Broker, StartError> {
        let meta_dir = config.data_dir.join(META_DIR);
        let metadata: Arc<dyn MetadataStore> =
            Arc::new(tokio::task::spawn_blocking(move || LocalMetadata::open(&meta_dir)).await??);
        Broker::start_with(config, metadata).await
    }

    pub async fn start_with(
        config: BrokerConfig,
        metadata: Arc<dyn MetadataStore>,
    ) -> Result<Broker, StartError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        let advertised = config.advertise.unwrap_or(local_addr);
        let state = Arc::new(
            tokio::task::spawn_blocking(move || BrokerState::open(config, advertised, metadata))
                .await??,
        );
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept_loop(
            listener,
            state.clone(),
            shutdown.clone(),
            tasks.clone(),
        ));
        tasks.spawn(flush_loop(state.clone(), shutdown.clone()));
        tasks.spawn(retention_loop(state.clone(), shutdown.clone()));
        tasks.spawn(group_loop(state.clone(), shutdown.clone()));
        tracing::info!(%local_addr, data = %state.config.data_dir.display(), cluster = %state.metadata.cluster_id(), "broker started");
        Ok(Broker {
            local_addr,
            state,
            shutdown,
            tasks,
        })
    }

    pub fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// Stops accepting, lets in-flight requests finish, then flushes and closes every partition.
    pub async fn shutdown(self) {
        tracing::info!("shutting down");
        self.shutdown.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(self.state.config.shutdown_grace * 2, self.tasks.wait()).await;
        let state = self.state.clone();
        let closed = tokio::task::spawn_blocking(move || {
            if let Err(e) = state.groups.close() {
                tracing::error!(error = %e, "closing the offsets log failed");
            }
            for partition in state.all_partitions() {
                if let Err(e) = partition.close() {
                    tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "close failed");
                }
            }
        })
        .await;
        if let Err(e) = closed {
            tracing::error!(error = %e, "closing partitions failed");
        }
        tracing::info!("shut down");
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<BrokerState>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(state.config.connections_max));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = state.config.connections_max, "connections_max reached; closing new connection");
            drop(stream);
            continue;
        };
        let connection = Connection::new(state.clone(), peer.to_string(), shutdown.clone());
        tasks.spawn(async move {
            connection.run(stream).await;
            drop(permit);
        });
    }
}

async fn flush_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(FLUSH_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let partitions: Vec<_> = state
            .all_partitions()
            .into_iter()
            .filter(|p| matches!(p.log.config().flush, tinymq_log::FlushPolicy::Interval(_)))
            .collect();
        if partitions.is_empty() {
            continue;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for p in partitions {
                if let Err(e) = p.flush_if_due() {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "interval flush failed");
                }
            }
        })
        .await;
    }
}

async fn retention_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(state.config.retention_check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let partitions = state.all_partitions();
        let _ = tokio::task::spawn_blocking(move || {
            for p in partitions {
                if let Err(e) = p.log.apply_retention() {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention failed");
                }
            }
        })
        .await;
    }
}

/// Expires group members whose session ended (so their partitions move even when nobody else
/// heartbeats), and, less often, the offsets of long-empty groups.
async fn group_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(GROUP_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        state.groups.expire(&|t| state.partition_count(t));
        ticks += 1;
        if ticks % OFFSETS_EXPIRY_EVERY_TICKS == 0 {
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                s.groups.expire_offsets(crate::group::OFFSETS_RETENTION)
            })
            .await;
        }
    }
}
