//! One simulated broker holding a replica of the partition: a production [`Partition`] on its
//! own in-memory disk ([`FaultyStorage`]), the metadata image it last received, and the
//! production code paths the broker runs for it — the leader's write path, the follower's
//! fetch request and answer handling ([`fetcher`]), the leader's side of a follower fetch
//! ([`serve`]), the ISR proposal ([`isr`]) and recovery on restart ([`Partition::open_with`]).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tinymq_meta::{Command, MetadataImage, PartitionRecord};
use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::batch::BatchIter;
use tinymq_protocol::messages as m;
use tinymq_storage::fault::{CrashMode, FaultyStorage};

use super::cluster::TOPIC;
use crate::fetch_frame::Records;
use crate::partition::{Partition, PendingAppend, ProduceContext};
use crate::replica::{fetcher, isr, serve, Role};
use crate::topic::TopicSettings;

/// How long a leader keeps a follower that has not caught up in the ISR.
pub const LAG_MAX_MS: i64 = 6_000;
/// How long a follower waits for a fetch's answer before it asks again (the fetch task's
/// timeout plus its long poll).
pub const FETCH_TIMEOUT_MS: i64 = 10_500;

/// One batch of a replica's log: base offset, next offset, the bytes as stored.
pub type Batch = (i64, i64, Bytes);

pub struct Node {
    pub id: u32,
    pub disk: FaultyStorage,
    /// `None` while the broker is down.
    pub partition: Option<Arc<Partition>>,
    /// Bumped at every restart: messages to an earlier incarnation are not delivered.
    pub incarnation: u64,
    /// The metadata image as this broker last received it.
    pub image: Option<MetadataImage>,
    /// The fetch this follower waits for: its id and when it was sent.
    pub fetch_in_flight: Option<(u64, i64)>,
}

impl Node {
    pub fn new(id: u32) -> Node {
        Node {
            id,
            disk: FaultyStorage::new(),
            partition: None,
            incarnation: 0,
            image: None,
            fetch_in_flight: None,
        }
    }

    /// Opens the partition through the production recovery path.
    pub fn start(&mut self, settings: &TopicSettings) -> Result<(), String> {
        let storage = Arc::new(self.disk.clone());
        let p = Partition::open_with(Path::new("/data"), TOPIC, 0, settings, true, storage)
            .map_err(|e| format!("recovery failed: {e}"))?;
        self.partition = Some(Arc::new(p));
        self.incarnation += 1;
        self.image = None;
        self.fetch_in_flight = None;
        Ok(())
    }

    /// Stops the broker: a clean shutdown closes the partition (flush, producer state), a
    /// process kill just drops it, a power cut also loses what the disk had not made durable.
    pub fn stop(&mut self, how: Stop) {
        if let Some(p) = self.partition.take() {
            if how == Stop::Clean {
                // A failed close (a failing disk) is an unclean shutdown after all.
                let _ = p.close();
            }
            drop(p);
        }
        if let Stop::PowerCut(mode) = how {
            self.disk.crash(mode);
        }
    }

    pub fn record(&self) -> Option<&PartitionRecord> {
        self.image.as_ref()?.topics.get(TOPIC)?.partitions.first()
    }

    /// Takes a new image, as reconciliation does: the partition assumes the role it names.
    pub fn take_image(&mut self, image: &MetadataImage, now: i64) {
        self.image = Some(image.clone());
        if let (Some(p), Some(record)) = (&self.partition, self.record()) {
            p.assume_role_at(self.id, record, now);
        }
    }

    /// The role the partition has here, if up.
    pub fn role(&self) -> Option<Role> {
        Some(self.partition.as_ref()?.role.lock().clone())
    }

    /// The fetch this follower sends now, as the fetch task builds it: to whom, in which
    /// leader epoch.
    pub fn fetch_request(&self) -> Option<(u32, u32, m::FetchRequest)> {
        let p = self.partition.as_ref()?;
        let Some(Role::Follower {
            leader: Some(leader),
            leader_epoch,
        }) = self.role()
        else {
            return None;
        };
        let fp = fetcher::fetch_partition(p, leader_epoch);
        let request = fetcher::replica_fetch_request(self.id, vec![fp]);
        Some((leader, leader_epoch, request))
    }

    /// The leader's answer to a follower's fetch, as the fetch handler makes it: every
    /// partition's report noted first, then each read within `budget` bytes.
    pub fn serve(
        &self,
        request: &m::FetchRequest,
        budget: usize,
        now: i64,
    ) -> Vec<m::FetchPartitionResult> {
        let Some(p) = &self.partition else {
            return vec![];
        };
        let led_here = self.record().and_then(|r| r.leader) == Some(self.id);
        let current_leader = || self.record().and_then(|r| r.leader).unwrap_or(0);
        if led_here {
            let registration = self
                .image
                .as_ref()
                .and_then(|image| image.brokers.get(&request.replica_id))
                .map(|b| b.epoch);
            for fp in &request.partitions {
                serve::note_follower_of(p, request.replica_id, fp, now, registration);
            }
        }
        request
            .partitions
            .iter()
            .map(|fp| {
                if !led_here {
                    return refused(fp, current_leader());
                }
                let (mut result, records) =
                    serve::read_led_for_follower(p, fp, budget, current_leader);
                match records {
                    Records::Bytes(bytes) => result.records = bytes,
                    Records::File(_) => return refused(fp, current_leader()),
                }
                result
            })
            .collect()
    }

    /// Applies the leader's answer through the fetch task's own handling; `None` when the
    /// partition no longer follows that leader in that epoch.
    pub fn apply(
        &self,
        leader: u32,
        leader_epoch: u32,
        result: m::FetchPartitionResult,
    ) -> Option<Result<bool, String>> {
        fetcher::apply_current(self.partition.as_ref()?, leader, leader_epoch, result)
    }

    /// A producer's `acks=all` write of `values`, through the produce handler's checks and
    /// the partition's write path: the pending write to wait on, or the refusal.
    pub fn produce(
        &self,
        values: &[&[u8]],
        now: i64,
        min_insync: usize,
    ) -> Result<PendingAppend, String> {
        let p = self.partition.as_ref().ok_or("down")?;
        let record = self.record().ok_or("no image")?;
        if record.leader != Some(self.id) || p.leading_epoch() != Some(record.leader_epoch) {
            return Err("not leader".into());
        }
        if self.isr_len() < min_insync {
            return Err("not enough replicas".into());
        }
        let context = ProduceContext {
            leader_epoch: record.leader_epoch,
            producer_id_end: 0,
            now_ms: now,
        };
        let records = CraftedBatch::honest(now, values).encode();
        let pending = p.write(records, 1_024, context).map_err(|e| e.message)?;
        p.finish(pending).map_err(|e| e.message)?;
        Ok(pending)
    }

    /// The in-sync replicas the partition's leader role counts here, as
    /// `BrokerState::enough_in_sync` does (none for a follower).
    pub fn isr_len(&self) -> usize {
        let Some(p) = &self.partition else { return 0 };
        match &*p.role.lock() {
            Role::Leader(leader) => leader.isr().len(),
            Role::Follower { .. } => 0,
        }
    }

    /// The ISR proposal the leader's ISR check sends now, if any.
    pub fn isr_proposal(&self, broker_epoch: u64, now: i64) -> Option<Command> {
        let p = self.partition.as_ref()?;
        let image = self.image.as_ref()?;
        let record = self.record()?;
        let registration = |id: u32| isr::registration_of(image, id);
        let (isr, partition_epoch) =
            isr::isr_proposal(p, record, self.id, LAG_MAX_MS, now, registration)?;
        Some(Command::AlterPartition {
            topic: TOPIC.into(),
            partition: 0,
            broker_id: self.id,
            broker_epoch,
            leader_epoch: record.leader_epoch,
            partition_epoch,
            isr,
        })
    }

    /// Every batch of the log from `from` (a batch boundary; `None`: the log start), as
    /// stored.
    pub fn batches(&self, from: Option<i64>) -> Result<Vec<Batch>, String> {
        let Some(p) = &self.partition else {
            return Ok(vec![]);
        };
        let start = p.log.log_start_offset();
        let (mut offset, end) = (from.unwrap_or(start).max(start), p.log.log_end_offset());
        let mut out = Vec::new();
        while offset < end {
            let read = p
                .log
                .read(offset, 1 << 20, None)
                .map_err(|e| e.to_string())?;
            let before = offset;
            for batch in BatchIter::new(read.records) {
                let batch = batch.map_err(|e| e.to_string())?;
                if batch.next_offset() <= offset {
                    continue;
                }
                offset = batch.next_offset();
                out.push((batch.base_offset(), batch.next_offset(), batch.into_bytes()));
            }
            if offset == before {
                return Err(format!(
                    "the log reads nothing at {offset} below its end {end}"
                ));
            }
        }
        Ok(out)
    }
}

/// How a broker stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Clean,
    Kill,
    PowerCut(CrashMode),
}

/// A result refusing `fp` (the image does not name this broker the leader).
fn refused(fp: &m::FetchPartition, current_leader: u32) -> m::FetchPartitionResult {
    m::FetchPartitionResult {
        topic: fp.topic.clone(),
        partition: fp.partition,
        high_watermark: -1,
        log_start_offset: -1,
        log_end_offset: -1,
        current_leader,
        error: Some(tinymq_protocol::ErrorCode::NOT_LEADER.with_message("not led here")),
        ..Default::default()
    }
}
