//! What the chaos tool asks of the cluster: each partition's leader and ISR (from every
//! broker, keeping the newest leader epoch each reports), the MetaServer Raft leader, and
//! whether the cluster has settled (every partition led, every replica in sync, every broker
//! agreeing).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tinymq_client::{Connection, PartitionState};
use tinymq_protocol::messages as m;

const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// One broker's answer: its view of every partition of `topic`.
async fn ask_broker(addr: SocketAddr, topic: &str) -> Option<Vec<PartitionState>> {
    let ask = async {
        let c = Connection::connect(&addr.to_string(), "tinymq-chaos", "")
            .await
            .ok()?;
        let request = m::DescribeTopicRequest { name: topic.into() };
        let r = c.request(&request, ASK_TIMEOUT).await.ok()?;
        (r.error.as_ref().is_none_or(|e| e.code == 0)).then_some(r.partitions)
    };
    tokio::time::timeout(ASK_TIMEOUT * 2, ask)
        .await
        .ok()
        .flatten()
}

/// The partitions as the brokers see them, each from the broker that knows the newest leader
/// epoch; also whether every broker answered and agreed.
pub async fn topic_state(fronts: &[SocketAddr], topic: &str) -> (Vec<PartitionState>, bool) {
    let mut merged: Vec<PartitionState> = Vec::new();
    let mut agreed = true;
    for addr in fronts {
        let Some(parts) = ask_broker(*addr, topic).await else {
            agreed = false;
            continue;
        };
        for p in parts {
            let i = p.partition as usize;
            if merged.len() <= i {
                merged.resize_with(i + 1, PartitionState::default);
            }
            let known = &merged[i];
            if known.leader != 0 && known.leader_epoch != p.leader_epoch {
                agreed = false;
            }
            if known.leader == 0 || p.leader_epoch > known.leader_epoch {
                merged[i] = p;
            }
        }
    }
    (merged, agreed)
}

/// The broker leading `partition` now, if any.
pub async fn leader_of(fronts: &[SocketAddr], topic: &str, partition: u32) -> Option<u32> {
    let (parts, _) = topic_state(fronts, topic).await;
    parts
        .get(partition as usize)
        .map(|p| p.leader)
        .filter(|l| *l != 0)
}

/// Partitions `broker` leads now.
pub async fn led_by(fronts: &[SocketAddr], topic: &str, broker: u32) -> Vec<u32> {
    let (parts, _) = topic_state(fronts, topic).await;
    parts
        .iter()
        .filter(|p| p.leader == broker)
        .map(|p| p.partition)
        .collect()
}

/// The MetaServer Raft leader as some node sees it.
pub async fn meta_leader(meta: &[SocketAddr]) -> Option<u32> {
    for addr in meta {
        let ask = async {
            let c = Connection::connect(&addr.to_string(), "tinymq-chaos", "")
                .await
                .ok()?;
            let r = c
                .request(&m::MetaReadRequest::default(), ASK_TIMEOUT)
                .await
                .ok()?;
            u32::try_from(r.leader).ok().filter(|l| *l != 0)
        };
        if let Ok(Some(l)) = tokio::time::timeout(ASK_TIMEOUT * 2, ask).await {
            return Some(l);
        }
    }
    None
}

/// Waits (up to `limit`) until every partition of `topic` has a leader and `replicas` in-sync
/// replicas and every broker agrees; returns whether it got there and how long it took.
pub async fn settle(
    fronts: &[SocketAddr],
    topic: &str,
    partitions: u32,
    replicas: usize,
    limit: Duration,
) -> (bool, Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        let (parts, agreed) = topic_state(fronts, topic).await;
        let done = agreed
            && parts.len() == partitions as usize
            && parts
                .iter()
                .all(|p| p.leader != 0 && p.isr.len() == replicas);
        if done {
            return (true, start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (false, start.elapsed())
}
