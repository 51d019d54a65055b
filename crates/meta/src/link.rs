//! How a broker reaches the MetaServer: in the same process (the standalone `tinymq server`
//! embeds a single-node MetaServer) or over TCP to any node of a MetaServer group. Both paths
//! run the same [`MetaService`] operations, so the broker behaves the same either way.
//!
//! Over TCP, the image watch (a long poll) and the heartbeats each have a connection of their
//! own, so heartbeats never queue behind the watch or a slow write. A failed connection is
//! replaced by one to the next address.
//!
//! The heartbeat connection is what the broker's trust in its session rests on: the MetaServer
//! ends a broker's session soon after that connection closes from the broker's side, so a
//! heartbeat counts only while the connection it went over is still this link's (see
//! [`MetaLink::heartbeat_path_open_since`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tinymq_client::{ClientError, Connection, NodeRole};
use tinymq_protocol::{messages as m, ErrorCode, Request};

use crate::service::MetaService;
use crate::{Command, MetadataImage, Reply};

/// Time allowed for a write over TCP (forwarding included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Time allowed for a heartbeat: about the broker's trust in its session, past which an
/// answer is of no use; the connection is then replaced by one to the next node.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a write keeps trying while no MetaServer node can be reached or none has a
/// reachable leader (a leader change), before it fails.
pub const WRITE_WAIT_MAX: Duration = Duration::from_secs(15);
/// Pause between those attempts (doubling up to 1 s).
const WRITE_RETRY_BACKOFF: Duration = Duration::from_millis(100);
const WRITE_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The MetaServer answered with an error: a refused command (its code says why), or
    /// `NOT_LEADER` while no leader is elected.
    #[error("MetaServer: {}", .0.message)]
    Server(m::Error),
    /// No MetaServer node could be reached or answered in time; retry.
    #[error("MetaServer unreachable: {0}")]
    Unavailable(String),
}

impl LinkError {
    /// The wire error to pass on to a broker's client.
    pub fn to_wire(&self) -> m::Error {
        match self {
            LinkError::Server(e) => e.clone(),
            LinkError::Unavailable(why) => ErrorCode::REQUEST_TIMED_OUT
                .with_message(format!("the MetaServer is unreachable: {why}")),
        }
    }
}

pub enum MetaLink {
    Local(Arc<MetaService>),
    /// Boxed: it holds the link's connections and security, the local variant one pointer.
    Remote(Box<RemoteMeta>),
}

impl MetaLink {
    /// A link to the MetaServer nodes at `addrs` (any one is enough) for broker `broker_id`.
    pub fn remote(addrs: Vec<String>, broker_id: u32) -> MetaLink {
        MetaLink::remote_secure(addrs, broker_id, tinymq_client::Security::default())
    }

    /// [`MetaLink::remote`] whose connections use `security` (TLS, node login).
    pub fn remote_secure(
        addrs: Vec<String>,
        broker_id: u32,
        security: tinymq_client::Security,
    ) -> MetaLink {
        MetaLink::Remote(Box::new(RemoteMeta {
            addrs,
            broker_id,
            security,
            control: Slot::default(),
            watch: Slot::default(),
            beat: Slot::default(),
            first_addr: AtomicUsize::new(0),
        }))
    }

    /// Applies a metadata command and returns its reply. Rides out a leader change: while no
    /// node can be reached, or the nodes answer `NOT_LEADER` (no leader accepted it), it
    /// tries again, all within [`WRITE_WAIT_MAX`]. A request that was sent but got no answer
    /// is not repeated (it may have been applied); its error says so.
    pub async fn write(&self, command: Command) -> Result<Reply, LinkError> {
        let deadline = tokio::time::Instant::now() + WRITE_WAIT_MAX;
        let mut backoff = WRITE_RETRY_BACKOFF;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let attempt = self.write_once(&command, left.min(REQUEST_TIMEOUT)).await;
            let error = match attempt {
                Ok(reply) => return Ok(reply),
                Err(e) => e,
            };
            let retry = match &error {
                Attempt::NotSent(_) => true,
                Attempt::Done(LinkError::Server(e)) => {
                    e.code == u32::from(ErrorCode::NOT_LEADER.code())
                }
                Attempt::Done(_) => false,
            };
            let error = error.into_link_error();
            if !retry || tokio::time::Instant::now() + backoff > deadline {
                return Err(error);
            }
            tracing::debug!(%error, "MetaServer write not applied yet; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(WRITE_RETRY_BACKOFF_MAX);
        }
    }

    async fn write_once(&self, command: &Command, timeout: Duration) -> Result<Reply, Attempt> {
        let response = match self {
            MetaLink::Local(service) => service.write(command.clone()).await,
            MetaLink::Remote(remote) => {
                let request = m::MetaWriteRequest {
                    command: serde_json::to_vec(command)
                        .expect("command serializes")
                        .into(),
                };
                remote
                    .send_attempt(&remote.control, &request, timeout)
                    .await?
            }
        };
        if let Some(error) = response.error.filter(|e| e.code != 0) {
            return Err(Attempt::Done(LinkError::Server(error)));
        }
        serde_json::from_slice(&response.reply)
            .map_err(|e| Attempt::Done(LinkError::Unavailable(format!("unreadable reply: {e}"))))
    }

    /// The image once it is newer than `since_version` (or after `wait`), with its version.
    pub async fn read(
        &self,
        since_version: u64,
        wait: Duration,
    ) -> Result<(u64, MetadataImage), LinkError> {
        let request = m::MetaReadRequest {
            since_version,
            wait_ms: wait.as_millis().min(u128::from(u32::MAX)) as u32,
        };
        let response = match self {
            MetaLink::Local(service) => service.read(request).await,
            MetaLink::Remote(remote) => remote.watch(&request, wait + REQUEST_TIMEOUT).await?,
        };
        if let Some(error) = response.error.filter(|e| e.code != 0) {
            return Err(LinkError::Server(error));
        }
        let image = serde_json::from_slice(&response.image)
            .map_err(|e| LinkError::Unavailable(format!("unreadable image: {e}")))?;
        Ok((response.version, image))
    }

    /// A MetaServer node's own view (leader, voters, node addresses, image), asked without
    /// waiting: what `tinymq cluster status` shows when pointed at a broker.
    pub async fn status(&self) -> Result<m::MetaReadResponse, LinkError> {
        let request = m::MetaReadRequest {
            since_version: 0,
            wait_ms: 0,
        };
        match self {
            MetaLink::Local(service) => Ok(service.read(request).await),
            MetaLink::Remote(remote) => remote.control(&request, REQUEST_TIMEOUT).await,
        }
    }

    /// Tells the leader that broker `id` (of registration `epoch`) is alive.
    pub async fn heartbeat(&self, broker_id: u32, epoch: u64) -> Result<Beat, LinkError> {
        let request = m::BrokerHeartbeatRequest {
            broker_id,
            epoch,
            ..Default::default()
        };
        let (response, sent) = match self {
            MetaLink::Local(service) => {
                let sent = std::time::Instant::now();
                (service.heartbeat(request).await, sent)
            }
            MetaLink::Remote(remote) => {
                // Stamped with the token of the connection it goes over (see the field).
                let stamped = |connection| m::BrokerHeartbeatRequest {
                    connection,
                    ..request
                };
                let attempt = remote.send_timed::<m::BrokerHeartbeatRequest, _>(
                    &remote.beat,
                    stamped,
                    HEARTBEAT_TIMEOUT,
                );
                attempt.await.map_err(Attempt::into_link_error)?
            }
        };
        match response.error.filter(|e| e.code != 0) {
            Some(error) => Err(LinkError::Server(error)),
            None => Ok(Beat {
                fenced: response.fenced,
                sent,
            }),
        }
    }

    /// Whether the connection heartbeats go over has been this link's, open, since `sent`:
    /// only then does a heartbeat sent at `sent` still vouch for the session. Always, in
    /// process.
    pub fn heartbeat_path_open_since(&self, sent: std::time::Instant) -> bool {
        match self {
            MetaLink::Local(_) => true,
            MetaLink::Remote(remote) => remote.beat.open_since(sent),
        }
    }

    /// The users as the MetaServer lists them: a broker's own image may lack them (only an
    /// authenticated node is sent the users' verifiers).
    pub async fn list_users(&self) -> Result<m::ListUsersResponse, LinkError> {
        match self {
            MetaLink::Local(service) => Ok(crate::security_ops::list_users(&service.node.image())),
            MetaLink::Remote(remote) => {
                remote
                    .control(&m::ListUsersRequest {}, REQUEST_TIMEOUT)
                    .await
            }
        }
    }
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy)]
pub struct Beat {
    /// The broker is fenced and must register again.
    pub fenced: bool,
    /// When it was sent, on the connection it went over.
    pub sent: std::time::Instant,
}

/// One of the link's connections, and when the current one was opened (for
/// [`MetaLink::heartbeat_path_open_since`], which must not wait on the async lock).
#[derive(Default)]
struct Slot {
    /// The connection, and the token this process gave it (nonzero, never given twice).
    connection: tokio::sync::Mutex<Option<(Arc<Connection>, u64)>>,
    current: parking_lot::Mutex<Option<(Arc<Connection>, std::time::Instant)>>,
}

/// A token no other connection of this process had, and (its high bits the clock at start)
/// very likely none of an earlier run of it: what a heartbeat says it came over.
fn connection_token() -> u64 {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicU64> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = now.map_or(1, |d| d.as_nanos() as u64) | 1;
        std::sync::atomic::AtomicU64::new(seed)
    });
    next.fetch_add(1, Ordering::Relaxed).max(1)
}

impl Slot {
    fn open_since(&self, sent: std::time::Instant) -> bool {
        self.current
            .lock()
            .as_ref()
            .is_some_and(|(c, opened)| !c.is_closed() && *opened <= sent)
    }
}

pub struct RemoteMeta {
    addrs: Vec<String>,
    /// Told in the handshake: metadata writes and heartbeats are accepted only from brokers.
    broker_id: u32,
    /// TLS and login of every connection to the MetaServer nodes.
    security: tinymq_client::Security,
    control: Slot,
    watch: Slot,
    /// Heartbeats only: the connection whose close ends this broker's session early.
    beat: Slot,
    /// Where the next connection attempt starts in `addrs`; moves on after a failure, so a
    /// slow or partitioned node is not chosen again first.
    first_addr: AtomicUsize,
}

impl RemoteMeta {
    async fn control<R: Request>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, LinkError> {
        self.send(&self.control, request, timeout).await
    }

    async fn watch<R: Request>(
        &self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, LinkError> {
        self.send(&self.watch, request, timeout).await
    }

    /// Sends on the connection in `slot`, (re)connecting to the first node that answers.
    async fn send<R: Request>(
        &self,
        slot: &Slot,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, LinkError> {
        self.send_attempt(slot, request, timeout)
            .await
            .map_err(Attempt::into_link_error)
    }

    /// [`RemoteMeta::send`], telling a request that never left (no node reachable) from one
    /// that was sent.
    async fn send_attempt<R: Request>(
        &self,
        slot: &Slot,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, Attempt> {
        Ok(self
            .send_timed::<R, &R>(slot, |_| request, timeout)
            .await?
            .0)
    }

    /// [`RemoteMeta::send_attempt`], also answering when the request was sent: after the
    /// connection it went over was chosen, so never before that connection was opened. The
    /// request is made from that connection's token. For heartbeats connecting, too, is
    /// bounded by `timeout` (a node that drops packets moves the next attempt on to the next
    /// node).
    async fn send_timed<R: Request, B: std::borrow::Borrow<R>>(
        &self,
        slot: &Slot,
        request: impl FnOnce(u64) -> B,
        timeout: Duration,
    ) -> Result<(R::Response, std::time::Instant), Attempt> {
        let (connection, token) = {
            let mut kept = slot.connection.lock().await;
            match kept.as_ref().filter(|(c, _)| !c.is_closed()) {
                Some((c, token)) => (c.clone(), *token),
                None => {
                    *slot.current.lock() = None;
                    // Recorded before connecting: every request sent from now on goes over
                    // the new connection (others wait for this lock).
                    let opened = std::time::Instant::now();
                    let connected = if std::ptr::eq(slot, &self.beat) {
                        // A heartbeat late by a 10 s connect would outlive the session.
                        match tokio::time::timeout(timeout, self.connect()).await {
                            Ok(connected) => connected,
                            Err(_) => {
                                self.first_addr.fetch_add(1, Ordering::Relaxed);
                                Err(format!("no MetaServer node answered within {timeout:?}"))
                            }
                        }
                    } else {
                        self.connect().await
                    };
                    let c = Arc::new(connected.map_err(Attempt::NotSent)?);
                    let token = connection_token();
                    *kept = Some((c.clone(), token));
                    *slot.current.lock() = Some((c.clone(), opened));
                    (c, token)
                }
            }
        };
        let sent = std::time::Instant::now();
        match connection.request(request(token).borrow(), timeout).await {
            Ok(response) => Ok((response, sent)),
            Err(ClientError::Server { code, message }) => {
                Err(Attempt::Done(LinkError::Server(code.with_message(message))))
            }
            Err(e) => {
                // Drop this connection (unless another caller already replaced it) and start
                // the next connection attempt at the following node.
                let mut kept = slot.connection.lock().await;
                if kept
                    .as_ref()
                    .is_some_and(|(c, _)| Arc::ptr_eq(c, &connection))
                {
                    *slot.current.lock() = None;
                    *kept = None;
                    self.first_addr.fetch_add(1, Ordering::Relaxed);
                }
                Err(Attempt::Done(LinkError::Unavailable(e.to_string())))
            }
        }
    }

    /// Connects to the first node that answers, starting at `first_addr`; the error lists why
    /// each failed.
    async fn connect(&self) -> Result<Connection, String> {
        let mut errors = Vec::new();
        let first = self.first_addr.load(Ordering::Relaxed);
        for i in 0..self.addrs.len() {
            let addr = &self.addrs[(first + i) % self.addrs.len()];
            let client_id = format!("broker-{}", self.broker_id);
            let id = u64::from(self.broker_id);
            let role = NodeRole::Broker;
            let security = &self.security;
            match Connection::connect_secure(addr, &client_id, "", role, id, security).await {
                Ok(c) => return Ok(c),
                Err(e) => errors.push(format!("{addr}: {e}")),
            }
        }
        Err(errors.join("; "))
    }
}

/// The outcome of one attempt of a request over the link.
enum Attempt {
    /// No MetaServer node could be reached: the request was not sent.
    NotSent(String),
    /// It was sent: the node's answer, or why none came.
    Done(LinkError),
}

impl Attempt {
    fn into_link_error(self) -> LinkError {
        match self {
            Attempt::NotSent(why) => LinkError::Unavailable(why),
            Attempt::Done(e) => e,
        }
    }
}
