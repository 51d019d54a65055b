//! The read-only views of a broker and of a MetaServer node that a node's HTTP listener
//! serves metrics, health and readiness from ([`tinymq_http::NodeView`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tinymq_broker::state::BrokerState;
use tinymq_http::{
    BrokerStats, ConnectionCounts, GroupStats, HistogramData, NodeView, OpStats, PartitionStats,
    RaftStats, ReadinessCheck, Traffic,
};
use tinymq_meta::raft::MetaNode;
use tinymq_protocol::stats::HistogramSnapshot;

/// A broker (with its embedded MetaServer node, for `tinymq server`).
pub struct BrokerView {
    pub state: Arc<BrokerState>,
    pub meta: Option<Arc<MetaNode>>,
    /// The Kafka listener's connections and requests, when it runs.
    pub kafka: Option<Arc<tinymq_net::ConnectionStats>>,
}

impl NodeView for BrokerView {
    fn credential(
        &self,
        user: &str,
        mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        use tinymq_auth::CredentialLookup;
        self.state.cluster.image().credential(user, mechanism)
    }

    fn role(&self) -> &'static str {
        if self.meta.is_some() {
            "server"
        } else {
            "broker"
        }
    }

    fn partitions(&self) -> Vec<PartitionStats> {
        let stats = |p: &tinymq_broker::partition::Partition| PartitionStats {
            topic: p.topic.clone(),
            partition: p.index,
            log_start_offset: p.log.log_start_offset(),
            log_end_offset: p.log.log_end_offset(),
            high_watermark: p.high_watermark(),
            size_bytes: p.log.size_bytes(),
            segment_count: p.log.segment_count() as u64,
            traffic: traffic(p.traffic.snapshot()),
        };
        self.state
            .all_partitions()
            .iter()
            .map(|p| stats(p))
            .collect()
    }

    fn raft(&self) -> Option<RaftStats> {
        self.meta.as_deref().map(raft_stats)
    }

    fn connections(&self) -> ConnectionCounts {
        counts(&self.state.connections)
    }

    fn readiness(&self) -> Vec<ReadinessCheck> {
        let joined = self.state.cluster.session_current();
        let failures = self.state.open_failure_count();
        let mut checks = vec![
            ReadinessCheck {
                name: "cluster_joined",
                ok: joined,
                detail: if joined {
                    "registered with a current MetaServer session".into()
                } else {
                    "no MetaServer session confirmed recently".into()
                },
            },
            ReadinessCheck {
                name: "partitions_opened",
                ok: failures == 0,
                detail: format!("{failures} partition(s) placed here failed to open"),
            },
        ];
        if let Some(meta) = &self.meta {
            checks.push(leader_check(meta));
        }
        checks
    }

    fn requests(&self) -> Vec<OpStats> {
        requests(&self.state.connections)
    }

    fn kafka_connections(&self) -> Option<ConnectionCounts> {
        self.kafka.as_deref().map(counts)
    }

    fn kafka_requests(&self) -> Vec<OpStats> {
        self.kafka.as_deref().map(requests).unwrap_or_default()
    }

    fn broker(&self) -> Option<BrokerStats> {
        let node = tinymq_broker::stats::node();
        let image = self.state.cluster.image();
        let me = self.state.node_id();
        let records = image.topics.values().flat_map(|t| t.partitions.iter());
        let (mut under_replicated, mut offline) = (0, 0);
        for p in records {
            if p.leader.is_none() {
                offline += 1;
            } else if p.leader == Some(me) && p.isr.len() < p.replicas.len() {
                under_replicated += 1;
            }
        }
        Some(BrokerStats {
            traffic: traffic(node.traffic.snapshot()),
            registered: self.state.cluster.session_current(),
            fsync_seconds: histogram(tinymq_broker::stats::fsyncs().snapshot(), 1e-9),
            batch_records: histogram(node.batch_records.snapshot(), 1.0),
            batch_bytes: histogram(node.batch_bytes.snapshot(), 1.0),
            under_replicated_partitions: under_replicated,
            offline_partitions: offline,
            isr_shrinks: node.isr_shrinks.load(Ordering::Relaxed),
            isr_expands: node.isr_expands.load(Ordering::Relaxed),
            cleaner: cleaner_figures(),
            quota_throttles: quota_throttles(&self.state.quotas),
        })
    }

    /// Lag from the high watermark of the partition's copy here (leader or follower); a
    /// partition with no copy on this broker has no lag series here.
    fn groups(&self) -> Vec<GroupStats> {
        let groups = &self.state.groups;
        let describe = |name: String| {
            let d = groups.describe(&name)?;
            let lag = d
                .offsets
                .iter()
                .filter(|o| o.offset >= 0)
                .filter_map(|o| {
                    let p = self.state.local_partition(&o.topic, o.partition)?;
                    let lag = p.high_watermark().saturating_sub(o.offset).max(0);
                    Some((o.topic.clone(), o.partition, lag))
                })
                .collect();
            Some(GroupStats {
                group: name,
                members: d.members.len() as u64,
                generation: u64::from(d.generation),
                lag,
            })
        };
        groups.list().into_iter().filter_map(describe).collect()
    }
}

fn quota_throttles(quotas: &tinymq_broker::quota::Quotas) -> Vec<tinymq_http::QuotaThrottle> {
    let throttle = |t: tinymq_broker::quota::ThrottleStats| tinymq_http::QuotaThrottle {
        principal: t.principal,
        kind: t.kind.name(),
        throttle_seconds: t.throttle_seconds,
        throttled_requests: t.throttled_requests,
    };
    quotas.stats().into_iter().map(throttle).collect()
}

fn traffic(t: tinymq_broker::stats::TrafficSnapshot) -> Traffic {
    Traffic {
        bytes_in: t.bytes_in,
        records_in: t.records_in,
        bytes_out: t.bytes_out,
        records_out: t.records_out,
    }
}

/// A recorded histogram with its bounds multiplied by `scale` (nanoseconds to seconds).
fn histogram(s: HistogramSnapshot, scale: f64) -> HistogramData {
    let bounds = s.bounds.iter().map(|b| *b as f64 * scale).chain([f64::MAX]);
    HistogramData {
        buckets: bounds.zip(s.counts.iter().copied()).collect(),
        sum: s.sum as f64 * scale,
    }
}

fn requests(stats: &tinymq_net::ConnectionStats) -> Vec<OpStats> {
    let ops = stats.requests.snapshot().into_iter();
    ops.map(|o| OpStats {
        op: snake_case(o.op.name()),
        count: o.count,
        errors: o.errors.iter().map(|(c, n)| (c.name(), *n)).collect(),
        duration_seconds: histogram(o.duration, 1e-9),
    })
    .collect()
}

/// `ListOffsets` → `list_offsets`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A MetaServer node (`tinymq meta`).
pub struct MetaView {
    pub node: Arc<MetaNode>,
    pub connections: Arc<tinymq_net::ConnectionStats>,
}

impl NodeView for MetaView {
    fn role(&self) -> &'static str {
        "meta"
    }

    fn credential(
        &self,
        user: &str,
        mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        use tinymq_auth::CredentialLookup;
        self.node.image().credential(user, mechanism)
    }

    fn partitions(&self) -> Vec<PartitionStats> {
        Vec::new()
    }

    fn raft(&self) -> Option<RaftStats> {
        Some(raft_stats(&self.node))
    }

    fn connections(&self) -> ConnectionCounts {
        counts(&self.connections)
    }

    fn readiness(&self) -> Vec<ReadinessCheck> {
        vec![leader_check(&self.node)]
    }

    fn requests(&self) -> Vec<OpStats> {
        requests(&self.connections)
    }
}

fn counts(stats: &tinymq_net::ConnectionStats) -> ConnectionCounts {
    ConnectionCounts {
        open: stats.open(),
        accepted: stats.accepted(),
        refused: stats.refused(),
        idle_closed: stats.idle_closed(),
    }
}

fn raft_stats(node: &MetaNode) -> RaftStats {
    let metrics = node.raft.metrics();
    let m = metrics.borrow();
    RaftStats {
        node_id: node.id,
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        applied_index: m.last_applied.map(|id| id.index),
        commit_index: m.replication.as_ref().and_then(|replication| {
            let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
            let matched = |id: u64| {
                let replicated = replication.get(&id).copied().flatten().map(|l| l.index);
                // The leader's own log counts as matched up to its last entry.
                if id == node.id {
                    replicated.max(m.last_log_index)
                } else {
                    replicated
                }
            };
            quorum_index(voters.iter().map(|&id| matched(id)))
        }),
    }
}

/// The highest log index stored by a majority of the voters whose matched indexes are given
/// (`None`: nothing known to be stored), or `None` when no majority stores any entry. This is
/// the leader's commit index except for the rule that an entry of an older term is committed
/// only with a later one, which can only make it larger than the true commit index while a
/// new leader has not yet committed an entry of its own term.
fn quorum_index(matched: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    let mut indexes: Vec<Option<u64>> = matched.collect();
    if indexes.is_empty() {
        return None;
    }
    // Largest first; the majority-th largest is stored by a majority.
    indexes.sort_unstable_by(|a, b| b.cmp(a));
    indexes[indexes.len() / 2]
}

fn leader_check(node: &MetaNode) -> ReadinessCheck {
    let leader = node.current_leader();
    ReadinessCheck {
        name: "meta_leader_known",
        ok: leader.is_some(),
        detail: match leader {
            Some(id) => format!("the MetaServer leader is node {id}"),
            None => "no MetaServer leader known (an election may be under way)".into(),
        },
    }
}

/// The log cleaner's figures for metrics.
fn cleaner_figures() -> tinymq_http::CleanerFigures {
    let c = tinymq_broker::cleaner::stats();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    tinymq_http::CleanerFigures {
        passes: load(&c.passes),
        bytes_read: load(&c.bytes_read),
        bytes_written: load(&c.bytes_written),
        records_removed: load(&c.records_removed),
        failures: load(&c.failures),
        dirty_bytes: load(&c.dirty_bytes),
        dirty_ratio_max: load(&c.dirty_ratio_max_millionths) as f64 / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::quorum_index;

    #[test]
    fn quorum_index_is_the_index_a_majority_stores() {
        assert_eq!(quorum_index([Some(9)].into_iter()), Some(9));
        assert_eq!(
            quorum_index([Some(9), Some(7), Some(3)].into_iter()),
            Some(7)
        );
        assert_eq!(quorum_index([Some(9), None, None].into_iter()), None);
        assert_eq!(
            quorum_index([Some(9), Some(8), Some(5), Some(2)].into_iter()),
            Some(5)
        );
        assert_eq!(quorum_index(std::iter::empty()), None);
    }
}
