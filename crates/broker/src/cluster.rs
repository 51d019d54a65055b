//! The broker's membership in the cluster: registering with the MetaServer (for an epoch),
//! heartbeating, registering again after being fenced, watching the metadata image, and
//! handing out producer ids from blocks the MetaServer allocates.
//!
//! The image is the broker's only source of truth about topics, placement and leadership; it
//! may lag the MetaServer by one long-poll round trip. Handlers read it without waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::link::{LinkError, MetaLink};
use tinymq_meta::{Command, MetadataImage, Reply};
use tinymq_protocol::{messages as m, ErrorCode};
use tokio::sync::watch;

/// How often a broker tells the MetaServer it is alive: seven times per session.
pub const HEARTBEAT_INTERVAL: Duration = tinymq_meta::session::BROKER_HEARTBEAT_INTERVAL;
/// How long one watch of the image waits for a change.
const WATCH_WAIT: Duration = Duration::from_secs(10);
/// Pause before retrying after the MetaServer could not be reached.
const RETRY_BACKOFF: Duration = Duration::from_millis(250);
/// How long registration waits for a broker id held by another address to be released (the
/// MetaServer's session, and much more): long enough for a broker restarted elsewhere to
/// replace its dead predecessor, short enough to fail a true duplicate clearly.
const ID_IN_USE_WAIT: Duration = Duration::from_secs(15);
/// How long after its last heartbeat the MetaServer answered (counted from when it was sent)
/// this broker still trusts its session: two thirds of the MetaServer's 1.5 s session, so that
/// a broker cut off from the MetaServer, or paused and resumed (a zombie), stops acknowledging
/// writes before the MetaServer fences it and elects other leaders. The half second between
/// them covers the leader's fence check (50 ms) and clocks that run at slightly different
/// rates; the broker and the leader each measure on their own monotonic clock. A heartbeat
/// counts only while the connection it went over is still open (the MetaServer also ends a
/// session soon after that connection closes: see `tinymq_meta::session`).
pub const SESSION_TRUST: Duration = Duration::from_millis(1000);
/// Producer ids reserved from the MetaServer at once.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// A version of the image: the MetaServer's applied log index, and the image itself.
#[derive(Debug, Clone, Default)]
pub struct VersionedImage {
    pub version: u64,
    pub image: Arc<MetadataImage>,
}

pub struct ClusterView {
    pub broker_id: u32,
    pub link: MetaLink,
    /// The epoch of this broker's current registration (0 before the first).
    epoch: AtomicU64,
    image: watch::Sender<VersionedImage>,
    /// When the last heartbeat or registration the MetaServer accepted was sent.
    session_confirmed: parking_lot::Mutex<Option<std::time::Instant>>,
    /// The unused rest of the current producer-id block: `next..end`.
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    /// This broker's Kafka listener address, registered with the cluster so every broker's
    /// Kafka Metadata answer can name it; `None` without a Kafka listener.
    kafka_advertised: Option<tinymq_meta::KafkaAddress>,
    /// Unit tests without a MetaServer act as if the session were confirmed.
    #[cfg(test)]
    assume_current: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterView")
            .field("broker_id", &self.broker_id)
            .field("epoch", &self.epoch())
            .field("version", &self.image.borrow().version)
            .finish()
    }
}

impl ClusterView {
    pub fn new(broker_id: u32, link: MetaLink) -> ClusterView {
        ClusterView {
            broker_id,
            link,
            epoch: AtomicU64::new(0),
            image: watch::Sender::new(VersionedImage::default()),
            session_confirmed: parking_lot::Mutex::new(None),
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            kafka_advertised: None,
            #[cfg(test)]
            assume_current: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// For unit tests without a MetaServer: the session counts as confirmed from now on.
    #[cfg(test)]
    pub(crate) fn assume_session_current(&self) {
        self.assume_current.store(true, Ordering::SeqCst);
    }

    /// Registers `kafka` (host, port) as this broker's Kafka listener address.
    pub fn with_kafka_advertised(mut self, kafka: Option<(String, u16)>) -> ClusterView {
        self.kafka_advertised = kafka.map(|(host, port)| tinymq_meta::KafkaAddress { host, port });
        self
    }

    /// Whether this broker may still act as a leader: the MetaServer confirmed its session
    /// by a heartbeat sent within [`SESSION_TRUST`] over the heartbeat connection still open
    /// (always, with the MetaServer in this process).
    pub fn session_current(&self) -> bool {
        if matches!(self.link, MetaLink::Local(_)) {
            return true;
        }
        #[cfg(test)]
        if self.assume_current.load(Ordering::SeqCst) {
            return true;
        }
        let confirmed = *self.session_confirmed.lock();
        confirmed.is_some_and(|at| {
            at.elapsed() < SESSION_TRUST && self.link.heartbeat_path_open_since(at)
        })
    }

    /// Ends this broker's trust in its session at once, on its own controlled shutdown once the
    /// fence is in: from then on it acknowledges nothing as a leader (as if the session had
    /// expired). With the MetaServer in this process, the session never ends.
    pub(crate) fn end_session(&self) -> bool {
        if matches!(self.link, MetaLink::Local(_)) {
            return false;
        }
        *self.session_confirmed.lock() = None;
        true
    }

    pub(crate) fn confirm_session(&self, sent: std::time::Instant) {
        let mut confirmed = self.session_confirmed.lock();
        if confirmed.is_none_or(|at| at < sent) {
            *confirmed = Some(sent);
        }
    }

    /// The newest image this broker has seen.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().image.clone()
    }

    /// The current image's version (cheaper than [`ClusterView::versioned`]).
    pub fn version(&self) -> u64 {
        self.image.borrow().version
    }

    pub fn versioned(&self) -> VersionedImage {
        self.image.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<VersionedImage> {
        self.image.subscribe()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub fn cluster_id(&self) -> String {
        self.image.borrow().image.cluster_id.clone()
    }

    /// Takes a newer image; older ones (from a lagging MetaServer node) are ignored.
    pub fn offer(&self, version: u64, image: MetadataImage) -> bool {
        self.image.send_if_modified(|current| {
            let newer = version > current.version || current.image.cluster_id.is_empty();
            if newer {
                *current = VersionedImage {
                    version,
                    image: Arc::new(image),
                };
            }
            newer
        })
    }

    /// Applies a command through the MetaServer, as a wire error if refused or unreachable.
    pub async fn write(&self, command: Command) -> Result<Reply, m::Error> {
        self.link.write(command).await.map_err(|e| e.to_wire())
    }

    /// Waits (up to `timeout`) until the watched image satisfies `ready`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        ready: impl Fn(&MetadataImage) -> bool,
    ) -> bool {
        let mut images = self.image.subscribe();
        let waited = tokio::time::timeout(timeout, images.wait_for(|v| ready(&v.image))).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// Reads the image once, waiting up to `wait` for one newer than what this broker has.
    pub async fn refresh(&self, wait: Duration) -> Result<bool, LinkError> {
        let since = self.image.borrow().version;
        let (version, image) = self.link.read(since, wait).await?;
        Ok(self.offer(version, image))
    }

    /// Registers this broker at `host:port`, retrying while the MetaServer is unreachable or
    /// has no leader, until the registration is in the image this broker watches. Fails only
    /// when the id stays held by another live broker for [`ID_IN_USE_WAIT`].
    /// `clean_shutdown`: whether this broker's data is as its last run left it when stopping
    /// cleanly (see `join.rs`); a registration after a fence within one run is clean.
    pub async fn register(
        &self,
        host: &str,
        port: u16,
        clean_shutdown: bool,
    ) -> Result<u64, m::Error> {
        let command = Command::RegisterBroker {
            id: self.broker_id,
            host: host.into(),
            port,
            clean_shutdown,
            kafka: self.kafka_advertised.clone(),
        };
        let id = self.broker_id;
        let epoch = loop {
            let epoch = self.send_registration(&command).await?;
            self.epoch.store(epoch, Ordering::SeqCst);
            if self.await_registration(epoch).await {
                break epoch;
            }
            // The session ended before this broker saw its registration (an image slow to
            // arrive on a loaded machine): a fenced epoch never turns live, so register anew.
            tracing::warn!(
                broker = id,
                epoch,
                "fenced before the registration was seen; registering again"
            );
        };
        // Only now: until this image, a broker back from a fence still reads its old
        // leaderships in its stale image and would take writes for partitions others lead.
        // Trust comes from a heartbeat (over the connection whose close ends the session), not
        // from the registration; if this one fails, the heartbeat loop's next one counts.
        match self.link.heartbeat(id, epoch).await {
            Ok(beat) if !beat.fenced => self.confirm_session(beat.sent),
            Ok(_) => tracing::warn!(broker = id, epoch, "fenced right after registering"),
            Err(e) => tracing::debug!(error = %e, "first heartbeat failed; the loop retries"),
        }
        tracing::info!(broker = id, epoch, "registered with the MetaServer");
        Ok(epoch)
    }

    /// Writes `command` (a registration) until the MetaServer answers it with an epoch.
    async fn send_registration(&self, command: &Command) -> Result<u64, m::Error> {
        let mut attempts = 0u32;
        let started = tokio::time::Instant::now();
        let mut warned_in_use = false;
        loop {
            match self.link.write(command.clone()).await {
                Ok(Reply::BrokerRegistered { epoch }) => return Ok(epoch),
                Ok(other) => {
                    return Err(ErrorCode::UNKNOWN_SERVER_ERROR
                        .with_message(format!("unexpected reply to a registration: {other:?}")))
                }
                Err(LinkError::Server(e))
                    if ErrorCode::from_code(e.code) == Some(ErrorCode::BROKER_ID_IN_USE) =>
                {
                    // Our own previous incarnation (restarted at another address) is released
                    // when its session expires; a second live broker with this id never is.
                    let waited = started.elapsed();
                    if waited > ID_IN_USE_WAIT {
                        return Err(e);
                    }
                    if !warned_in_use {
                        tracing::warn!(error = %e.message, "waiting for the broker id to be released");
                        warned_in_use = true;
                    }
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                Err(LinkError::Server(e))
                    if ErrorCode::from_code(e.code).is_none_or(|c| !c.is_retriable()) =>
                {
                    // A refusal that waiting does not change (a decommissioned id).
                    return Err(e);
                }
                Err(e) => {
                    attempts += 1;
                    if attempts % 20 == 1 {
                        tracing::warn!(error = %e, "cannot register with the MetaServer yet; retrying");
                    }
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }

    /// Waits until the watched image shows registration `epoch` live (true), or fenced
    /// (false). Heartbeats meanwhile, so that an image slow to arrive does not end the new
    /// session: it expires [`tinymq_meta::session::BROKER_SESSION_TIMEOUT`] after the last
    /// heartbeat, and the heartbeat loop starts only after this wait.
    async fn await_registration(&self, epoch: u64) -> bool {
        let id = self.broker_id;
        loop {
            match self.image().brokers.get(&id) {
                Some(b) if b.epoch == epoch && !b.fenced => return true,
                // Fenced, or replaced by a newer registration of this id.
                Some(b) if b.epoch >= epoch => return false,
                _ => {}
            }
            match self.link.heartbeat(id, epoch).await {
                // Not yet trust (the image may still show old leaderships): only the session.
                Ok(beat) if beat.fenced => return false,
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "heartbeat while registering failed"),
            }
            if let Err(e) = self.refresh(HEARTBEAT_INTERVAL).await {
                tracing::debug!(error = %e, "metadata read failed; retrying");
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        }
    }

    /// Tells the MetaServer this broker is stopping (a controlled shutdown): its current
    /// registration is fenced at once, so no new partition is placed on it and its partitions
    /// move now rather than after its session. A restart registers again.
    pub async fn unregister(&self) -> Result<(), m::Error> {
        let fence = Command::FenceBroker {
            id: self.broker_id,
            epoch: self.epoch(),
        };
        self.write(fence).await.map(drop)
    }

    /// A producer id never handed out before, cluster-wide.
    pub async fn allocate_producer_id(&self) -> Result<i64, m::Error> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            let reply = self
                .write(Command::AllocateProducerIds {
                    count: PRODUCER_ID_BLOCK,
                })
                .await?;
            let Reply::ProducerIds { first, count } = reply else {
                return Err(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!(
                    "unexpected reply to a producer-id request: {reply:?}"
                )));
            };
            *ids = (first, first + count);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// Heartbeats every [`HEARTBEAT_INTERVAL`] until `stop`; registers again when fenced.
    pub async fn heartbeat_loop(
        self: Arc<Self>,
        host: String,
        port: u16,
        stop: tokio_util::sync::CancellationToken,
    ) {
        // Failed heartbeats in a row: a MetaServer election fails several 200 ms beats, so
        // only the first is a WARN and the recovery an INFO; the rest are debug.
        let mut failing = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT_INTERVAL) => {}
                _ = stop.cancelled() => return,
            }
            let beat = self.link.heartbeat(self.broker_id, self.epoch()).await;
            if beat.is_ok() && failing > 0 {
                tracing::info!(failed = failing, "heartbeats reach the MetaServer again");
                failing = 0;
            }
            match beat {
                Ok(beat) if !beat.fenced => self.confirm_session(beat.sent),
                // Stopping: the fence is this broker's own controlled shutdown.
                Ok(_) if stop.is_cancelled() => return,
                Ok(_) => {
                    // Fenced: its leaderships are being taken away, so no more trust in them
                    // until the new registration is confirmed.
                    *self.session_confirmed.lock() = None;
                    tracing::warn!(
                        broker = self.broker_id,
                        epoch = self.epoch(),
                        "fenced by the MetaServer (session expired); registering again"
                    );
                    let registering = self.register(&host, port, true);
                    tokio::select! {
                        r = registering => if let Err(e) = r {
                            tracing::error!(error = %e.message, "registering again was refused");
                        },
                        _ = stop.cancelled() => return,
                    }
                }
                Err(e) => {
                    failing = failing.saturating_add(1);
                    if failing == 1 {
                        tracing::warn!(error = %e, "heartbeat failed; retrying");
                    } else {
                        tracing::debug!(error = %e, failed = failing, "heartbeat failed again");
                    }
                }
            }
        }
    }

    /// Keeps the image current until `stop` (subscribers see each newer one).
    pub async fn watch_loop(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        loop {
            let read = tokio::select! {
                r = self.refresh(WATCH_WAIT) => r,
                _ = stop.cancelled() => return,
            };
            match read {
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "metadata watch failed; retrying");
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
