//! Raft messages between MetaServer nodes over the native protocol: each RPC is a `RaftRpc`
//! frame whose body carries the openraft request as JSON, answered with the JSON result.
//! A peer that becomes unreachable is logged once (WARN), and again (INFO) when it answers.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tinymq_client::{Connection, NodeRole};
use tinymq_protocol::messages as m;

use super::TypeConfig;

pub const RPC_APPEND: u32 = 1;
pub const RPC_VOTE: u32 = 2;
pub const RPC_SNAPSHOT: u32 = 3;
/// Time allowed for one Raft RPC.
const RPC_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to peers by the address in their membership entry, identifying as MetaServer
/// node `from` (Raft RPCs are accepted only from MetaServer nodes).
#[derive(Clone, Default)]
pub struct TcpNetwork {
    pub from: u64,
    /// Peers whose last RPC failed to reach them, shared by every link of this node.
    pub unreachable: Arc<Mutex<BTreeSet<u64>>>,
    /// TLS and login of every connection to a peer.
    pub security: tinymq_client::Security,
}

pub struct TcpLink {
    from: u64,
    target: u64,
    addr: String,
    connection: Option<Arc<Connection>>,
    unreachable: Arc<Mutex<BTreeSet<u64>>>,
    security: tinymq_client::Security,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> TcpLink {
        TcpLink {
            from: self.from,
            target,
            addr: node.addr.clone(),
            connection: None,
            unreachable: self.unreachable.clone(),
            security: self.security.clone(),
        }
    }
}

fn network_error<E: std::error::Error>(e: impl std::fmt::Display) -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
}

impl TcpLink {
    /// Logs a change in whether the peer can be reached (openraft's own errors for it are
    /// off by default: it retries every heartbeat).
    fn note_reachable(&self, reachable: bool, error: Option<&str>) {
        let mut unreachable = self.unreachable.lock();
        if reachable && unreachable.remove(&self.target) {
            tracing::info!(peer = self.target, addr = %self.addr, "MetaServer peer reachable again");
        } else if !reachable && unreachable.insert(self.target) {
            tracing::warn!(peer = self.target, addr = %self.addr, error = error.unwrap_or(""),
                "MetaServer peer unreachable; retrying");
        }
    }

    /// Sends one RPC and decodes its result; transport failures become `Unreachable`, so
    /// openraft backs off before trying this peer again.
    async fn call<
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    >(
        &mut self,
        kind: u32,
        request: &Req,
    ) -> Result<Resp, RPCError<u64, BasicNode, E>> {
        // `E` is the whole remote error type (e.g. `RaftError<u64>`), decoded as sent.
        let connection = match self.connection.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => c.clone(),
            None => {
                let client_id = format!("meta-peer-{}", self.target);
                let (role, security) = (NodeRole::Meta, &self.security);
                let c = Connection::connect_secure(
                    &self.addr, &client_id, "", role, self.from, security,
                )
                .await
                .map_err(|e| {
                    self.note_reachable(false, Some(&e.to_string()));
                    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
                })?;
                let c = Arc::new(c);
                self.connection = Some(c.clone());
                c
            }
        };
        let payload = serde_json::to_vec(request).map_err(network_error)?;
        let response = connection
            .request(
                &m::RaftRpcRequest {
                    kind,
                    payload: Bytes::from(payload),
                },
                RPC_TIMEOUT,
            )
            .await
            .map_err(|e| {
                self.connection = None;
                self.note_reachable(false, Some(&e.to_string()));
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
            })?;
        self.note_reachable(true, None);
        let result: Result<Resp, E> =
            serde_json::from_slice(&response.payload).map_err(network_error)?;
        result.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for TcpLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(RPC_APPEND, &rpc).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call(RPC_SNAPSHOT, &rpc).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(RPC_VOTE, &rpc).await
    }
}
