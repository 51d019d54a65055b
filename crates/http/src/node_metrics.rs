//! The node's series beyond its partitions' logs: native-protocol requests per operation, the
//! Kafka listener's connections and requests,
//! the broker's traffic, disk and replication figures, and consumer groups with their lag.
//! All are taken from the [`crate::NodeView`] at scrape time.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use crate::metrics::{as_i64, counter, counters, gauge, gauge1, histograms, Labels};
use crate::{BrokerStats, ConnectionCounts, GroupStats, OpStats, QuotaThrottle};

type Result = std::result::Result<(), std::fmt::Error>;

pub(crate) fn requests(encoder: &mut DescriptorEncoder, ops: &[OpStats]) -> Result {
    requests_of(
        encoder,
        "",
        "Native-protocol requests answered, by operation.",
        ops,
    )
}

/// The Kafka listener's connections: the same counts as the native port's, under `kafka_`.
pub(crate) fn kafka_connections(encoder: &mut DescriptorEncoder, c: &ConnectionCounts) -> Result {
    let open = as_i64(c.open);
    gauge1(
        encoder,
        "kafka_connections_open",
        "Open connections to the Kafka port.",
        open,
    )?;
    let accepted = "Connections the Kafka port accepted.";
    counter(encoder, "kafka_connections_accepted", accepted, c.accepted)?;
    let refused = "Kafka-port connections closed at once: connections_max were open.";
    counter(encoder, "kafka_connections_refused", refused, c.refused)?;
    let idle = "Kafka-port connections closed after idle_timeout_ms with nothing in flight.";
    counter(
        encoder,
        "kafka_connections_idle_closed",
        idle,
        c.idle_closed,
    )
}

/// The Kafka listener's requests, by the native operation each became (`kafka_requests`, …).
pub(crate) fn kafka_requests(encoder: &mut DescriptorEncoder, ops: &[OpStats]) -> Result {
    let help =
        "Kafka-port requests answered through the broker, by the native operation each became.";
    requests_of(encoder, "kafka_", help, ops)
}

fn requests_of(
    encoder: &mut DescriptorEncoder,
    prefix: &str,
    help: &str,
    ops: &[OpStats],
) -> Result {
    let op = |o: &OpStats| -> Labels { vec![("op", o.op.clone())] };
    let counts: Vec<(Labels, u64)> = ops.iter().map(|o| (op(o), o.count)).collect();
    counters(encoder, &format!("{prefix}requests"), help, &counts)?;
    let errors: Vec<(Labels, u64)> = ops
        .iter()
        .flat_map(|o| {
            o.errors.iter().map(|(code, n)| {
                let labels = vec![("op", o.op.clone()), ("code", (*code).to_string())];
                (labels, *n)
            })
        })
        .collect();
    counters(
        encoder,
        &format!("{prefix}request_errors"),
        "Errors answered, by operation and error code: a response's own, and each partition's in produce and fetch.",
        &errors,
    )?;
    let durations: Vec<_> = ops.iter().map(|o| (op(o), &o.duration_seconds)).collect();
    histograms(
        encoder,
        &format!("{prefix}request_duration_seconds"),
        "Time from a request's arrival to its response being ready, by operation.",
        &durations,
    )
}

pub(crate) fn broker(encoder: &mut DescriptorEncoder, b: &BrokerStats) -> Result {
    let t = &b.traffic;
    counter(
        encoder,
        "bytes_in",
        "Bytes of batches appended by produce on this node (leader appends, not replica copies).",
        t.bytes_in,
    )?;
    counter(
        encoder,
        "records_in",
        "Records appended by produce on this node.",
        t.records_in,
    )?;
    counter(
        encoder,
        "bytes_out",
        "Bytes of batches returned to consumers (not to follower replicas).",
        t.bytes_out,
    )?;
    counter(
        encoder,
        "records_out",
        "Records returned to consumers.",
        t.records_out,
    )?;
    gauge1(
        encoder,
        "broker_registered",
        "1 while the MetaServer has confirmed this broker's registration recently, else 0.",
        i64::from(b.registered),
    )?;
    histograms(
        encoder,
        "fsync_duration_seconds",
        "Time of each fsync of a segment's log file (its count is the number of fsyncs).",
        &[(vec![], &b.fsync_seconds)],
    )?;
    histograms(
        encoder,
        "produce_batch_records",
        "Records per batch appended by produce.",
        &[(vec![], &b.batch_records)],
    )?;
    histograms(
        encoder,
        "produce_batch_bytes",
        "Bytes per batch appended by produce.",
        &[(vec![], &b.batch_bytes)],
    )?;
    gauge1(
        encoder,
        "under_replicated_partitions",
        "Partitions led here with fewer in-sync replicas than replicas.",
        as_i64(b.under_replicated_partitions),
    )?;
    gauge1(
        encoder,
        "offline_partitions",
        "Partitions of the cluster without a leader, in this broker's metadata.",
        as_i64(b.offline_partitions),
    )?;
    counter(
        encoder,
        "isr_shrinks",
        "Changes to the ISR of a partition led here that removed a replica.",
        b.isr_shrinks,
    )?;
    counter(
        encoder,
        "isr_expands",
        "Changes to the ISR of a partition led here that added a replica.",
        b.isr_expands,
    )?;
    cleaner(encoder, &b.cleaner)
}

/// The log cleaner's figures (docs/storage.md, "Compaction").
fn cleaner(encoder: &mut DescriptorEncoder, c: &crate::view::CleanerFigures) -> Result {
    let totals = [
        (
            "cleaner_passes",
            "Cleaning passes over a compacted log.",
            c.passes,
        ),
        (
            "cleaner_read_bytes",
            "Bytes the cleaner read.",
            c.bytes_read,
        ),
        (
            "cleaner_written_bytes",
            "Bytes the cleaner wrote.",
            c.bytes_written,
        ),
        (
            "cleaner_records_removed",
            "Records the cleaner removed (older ones of a key, expired tombstones).",
            c.records_removed,
        ),
        (
            "cleaner_failures",
            "Cleaning passes that failed.",
            c.failures,
        ),
    ];
    for (name, help, value) in totals {
        counter(encoder, name, help, value)?;
    }
    gauge1(
        encoder,
        "cleaner_dirty_bytes",
        "Bytes of compacted logs not cleaned yet (the cleaner's lag), at its last check.",
        as_i64(c.dirty_bytes),
    )?;
    crate::metrics::gauge1_f64(
        encoder,
        "cleaner_dirty_ratio_max",
        "The largest share of a compacted log's cleanable bytes not cleaned yet.",
        c.dirty_ratio_max,
    )
}

/// Throttling by quotas: at most `series_max` series of each (the first by principal and
/// kind); only principals throttled at least once, with limiters on this broker now, appear.
pub(crate) fn quotas(
    encoder: &mut DescriptorEncoder,
    throttles: &[QuotaThrottle],
    series_max: usize,
) -> Result {
    let shown = &throttles[..throttles.len().min(series_max)];
    let labels = |t: &QuotaThrottle| -> Labels {
        vec![
            ("principal", t.principal.clone()),
            ("kind", t.kind.to_string()),
        ]
    };
    let mut metric = encoder.encode_descriptor(
        "quota_throttle_seconds",
        "Delay imposed on a principal's requests by its quota of one kind (produce, fetch or request bytes/rates) on this broker; a request over two quotas waits for the longer, so kinds may overlap.",
        None,
        MetricType::Counter,
    )?;
    for t in shown {
        ConstCounter::new(t.throttle_seconds).encode(metric.encode_family(&labels(t))?)?;
    }
    let counts: Vec<(Labels, u64)> = shown
        .iter()
        .map(|t| (labels(t), t.throttled_requests))
        .collect();
    counters(
        encoder,
        "quota_throttled_requests",
        "Requests (or fetch responses) of a principal delayed by its quota of one kind on this broker.",
        &counts,
    )
}

/// At most `series_max` groups, and `series_max` lag series in all, get series (the first by
/// name); the others are counted in `group_series_omitted`.
pub(crate) fn groups(
    encoder: &mut DescriptorEncoder,
    groups: &[GroupStats],
    series_max: usize,
) -> Result {
    let mut sorted: Vec<&GroupStats> = groups.iter().collect();
    sorted.sort_by(|a, b| a.group.cmp(&b.group));
    let shown = &sorted[..sorted.len().min(series_max)];
    let group = |g: &GroupStats| -> Labels { vec![("group", g.group.clone())] };
    let members: Vec<_> = shown
        .iter()
        .map(|g| (group(g), as_i64(g.members)))
        .collect();
    gauge(
        encoder,
        "group_members",
        "Members of a consumer group this node coordinates.",
        &members,
    )?;
    let generations: Vec<_> = shown
        .iter()
        .map(|g| (group(g), as_i64(g.generation)))
        .collect();
    gauge(
        encoder,
        "group_generation",
        "Generation of a consumer group this node coordinates.",
        &generations,
    )?;
    let all_lags = shown.iter().flat_map(|g| {
        g.lag.iter().map(|(topic, partition, lag)| {
            let labels = vec![
                ("group", g.group.clone()),
                ("topic", topic.clone()),
                ("partition", partition.to_string()),
            ];
            (labels, *lag)
        })
    });
    let lags: Vec<(Labels, i64)> = all_lags.take(series_max).collect();
    gauge(
        encoder,
        "group_lag",
        "High watermark minus the group's committed offset, for partitions whose high watermark this node knows.",
        &lags,
    )?;
    let lag_total: usize = groups.iter().map(|g| g.lag.len()).sum();
    let omitted = (groups.len() - shown.len()) + lag_total.saturating_sub(lags.len());
    gauge1(
        encoder,
        "group_series_omitted",
        "Groups and lag series left out past http_partition_series_max.",
        as_i64(omitted as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;
    use prometheus_client::registry::Registry;

    #[derive(Debug)]
    struct Groups(Vec<GroupStats>, usize);

    impl Collector for Groups {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result {
            groups(&mut encoder, &self.0, self.1)
        }
    }

    fn group(name: &str, lags: u32) -> GroupStats {
        GroupStats {
            group: name.into(),
            members: 1,
            generation: 3,
            lag: (0..lags).map(|p| ("t".to_string(), p, 7)).collect(),
        }
    }

    fn encode(groups: Vec<GroupStats>, series_max: usize) -> String {
        let mut registry = Registry::with_prefix("tinymq");
        registry.register_collector(Box::new(Groups(groups, series_max)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn group_series_stop_at_the_limit_and_say_how_many_were_left_out() {
        let text = encode(vec![group("b", 2), group("a", 2), group("c", 1)], 3);
        let lines = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
        // The first three groups by name, the first three lag series over them.
        assert_eq!(lines("tinymq_group_members{"), 3);
        assert_eq!(lines("tinymq_group_lag{"), 3);
        assert!(text.contains(r#"tinymq_group_lag{group="a",topic="t",partition="0"} 7"#));
        assert!(!text.contains(r#"group="c",topic"#), "{text}");
        assert!(text.contains("tinymq_group_series_omitted 2\n"), "{text}");

        let text = encode(vec![group("a", 1), group("b", 1)], 1);
        assert!(!text.contains(r#"group="b""#), "{text}");
        // One group and one lag series left out.
        assert!(text.contains("tinymq_group_series_omitted 2\n"), "{text}");
    }

    #[derive(Debug)]
    struct Quotas(Vec<QuotaThrottle>, usize);

    impl Collector for Quotas {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result {
            quotas(&mut encoder, &self.0, self.1)
        }
    }

    #[test]
    fn quota_series_carry_principal_and_kind_and_stop_at_the_limit() {
        let throttle = |principal: &str, kind: &'static str| QuotaThrottle {
            principal: principal.into(),
            kind,
            throttle_seconds: 1.5,
            throttled_requests: 3,
        };
        let all = vec![
            throttle("User:alice", "fetch"),
            throttle("User:alice", "produce"),
            throttle("User:bob", "request"),
        ];
        let mut registry = Registry::with_prefix("tinymq");
        registry.register_collector(Box::new(Quotas(all, 2)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("# TYPE tinymq_quota_throttle_seconds counter"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"tinymq_quota_throttle_seconds_total{principal="User:alice",kind="fetch"} 1.5"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"tinymq_quota_throttled_requests_total{principal="User:alice",kind="produce"} 3"#
            ),
            "{text}"
        );
        assert!(!text.contains("User:bob"), "{text}");
    }
}
