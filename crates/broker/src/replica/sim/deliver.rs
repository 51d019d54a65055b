//! Message delivery: any message in flight may be delivered next (reordering), or dropped;
//! one to a broker that restarted since it was sent, or across a cut, is lost. The receiving
//! side runs the production code: the leader's side of a follower fetch, the follower's
//! handling of the answer, the MetaServer's `AlterPartition`, the leader taking its reply.

use tinymq_protocol::batch::BatchIter;

use super::world::{Body, Dest, Msg, World};

impl World {
    /// Delivers (or drops) one message in flight.
    pub fn deliver(&mut self) -> Result<(), String> {
        if self.net.is_empty() {
            return Ok(());
        }
        let msg = self.net.remove(self.rng.index(self.net.len()));
        let stopped = |id: u32, incarnation: u64| {
            let node = &self.nodes[self.index_of(id)];
            node.partition.is_none() || node.incarnation != incarnation
        };
        // A stopped process's connections are gone: what it sent is not served.
        let sender_gone = match &msg.body {
            Body::Fetch {
                from,
                from_incarnation,
                ..
            } => stopped(*from, *from_incarnation),
            _ => false,
        };
        let gone = sender_gone
            || match msg.to {
                Dest::Meta => false,
                Dest::Broker(id, incarnation) => stopped(id, incarnation),
            };
        if gone || self.rng.chance(4) || self.is_cut(msg.from, &msg.to) {
            self.stats.dropped += 1;
            self.log(format!("drop message {}", msg.id));
            self.connection_lost(&msg);
            return Ok(());
        }
        let i = match msg.to {
            Dest::Meta => return self.at_meta(msg.body),
            Dest::Broker(id, _) => self.index_of(id),
        };
        match msg.body {
            Body::Fetch {
                from,
                from_incarnation,
                leader_epoch,
                request,
            } => {
                let budget = 1 + self.rng.below(3_000) as usize;
                let results = self.nodes[i].serve(&request, budget, self.now);
                let leader = self.nodes[i].id;
                let hw = self.nodes[i]
                    .partition
                    .as_ref()
                    .map_or(-1, |p| p.high_watermark());
                self.log(format!("serve {from} at {leader}: hw {hw}"));
                let body = Body::Answer {
                    request_id: msg.id,
                    leader,
                    leader_epoch,
                    results,
                };
                self.send(Some(leader), Dest::Broker(from, from_incarnation), body);
            }
            Body::Answer {
                request_id,
                leader,
                leader_epoch,
                results,
            } => self.at_follower(i, request_id, leader, leader_epoch, results),
            Body::AlterReply { record } => {
                let (id, now) = (self.nodes[i].id, self.now);
                if let Some(p) = &self.nodes[i].partition {
                    p.assume_role_at(id, &record, now);
                }
                self.log(format!(
                    "alter reply -> {id}: isr {:?} pe {}",
                    record.isr, record.partition_epoch
                ));
            }
            Body::Alter { .. } => {}
        }
        Ok(())
    }

    /// A lost fetch or answer: mostly the follower's connection broke and it fetches again
    /// (after a backoff, which the schedule stands for); else it waits for its timeout.
    fn connection_lost(&mut self, msg: &Msg) {
        let (follower, request_id) = match (&msg.body, &msg.to) {
            (Body::Fetch { from, .. }, _) => (*from, msg.id),
            (Body::Answer { request_id, .. }, Dest::Broker(to, _)) => (*to, *request_id),
            _ => return,
        };
        let i = self.index_of(follower);
        if self.nodes[i].fetch_in_flight.map(|f| f.0) == Some(request_id) && self.rng.chance(95) {
            self.nodes[i].fetch_in_flight = None;
        }
    }

    fn at_meta(&mut self, body: Body) -> Result<(), String> {
        let Body::Alter {
            from,
            from_incarnation,
            command,
        } = body
        else {
            return Ok(());
        };
        match self.cluster.alter(&command) {
            Ok(record) => {
                self.stats.isr_changes += 1;
                self.send(
                    None,
                    Dest::Broker(from, from_incarnation),
                    Body::AlterReply { record },
                );
            }
            Err(e) => self.log(format!("alter from {from} refused: {e}")),
        }
        Ok(())
    }

    /// A follower handles its leader's answer, as the fetch task does (an answer to a fetch
    /// it no longer waits for is not applied: the request timed out).
    fn at_follower(
        &mut self,
        i: usize,
        request_id: u64,
        leader: u32,
        leader_epoch: u32,
        results: Vec<tinymq_protocol::messages::FetchPartitionResult>,
    ) {
        if self.nodes[i].fetch_in_flight.map(|f| f.0) != Some(request_id) {
            self.log(format!(
                "answer {leader} -> {}: no longer awaited",
                self.nodes[i].id
            ));
            return;
        }
        self.nodes[i].fetch_in_flight = None;
        let id = self.nodes[i].id;
        for result in results {
            let what = match (&result.diverging_epoch, &result.error) {
                (Some(d), _) => format!("diverging at epoch {} end {}", d.epoch, d.end_offset),
                (None, Some(e)) => format!("error {}", e.code),
                (None, None) => format!(
                    "{} bytes hw {}",
                    result.records.len(),
                    result.high_watermark
                ),
            };
            let diverged = result.diverging_epoch.is_some();
            let plain = !diverged && result.error.is_none();
            let applied = self.nodes[i].apply(leader, leader_epoch, result);
            if diverged && matches!(applied, Some(Ok(true))) {
                self.stats.truncations += 1;
            }
            if plain {
                self.appended(i);
            } else {
                self.touched(i);
            }
            let end = self.nodes[i]
                .partition
                .as_ref()
                .map_or(0, |p| p.log.log_end_offset());
            self.log(format!(
                "answer {leader} -> {id}: {what}: {applied:?}, log end {end}"
            ));
        }
    }

    /// A consumer's read of broker `i` up to its high watermark `hw`.
    pub fn check_consumed(&mut self, i: usize, bytes: bytes::Bytes, hw: i64) -> Result<(), String> {
        let id = self.nodes[i].id;
        for batch in BatchIter::new(bytes) {
            let batch = batch.map_err(|e| format!("a consumer read a bad batch from {id}: {e}"))?;
            if batch.next_offset() > hw {
                return Err(format!(
                    "a consumer of broker {id} read [{}, {}) above the high watermark {hw}",
                    batch.base_offset(),
                    batch.next_offset()
                ));
            }
        }
        Ok(())
    }
}
