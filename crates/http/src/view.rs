//! The read-only view of a node the HTTP listener serves from: what a broker or MetaServer
//! exposes to it, taken fresh at every scrape or health check.

/// One partition held by this node.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    pub topic: String,
    pub partition: u32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    pub segment_count: u64,
    /// Produced to and fetched by consumers from this partition here since it was opened.
    pub traffic: Traffic,
}

/// Records and bytes in (appended by produce) and out (returned to consumers).
#[derive(Debug, Clone, Copy, Default)]
pub struct Traffic {
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

/// A histogram's buckets, each `(upper bound, count)` and not cumulative; the last bound is
/// `f64::MAX` (`+Inf`).
#[derive(Debug, Clone, Default)]
pub struct HistogramData {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
}

impl HistogramData {
    pub fn count(&self) -> u64 {
        self.buckets
            .iter()
            .fold(0u64, |a, (_, n)| a.saturating_add(*n))
    }
}

/// One operation of the native protocol: requests answered, errors by code, latency.
#[derive(Debug, Clone)]
pub struct OpStats {
    /// snake_case, e.g. `produce`.
    pub op: String,
    pub count: u64,
    /// `(ErrorCode name, count)` for codes seen.
    pub errors: Vec<(&'static str, u64)>,
    pub duration_seconds: HistogramData,
}

/// One consumer group this node coordinates.
#[derive(Debug, Clone)]
pub struct GroupStats {
    pub group: String,
    pub members: u64,
    pub generation: u64,
    /// `(topic, partition, lag)` where the group has a committed offset and this node knows
    /// the partition's high watermark.
    pub lag: Vec<(String, u32, i64)>,
}

/// A broker's own figures.
#[derive(Debug, Clone, Default)]
pub struct BrokerStats {
    /// Totals over every partition ever held here (monotonic while partitions come and go).
    pub traffic: Traffic,
    /// The MetaServer confirmed this broker's registration recently.
    pub registered: bool,
    pub fsync_seconds: HistogramData,
    pub batch_records: HistogramData,
    pub batch_bytes: HistogramData,
    /// Partitions led here whose ISR is smaller than their replica set.
    pub under_replicated_partitions: u64,
    /// Partitions of the cluster without a leader, as this broker's metadata shows them.
    pub offline_partitions: u64,
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    /// The log cleaner (compaction) in this process.
    pub cleaner: CleanerFigures,
    /// Throttling by quotas, per principal (with limiters on this broker now) and kind.
    pub quota_throttles: Vec<QuotaThrottle>,
}

/// How much one principal's quota of one kind (`produce`, `fetch`, `request`) has throttled it.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaThrottle {
    pub principal: String,
    pub kind: &'static str,
    pub throttle_seconds: f64,
    pub throttled_requests: u64,
}

/// The Raft state of a MetaServer node (one running in this process).
#[derive(Debug, Clone)]
pub struct RaftStats {
    pub node_id: u64,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    /// On the leader only: the highest index a majority of the voters store.
    pub commit_index: Option<u64>,
}

/// The native port's connection counts.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionCounts {
    pub open: u64,
    pub accepted: u64,
    pub refused: u64,
    /// Closed after `idle_timeout_ms` without a frame.
    pub idle_closed: u64,
}

/// One condition of readiness, named, with what is missing when it does not hold.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReadinessCheck {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// What a node shows its HTTP listener. Calls may block briefly on the node's own locks; the
/// listener makes them on a blocking thread.
pub trait NodeView: Send + Sync + 'static {
    /// "broker", "server" or "meta".
    fn role(&self) -> &'static str;
    /// The partitions this node holds (none for a MetaServer node).
    fn partitions(&self) -> Vec<PartitionStats>;
    /// The Raft state, if a MetaServer node runs in this process.
    fn raft(&self) -> Option<RaftStats>;
    /// The native port's connection counts.
    fn connections(&self) -> ConnectionCounts;
    /// Every condition of readiness; the node is ready when all hold.
    fn readiness(&self) -> Vec<ReadinessCheck>;
    /// The native port's requests, by operation (those with at least one request).
    fn requests(&self) -> Vec<OpStats> {
        Vec::new()
    }
    /// The Kafka listener's connection counts, if it runs in this process.
    fn kafka_connections(&self) -> Option<ConnectionCounts> {
        None
    }
    /// The native operations the Kafka listener's requests became, by operation.
    fn kafka_requests(&self) -> Vec<OpStats> {
        Vec::new()
    }
    /// The broker's figures, if a broker runs in this process.
    fn broker(&self) -> Option<BrokerStats> {
        None
    }
    /// The consumer groups this node coordinates.
    fn groups(&self) -> Vec<GroupStats> {
        Vec::new()
    }
    /// `user`'s stored SCRAM credential for `mechanism` from the node's metadata image (HTTP
    /// Basic passwords are checked against it); `None` for an unknown user.
    fn credential(
        &self,
        _user: &str,
        _mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        None
    }
}

impl std::fmt::Debug for dyn NodeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeView({})", self.role())
    }
}

/// What the log cleaner did in this process, and what waits for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerFigures {
    pub passes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    pub failures: u64,
    /// Bytes of compacted logs not cleaned yet, at the last check.
    pub dirty_bytes: u64,
    /// The largest dirty ratio of a compacted log, at the last check.
    pub dirty_ratio_max: f64,
}
