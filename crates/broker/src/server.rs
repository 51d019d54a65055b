//! The broker process: joins the cluster, serves the client port through the shared front end
//! ([`tinymq_net::serve_secure`], up to `connections_max` connections), runs the background tasks
//! (interval flushes, retention, group sessions, heartbeats, watching the metadata and opening
//! or closing partitions as it changes), and shuts down gracefully: stop accepting, let
//! requests in flight finish, flush and close every partition. Disk work at start (the legacy
//! import, the data directory's identity, opening partitions) runs on the blocking pool.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use tinymq_meta::dir_lock::{DirLock, DirLockError};
use tinymq_meta::link::MetaLink;
use tinymq_meta::service::MetaService;

use crate::cluster::ClusterView;
use crate::config::{Advertised, BrokerConfig};
use crate::connection::BrokerFront;
use crate::state::BrokerState;

/// How often partitions with an `interval:<ms>` flush policy are checked.
const FLUSH_TICK: Duration = Duration::from_millis(10);
/// How often group sessions are checked: the precision of classic (Kafka) sessions and join
/// phases, whose tick walks the classic groups only.
const GROUP_TICK: Duration = Duration::from_millis(100);
/// Native sessions are checked every this many group ticks (500 ms): a native expiry walks
/// every group, and native members learn of changes by heartbeats anyway.
const NATIVE_EXPIRY_EVERY_TICKS: u64 = 5;
/// Offsets of long-empty groups are looked for every this many group ticks (10 minutes).
const OFFSETS_EXPIRY_EVERY_TICKS: u64 = 6000;
/// Directory under the data directory that holds the embedded MetaServer of the standalone
/// server.
pub const META_DIR: &str = "__meta";
/// The embedded MetaServer's node id.
const EMBEDDED_META_ID: u64 = 1;
/// How long a stopping broker waits for the MetaServer to take note (it is fenced by session
/// expiry anyway if this fails).
const UNREGISTER_WAIT: Duration = Duration::from_secs(5);
/// How long a stopping broker waits for an image that shows its fence ([`step_down`]).
const STEP_DOWN_WAIT: Duration = Duration::from_secs(2);
/// One read's wait for a newer image while stepping down.
const STEP_DOWN_POLL: Duration = Duration::from_millis(100);
/// How long a standalone start waits for its single-node MetaServer to lead (it does at once
/// in practice; past this, registration retries on its own).
const EMBEDDED_LEADER_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Lock(#[from] DirLockError),
    #[error("invalid listener limits: {0}")]
    Limits(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the embedded MetaServer: {0}")]
    Meta(#[from] tinymq_meta::raft::MetaNodeError),
    #[error("cannot join the cluster: {0}")]
    Join(#[from] crate::join::JoinError),
    #[error("cannot import the earlier standalone metadata: {0}")]
    Import(std::io::Error),
    #[error("cannot open partitions: {0}")]
    Log(#[from] tinymq_log::LogError),
    #[error("startup worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// How long the standalone server waits at its first start for user `admin` to be created
/// before it accepts connections anyway (it goes on trying in the background).
const ADMIN_BOOTSTRAP_WAIT_MAX: Duration = Duration::from_secs(30);

/// Creates user `admin` in the embedded MetaServer (if the cluster has no user) and waits
/// until this broker's image holds it: logins are checked against that image, and the port
/// accepts nobody before this returns, so the first login after "listening" succeeds.
async fn bootstrap_admin(
    meta: &Arc<MetaService>,
    cluster: &ClusterView,
    credentials: Vec<tinymq_auth::StoredCredential>,
) {
    let wait = ADMIN_BOOTSTRAP_WAIT_MAX;
    if !tinymq_meta::security_ops::bootstrap_admin_now(meta, credentials, wait).await {
        return;
    }
    let deadline = tokio::time::Instant::now() + wait;
    while cluster.image().users.is_empty() && tokio::time::Instant::now() < deadline {
        if let Err(e) = cluster.refresh(Duration::from_millis(100)).await {
            tracing::warn!(error = %e, "reading the metadata after creating user admin failed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Logs a warning when the advertised host is a name that does not resolve here: it is sent
/// to clients as written (they may resolve it otherwise), but this broker's own client (dead
/// letters, routes) connects to it too, and fails until it resolves.
async fn warn_unless_resolvable(advertised: Advertised) {
    if advertised.host.parse::<std::net::IpAddr>().is_ok() {
        return;
    }
    let target = (advertised.host.as_str(), advertised.port);
    if let Err(e) = tokio::net::lookup_host(target).await {
        tracing::warn!(%advertised, error = %e, "the advertised host name does not resolve on this node; clients are sent to it as written, but this broker's own connections to it fail until it does");
    }
}

/// A running broker.
pub struct Broker {
    pub local_addr: SocketAddr,
    state: Arc<BrokerState>,
    /// The MetaServer running in this process (standalone server), if any.
    embedded_meta: Option<Arc<MetaService>>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    /// The data directory's lock, held for the broker's life (released after shutdown).
    _dir_lock: DirLock,
}

impl Broker {
    /// Starts a broker: the standalone server (with a single-node MetaServer embedded, its
    /// data in `<data>/__meta`) when `config.meta` is empty, else a broker of the cluster whose
    /// MetaServer nodes `config.meta` lists.
    ///
    /// Before anything else it locks the data directory, so a second process on the same
    /// directory fails here, naming the holder. The embedded MetaServer locks `<data>/__meta`
    /// on its own: a lock file per directory, so the two never meet.
    pub async fn start(config: BrokerConfig) -> Result<Broker, StartError> {
        config.listener.check().map_err(StartError::Limits)?;
        let dir = config.data_dir.clone();
        let dir_lock = tokio::task::spawn_blocking(move || DirLock::acquire(&dir)).await??;
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
        let advertised = config
            .advertise
            .clone()
            .unwrap_or_else(|| Advertised::from(local_addr));
        let unspecified = advertised
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if unspecified {
            // Clients and other nodes are told this address in metadata; 0.0.0.0 reaches this
            // node only from its own machine, and a TLS certificate cannot name it.
            tracing::warn!(
                %advertised,
                "advertising the unspecified address: clients on other machines cannot reach it; give --advertise HOST:PORT (the address they reach this node at, which a TLS certificate must name)"
            );
        }
        // In the background: a slow resolver must not hold up the start.
        tokio::spawn(warn_unless_resolvable(advertised.clone()));
        let meta_dir = config.data_dir.join(META_DIR);
        let (link, embedded_meta, legacy) = if config.meta.is_empty() {
            let dir = meta_dir.clone();
            let legacy = tokio::task::spawn_blocking(move || crate::legacy::find(&dir))
                .await?
                .map_err(StartError::Import)?;
            let peers = [(EMBEDDED_META_ID, advertised.to_string())].into();
            let cluster_id = legacy.as_ref().map(|l| l.cluster_id.clone());
            let links = config.links.clone();
            let service =
                MetaService::start_secure(EMBEDDED_META_ID, peers, &meta_dir, cluster_id, links)
                    .await?;
            retire_previous_run(&service, config.node_id).await;
            (MetaLink::Local(service.clone()), Some(service), legacy)
        } else {
            let link =
                MetaLink::remote_secure(config.meta.clone(), config.node_id, config.links.clone());
            (link, None, None)
        };
        let cluster = Arc::new(
            ClusterView::new(config.node_id, link)
                .with_kafka_advertised(config.kafka_advertised.clone()),
        );
        let host = advertised.host.clone();
        crate::join::join(&cluster, &config.data_dir, &host, advertised.port).await?;
        if let Some(legacy) = legacy {
            crate::legacy::import(&cluster, &meta_dir, legacy)
                .await
                .map_err(StartError::Import)?;
        }
        if let (Some(meta), Some(admin)) = (&embedded_meta, config.admin_bootstrap.clone()) {
            bootstrap_admin(meta, &cluster, admin).await;
        }
        if embedded_meta.is_some() {
            // The only broker coordinates every group: no need to wait for a FindCoordinator
            // (a cluster creates the offsets topic then, once its brokers have registered).
            let ensure = tinymq_meta::Command::EnsureOffsetsTopic {
                partitions: crate::group::offsets::OFFSETS_PARTITIONS,
            };
            if let Err(e) = cluster.write(ensure).await {
                tracing::warn!(error = %e.message, "creating the offsets topic failed; retried at the first FindCoordinator");
            }
            cluster.refresh(Duration::ZERO).await.ok();
        }
        let view = cluster.clone();
        let port = advertised.port;
        let state = tokio::task::spawn_blocking(move || BrokerState::new(config, advertised, view))
            .await??;
        let state = Arc::new(state);
        let quotas = &state.cluster.image().quotas;
        state.quotas.apply(quotas, std::time::Instant::now());
        let opening = state.clone();
        tokio::task::spawn_blocking(move || {
            let image = opening.cluster.image();
            if let Err(e) = opening.retire_deleted_topics(&image) {
                tracing::warn!(error = %e, "cleaning up deleted topics failed");
            }
            opening.reconcile(&image);
        })
        .await?;
        crate::replica::fetcher::sync(&state);
        crate::offsets_partitions::sync(&state);
        crate::txn::sync(&state);
        crate::half::ops::sync(&state);
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(tinymq_net::serve_secure(
            listener,
            Arc::new(BrokerFront(state.clone())),
            state.config.listener.clone(),
            state.config.security.clone(),
            shutdown.clone(),
            tasks.clone(),
            state.connections.clone(),
        ));
        tasks.spawn(flush_loop(state.clone(), shutdown.clone()));
        tasks.spawn(retention_loop(state.clone(), shutdown.clone()));
        tasks.spawn(crate::cleaner::run(state.clone(), shutdown.clone()));
        tasks.spawn(group_loop(state.clone(), shutdown.clone()));
        tasks.spawn(txn_loop(state.clone(), shutdown.clone()));
        tasks.spawn(half_loop(state.clone(), shutdown.clone()));
        tasks.spawn(crate::share::run(state.clone(), shutdown.clone()));
        tasks.spawn(crate::delay::run(state.clone(), shutdown.clone()));
        tasks.spawn(crate::route::run(state.clone(), shutdown.clone()));
        tasks.spawn(cluster.clone().heartbeat_loop(host, port, shutdown.clone()));
        tasks.spawn(cluster.clone().watch_loop(shutdown.clone()));
        tasks.spawn(reconcile_loop(state.clone(), shutdown.clone()));
        tasks.spawn(crate::replica::isr::isr_loop(
            state.clone(),
            shutdown.clone(),
        ));
        tracing::info!(%local_addr, broker = state.node_id(), data = %state.config.data_dir.display(), cluster = %cluster.cluster_id(), "broker started");
        Ok(Broker {
            local_addr,
            state,
            embedded_meta,
            shutdown,
            tasks,
            _dir_lock: dir_lock,
        })
    }

    pub fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// The native service, for in-process listeners of other protocols (Kafka).
    pub fn front(&self) -> BrokerFront {
        BrokerFront(self.state.clone())
    }

    /// How long each of [`Broker::shutdown`]'s waits for requests in flight may last.
    pub fn shutdown_grace(&self) -> Duration {
        self.state.config.listener.shutdown_grace
    }

    /// The MetaServer running in this process (the standalone server), if any.
    pub fn embedded_meta(&self) -> Option<&Arc<MetaService>> {
        self.embedded_meta.as_ref()
    }

    /// Stops accepting and heartbeating, tells the MetaServer it is stopping (so nothing new is
    /// placed here), lets in-flight requests finish, then flushes and closes every partition.
    pub async fn shutdown(self) {
        tracing::info!("shutting down");
        self.shutdown.cancel();
        self.tasks.close();
        // After the heartbeats stop: a heartbeat answered "fenced" would register again.
        let cluster = &self.state.cluster;
        match tokio::time::timeout(UNREGISTER_WAIT, cluster.unregister()).await {
            Ok(Ok(())) => {
                tracing::info!("left the cluster: no new partitions are placed here");
                step_down(&self.state).await;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e.message, "could not tell the MetaServer this broker stops; it is fenced when its session expires")
            }
            Err(_) => {
                tracing::warn!("the MetaServer did not answer in time; this broker is fenced when its session expires")
            }
        }
        let grace = self.state.config.listener.shutdown_grace.saturating_mul(2);
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
        self.state.fetchers.stop();
        let state = self.state.clone();
        let closed = tokio::task::spawn_blocking(move || {
            if state.close_all() {
                if let Err(e) = crate::join::mark_clean_shutdown(&state.config.data_dir) {
                    tracing::warn!(error = %e, "could not record the clean shutdown");
                }
            }
        })
        .await;
        if let Err(e) = closed {
            tracing::error!(error = %e, "closing partitions failed");
        }
        if let Some(meta) = self.embedded_meta {
            meta.shutdown().await;
        }
        tracing::info!("shut down");
    }

    /// Resolves if the embedded MetaServer's Raft core stops on a fatal error.
    pub async fn embedded_meta_failed(&self) -> String {
        match &self.embedded_meta {
            Some(meta) => meta.node.fatal().await,
            None => std::future::pending().await,
        }
    }
}

/// After this broker's fence is in (its controlled shutdown): stops leading at once what the
/// fence moved, instead of when the process exits. Requests waiting on the in-sync replicas
/// (`acks=all`) end with NOT_LEADER now, so their producers retry at the new leader within
/// milliseconds, where they would otherwise wait out the shutdown grace: the followers have
/// moved to the new leader and stopped fetching here, so those writes would never be confirmed.
/// Waits (bounded by [`STEP_DOWN_WAIT`]) for an image where the fence moved this broker's
/// leaderships: a MetaServer follower may answer a read before it applied the fence.
async fn step_down(state: &Arc<BrokerState>) {
    let cluster = &state.cluster;
    if !cluster.end_session() {
        return;
    }
    let me = state.node_id();
    let leads_here = |image: &tinymq_meta::MetadataImage| {
        state.all_partitions().iter().any(|p| {
            p.leading_epoch().is_some()
                && image
                    .topics
                    .get(&p.topic)
                    .and_then(|t| t.partitions.get(p.index as usize))
                    .is_some_and(|record| record.leader == Some(me))
        })
    };
    let deadline = tokio::time::Instant::now() + STEP_DOWN_WAIT;
    while leads_here(&cluster.image()) && tokio::time::Instant::now() < deadline {
        if cluster.refresh(STEP_DOWN_POLL).await.is_err() {
            tokio::time::sleep(STEP_DOWN_POLL).await;
        }
    }
    let image = cluster.image();
    let state = state.clone();
    let stepped = tokio::task::spawn_blocking(move || state.assume_roles(&image)).await;
    if let Err(e) = stepped {
        tracing::warn!(error = %e, "could not take the roles the fence gave");
    }
}

/// The standalone server is the only broker of its embedded MetaServer, so a registration left
/// from its previous run (possibly on another port) is stale: fence it, so the new run may
/// register from any address.
async fn retire_previous_run(service: &MetaService, broker_id: u32) {
    let node = &service.node;
    let deadline = tokio::time::Instant::now() + EMBEDDED_LEADER_WAIT;
    while node.current_leader() != Some(node.id) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let image = node.image();
    if let Some(previous) = image.brokers.get(&broker_id).filter(|b| !b.fenced) {
        let fence = tinymq_meta::Command::FenceBroker {
            id: broker_id,
            epoch: previous.epoch,
        };
        if let Some(e) = service.write(fence).await.error {
            tracing::warn!(error = %e.message, "could not retire the previous run's registration");
        }
    }
}

/// Opens and closes partitions as the image changes (one reconciliation at a time, on a
/// blocking thread; changes that arrive meanwhile are taken in the next round).
async fn reconcile_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut images = state.cluster.subscribe();
    loop {
        tokio::select! {
            changed = images.changed() => if changed.is_err() { return },
            _ = shutdown.cancelled() => return,
        }
        let image = images.borrow_and_update().image.clone();
        state.quotas.apply(&image.quotas, std::time::Instant::now());
        let s = state.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || s.reconcile(&image)).await {
            tracing::error!(error = %e, "reconciling partitions failed");
        }
        crate::replica::fetcher::sync(&state);
        crate::offsets_partitions::sync(&state);
        crate::txn::sync(&state);
        crate::half::ops::sync(&state);
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
            .filter(|p| matches!(p.log.flush_policy(), tinymq_log::FlushPolicy::Interval(_)))
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
                if let Err(e) = p.apply_retention() {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention failed");
                }
            }
        })
        .await;
    }
}

/// How often the transaction coordinator looks for transactions past their timeout.
const TXN_TICK: Duration = Duration::from_secs(1);

/// How often the half-message coordinator looks for halves to roll back or finish.
const HALF_TICK: Duration = Duration::from_millis(250);

/// The half-message coordinator's timer (`half::ops::tick`).
async fn half_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(HALF_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        crate::half::ops::tick(&state).await;
    }
}

/// The transaction coordinator's timer (`txn::ops::tick`).
async fn txn_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(TXN_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        crate::txn::ops::tick(&state).await;
    }
}

/// The broker's one group timer: expires group members whose session ended (so their
/// partitions move even when nobody else heartbeats) and ends classic join phases past their
/// deadline, and, less often, the offsets of long-empty groups.
async fn group_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(GROUP_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        state.groups.classic_tick(std::time::Instant::now());
        ticks += 1;
        if ticks.is_multiple_of(NATIVE_EXPIRY_EVERY_TICKS) {
            state.groups.expire(&|t| state.partition_count(t));
        }
        if ticks.is_multiple_of(OFFSETS_EXPIRY_EVERY_TICKS) {
            let expired = state
                .groups
                .expired_offsets(crate::group::OFFSETS_RETENTION);
            for (group, tombstones) in expired {
                let count = tombstones.len();
                match crate::offsets_partitions::append(&state, &group, tombstones).await {
                    Ok(()) => {
                        tracing::info!(%group, offsets = count, "expired the offsets of an empty group")
                    }
                    Err(e) => {
                        tracing::warn!(%group, error = %e.message, "could not expire offsets")
                    }
                }
            }
        }
    }
}
