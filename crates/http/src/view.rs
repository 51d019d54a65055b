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
}

/// The Raft state of a MetaServer node (one running in this process).
#[derive(Debug, Clone)]
pub struct RaftStats {
    pub node_id: u64,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
}

/// The native port's connection counts.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionCounts {
    pub open: u64,
    pub accepted: u64,
    pub refused: u64,
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
}

impl std::fmt::Debug for dyn NodeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeView({})", self.role())
    }
}
