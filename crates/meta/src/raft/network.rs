//! Raft messages between MetaServer nodes over the native protocol: each RPC is a `RaftRpc`
//! frame whose body carries the openraft request as JSON, answered with the JSON result.

use std::sync::Arc;
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
}

pub struct TcpLink {
    from: u64,
    target: u64,
    addr: String,
    connection: Option<Arc<Connection>>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> TcpLink {
        TcpLink {
            from: self.from,
            target,
            addr: node.addr.clone(),
            connection: None,
        }
    }
}

fn network_error<E: std::error::Error>(e: impl std::fmt::Display) -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
}

impl TcpLink {
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
                let c =
                    Connection::connect_as(&self.addr, &client_id, "", NodeRole::Meta, self.from)
                        .await
                        .map_err(|e| {
                            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
                                e.to_string(),
                            )))
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
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e.to_string())))
            })?;
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
