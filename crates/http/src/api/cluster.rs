//! `GET /api/v1/cluster`: the MetaServer group (each node asked directly, up or down, the
//! Raft leader) and the brokers with their liveness, from the metadata image.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use tinymq_client::{Connection, NodeRole, Security};
use tinymq_protocol::messages as m;
use utoipa::ToSchema;

use super::{ApiState, Problem, META_NODE_ANSWER_WAIT};

#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterInfo {
    /// Empty until the MetaServer has set it.
    pub cluster_id: String,
    pub meta: MetaInfo,
    pub brokers: Vec<BrokerInfo>,
    /// Set when the answering broker could not reach a MetaServer node: its last image is
    /// shown.
    pub warning: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetaInfo {
    /// The Raft leader's node id, if one is known.
    pub leader: Option<u64>,
    pub nodes: Vec<MetaNodeInfo>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MetaNodeInfo {
    pub id: u64,
    /// The node's native address.
    pub address: String,
    /// Whether it answered within 2 s.
    pub up: bool,
    /// Index of the last Raft log entry it applied (when up).
    pub applied_index: Option<u64>,
    pub leader: bool,
    pub voter: bool,
    /// Why it is shown as down.
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BrokerInfo {
    pub id: u32,
    /// The broker's native address, `host:port`.
    pub address: String,
    /// Registered and not fenced.
    pub alive: bool,
    /// Changes at every registration.
    pub epoch: u64,
}

/// The parts of the metadata image the API reads.
#[derive(Deserialize)]
pub(super) struct Image {
    #[serde(default)]
    pub cluster_id: String,
    #[serde(default)]
    pub brokers: std::collections::BTreeMap<String, ImageBroker>,
    #[serde(default)]
    pub topics: std::collections::BTreeMap<String, ImageTopic>,
}

/// A topic of the metadata image: only its stored settings (placement comes from Metadata).
#[derive(Deserialize)]
pub(super) struct ImageTopic {
    #[serde(default)]
    pub config: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(super) struct ImageBroker {
    pub id: u32,
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub epoch: u64,
    #[serde(default)]
    pub fenced: bool,
}

/// A connection to the node at `addr` with the caller's security (TLS, impersonation).
async fn connect(
    addr: &str,
    security: &Security,
) -> Result<Connection, tinymq_client::ClientError> {
    Connection::connect_secure(addr, "tinymq-http", "", NodeRole::Client, 0, security).await
}

/// Asks the node at `addr` (any role answers it) for the metadata image.
pub(crate) async fn read_image(
    addr: SocketAddr,
    wait: Duration,
    security: &Security,
) -> Result<(m::MetaReadResponse, Image), Problem> {
    let asked = tokio::time::timeout(wait, async {
        let c = connect(&addr.to_string(), security).await?;
        c.request(&m::MetaReadRequest::default(), wait).await
    })
    .await;
    let read = match asked {
        Ok(answer) => answer?,
        Err(_) => {
            return Err(Problem::unavailable(format!(
                "this node's native port ({addr}) did not answer within {wait:?}"
            )))
        }
    };
    let image: Image = serde_json::from_slice(&read.image).map_err(|e| {
        Problem::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "UNKNOWN_SERVER_ERROR",
            format!("the metadata image is not readable: {e}"),
        )
    })?;
    Ok((read, image))
}

/// The MetaServer nodes, their Raft leader, and the brokers.
#[utoipa::path(
    get,
    path = "/cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "The cluster", body = ClusterInfo),
        (status = 503, description = "No node of the cluster answered", body = Problem,
         content_type = "application/problem+json"),
        (status = 502, description = "A node answered something unreadable", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn get_cluster(State(state): State<ApiState>) -> Result<Json<ClusterInfo>, Problem> {
    // Asked of this node itself: every role answers it, even with no broker live.
    let security = state.security();
    let wait = META_NODE_ANSWER_WAIT.mul_f64(2.0);
    let (read, image) = read_image(state.native()?, wait, &security).await?;
    let warning = read
        .error
        .as_ref()
        .filter(|e| e.code != 0)
        .map(|e| format!("{}: {}", e.error_code().name(), e.message));
    let leader = (read.leader != 0).then_some(read.leader);
    let nodes = ask_nodes(&read.nodes, leader, &read.voters, &security).await;
    let brokers = image
        .brokers
        .into_values()
        .map(|b| BrokerInfo {
            id: b.id,
            address: format!("{}:{}", b.host, b.port),
            alive: !b.fenced,
            epoch: b.epoch,
        })
        .collect();
    Ok(Json(ClusterInfo {
        cluster_id: image.cluster_id,
        meta: MetaInfo { leader, nodes },
        brokers,
        warning,
    }))
}

/// Asks every MetaServer node for its applied index, all at once.
async fn ask_nodes(
    nodes: &[m::MetaNodeAddress],
    leader: Option<u64>,
    voters: &[u64],
    security: &Security,
) -> Vec<MetaNodeInfo> {
    let mut asks = tokio::task::JoinSet::new();
    for n in nodes {
        let (id, addr) = (n.id, n.addr.clone());
        let security = security.clone();
        asks.spawn(async move {
            let asked = tokio::time::timeout(META_NODE_ANSWER_WAIT, async {
                let c = connect(&addr, &security).await?;
                c.request(&m::MetaReadRequest::default(), META_NODE_ANSWER_WAIT)
                    .await
            })
            .await;
            let answer = match asked {
                Ok(Ok(r)) => Ok(r.version),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {META_NODE_ANSWER_WAIT:?}")),
            };
            (id, addr, answer)
        });
    }
    let mut out = Vec::with_capacity(nodes.len());
    while let Some(joined) = asks.join_next().await {
        let Ok((id, address, answer)) = joined else {
            continue;
        };
        out.push(MetaNodeInfo {
            id,
            address,
            up: answer.is_ok(),
            applied_index: answer.as_ref().ok().copied(),
            leader: Some(id) == leader,
            voter: voters.contains(&id),
            error: answer.err(),
        });
    }
    out.sort_by_key(|n| n.id);
    out
}
