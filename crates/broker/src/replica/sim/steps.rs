//! The seeded schedule: each step is one event — a produce, a follower fetch sent, a message
//! delivered (or dropped), time passing (heartbeats, session expiry), a broker taking the
//! latest image, a leader's ISR check, a crash or restart, a network cut or heal, a disk
//! fault, a preferred-leader election, a consumer read — chosen by weight from the seed.

use tinymq_storage::fault::{CrashMode, Faults};

use super::node::Stop;
use super::world::{Body, Dest, World, Write};
use crate::replica::Role;

impl World {
    /// One step of the schedule.
    pub fn step(&mut self) -> Result<(), String> {
        let before = self.cluster.record().cloned();
        // Per mille: mostly traffic, with a fault every few dozen steps.
        match self.rng.below(1_000) {
            0..=179 => self.produce(),
            180..=399 => self.send_fetch(),
            400..=729 => self.deliver()?,
            730..=799 => self.pass_time(),
            800..=899 => self.sync_image(),
            900..=939 => self.isr_check(),
            940..=942 => self.stop_broker(),
            943..=959 => self.restart_broker()?,
            960..=965 => self.cut_or_heal(),
            966..=969 => self.disk_fault(),
            970..=972 => self.preferred_election(),
            _ => self.consume()?,
        }
        let after = self.cluster.record().cloned();
        if before != after {
            if let Some(r) = &after {
                if before.as_ref().map(|b| b.leader_epoch) != Some(r.leader_epoch) {
                    self.stats.leader_epochs += 1;
                }
                self.log(format!(
                    "  meta: leader {:?} epoch {} isr {:?} pe {}",
                    r.leader, r.leader_epoch, r.isr, r.partition_epoch
                ));
            }
        }
        self.settle_writes()
    }

    fn up(&mut self) -> Option<usize> {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].partition.is_some())
            .collect();
        (!up.is_empty()).then(|| up[self.rng.index(up.len())])
    }

    fn produce(&mut self) {
        // The producer's metadata is the MetaServer's, or (a stale client) any broker.
        let i = match self.cluster.record().and_then(|r| r.leader) {
            Some(l) if self.rng.chance(85) => self.index_of(l),
            _ => self.rng.index(self.nodes.len()),
        };
        let count = 1 + self.rng.below(3) as usize;
        let value = self.stats.produced;
        let values: Vec<Vec<u8>> = (0..count)
            .map(|k| format!("v{value}.{k}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        self.stats.produced += 1;
        let node = &self.nodes[i];
        let (id, incarnation) = (node.id, node.incarnation);
        match node.produce(&refs, self.now, self.min_insync) {
            Ok(pending) => {
                self.log(format!(
                    "produce to {id}: [{}, {}) epoch {}",
                    pending.base_offset, pending.end_offset, pending.leader_epoch
                ));
                self.writes.push(Write {
                    node: id,
                    incarnation,
                    epoch: pending.leader_epoch,
                    base: pending.base_offset,
                    end: pending.end_offset,
                });
            }
            Err(e) => {
                self.stats.refused += 1;
                self.log(format!("produce to {id}: refused ({e})"));
            }
        }
        self.appended(i);
    }

    fn send_fetch(&mut self) {
        let Some(i) = self.up() else { return };
        if !self.may_fetch(i) {
            return;
        }
        let Some((leader, leader_epoch, request)) = self.nodes[i].fetch_request() else {
            return;
        };
        let (from, from_incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        let to_incarnation = self.nodes[self.index_of(leader)].incarnation;
        let fp = &request.partitions[0];
        self.log(format!(
            "fetch {from} -> {leader}: offset {} epoch {:?} durable {} (e{leader_epoch})",
            fp.offset, fp.last_fetched_epoch, fp.replica_durable_end
        ));
        let body = Body::Fetch {
            from,
            from_incarnation,
            leader_epoch,
            request,
        };
        let sent = self.send(Some(from), Dest::Broker(leader, to_incarnation), body);
        // A lost request is waited for as long as one whose answer is lost.
        let id = sent.unwrap_or_else(|| self.next_id());
        self.nodes[i].fetch_in_flight = Some((id, self.now));
    }

    fn pass_time(&mut self) {
        let ms = 10 + self.rng.below(1_500) as i64;
        self.now += ms;
        for i in 0..self.nodes.len() {
            let id = self.nodes[i].id;
            if self.nodes[i].partition.is_some() && !self.cut_meta.contains(&id) {
                match self.cluster.heartbeat(id, self.now) {
                    Ok(true) => self.log(format!("  {id} registers again after its fence")),
                    Ok(false) => {}
                    Err(e) => self.log(format!("  {id} cannot register again: {e}")),
                }
            }
        }
        let fenced = self.cluster.expire_sessions(self.now);
        self.log(format!(
            "time +{ms}ms{}",
            if fenced.is_empty() {
                String::new()
            } else {
                format!(", fenced {fenced:?}")
            }
        ));
        self.stats.fenced += fenced.len() as u64;
        // The page cache writes back (under `os`; under `always` all is synced already).
        for n in &self.nodes {
            if let Some(p) = n.partition.as_ref().filter(|_| self.rng.chance(40)) {
                // A failing disk fails the log; the broker notices on its next write.
                let _ = p.log.flush();
            }
        }
        // A transient disk fault passes.
        if self.rng.chance(30) {
            for n in &self.nodes {
                n.disk.set_faults(Faults::default());
            }
        }
    }

    fn sync_image(&mut self) {
        let Some(i) = self.up() else { return };
        if self.cut_meta.contains(&self.nodes[i].id) {
            return;
        }
        let image = self.cluster.image.clone();
        let now = self.now;
        self.nodes[i].take_image(&image, now);
        let role = self.nodes[i].role();
        let id = self.nodes[i].id;
        self.log(format!("image -> {id}: {}", role_line(role.as_ref())));
    }

    fn isr_check(&mut self) {
        let Some(i) = self.up() else { return };
        let id = self.nodes[i].id;
        let epoch = self.cluster.broker_epoch(id).unwrap_or(0);
        let Some(command) = self.nodes[i].isr_proposal(epoch, self.now) else {
            return;
        };
        self.log(format!("isr check {id}: {command:?}"));
        let from_incarnation = self.nodes[i].incarnation;
        let body = Body::Alter {
            from: id,
            from_incarnation,
            command,
        };
        self.send(Some(id), Dest::Meta, body);
    }

    fn stop_broker(&mut self) {
        let Some(i) = self.up() else { return };
        let how = match self.rng.below(4) {
            0 => Stop::Clean,
            1 => Stop::Kill,
            2 => Stop::PowerCut(CrashMode::LoseUnsynced),
            _ => Stop::PowerCut(CrashMode::KeepUnsyncedPrefix(self.rng.below(300) as usize)),
        };
        self.stats.count_stop(how);
        let id = self.nodes[i].id;
        self.log(format!("stop {id}: {how:?}"));
        self.nodes[i].stop(how);
        self.nodes[i].disk.set_faults(Faults::default());
        self.clean_stop[i] = how == Stop::Clean;
        self.touched(i);
    }

    fn restart_broker(&mut self) -> Result<(), String> {
        let down: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].partition.is_none())
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        let i = down[self.rng.index(down.len())];
        let id = self.nodes[i].id;
        if self.cut_meta.contains(&id) {
            // A broker opens its partitions once registered, from the image it then gets.
            return Ok(());
        }
        self.nodes[i].start(&self.settings)?;
        self.touched(i);
        self.stats.restarts += 1;
        let p = self.nodes[i].partition.clone();
        let (end, durable) = p.map_or((0, 0), |p| (p.log.log_end_offset(), p.log.durable_offset()));
        self.log(format!(
            "restart {id}: recovered log end {end} durable {durable}"
        ));
        self.cluster.register(id, self.clean_stop[i], self.now)?;
        let image = self.cluster.image.clone();
        self.nodes[i].take_image(&image, self.now);
        Ok(())
    }

    /// Heals a cut (most of the time, when there is one: cuts are short) or cuts a broker
    /// off from the MetaServer or from the other brokers.
    fn cut_or_heal(&mut self) {
        let cuts: Vec<(bool, u32)> = (self.cut_meta.iter().map(|&id| (true, id)))
            .chain(self.cut_net.iter().map(|&id| (false, id)))
            .collect();
        let (meta, id, cut) = if !cuts.is_empty() && self.rng.chance(85) {
            let (meta, id) = cuts[self.rng.index(cuts.len())];
            (meta, id, false)
        } else {
            let id = self.nodes[self.rng.index(self.nodes.len())].id;
            (self.rng.chance(50), id, true)
        };
        let set = if meta {
            &mut self.cut_meta
        } else {
            &mut self.cut_net
        };
        if cut {
            set.insert(id);
            self.stats.cuts += 1;
        } else {
            set.remove(&id);
        }
        let what = if meta { "metaserver" } else { "brokers" };
        self.log(format!(
            "{} {id} from the {what}",
            if cut { "cut" } else { "heal" }
        ));
    }

    fn disk_fault(&mut self) {
        let Some(i) = self.up() else { return };
        let bytes = self.rng.below(200) as usize;
        let kind = self.rng.index(3);
        let mut fault = Faults::each_write_fault(bytes)[kind].clone();
        if let Some(left) = fault.space_bytes_left.as_mut() {
            *left = bytes as u64;
        }
        self.stats.count_disk_fault(kind);
        let id = self.nodes[i].id;
        self.log(format!("disk fault on {id}: {fault:?}"));
        self.nodes[i].disk.set_faults(fault);
    }

    fn preferred_election(&mut self) {
        if let Err(e) = self.cluster.elect_preferred() {
            self.log(format!("preferred election refused: {e}"));
        } else {
            self.log("preferred election".into());
        }
    }

    fn consume(&mut self) -> Result<(), String> {
        let Some(i) = self.up() else { return Ok(()) };
        let Some(p) = self.nodes[i].partition.clone() else {
            return Ok(());
        };
        if !matches!(self.nodes[i].role(), Some(Role::Leader(_))) {
            return Ok(());
        }
        let hw = p.high_watermark();
        let offset = self.rng.below(hw.max(0) as u64 + 1) as i64;
        let budget = 1 + self.rng.below(4_096) as usize;
        self.stats.consumed += 1;
        match crate::fetch_frame::read_records(&p, offset, budget, Some(hw)) {
            Ok(crate::fetch_frame::Records::Bytes(bytes)) => self.check_consumed(i, bytes, hw),
            Ok(crate::fetch_frame::Records::File(_)) => Ok(()),
            Err(e) => {
                self.log(format!("consume from {}: {e:?}", self.nodes[i].id));
                Ok(())
            }
        }
    }
}

/// A role for the trace.
pub fn role_line(role: Option<&Role>) -> String {
    match role {
        None => "down".into(),
        Some(Role::Leader(l)) => format!("leader e{} isr {:?}", l.leader_epoch, l.isr()),
        Some(Role::Follower {
            leader,
            leader_epoch,
        }) => format!("follower of {leader:?} e{leader_epoch}"),
    }
}
