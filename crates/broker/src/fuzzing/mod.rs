//! The request path without the network, for fuzzing: a structure-aware [`Scenario`] (built
//! from arbitrary bytes by the `arbitrary` crate) drives produce, fetch, list-offsets and
//! producer-id requests through the same per-partition functions the handlers use, against a
//! real [`Partition`] in a directory, with clean and unclean reopens (recovery) and damage to
//! its files in between.
//!
//! [`run`] panics when a rule is broken: offsets that are not contiguous, a produce answered
//! with the wrong offset, a read past the high watermark, a partition that cannot be reopened,
//! or a valid batch refused or not read back at the end. Anything else that fails returns an
//! error to the "client", as it should. `fuzz/fuzz_targets/request_path.rs` runs it under
//! libFuzzer; `tests/request_path_seeds.rs` replays the committed seeds in every test run.

use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use bytes::Bytes;
use tinymq_protocol::batch::craft::{CraftedBatch, CraftedRecord};
use tinymq_protocol::batch::{BatchIter, Compression, BATCH_MAGIC};

use crate::partition::{now_ms, Partition, ProduceContext};
use crate::service::append::write_partition;
use crate::service::read::{list_partition_offset, read_partition, Isolation};
use crate::topic::TopicSettings;

mod seed;

pub use seed::{seed_bytes, seeds};

const TOPIC: &str = "fuzz";
/// Operations per scenario, produces remembered for retries, records per crafted batch,
/// producers allocated: small bounds keep one run fast.
const OPS_MAX: usize = 128;
const SENT_REMEMBERED: usize = 8;
const RECORDS_MAX: usize = 16;
const PRODUCERS_MAX: usize = 4;

/// The partition's settings, then what happens to it.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct Scenario {
    /// Segment size in KiB, 1 to 256: small segments make rolls and multi-segment reads common.
    pub segment_kib: u8,
    /// 0 flush `always`, 1 `os`, else `interval:1`.
    pub flush: u8,
    pub ops: Vec<Op>,
}

#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum Op {
    Produce(Produce),
    /// Sends an earlier produce's bytes again (a retry).
    Retry(u8),
    Fetch {
        offset: OffsetPick,
        bytes_max: u16,
    },
    ListOffsets(i64),
    InitProducerId,
    /// Closes (flushing) or just drops the partition, then opens it again (recovery).
    Reopen {
        clean: bool,
    },
    /// Drops the partition, writes `bytes` into one of its files at `at`, and reopens.
    Damage {
        file: u8,
        at: u32,
        bytes: Vec<u8>,
    },
    /// Drops the partition, cuts `bytes` off the end of one of its files (a torn write), and
    /// reopens.
    Tear {
        file: u8,
        bytes: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum OffsetPick {
    Start,
    End,
    Exact(i64),
}

#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum Produce {
    /// What a real producer sends: a true header, maybe compressed and idempotent.
    Honest {
        values: Vec<Vec<u8>>,
        compression: u8,
        producer: Option<u8>,
    },
    /// Every header field chosen freely, records with chosen deltas.
    Crafted {
        magic: i8,
        attributes: i16,
        last_offset_delta: i32,
        timestamp_offset_ms: i64,
        max_timestamp_offset_ms: i64,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        record_count: i32,
        records: Vec<(i32, i64, Vec<u8>)>,
    },
    Raw(Vec<u8>),
}

/// Runs a scenario in `dir` (which must be empty). Panics when a rule is broken.
pub fn run(scenario: Scenario, dir: &Path) {
    let mut h = Harness::open(dir, &scenario);
    for op in scenario.ops.into_iter().take(OPS_MAX) {
        h.apply(op);
    }
    h.check_still_healthy();
}

struct Harness {
    dir: PathBuf,
    settings: TopicSettings,
    partition: Option<Partition>,
    producer_id_end: i64,
    /// Allocated producer ids and the next sequence each will send.
    producers: Vec<(i64, i32)>,
    sent: Vec<Bytes>,
    /// Whether files were damaged by hand: then stored bytes may fail their CRC on reading.
    damaged: bool,
}

impl Harness {
    fn open(dir: &Path, scenario: &Scenario) -> Harness {
        let segment_bytes = 1024 * u64::from(scenario.segment_kib.max(1));
        let settings = TopicSettings {
            segment_bytes,
            message_bytes_max: segment_bytes.min(64 * 1024) as u32,
            flush: match scenario.flush {
                0 => "always".into(),
                1 => "os".into(),
                _ => "interval:1".into(),
            },
            ..TopicSettings::default()
        };
        let mut h = Harness {
            dir: dir.to_path_buf(),
            settings,
            partition: None,
            producer_id_end: 1,
            producers: Vec::new(),
            sent: Vec::new(),
            damaged: false,
        };
        h.reopen();
        h
    }

    fn partition(&self) -> &Partition {
        self.partition
            .as_ref()
            .expect("the harness keeps the partition open")
    }

    fn reopen(&mut self) {
        self.partition = None;
        let opened = Partition::open(&self.dir, TOPIC, 0, &self.settings, false);
        self.partition = Some(opened.unwrap_or_else(|e| panic!("reopening failed: {e}")));
        self.check_log();
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Produce(p) => {
                let bytes = self.encode(p);
                self.produce(bytes);
            }
            Op::Retry(i) => {
                if let Some(bytes) = self.sent.get(usize::from(i) % self.sent.len().max(1)) {
                    self.produce(bytes.clone());
                }
            }
            Op::Fetch { offset, bytes_max } => self.fetch(offset, bytes_max),
            Op::ListOffsets(timestamp) => {
                let p = self.partition();
                if let Ok((offset, _)) =
                    list_partition_offset(p, timestamp, Isolation::ReadUncommitted)
                {
                    assert!(
                        offset <= p.high_watermark(),
                        "listed offset past the watermark"
                    );
                }
            }
            Op::InitProducerId => {
                if self.producers.len() < PRODUCERS_MAX {
                    self.producers.push((self.producer_id_end, 0));
                    self.producer_id_end += 1;
                }
            }
            Op::Reopen { clean } => {
                if clean {
                    let _ = self.partition().close();
                }
                self.reopen();
            }
            Op::Damage { file, at, bytes } => self.damage(file, |f, len| {
                use std::os::unix::fs::FileExt;
                let at = if len == 0 { 0 } else { u64::from(at) % len };
                let _ = f.write_all_at(&bytes[..bytes.len().min(64)], at);
            }),
            Op::Tear { file, bytes } => self.damage(file, |f, len| {
                let _ = f.set_len(len.saturating_sub(u64::from(bytes)));
            }),
        }
    }

    fn encode(&mut self, produce: Produce) -> Bytes {
        let now = now_ms();
        match produce {
            Produce::Honest {
                values,
                compression,
                producer,
            } => {
                let values: Vec<&[u8]> = values.iter().take(RECORDS_MAX).map(|v| &v[..]).collect();
                let mut b = CraftedBatch::honest(now, &values);
                b.attributes = match compression % 3 {
                    0 => Compression::None,
                    1 => Compression::Lz4,
                    _ => Compression::Zstd,
                }
                .attribute_bits();
                let slot = producer.and_then(|i| {
                    let n = self.producers.len();
                    (n > 0).then(|| usize::from(i) % n)
                });
                if let Some(slot) = slot {
                    let (id, next) = &mut self.producers[slot];
                    (b.producer_id, b.producer_epoch, b.base_sequence) = (*id, 0, *next);
                    *next = next.wrapping_add(b.record_count).max(0);
                }
                b.encode()
            }
            Produce::Crafted {
                magic,
                attributes,
                last_offset_delta,
                timestamp_offset_ms,
                max_timestamp_offset_ms,
                producer_id,
                producer_epoch,
                base_sequence,
                record_count,
                records,
            } => CraftedBatch {
                // Mostly the right magic, so that the later checks are reached.
                magic: if magic % 8 == 0 { magic } else { BATCH_MAGIC },
                attributes,
                last_offset_delta,
                base_timestamp: now.wrapping_add(timestamp_offset_ms % 1_000_000_000),
                max_timestamp: now.wrapping_add(max_timestamp_offset_ms % 1_000_000_000),
                producer_id,
                producer_epoch,
                base_sequence,
                record_count,
                records: records
                    .into_iter()
                    .take(RECORDS_MAX)
                    .map(|(offset_delta, timestamp_delta, value)| CraftedRecord {
                        offset_delta,
                        timestamp_delta,
                        value,
                    })
                    .collect(),
            }
            .encode(),
            Produce::Raw(bytes) => Bytes::from(bytes),
        }
    }

    /// Produces and checks the answer against the log: a new batch lands at the old end and
    /// moves it by its record count; a duplicate or a refusal leaves the end where it was.
    fn produce(&mut self, records: Bytes) {
        if self.sent.len() == SENT_REMEMBERED {
            self.sent.remove(0);
        }
        self.sent.push(records.clone());
        let p = self.partition.as_ref().expect("open");
        let end_before = p.log.log_end_offset();
        let context = ProduceContext {
            leader_epoch: 1,
            producer_id_end: self.producer_id_end,
            now_ms: now_ms(),
        };
        let Ok(pending) = write_partition(p, records.clone(), context) else {
            assert_eq!(
                p.log.log_end_offset(),
                end_before,
                "a refused batch changed the log"
            );
            return;
        };
        let end_after = p.log.log_end_offset();
        let count = BatchIter::new(records)
            .next()
            .and_then(Result::ok)
            .map_or(0, |b| i64::from(b.record_count()));
        if end_after == end_before {
            assert!(
                pending.base_offset < end_before,
                "a duplicate names a stored offset"
            );
        } else {
            assert_eq!(
                pending.base_offset, end_before,
                "a new batch lands at the end"
            );
            assert_eq!(
                end_after,
                end_before + count,
                "the end moves by the record count"
            );
        }
        // A storage failure (none is expected on a healthy disk) is an answer, not a panic.
        let _ = p.finish(pending);
    }

    fn fetch(&self, pick: OffsetPick, bytes_max: u16) {
        let p = self.partition();
        let offset = match pick {
            OffsetPick::Start => p.log.log_start_offset(),
            OffsetPick::End => p.log.log_end_offset(),
            OffsetPick::Exact(o) => o,
        };
        if let Ok(records) = read_partition(p, offset, usize::from(bytes_max)) {
            self.check_batches(records, Some(p.high_watermark()));
        }
    }

    /// Whole batches with offsets that follow each other (and valid CRCs unless the files
    /// were damaged by hand), none ending at or past `limit`.
    fn check_batches(&self, records: Bytes, limit: Option<i64>) {
        let mut next = None;
        for batch in BatchIter::new(records) {
            let Ok(batch) = batch else {
                assert!(self.damaged, "a stored batch failed its checks");
                return;
            };
            if let Some(expected) = next {
                assert_eq!(batch.base_offset(), expected, "offsets are contiguous");
            }
            if let Some(limit) = limit {
                assert!(batch.last_offset() < limit, "read past the high watermark");
            }
            next = Some(batch.next_offset());
        }
    }

    /// Reads the whole log from its start, a batch-sized step at a time.
    fn check_log(&self) {
        let p = self.partition();
        let (start, end) = (p.log.log_start_offset(), p.log.log_end_offset());
        assert!(start <= end, "log start {start} past its end {end}");
        assert!(p.high_watermark() <= end, "high watermark past the end");
        if let Ok(read) = p.log.read(start, 1 << 20, None) {
            self.check_batches(read.records, None);
        }
    }

    fn damage(&mut self, pick: u8, f: impl FnOnce(&std::fs::File, u64)) {
        self.partition = None;
        let mut files: Vec<PathBuf> = std::fs::read_dir(Partition::dir_for(&self.dir, TOPIC, 0))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        if let Some(path) = files.get(usize::from(pick) % files.len().max(1)) {
            if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
                let len = file.metadata().map_or(0, |m| m.len());
                f(&file, len);
                self.damaged = true;
            }
        }
        self.reopen();
    }

    /// The promise at the end of any scenario: a valid batch is accepted, read back, and
    /// still there after a clean reopen.
    fn check_still_healthy(&mut self) {
        let value = b"still healthy".as_slice();
        let batch = CraftedBatch::honest(now_ms(), &[value]).encode();
        let p = self.partition();
        let end = p.log.log_end_offset();
        let context = ProduceContext {
            leader_epoch: 1,
            producer_id_end: self.producer_id_end,
            now_ms: now_ms(),
        };
        let pending = write_partition(p, batch, context)
            .unwrap_or_else(|e| panic!("a valid batch was refused: {e}"));
        assert_eq!(pending.base_offset, end);
        p.finish(pending).expect("the valid batch is stored");
        p.close().expect("close");
        self.reopen();
        let p = self.partition();
        let read = read_partition(p, end, 1 << 20).expect("the valid batch reads back");
        let first = BatchIter::new(read)
            .next()
            .expect("a batch")
            .expect("valid");
        let records = first.records(1 << 20).expect("records");
        let record = records
            .iter()
            .find(|r| r.offset == end)
            .expect("its offset");
        assert_eq!(record.value.as_deref(), Some(value));
    }
}
