//! `tinymq cluster status`: the MetaServer group (every node, asked directly, up or down, and
//! the Raft leader), the brokers with their liveness, and decommissioned ids. Pointed at a
//! broker, the broker asks a MetaServer node for it; if none answers, the broker's last image
//! is shown with a warning.

use std::time::Duration;
use tinymq_client::Security;

use tinymq_client::Connection;
use tinymq_meta::MetadataImage;
use tinymq_protocol::messages as m;

use crate::outln;

/// How long each MetaServer node gets to answer before it is shown as down.
const NODE_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// One MetaServer node as seen by the tool.
struct NodeState {
    id: u64,
    addr: String,
    /// Index of the last log entry it applied, or why it did not answer.
    answer: Result<u64, String>,
}

pub async fn run(json: bool, bootstrap: &str, security: &Security) -> anyhow::Result<()> {
    let mut last = None;
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match read(addr, Duration::from_secs(10), security).await {
            Ok(read) => return show(read, json, security).await,
            Err(e) => last = Some(e.context(format!("asking {addr}"))),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no --bootstrap address")))
}

async fn read(
    addr: &str,
    timeout: Duration,
    security: &Security,
) -> anyhow::Result<m::MetaReadResponse> {
    let role = tinymq_client::NodeRole::Client;
    let connect = Connection::connect_secure(addr, "tinymq-cluster-status", "", role, 0, security);
    let c = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))??;
    Ok(c.request(&m::MetaReadRequest::default(), timeout).await?)
}

/// Asks every node of the group for its applied version, all at once (so the whole takes at
/// most `NODE_ANSWER_WAIT`).
async fn node_states(nodes: &[m::MetaNodeAddress], security: &Security) -> Vec<NodeState> {
    let mut asks = tokio::task::JoinSet::new();
    for n in nodes {
        let (id, addr, security) = (n.id, n.addr.clone(), security.clone());
        asks.spawn(async move {
            let answer = match read(&addr, NODE_ANSWER_WAIT, &security).await {
                Ok(r) => Ok(r.version),
                Err(e) => Err(format!("{e:#}")),
            };
            NodeState { id, addr, answer }
        });
    }
    let mut states = Vec::with_capacity(nodes.len());
    while let Some(joined) = asks.join_next().await {
        if let Ok(state) = joined {
            states.push(state);
        }
    }
    states.sort_by_key(|s| s.id);
    states
}

async fn show(read: m::MetaReadResponse, json: bool, security: &Security) -> anyhow::Result<()> {
    let warning = read
        .error
        .as_ref()
        .filter(|e| e.code != 0)
        .map(|e| format!("{}: {}", e.error_code().name(), e.message));
    if let Some(w) = &warning {
        eprintln!("warning: {w}");
    }
    let image: MetadataImage = serde_json::from_slice(&read.image)?;
    let nodes = node_states(&read.nodes, security).await;
    let leader = (read.leader != 0).then_some(read.leader);
    if json {
        let meta: Vec<_> = nodes
            .iter()
            .map(|n| {
                serde_json::json!({
                    "id": n.id, "addr": n.addr, "up": n.answer.is_ok(),
                    "leader": Some(n.id) == leader, "voter": read.voters.contains(&n.id),
                    "applied": n.answer.as_ref().ok(), "error": n.answer.as_ref().err(),
                })
            })
            .collect();
        let brokers: Vec<_> = image
            .brokers
            .values()
            .map(|b| serde_json::json!({"id": b.id, "host": b.host, "port": b.port, "epoch": b.epoch, "live": !b.fenced}))
            .collect();
        let out = serde_json::json!({
            "answered_by": (read.node_id != 0).then_some(read.node_id), "leader": leader,
            "voters": read.voters, "meta_nodes": meta, "brokers": brokers,
            "topics": image.topics.keys().collect::<Vec<_>>(),
            "decommissioned_brokers": image.decommissioned_brokers, "warning": warning,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(());
    }
    let leader_text = leader.map_or_else(|| "unknown".to_string(), |l| l.to_string());
    outln!("meta nodes {:?}, leader {leader_text}", read.voters)?;
    for n in &nodes {
        let role = if Some(n.id) == leader {
            "leader"
        } else {
            "follower"
        };
        match &n.answer {
            Ok(version) => outln!("meta {} {} up ({role}, applied {version})", n.id, n.addr)?,
            Err(e) => outln!("meta {} {} down: {e}", n.id, n.addr)?,
        }
    }
    for b in image.brokers.values() {
        let state = if b.fenced { "fenced" } else { "live" };
        outln!(
            "broker {} {}:{} epoch {} {state}",
            b.id,
            b.host,
            b.port,
            b.epoch
        )?;
    }
    for id in &image.decommissioned_brokers {
        outln!("broker {id} decommissioned")?;
    }
    Ok(())
}
