//! The share-partition state log's records (docs/storage.md, "Share-group state logs"): what
//! each record means when replayed, and its bytes.
//!
//! Each record is framed as `length: u32 LE` (of the body), `crc32c: u32 LE` (of the body),
//! then the body: `version: u8` (1), `kind: u8`, and the kind's fields, little-endian:
//! - 1 Acquired `first: i64, last: i64`: delivered once more (new offsets start at count 1);
//! - 2 Done `first: i64, last: i64`: accepted, skipped (filter, no record) or gone (retention);
//! - 3 DeadLetterPending `first: i64, last: i64, reason: u8` (1 rejected, 2 max attempts);
//! - 4 DeadLettered `first: i64, last: i64`: written to the dead-letter topic, done;
//! - 5 Snapshot `start: i64, end: i64, dead_lettered_total: u64, count: u32`, then `count`
//!   entries `offset: i64, state: u8 (0 available, 1 rejected, 2 max attempts), deliveries: u32`;
//! - 6 Returned `first: i64, last: i64`: released unseen, one delivery taken back (a log
//!   written before kind 6 existed never has one, and loads as before).
//!
//! A rebuild replays the records in order; the first torn or corrupt record ends the log
//! (everything after it is ignored and cut off by the broker).

use std::collections::BTreeMap;

use crate::partition::{DeadLetterReason, InFlightRecord, RecordState, SharePartition};
use crate::SHARE_IN_FLIGHT_RECORDS_MAX;

const VERSION: u8 = 1;
const FRAME_BYTES: usize = 8;
const SNAPSHOT_ENTRY_BYTES: usize = 13;
/// Largest record body: a snapshot of a full in-flight window (and its fixed fields).
pub const STATE_RECORD_BYTES_MAX: usize =
    2 + 28 + SNAPSHOT_ENTRY_BYTES * SHARE_IN_FLIGHT_RECORDS_MAX as usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord {
    Acquired {
        first: i64,
        last: i64,
    },
    Done {
        first: i64,
        last: i64,
    },
    DeadLetterPending {
        first: i64,
        last: i64,
        reason: DeadLetterReason,
    },
    DeadLettered {
        first: i64,
        last: i64,
    },
    Snapshot(SharePartition),
    /// Released unseen: the acquisition's delivery is taken back (the records are available
    /// again, as every acquired record is after a rebuild).
    Returned {
        first: i64,
        last: i64,
    },
}

fn reason_code(reason: DeadLetterReason) -> u8 {
    match reason {
        DeadLetterReason::Rejected => 1,
        DeadLetterReason::MaxAttempts => 2,
    }
}

fn reason_of(code: u8) -> Option<DeadLetterReason> {
    match code {
        1 => Some(DeadLetterReason::Rejected),
        2 => Some(DeadLetterReason::MaxAttempts),
        _ => None,
    }
}

/// Appends one framed record to `out`.
pub fn encode_record(record: &StateRecord, out: &mut Vec<u8>) {
    let mut body = vec![VERSION];
    let range = |body: &mut Vec<u8>, kind: u8, first: i64, last: i64| {
        body.push(kind);
        body.extend_from_slice(&first.to_le_bytes());
        body.extend_from_slice(&last.to_le_bytes());
    };
    match record {
        StateRecord::Acquired { first, last } => range(&mut body, 1, *first, *last),
        StateRecord::Done { first, last } => range(&mut body, 2, *first, *last),
        StateRecord::DeadLetterPending {
            first,
            last,
            reason,
        } => {
            range(&mut body, 3, *first, *last);
            body.push(reason_code(*reason));
        }
        StateRecord::DeadLettered { first, last } => range(&mut body, 4, *first, *last),
        StateRecord::Returned { first, last } => range(&mut body, 6, *first, *last),
        StateRecord::Snapshot(state) => {
            body.push(5);
            body.extend_from_slice(&state.start_offset.to_le_bytes());
            body.extend_from_slice(&state.end_offset.to_le_bytes());
            body.extend_from_slice(&state.dead_lettered_total.to_le_bytes());
            body.extend_from_slice(&(state.records.len() as u32).to_le_bytes());
            for (offset, record) in &state.records {
                body.extend_from_slice(&offset.to_le_bytes());
                body.push(match record.state {
                    RecordState::Available | RecordState::Acquired { .. } => 0,
                    RecordState::DeadLetter(reason) => reason_code(reason),
                });
                body.extend_from_slice(&record.delivery_count.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
}

/// The records of a log's bytes up to the first torn or corrupt one.
#[derive(Debug, Default)]
pub struct Decoded {
    pub records: Vec<StateRecord>,
    /// Bytes of `records`: the file is cut here if it is longer.
    pub valid_bytes: usize,
    /// Why decoding stopped before the end, if it did.
    pub stopped: Option<String>,
}

pub fn decode_records(bytes: &[u8]) -> Decoded {
    let mut decoded = Decoded::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match decode_one(rest) {
            Ok((record, used)) => {
                decoded.records.push(record);
                decoded.valid_bytes += used;
                rest = rest.get(used..).unwrap_or_default();
            }
            Err(why) => {
                decoded.stopped = Some(format!("at byte {}: {why}", decoded.valid_bytes));
                break;
            }
        }
    }
    decoded
}

/// Reads little-endian fields from a body, failing on a short one.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, tail) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| "record body too short".to_string())?;
        self.0 = tail;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take::<8>().map(i64::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.take::<4>().map(u32::from_le_bytes)
    }
}

fn decode_one(bytes: &[u8]) -> Result<(StateRecord, usize), String> {
    let (frame, rest) = bytes
        .split_first_chunk::<FRAME_BYTES>()
        .ok_or("torn record frame")?;
    let length = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if length > STATE_RECORD_BYTES_MAX {
        return Err(format!(
            "record length {length} above {STATE_RECORD_BYTES_MAX}"
        ));
    }
    let body = rest.get(..length).ok_or("torn record body")?;
    if crc32c::crc32c(body) != crc {
        return Err("checksum mismatch".into());
    }
    let mut r = Reader(body);
    let version = r.u8()?;
    if version != VERSION {
        return Err(format!("unknown record version {version}"));
    }
    let kind = r.u8()?;
    let record = match kind {
        1..=4 | 6 => {
            let (first, last) = (r.i64()?, r.i64()?);
            if first > last {
                return Err(format!("range {first}..={last} is reversed"));
            }
            match kind {
                1 => StateRecord::Acquired { first, last },
                2 => StateRecord::Done { first, last },
                3 => {
                    let reason = reason_of(r.u8()?).ok_or("unknown dead-letter reason")?;
                    StateRecord::DeadLetterPending {
                        first,
                        last,
                        reason,
                    }
                }
                4 => StateRecord::DeadLettered { first, last },
                _ => StateRecord::Returned { first, last },
            }
        }
        5 => StateRecord::Snapshot(decode_snapshot(&mut r)?),
        other => return Err(format!("unknown record kind {other}")),
    };
    Ok((record, FRAME_BYTES + length))
}

fn decode_snapshot(r: &mut Reader<'_>) -> Result<SharePartition, String> {
    let start_offset = r.i64()?;
    let end_offset = r.i64()?;
    let dead_lettered_total = r.take::<8>().map(u64::from_le_bytes)?;
    let count = r.u32()?;
    // Offsets are never negative, and the in-flight bound caps the span (so replaying records
    // after it never counts through a huge or wrapped range).
    let span_ok = end_offset
        .checked_sub(start_offset)
        .is_some_and(|span| (0..=SHARE_IN_FLIGHT_RECORDS_MAX).contains(&span));
    if i64::from(count) > SHARE_IN_FLIGHT_RECORDS_MAX || start_offset < 0 || !span_ok {
        return Err(format!(
            "snapshot of {count} records in {start_offset}..{end_offset}"
        ));
    }
    let mut records = BTreeMap::new();
    for _ in 0..count {
        let offset = r.i64()?;
        let state = match r.u8()? {
            0 => RecordState::Available,
            code => RecordState::DeadLetter(reason_of(code).ok_or("unknown record state")?),
        };
        let delivery_count = r.u32()?;
        if !(start_offset..end_offset).contains(&offset) {
            return Err(format!(
                "snapshot record {offset} outside {start_offset}..{end_offset}"
            ));
        }
        records.insert(
            offset,
            InFlightRecord {
                state,
                delivery_count,
            },
        );
    }
    Ok(SharePartition {
        start_offset,
        end_offset,
        records,
        dead_lettered_total,
        unseen_returns: Default::default(),
    })
}

impl SharePartition {
    /// Replays one record of the state log (acquired records come back available).
    pub fn apply(&mut self, record: &StateRecord) -> Result<(), String> {
        match record {
            StateRecord::Acquired { first, last } => {
                for r in self.records.range_mut(first..=last).map(|(_, r)| r) {
                    r.delivery_count = r.delivery_count.saturating_add(1);
                }
                let new_first = (*first).max(self.end_offset);
                if *last >= new_first {
                    // In i128: hostile bytes with a valid checksum must not overflow or
                    // make the loop below count through a huge range.
                    let above_bound = i128::from(*last)
                        >= i128::from(self.start_offset) + i128::from(SHARE_IN_FLIGHT_RECORDS_MAX)
                        || i128::from(*last) - i128::from(new_first)
                            >= i128::from(SHARE_IN_FLIGHT_RECORDS_MAX);
                    if above_bound {
                        return Err(format!("acquired range {first}..={last} above the bound"));
                    }
                    for offset in new_first..=*last {
                        let record = InFlightRecord {
                            state: RecordState::Available,
                            delivery_count: 1,
                        };
                        self.records.insert(offset, record);
                    }
                    self.end_offset = last.saturating_add(1);
                }
            }
            StateRecord::Done { first, last } => self.mark_done(*first, *last),
            StateRecord::DeadLetterPending {
                first,
                last,
                reason,
            } => self.mark_dead_letter(*first, *last, *reason),
            StateRecord::DeadLettered { first, last } => {
                let before = self.records.len();
                self.mark_done(*first, *last);
                self.dead_lettered_total += (before - self.records.len()) as u64;
            }
            StateRecord::Snapshot(state) => *self = state.rebuilt(),
            StateRecord::Returned { first, last } => {
                for r in self.records.range_mut(first..=last).map(|(_, r)| r) {
                    r.delivery_count = r.delivery_count.saturating_sub(1);
                }
            }
        }
        self.advance_start();
        Ok(())
    }

    /// The state a log's records give: a snapshot's, then the records after it.
    pub fn replay(records: &[StateRecord]) -> Result<SharePartition, String> {
        let mut state = SharePartition::default();
        for record in records {
            state.apply(record)?;
        }
        Ok(state)
    }
}
