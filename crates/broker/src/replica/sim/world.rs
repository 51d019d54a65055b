//! The simulated world: a clock, the MetaServer, three brokers, a network that delivers,
//! drops, delays and reorders their messages, a producer, and a seeded schedule of steps
//! (see [`World::step`]); the invariants ([`super::check`]) run after every step.

use std::collections::BTreeSet;

use tinymq_meta::{Command, PartitionRecord};
use tinymq_protocol::messages as m;

use super::check::{batch_at, Checker};
use super::cluster::Cluster;
use super::node::{Batch, Node, FETCH_TIMEOUT_MS};
use super::rng::Rng;
use super::Stats;
use crate::topic::TopicSettings;

pub const REPLICAS: [u32; 3] = [1, 2, 3];
/// The simulation's clock starts at a plausible wall-clock time (batch timestamps are
/// checked against it).
const START_MS: i64 = 1_700_000_000_000;
const IN_FLIGHT_MAX: usize = 32;

pub enum Dest {
    Meta,
    Broker(u32, u64),
}

pub enum Body {
    Fetch {
        from: u32,
        from_incarnation: u64,
        leader_epoch: u32,
        request: m::FetchRequest,
    },
    Answer {
        request_id: u64,
        leader: u32,
        leader_epoch: u32,
        results: Vec<m::FetchPartitionResult>,
    },
    Alter {
        from: u32,
        from_incarnation: u64,
        command: Command,
    },
    AlterReply {
        record: PartitionRecord,
    },
}

pub struct Msg {
    pub id: u64,
    /// The sending broker (`None`: the MetaServer).
    pub from: Option<u32>,
    pub to: Dest,
    pub body: Body,
}

/// What may have changed in a broker's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Appended,
    Any,
}

/// A write waiting for the high watermark (`acks=all`).
pub struct Write {
    pub node: u32,
    pub incarnation: u64,
    pub epoch: u32,
    pub base: i64,
    pub end: i64,
}

pub struct World {
    pub now: i64,
    pub rng: Rng,
    pub cluster: Cluster,
    pub nodes: Vec<Node>,
    pub settings: TopicSettings,
    pub min_insync: usize,
    pub net: Vec<Msg>,
    /// Brokers cut off from the MetaServer, and from the other brokers.
    pub cut_meta: BTreeSet<u32>,
    pub cut_net: BTreeSet<u32>,
    /// Whether each broker's last stop was clean (for its registration).
    pub clean_stop: Vec<bool>,
    pub writes: Vec<Write>,
    pub checker: Checker,
    /// Each broker's log as of the last check, what may have changed in it since, and a
    /// count of its changes (the checker skips a log that has not changed).
    pub logs: Vec<Vec<Batch>>,
    stale: Vec<Option<Change>>,
    pub generations: Vec<u64>,
    next_id: u64,
    pub trace: Vec<String>,
    pub stats: Stats,
}

impl World {
    pub fn new(seed: u64) -> Result<World, String> {
        let mut rng = Rng::new(seed);
        // Half the seeds flush `always` (an acknowledgement needs an fsync on every in-sync
        // replica), half `os` (the page cache holds writes until the simulated writeback, so
        // a power cut loses acknowledged records on that replica: the MetaServer's rules for
        // an unclean restart must keep them elsewhere).
        let flush = if rng.chance(50) { "always" } else { "os" };
        let settings = TopicSettings {
            flush: flush.into(),
            replication_factor: 3,
            // Small segments: rolls, and truncations across segment boundaries.
            segment_bytes: 2_048,
            message_bytes_max: 1_024,
            retention_ms: -1,
            ..TopicSettings::default()
        };
        let cluster = Cluster::new(&REPLICAS, &settings, START_MS)?;
        let min_insync = cluster
            .image
            .topics
            .get(super::cluster::TOPIC)
            .map_or(1, |t| t.min_insync_replicas().max(1) as usize);
        let mut w = World {
            now: START_MS,
            rng,
            cluster,
            nodes: REPLICAS.iter().map(|&id| Node::new(id)).collect(),
            settings,
            min_insync,
            net: Vec::new(),
            cut_meta: BTreeSet::new(),
            cut_net: BTreeSet::new(),
            clean_stop: vec![true; REPLICAS.len()],
            writes: Vec::new(),
            checker: Checker::default(),
            logs: vec![vec![]; REPLICAS.len()],
            stale: vec![Some(Change::Any); REPLICAS.len()],
            generations: vec![0; REPLICAS.len()],
            next_id: 0,
            trace: Vec::new(),
            stats: Stats::default(),
        };
        w.log(format!("flush {flush}"));
        w.stats.os_flush_seeds = u64::from(flush == "os");
        for i in 0..w.nodes.len() {
            w.nodes[i].start(&w.settings)?;
            let image = w.cluster.image.clone();
            w.nodes[i].take_image(&image, w.now);
        }
        Ok(w)
    }

    pub fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    pub fn index_of(&self, id: u32) -> usize {
        self.nodes.iter().position(|n| n.id == id).unwrap_or(0)
    }

    /// Marks a broker's log as possibly changed in any way (a truncation, a restart).
    pub fn touched(&mut self, i: usize) {
        self.stale[i] = Some(Change::Any);
    }

    /// Marks a broker's log as possibly appended to.
    pub fn appended(&mut self, i: usize) {
        self.stale[i].get_or_insert(Change::Appended);
    }

    /// Reads again what may have changed in every broker's log.
    pub fn refresh_logs(&mut self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            let Some(change) = self.stale[i].take() else {
                continue;
            };
            self.generations[i] += 1;
            let end = self.nodes[i]
                .partition
                .as_ref()
                .map_or(0, |p| p.log.log_end_offset());
            let known = self.logs[i].last().map_or(0, |b| b.1);
            if change == Change::Any || end < known {
                self.logs[i] = self.nodes[i].batches(None)?;
            } else {
                let more = self.nodes[i].batches(Some(known))?;
                self.logs[i].extend(more);
            }
        }
        Ok(())
    }

    /// Whether the network between `from` (`None`: the MetaServer) and `to` is cut.
    pub fn is_cut(&self, from: Option<u32>, to: &Dest) -> bool {
        let blocked = |id: u32, meta: bool| {
            if meta {
                self.cut_meta.contains(&id)
            } else {
                self.cut_net.contains(&id)
            }
        };
        let to_meta = matches!(to, Dest::Meta);
        from.is_some_and(|f| blocked(f, to_meta))
            || matches!(to, Dest::Broker(id, _) if blocked(*id, from.is_none()))
    }

    /// Queues a message, unless the network between the two ends is cut or full; its id.
    pub fn send(&mut self, from: Option<u32>, to: Dest, body: Body) -> Option<u64> {
        if self.is_cut(from, &to) || self.net.len() >= IN_FLIGHT_MAX {
            self.stats.dropped += 1;
            return None;
        }
        let id = self.next_id();
        self.net.push(Msg { id, from, to, body });
        Some(id)
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Settles the writes waiting for `acks=all` as the produce handler's wait does: done
    /// once the high watermark passes the write while the broker still leads in the epoch it
    /// was taken in; failed once it does not lead so any more (or restarted).
    pub fn settle_writes(&mut self) -> Result<(), String> {
        let writes = std::mem::take(&mut self.writes);
        for write in writes {
            let i = self.index_of(write.node);
            let node = &self.nodes[i];
            let leading = node.incarnation == write.incarnation
                && node.partition.as_ref().and_then(|p| p.leading_epoch()) == Some(write.epoch);
            let hw = node.partition.as_ref().map_or(-1, |p| p.high_watermark());
            if !leading {
                self.stats.write_failed += 1;
                self.log(format!(
                    "  write [{}, {}) failed: broker {} no longer leads epoch {}",
                    write.base, write.end, write.node, write.epoch
                ));
                continue;
            }
            if hw < write.end {
                self.writes.push(write);
                continue;
            }
            // The produce handler's check after the wait: a write on fewer disks than
            // `min_insync_replicas` is answered NOT_ENOUGH_REPLICAS, not acknowledged.
            if self.nodes[i].isr_len() < self.min_insync {
                self.stats.write_failed += 1;
                self.log(format!(
                    "  write [{}, {}) failed: the ISR shrank below the minimum",
                    write.base, write.end
                ));
                continue;
            }
            let log = self.nodes[i].batches(Some(write.base))?;
            let Some((_, _, bytes)) = batch_at(&log, write.base) else {
                return Err(format!(
                    "broker {} acknowledged [{}, {}) but holds no batch there",
                    write.node, write.base, write.end
                ));
            };
            self.checker
                .acknowledge(write.base, bytes.clone(), write.epoch)?;
            self.stats.acked += 1;
            self.log(format!(
                "  acked [{}, {}) epoch {}",
                write.base, write.end, write.epoch
            ));
        }
        Ok(())
    }

    /// A one-line state, for traces and failures.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if let Some(r) = self.cluster.record() {
            out.push_str(&format!(
                "meta: leader {:?} epoch {} isr {:?} pe {}\n",
                r.leader, r.leader_epoch, r.isr, r.partition_epoch
            ));
        }
        for n in &self.nodes {
            match &n.partition {
                None => out.push_str(&format!("broker {}: down\n", n.id)),
                Some(p) => out.push_str(&format!(
                    "broker {} inc {}: {} log [{}, {}) durable {} hw {} latest epoch {:?}\n",
                    n.id,
                    n.incarnation,
                    super::steps::role_line(n.role().as_ref()),
                    p.log.log_start_offset(),
                    p.log.log_end_offset(),
                    p.log.durable_offset(),
                    p.high_watermark(),
                    p.log.latest_epoch(),
                )),
            }
        }
        out
    }

    /// Whether a follower may send a fetch now (one at a time, or after a timeout).
    pub fn may_fetch(&self, i: usize) -> bool {
        self.nodes[i]
            .fetch_in_flight
            .is_none_or(|(_, sent)| self.now - sent > FETCH_TIMEOUT_MS)
    }
}
