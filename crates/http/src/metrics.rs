//! `/metrics`: prometheus-client collectors that read the node's view, the listener's counters
//! and the process's `/proc` entries at scrape time, so a scrape costs nothing between scrapes.
//!
//! Cardinality is bounded: at most `partition_series_max` partitions get their own series
//! (the first by topic and index); the node totals always cover every partition.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::listener::ConnectionCounters;
use crate::{HistogramData, NodeSlot, PartitionStats};

pub(crate) struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub fn new(
        node: Arc<NodeSlot>,
        counters: Arc<ConnectionCounters>,
        partition_series_max: usize,
    ) -> Metrics {
        let mut registry = Registry::with_prefix("tinymq");
        registry.register_collector(Box::new(NodeCollector {
            node,
            partition_series_max,
        }));
        registry.register_collector(Box::new(HttpCollector(counters)));
        registry.register_collector(Box::new(ProcessCollector));
        Metrics { registry }
    }

    /// The OpenMetrics text of one scrape.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

pub(crate) type Labels = Vec<(&'static str, String)>;

pub(crate) fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        ConstGauge::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// One series without labels.
pub(crate) fn gauge1(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// One series without labels, fractional.
pub(crate) fn gauge1_f64(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

pub(crate) fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

pub(crate) fn counters(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        ConstCounter::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

/// Histograms, one per label set (an empty set for a single series).
pub(crate) fn histograms(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, &HistogramData)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in series {
        // An empty label set would print as `{}`.
        if labels.is_empty() {
            metric.encode_histogram::<NoLabelSet>(h.sum, h.count(), &h.buckets, None)?;
        } else {
            let mut family = metric.encode_family(labels)?;
            family.encode_histogram::<NoLabelSet>(h.sum, h.count(), &h.buckets, None)?;
        }
    }
    Ok(())
}

/// Saturating: a count past `i64::MAX` is not a real case, and a scrape must not fail on it.
pub(crate) fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[derive(Debug)]
struct NodeCollector {
    node: Arc<NodeSlot>,
    partition_series_max: usize,
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(node) = self.node.get() else {
            return Ok(());
        };
        let mut partitions = node.partitions();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        self.encode_totals(&mut encoder, &partitions)?;
        let shown = partitions.len().min(self.partition_series_max);
        encode_partitions(&mut encoder, &partitions[..shown])?;
        let c = node.connections();
        gauge1(
            &mut encoder,
            "connections_open",
            "Open connections to the native port.",
            as_i64(c.open),
        )?;
        counter(
            &mut encoder,
            "connections_accepted",
            "Connections the native port accepted.",
            c.accepted,
        )?;
        counter(
            &mut encoder,
            "connections_refused",
            "Native-port connections refused with LIMIT_EXCEEDED: connections_max were open.",
            c.refused,
        )?;
        counter(
            &mut encoder,
            "connections_idle_closed",
            "Native-port connections closed after idle_timeout_ms without a frame.",
            c.idle_closed,
        )?;
        crate::node_metrics::requests(&mut encoder, &node.requests())?;
        if let Some(k) = node.kafka_connections() {
            crate::node_metrics::kafka_connections(&mut encoder, &k)?;
            crate::node_metrics::kafka_requests(&mut encoder, &node.kafka_requests())?;
        }
        if let Some(broker) = node.broker() {
            crate::node_metrics::broker(&mut encoder, &broker)?;
            let throttles = &broker.quota_throttles;
            crate::node_metrics::quotas(&mut encoder, throttles, self.partition_series_max)?;
        }
        let groups = node.groups();
        crate::node_metrics::groups(&mut encoder, &groups, self.partition_series_max)?;
        if let Some(raft) = node.raft() {
            let node_label: Labels = vec![("node", raft.node_id.to_string())];
            let one = |v: i64| [(node_label.clone(), v)];
            let index = |v: Option<u64>| v.map_or(-1, as_i64);
            gauge(
                &mut encoder,
                "meta_raft_term",
                "Raft term this MetaServer node is in.",
                &one(as_i64(raft.term)),
            )?;
            gauge(
                &mut encoder,
                "meta_raft_leader",
                "Id of the Raft leader this node knows, -1 if none.",
                &one(raft.leader.map_or(-1, as_i64)),
            )?;
            gauge(
                &mut encoder,
                "meta_raft_last_log_index",
                "Index of the last entry in this node's Raft log, -1 if empty.",
                &one(index(raft.last_log_index)),
            )?;
            gauge(
                &mut encoder,
                "meta_raft_applied_index",
                "Index of the last Raft entry applied to the metadata, -1 if none.",
                &one(index(raft.applied_index)),
            )?;
            if let Some(commit_index) = raft.commit_index {
                gauge(
                    &mut encoder,
                    "meta_raft_commit_index",
                    "On the Raft leader: the highest log index a majority of voters store.",
                    &one(as_i64(commit_index)),
                )?;
            }
        }
        Ok(())
    }
}

impl NodeCollector {
    fn encode_totals(
        &self,
        encoder: &mut DescriptorEncoder,
        partitions: &[PartitionStats],
    ) -> Result<(), std::fmt::Error> {
        let bytes: u64 = partitions.iter().map(|p| p.size_bytes).sum();
        gauge1(
            encoder,
            "partitions",
            "Partitions held by this node.",
            as_i64(partitions.len() as u64),
        )?;
        gauge1(
            encoder,
            "log_size_bytes_all",
            "Bytes of log segments over every partition held here.",
            as_i64(bytes),
        )?;
        let omitted = partitions.len().saturating_sub(self.partition_series_max);
        gauge1(
            encoder,
            "partition_series_omitted",
            "Partitions without their own series (past partition_series_max).",
            as_i64(omitted as u64),
        )
    }
}

fn encode_partitions(
    encoder: &mut DescriptorEncoder,
    partitions: &[PartitionStats],
) -> Result<(), std::fmt::Error> {
    let labels = |p: &PartitionStats| -> Labels {
        vec![
            ("topic", p.topic.clone()),
            ("partition", p.partition.to_string()),
        ]
    };
    let series = |f: &dyn Fn(&PartitionStats) -> i64| -> Vec<(Labels, i64)> {
        partitions.iter().map(|p| (labels(p), f(p))).collect()
    };
    gauge(
        encoder,
        "partition_log_start_offset",
        "First offset still in the partition's log.",
        &series(&|p| p.log_start_offset),
    )?;
    gauge(
        encoder,
        "partition_log_end_offset",
        "Offset the partition's next record gets.",
        &series(&|p| p.log_end_offset),
    )?;
    gauge(
        encoder,
        "partition_high_watermark",
        "End of what consumers may read.",
        &series(&|p| p.high_watermark),
    )?;
    gauge(
        encoder,
        "partition_log_size_bytes",
        "Bytes of the partition's log segments.",
        &series(&|p| as_i64(p.size_bytes)),
    )?;
    gauge(
        encoder,
        "partition_segments",
        "Log segments of the partition.",
        &series(&|p| as_i64(p.segment_count)),
    )?;
    let totals = |f: &dyn Fn(&PartitionStats) -> u64| -> Vec<(Labels, u64)> {
        partitions.iter().map(|p| (labels(p), f(p))).collect()
    };
    counters(
        encoder,
        "partition_bytes_in",
        "Bytes of batches appended to the partition by produce here.",
        &totals(&|p| p.traffic.bytes_in),
    )?;
    counters(
        encoder,
        "partition_records_in",
        "Records appended to the partition by produce here.",
        &totals(&|p| p.traffic.records_in),
    )?;
    counters(
        encoder,
        "partition_bytes_out",
        "Bytes of batches of the partition returned to consumers here.",
        &totals(&|p| p.traffic.bytes_out),
    )?;
    counters(
        encoder,
        "partition_records_out",
        "Records of the partition returned to consumers here.",
        &totals(&|p| p.traffic.records_out),
    )
}

#[derive(Debug)]
struct HttpCollector(Arc<ConnectionCounters>);

impl Collector for HttpCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        let open = c.open.load(Ordering::Relaxed);
        gauge1(
            &mut encoder,
            "http_connections_open",
            "Open connections to the HTTP listener.",
            as_i64(open),
        )?;
        counter(
            &mut encoder,
            "http_connections_accepted",
            "Connections the HTTP listener accepted.",
            c.accepted.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_connections_refused",
            "HTTP connections closed at once: http_connections_max were open.",
            c.refused.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_connections_idle_closed",
            "HTTP connections closed after http_idle_timeout_ms without a byte moving.",
            c.idle_closed.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_requests_slow_closed",
            "HTTP connections closed because a request was not received and answered within http_request_timeout_ms + http_idle_timeout_ms of its first byte.",
            c.slow_closed.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_connections_tls_failed",
            "HTTPS connections closed in their TLS handshake (a failed handshake, or plain HTTP sent to the HTTPS listener).",
            c.tls_failed.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_auth_failed",
            "HTTP requests refused for credentials that did not verify (a wrong password, an unknown user, a bad or expired token).",
            c.auth_failed.load(Ordering::Relaxed),
        )
    }
}

#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A figure /proc does not give (another OS, a hardened /proc) is left out, not zero.
        let stat = crate::process::stat();
        if let Some(s) = &stat {
            let cpu = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time of this process.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(s.cpu_seconds).encode(cpu)?;
            gauge1(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory of this process.",
                as_i64(s.rss_bytes),
            )?;
        }
        if let Some(n) = crate::process::open_fds() {
            gauge1(
                &mut encoder,
                "process_open_fds",
                "Open file descriptors of this process.",
                as_i64(n),
            )?;
        }
        Ok(())
    }
}
