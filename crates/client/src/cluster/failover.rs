//! Getting past a stalled node. A stopped broker process keeps its TCP connections open and
//! answers nothing, so waiting on it means waiting out the whole request timeout. Here:
//!
//! - metadata requests ask one node at a time, each for at most [`METADATA_NODE_TIMEOUT`],
//!   nodes that recently let one time out ("suspects") last;
//! - a request to a partition's leader can race [`Cluster::leader_moved`], which, after a
//!   first wait, checks the route every [`LEADER_CHECK_INTERVAL`] through other nodes and
//!   resolves once they name a different leader (or none). Whether giving the request up is
//!   safe is the caller's business: always for reads; for produce only with idempotence,
//!   since the batch is then resent with the same sequence (see `producer/worker.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tinymq_protocol::messages as m;

use super::{every_address_failed, Cluster, TopicRoute};
use crate::error::ClientError;

/// Longest one node may take to answer a metadata request before the next one is asked
/// (capped by the request timeout). A live node answers from memory in milliseconds.
pub const METADATA_NODE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a node that let a metadata request time out is asked last.
pub const SUSPECT_FOR: Duration = Duration::from_secs(30);
/// How long a request to a partition's leader waits before the route is first checked, and
/// how often it is checked again while the request stays unanswered.
pub const LEADER_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The order in which to ask nodes for metadata: live connections, then bootstrap addresses,
/// each skipping suspects and `avoid`; then the suspects, longest-suspected first; `avoid`
/// last of all. No address appears twice.
pub(super) fn order_candidates(
    live: &[String],
    bootstrap: &[String],
    suspects: &HashMap<String, Instant>,
    avoid: Option<&str>,
    now: Instant,
) -> Vec<String> {
    let suspected = |addr: &str| {
        suspects
            .get(addr)
            .is_some_and(|since| now.saturating_duration_since(*since) < SUSPECT_FOR)
    };
    let mut order: Vec<String> = Vec::new();
    for addr in live.iter().chain(bootstrap) {
        if !suspected(addr) && Some(addr.as_str()) != avoid && !order.contains(addr) {
            order.push(addr.clone());
        }
    }
    let mut late: Vec<(&String, Instant)> = suspects
        .iter()
        .filter(|(addr, _)| suspected(addr) && Some(addr.as_str()) != avoid)
        .filter(|(addr, _)| live.contains(addr) || bootstrap.contains(addr))
        .map(|(addr, since)| (addr, *since))
        .collect();
    late.sort_by_key(|(_, since)| *since);
    order.extend(late.into_iter().map(|(addr, _)| addr.clone()));
    if let Some(avoid) = avoid {
        let known = live.iter().chain(bootstrap).any(|a| a == avoid);
        if known && !order.iter().any(|a| a == avoid) {
            order.push(avoid.to_string());
        }
    }
    order
}

/// Where the route says `partition` went if `leader` no longer leads it: the new leader's
/// address, or "no leader". `None` while `leader` still leads it.
pub(super) fn moved_to(route: &TopicRoute, partition: u32, leader: &str) -> Option<String> {
    match route.leaders.get(partition as usize) {
        Some(Some(addr)) if addr == leader => None,
        Some(Some(addr)) => Some(addr.clone()),
        Some(None) | None => Some("no leader".into()),
    }
}

impl Cluster {
    /// Node addresses to try, best first (see [`order_candidates`]).
    pub(super) fn candidates(&self, avoid: Option<&str>) -> Vec<String> {
        let live: Vec<String> = self
            .connections
            .lock()
            .iter()
            .filter(|(_, c)| !c.is_closed())
            .map(|(addr, _)| addr.clone())
            .collect();
        let suspects = self.suspects.lock().clone();
        order_candidates(
            &live,
            &self.config.bootstrap,
            &suspects,
            avoid,
            Instant::now(),
        )
    }

    fn suspect(&self, addr: &str) {
        self.suspects
            .lock()
            .insert(addr.to_string(), Instant::now());
    }

    /// A metadata request, asked of one node after another (connecting if needed), each for
    /// at most [`METADATA_NODE_TIMEOUT`]; `avoid` is asked only if no other node answers.
    pub(super) async fn metadata(
        &self,
        request: &m::MetadataRequest,
        avoid: Option<&str>,
    ) -> Result<m::MetadataResponse, ClientError> {
        let per_node = METADATA_NODE_TIMEOUT.min(self.config.request_timeout);
        let mut failures = Vec::new();
        for addr in self.candidates(avoid) {
            let attempt = async {
                let connection = self.connection(&addr).await?;
                connection.request(request, per_node).await
            };
            match tokio::time::timeout(per_node, attempt).await {
                Ok(Ok(response)) => {
                    self.suspects.lock().remove(&addr);
                    return Ok(response);
                }
                Ok(Err(ClientError::Timeout(ms))) => {
                    self.suspect(&addr);
                    failures.push(node_timed_out(&addr, ms));
                }
                Ok(Err(e)) => failures.push(e),
                Err(_) => {
                    self.suspect(&addr);
                    failures.push(node_timed_out(&addr, per_node.as_millis() as u64));
                }
            }
            tracing::debug!(node = %addr, error = ?failures.last(), "metadata: trying the next node");
        }
        Err(every_address_failed(failures))
    }

    /// Resolves once the route of one of `partitions` names a leader other than `leader` (or
    /// none), checked first after `first_wait`, then every [`LEADER_CHECK_INTERVAL`], through
    /// nodes other than `leader`; never resolves while `leader` still leads them all. Meant to
    /// race a request to `leader`: the error it gives is what that request fails with.
    pub(crate) async fn leader_moved(
        &self,
        partitions: &[(String, u32)],
        leader: &str,
        first_wait: Duration,
    ) -> ClientError {
        if partitions.is_empty() {
            return std::future::pending().await;
        }
        tokio::time::sleep(first_wait).await;
        loop {
            for (topic, partition) in partitions {
                let route = match self.recent_route(topic, leader).await {
                    Ok(route) => route,
                    Err(e) => {
                        tracing::debug!(%topic, error = %e, "route check failed; waiting on");
                        continue;
                    }
                };
                if let Some(to) = moved_to(&route, *partition, leader) {
                    // It left a request unanswered while the cluster moved on: ask it last.
                    self.suspect(leader);
                    tracing::info!(%topic, partition, from = leader, %to,
                        "leader moved while a request to it was unanswered; giving it up");
                    return ClientError::LeaderMoved {
                        topic: topic.clone(),
                        partition: *partition,
                        from: leader.to_string(),
                        to,
                    };
                }
            }
            tokio::time::sleep(LEADER_CHECK_INTERVAL).await;
        }
    }

    /// The route of `topic` fetched within the last half check interval (many requests
    /// waiting on one leader share one refresh), else a fresh one not asked of `avoid`.
    async fn recent_route(
        &self,
        topic: &str,
        avoid: &str,
    ) -> Result<std::sync::Arc<TopicRoute>, ClientError> {
        let cached = self.routes.lock().get(topic).cloned();
        match cached {
            Some(route) if route.fetched.elapsed() < LEADER_CHECK_INTERVAL / 2 => Ok(route),
            _ => self.refresh_avoiding(topic, Some(avoid)).await,
        }
    }
}

fn node_timed_out(addr: &str, ms: u64) -> ClientError {
    ClientError::Connect {
        addr: addr.to_string(),
        reason: format!("no metadata answer within {ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn suspects_and_the_avoided_node_are_asked_last() {
        let now = Instant::now();
        let mut suspects = HashMap::new();
        suspects.insert("b:2".to_string(), now - Duration::from_secs(1));
        suspects.insert("c:3".to_string(), now - Duration::from_secs(5));
        // Long enough ago to be forgiven.
        suspects.insert(
            "d:4".to_string(),
            now - SUSPECT_FOR - Duration::from_secs(1),
        );
        let order = order_candidates(
            &s(&["a:1", "b:2", "c:3"]),
            &s(&["d:4", "a:1", "e:5"]),
            &suspects,
            Some("e:5"),
            now,
        );
        assert_eq!(order, s(&["a:1", "d:4", "c:3", "b:2", "e:5"]));
    }

    #[test]
    fn an_unknown_avoided_node_is_not_asked_and_nothing_is_asked_twice() {
        let order = order_candidates(
            &s(&["a:1"]),
            &s(&["a:1", "b:2"]),
            &HashMap::new(),
            Some("z:9"),
            Instant::now(),
        );
        assert_eq!(order, s(&["a:1", "b:2"]));
    }

    #[test]
    fn a_route_naming_another_leader_or_none_is_a_move() {
        let route = TopicRoute {
            name: "t".into(),
            leaders: vec![Some("a:1".into()), Some("b:2".into()), None],
            fetched: Instant::now(),
        };
        assert_eq!(moved_to(&route, 0, "a:1"), None);
        assert_eq!(moved_to(&route, 1, "a:1").as_deref(), Some("b:2"));
        assert_eq!(moved_to(&route, 2, "a:1").as_deref(), Some("no leader"));
        assert_eq!(moved_to(&route, 3, "a:1").as_deref(), Some("no leader"));
    }
}
