//! A seeded simulation of the transaction coordinator and the partitions' transaction rules
//! together, with the coordinator crashing (its memory rebuilt from what reached its log, a
//! write lost or landing without an answer), markers delivered late and in any order,
//! producers dying mid-transaction, zombies sending late batches, and time passing timeouts.
//! Everything is the real rules: `txn::state` (the coordinator's state machine),
//! `txn::verify::holds` (the leader's verification) and `PartitionTxns` (open and aborted
//! transactions, the last stable offset, the aborted ranges a read-committed fetch carries).
//!
//! Checked after every step: a read-committed reader of every partition (the records below
//! the LSO, with Kafka's consumer algorithm over `aborted_in_range`) sees only records of
//! transactions decided COMMIT. Checked at the end, once everything is healed and every
//! transaction ended or timed out: no partition holds an open transaction, every committed
//! transaction is visible whole and no aborted one at all.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tinymq_broker::partition_txns::PartitionTxns;
use tinymq_broker::txn::state::{self, EndStep, InitStep, TxnMetadata, TxnState};
use tinymq_broker::txn::verify::holds;
use tinymq_protocol::batch::control::MarkerType;

const PARTITIONS: usize = 4;
const PRODUCERS: usize = 3;
const TIMEOUT_MS: u32 = 1_000;
const STEPS: usize = 3_000;
const SEEDS: u64 = 40;

/// xorshift64*: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A transactional record of transaction `txn` (a global number) by `pid`.
    Data {
        pid: i64,
        txn: u64,
    },
    Marker {
        pid: i64,
        commit: bool,
    },
}

#[derive(Default)]
struct Partition {
    txns: PartitionTxns,
    log: Vec<Entry>,
    /// The producer epochs the partition knows (markers move them), for fencing.
    epochs: HashMap<i64, i16>,
}

impl Partition {
    fn end(&self) -> i64 {
        self.log.len() as i64
    }

    /// A leader's write of a transactional record, verified first when it would open a
    /// transaction; false when refused.
    fn produce(&mut self, pid: i64, epoch: i16, txn: u64, verified: bool) -> bool {
        if self.epochs.get(&pid).is_some_and(|e| *e > epoch) {
            return false;
        }
        if verified && self.txns.needs_verification(pid, epoch) {
            self.txns.verified(pid, epoch).unwrap();
        }
        if self.txns.check_leader_data(pid, epoch).is_err() {
            return false;
        }
        let offset = self.end();
        self.log.push(Entry::Data { pid, txn });
        self.txns.apply_data(pid, epoch, offset, offset);
        self.epochs.insert(pid, epoch);
        true
    }

    fn marker(&mut self, pid: i64, epoch: i16, commit: bool) -> bool {
        if self.epochs.get(&pid).is_some_and(|e| *e > epoch) {
            return false;
        }
        let offset = self.end();
        self.log.push(Entry::Marker { pid, commit });
        let marker = if commit {
            MarkerType::Commit
        } else {
            MarkerType::Abort
        };
        self.txns.apply_marker(pid, offset, marker);
        self.epochs.insert(pid, epoch);
        true
    }

    /// What a read-committed consumer reads from offset 0: the transactions of the records
    /// below the LSO that are not in an aborted range, Kafka's consumer algorithm.
    fn read_committed(&self) -> Vec<u64> {
        let lso = self.txns.last_stable_offset(self.end());
        let mut aborted = self.txns.aborted_in_range(0, lso);
        aborted.sort_by_key(|&(_, first)| first);
        let mut aborted = aborted.into_iter().peekable();
        let mut skipping = BTreeSet::new();
        let mut seen = Vec::new();
        for (offset, entry) in self.log.iter().enumerate().take(lso as usize) {
            while let Some((pid, _)) = aborted.next_if(|&(_, first)| first <= offset as i64) {
                skipping.insert(pid);
            }
            match *entry {
                Entry::Data { pid, txn } if !skipping.contains(&pid) => seen.push(txn),
                Entry::Data { .. } => {}
                Entry::Marker { pid, commit: false } => {
                    skipping.remove(&pid);
                }
                Entry::Marker { .. } => {}
            }
        }
        seen
    }
}

#[derive(Default)]
struct Coordinator {
    up: bool,
    memory: HashMap<String, TxnMetadata>,
    /// Every record that reached the coordinator's log, in order.
    log: Vec<(String, TxnMetadata)>,
    /// Decided transactions whose markers are still to be written: (id, decided state,
    /// partitions left).
    markers: Vec<(String, TxnMetadata, BTreeSet<usize>)>,
}

impl Coordinator {
    /// Makes `next` durable for `id`: lands and is answered (usually), is lost, or lands
    /// unanswered (the caller sees a failure; a later replay sees it).
    fn persist(&mut self, rng: &mut Rng, id: &str, next: TxnMetadata) -> bool {
        if !self.up {
            return false;
        }
        match rng.below(20) {
            0 => false,
            1 => {
                self.log.push((id.to_string(), next));
                false
            }
            _ => {
                self.log.push((id.to_string(), next.clone()));
                self.memory.insert(id.to_string(), next);
                true
            }
        }
    }

    fn crash(&mut self) {
        self.up = false;
        self.memory.clear();
        self.markers.clear();
    }

    /// Restarts from its log, and resumes the markers of what was deciding; returns those
    /// decided states (a decision whose write landed unanswered is a decision all the same).
    fn recover(&mut self) -> Vec<TxnMetadata> {
        self.up = true;
        for (id, m) in &self.log {
            self.memory.insert(id.clone(), m.clone());
        }
        let mut deciding = Vec::new();
        for (id, m) in &self.memory {
            if m.state.is_preparing() {
                let left = m.partitions.iter().map(|(_, p)| *p as usize).collect();
                self.markers.push((id.clone(), m.clone(), left));
                deciding.push(m.clone());
            }
        }
        deciding
    }

    fn decided(&mut self, id: &str, m: TxnMetadata) {
        let left = m.partitions.iter().map(|(_, p)| *p as usize).collect();
        self.markers.push((id.to_string(), m, left));
    }
}

struct Producer {
    id: String,
    /// (producer id, epoch) once initialized; None while dead or not initialized.
    held: Option<(i64, i16)>,
    /// The open transaction's number, partitions added, and what was written where.
    open: Option<(u64, BTreeSet<usize>)>,
    /// An EndTxn that got no answer: the producer retries it (as clients do) and sends
    /// nothing more meanwhile.
    ending: Option<bool>,
}

fn tp(partition: usize) -> (String, u32) {
    ("t".to_string(), partition as u32)
}

struct World {
    rng: Rng,
    now_ms: i64,
    partitions: Vec<Partition>,
    coordinator: Coordinator,
    producers: Vec<Producer>,
    next_pid: i64,
    next_txn: u64,
    /// The transaction of each (producer id, start time) the coordinator has known open:
    /// the start time (a clock that moves every step) tells a producer's transactions apart.
    txn_of: HashMap<(i64, i64), u64>,
    /// The outcome of each transaction whose outcome the coordinator made durable.
    outcome: BTreeMap<u64, bool>,
    /// Transactions with records written.
    written: BTreeMap<u64, usize>,
    /// (producer id, epoch, transaction) of every record a producer sent, for zombies.
    sent: Vec<(i64, i16, u64)>,
}

impl World {
    fn new(seed: u64) -> World {
        World {
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            now_ms: 0,
            partitions: (0..PARTITIONS).map(|_| Partition::default()).collect(),
            coordinator: Coordinator {
                up: true,
                ..Coordinator::default()
            },
            producers: (0..PRODUCERS)
                .map(|i| Producer {
                    id: format!("tx-{i}"),
                    held: None,
                    open: None,
                    ending: None,
                })
                .collect(),
            next_pid: 1,
            next_txn: 1,
            txn_of: HashMap::new(),
            outcome: BTreeMap::new(),
            written: BTreeMap::new(),
            sent: Vec::new(),
        }
    }

    /// Records the outcome of the transaction that `m`, a decided state, ends.
    fn decide(&mut self, m: &TxnMetadata, commit: bool) {
        let txn = self.txn_of.get(&(m.producer_id, m.start_ms)).copied();
        if let Some(txn) = txn {
            let earlier = self.outcome.insert(txn, commit);
            assert!(
                earlier.is_none_or(|e| e == commit),
                "transaction {txn} decided both ways; now {m:?}; coordinator log {:?}",
                self.coordinator
                    .log
                    .iter()
                    .filter(|(_, x)| x.producer_id == m.producer_id)
                    .collect::<Vec<_>>()
            );
        }
    }

    fn recover(&mut self) {
        for m in self.coordinator.recover() {
            let commit = m.state == TxnState::PrepareCommit;
            self.decide(&m, commit);
        }
    }

    fn init(&mut self, p: usize) {
        let id = self.producers[p].id.clone();
        let current = self.coordinator.memory.get(&id).cloned();
        let fresh = Some(self.next_pid);
        let Ok(step) =
            state::init_producer_id(current.as_ref(), TIMEOUT_MS, None, fresh, self.now_ms)
        else {
            return;
        };
        match step {
            InitStep::Ready(m) => {
                // An allocated producer id is never handed out again, even when the write
                // that used it fails.
                if m.producer_id == self.next_pid {
                    self.next_pid += 1;
                }
                if self.coordinator.persist(&mut self.rng, &id, m.clone()) {
                    self.producers[p].held = Some((m.producer_id, m.producer_epoch));
                    self.producers[p].open = None;
                }
            }
            InitStep::AbortFirst(m) => {
                if self.coordinator.persist(&mut self.rng, &id, m.clone()) {
                    self.decide(&m, false);
                    self.coordinator.decided(&id, m);
                }
            }
            InitStep::NeedProducerId => unreachable!("a fresh id was given"),
        }
    }

    fn add_and_produce(&mut self, p: usize) {
        let Some((pid, epoch)) = self.producers[p].held else {
            return;
        };
        if self.producers[p].ending.is_some() {
            return;
        }
        let id = self.producers[p].id.clone();
        let partition = self.rng.below(PARTITIONS);
        let (txn, mut added) = match self.producers[p].open.take() {
            Some(open) => open,
            None => {
                let txn = self.next_txn;
                self.next_txn += 1;
                (txn, BTreeSet::new())
            }
        };
        if !added.contains(&partition) {
            let Some(m) = self
                .coordinator
                .memory
                .get(&id)
                .filter(|_| self.coordinator.up)
            else {
                self.producers[p].open = Some((txn, added));
                return;
            };
            let Ok(next) = state::add_partitions(m, pid, epoch, &[tp(partition)], self.now_ms)
            else {
                // Fenced, or markers are being written: this instance gives up its transaction.
                self.producers[p].open = None;
                return;
            };
            if let Some(next) = next {
                if !self.coordinator.persist(&mut self.rng, &id, next) {
                    self.producers[p].open = Some((txn, added));
                    return;
                }
            }
            added.insert(partition);
            let start = self.coordinator.memory[&id].start_ms;
            let known = self.txn_of.insert((pid, start), txn);
            assert!(
                known.is_none_or(|k| k == txn),
                "two transactions started at {start}"
            );
        }
        let verified =
            self.coordinator.memory.get(&id).is_some_and(|m| {
                self.coordinator.up && holds(m, pid, epoch, "t", partition as u32)
            });
        if self.partitions[partition].produce(pid, epoch, txn, verified) {
            *self.written.entry(txn).or_default() += 1;
        }
        self.sent.push((pid, epoch, txn));
        self.producers[p].open = Some((txn, added));
    }

    fn end(&mut self, p: usize, commit: bool) {
        let commit = self.producers[p].ending.unwrap_or(commit);
        let (Some((pid, epoch)), Some(_)) = (self.producers[p].held, &self.producers[p].open)
        else {
            return;
        };
        let id = self.producers[p].id.clone();
        let Some(m) = self
            .coordinator
            .memory
            .get(&id)
            .filter(|_| self.coordinator.up)
        else {
            return;
        };
        let ended = match state::end_txn(m, pid, epoch, commit, self.now_ms) {
            Ok(EndStep::Prepare(next)) => {
                let durable = self.coordinator.persist(&mut self.rng, &id, next.clone());
                if durable {
                    self.decide(&next, commit);
                    self.coordinator.decided(&id, next);
                }
                durable
            }
            Ok(EndStep::Done) => true,
            // Markers still being written: retried later.
            Err(e) if e.code.is_retriable() => false,
            // Fenced, or the other outcome was decided: this transaction is over for it.
            Err(_) => true,
        };
        if ended {
            self.producers[p].open = None;
            self.producers[p].ending = None;
        } else {
            self.producers[p].ending = Some(commit);
        }
    }

    /// Writes one pending marker of a decided transaction; once none is left, records its
    /// completion (kept pending when that write fails, as the coordinator retries it).
    fn deliver_marker(&mut self) {
        if !self.coordinator.up || self.coordinator.markers.is_empty() {
            return;
        }
        let i = self.rng.below(self.coordinator.markers.len());
        let (_, m, left) = &mut self.coordinator.markers[i];
        if !left.is_empty() {
            let partition = *left
                .iter()
                .nth(self.rng.below(left.len()))
                .expect("non-empty");
            let commit = m.state == TxnState::PrepareCommit;
            let written =
                self.partitions[partition].marker(m.producer_id, m.producer_epoch, commit);
            assert!(written, "a marker of the decided epoch is never fenced");
            left.remove(&partition);
            if !left.is_empty() {
                return;
            }
        }
        let (id, m, _) = self.coordinator.markers[i].clone();
        let current = self.coordinator.memory.get(&id);
        let Some(done) = current
            .filter(|c| **c == m)
            .and_then(|c| state::complete(c, self.now_ms))
        else {
            // Superseded (a crash replayed a later state): nothing to complete.
            self.coordinator.markers.remove(i);
            return;
        };
        if self.coordinator.persist(&mut self.rng, &id, done) {
            self.coordinator.markers.remove(i);
        }
    }

    fn tick(&mut self) {
        self.now_ms += i64::from(TIMEOUT_MS) / 3;
        if !self.coordinator.up {
            return;
        }
        let ids: Vec<String> = self.coordinator.memory.keys().cloned().collect();
        for id in ids {
            let m = self.coordinator.memory[&id].clone();
            if let Some(next) = state::timed_out(&m, self.now_ms) {
                if self.coordinator.persist(&mut self.rng, &id, next.clone()) {
                    self.decide(&next, false);
                    self.coordinator.decided(&id, next);
                }
            }
        }
    }

    /// A zombie: a batch from an earlier epoch of a producer, as a late retry would be.
    fn zombie(&mut self) {
        let Some(&(pid, epoch, txn)) = self.sent.get(self.rng.below(self.sent.len().max(1))) else {
            return;
        };
        let partition = self.rng.below(PARTITIONS);
        // Only a fenced instance's batch: one of the current epoch would carry the next
        // sequence of a live transaction (sequences are the partition's other check, not
        // modelled here).
        let fenced = self
            .coordinator
            .memory
            .values()
            .any(|m| m.producer_id == pid && m.producer_epoch > epoch);
        // With the producer's transaction open on the partition, a batch of that epoch is part
        // of it (or a duplicate its sequence gives away): only the case where it would open
        // one is the verification's.
        if !fenced || self.partitions[partition].txns.is_open(pid) {
            return;
        }
        // No coordinator confirms a fenced epoch's transaction.
        let in_txn = self
            .coordinator
            .memory
            .values()
            .any(|m| self.coordinator.up && holds(m, pid, epoch, "t", partition as u32));
        if self.partitions[partition].produce(pid, epoch, txn, in_txn) {
            *self.written.entry(txn).or_default() += 1;
        }
    }

    fn step(&mut self) {
        self.now_ms += 1;
        let p = self.rng.below(PRODUCERS);
        match self.rng.below(100) {
            0..=9 => self.init(p),
            10..=44 => self.add_and_produce(p),
            45..=54 => {
                let commit = self.rng.chance(70);
                self.end(p, commit)
            }
            55..=74 => self.deliver_marker(),
            75..=84 => self.tick(),
            85..=87 => {
                self.producers[p] = Producer {
                    id: self.producers[p].id.clone(),
                    held: None,
                    open: None,
                    ending: None,
                }
            }
            88..=90 => self.coordinator.crash(),
            91..=94 => {
                if !self.coordinator.up {
                    self.recover()
                }
            }
            _ => self.zombie(),
        }
    }

    /// Every record a read-committed reader sees belongs to a transaction decided COMMIT.
    fn check(&self, seed: u64, step: usize) {
        for (i, partition) in self.partitions.iter().enumerate() {
            for txn in partition.read_committed() {
                assert_eq!(
                    self.outcome.get(&txn),
                    Some(&true),
                    "seed {seed} step {step}: partition {i} shows transaction {txn}, which was not committed: {:?}",
                    partition.log
                );
            }
        }
    }

    /// Heals everything and lets every transaction end: the coordinator up, all producers
    /// gone, time past every timeout, every marker written.
    fn quiesce(&mut self) {
        if !self.coordinator.up {
            self.recover();
        }
        for p in &mut self.producers {
            p.held = None;
            p.open = None;
            p.ending = None;
        }
        for _ in 0..1_000 {
            self.now_ms += i64::from(TIMEOUT_MS) * 2;
            let ids: Vec<String> = self.coordinator.memory.keys().cloned().collect();
            for id in ids {
                let m = self.coordinator.memory[&id].clone();
                if let Some(next) = state::timed_out(&m, self.now_ms) {
                    self.coordinator.log.push((id.clone(), next.clone()));
                    self.coordinator.memory.insert(id.clone(), next.clone());
                    self.decide(&next, false);
                    self.coordinator.decided(&id, next);
                }
            }
            while !self.coordinator.markers.is_empty() {
                self.deliver_marker();
            }
            let settled = self
                .coordinator
                .memory
                .values()
                .all(|m| !m.state.is_preparing() && m.state != TxnState::Ongoing);
            if settled {
                return;
            }
        }
        panic!("the transactions never settled");
    }
}

fn run(seed: u64) -> (usize, usize) {
    let mut world = World::new(seed);
    for step in 0..STEPS {
        world.step();
        world.check(seed, step);
    }
    world.quiesce();
    world.check(seed, STEPS);
    for (i, partition) in world.partitions.iter().enumerate() {
        assert_eq!(
            partition.txns.last_stable_offset(partition.end()),
            partition.end(),
            "seed {seed}: partition {i} still holds an open transaction"
        );
        let mut visible: BTreeMap<u64, usize> = BTreeMap::new();
        for txn in partition.read_committed() {
            *visible.entry(txn).or_default() += 1;
        }
        let mut written: BTreeMap<u64, usize> = BTreeMap::new();
        for e in &partition.log {
            if let Entry::Data { txn, .. } = e {
                *written.entry(*txn).or_default() += 1;
            }
        }
        for (txn, n) in written {
            let want = if world.outcome.get(&txn) == Some(&true) {
                n
            } else {
                0
            };
            assert_eq!(
                visible.get(&txn).copied().unwrap_or(0),
                want,
                "seed {seed}: partition {i}, transaction {txn} ({:?}); log {:?}; aborted {:?}",
                world.outcome.get(&txn),
                partition.log,
                partition.txns.aborted()
            );
        }
    }
    let committed = world.outcome.values().filter(|c| **c).count();
    (committed, world.outcome.len() - committed)
}

#[test]
fn committed_transactions_are_seen_whole_and_aborted_ones_never_through_crashes() {
    let (mut committed, mut aborted) = (0, 0);
    for seed in 0..SEEDS {
        let (c, a) = run(seed);
        committed += c;
        aborted += a;
    }
    assert!(
        committed > 0 && aborted > 0,
        "{committed} committed, {aborted} aborted"
    );
    eprintln!(
        "{SEEDS} seeds x {STEPS} steps: {committed} transactions committed, {aborted} aborted"
    );
}
