//! The timer log's entry format: one frame per entry, checksummed and versioned, so a torn or
//! damaged tail is recognised and cut at the last whole entry (docs/storage.md, "Timer log").
//!
//! Frame: `body_length: u32 BE | crc32c(body): u32 BE | body`, where the body is
//! `version: u8 (= 1) | kind: u8 | fields…` (all integers big-endian):
//! - 1 `Checkpoint`: `next_entry_id: u64` — first in a compacted log, so entry ids keep
//!   growing after the entries that used them are gone;
//! - 2 `Stored`: `entry_id: u64 | deliver_at_ms: i64 | stored_at_ms: i64 | producer_id: i64 |
//!   producer_epoch: i16 | first_sequence: i32 | last_sequence: i32 | batch` (the rest: the
//!   record batch as produced);
//! - 3 `Assigned`: `entry_id: u64 | producer_id: i64 | producer_epoch: i16 | sequence: i32 |
//!   scan_from_offset: i64` — the scheduler's own producer identity this entry is appended
//!   under (fsynced before the append, so a replay after a crash carries the same identity and
//!   is recognised), and the partition's log end offset when it was given: a batch appended
//!   under it lies at or above that offset, which is where a replay looks for it when the
//!   partition no longer remembers the producer. A body without the last field (written
//!   before it existed) reads as `scan_from_offset = -1`, "unknown";
//! - 4 `Delivered`: `entry_id: u64 | delivered_at_ms: i64` — the batch is in the partition;
//! - 5 `Remembered`: `producer_id | producer_epoch | first_sequence | last_sequence |
//!   entry_id | deliver_at_ms` — a delivered batch's client identity, kept by compaction so a
//!   late retry is still answered as a duplicate.

use bytes::{Buf, BufMut, Bytes};

/// The version byte every entry written now carries.
pub const ENTRY_VERSION: u8 = 1;
/// Length and checksum before each body.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest body accepted: a batch of the largest `message_bytes_max` a topic may have (16 MiB)
/// plus the fixed fields. Checked before a body is read into memory.
pub const ENTRY_BODY_BYTES_MAX: usize = (16 << 20) + 256;
/// Bytes of a `Stored` body before its batch (version, kind and the fixed fields).
const STORED_FIXED_BYTES: usize = 2 + 8 + 8 + 8 + 8 + 2 + 4 + 4;
/// Where a `Stored` frame's batch starts, from the frame's first byte.
pub const STORED_BATCH_OFFSET: usize = FRAME_HEADER_BYTES + STORED_FIXED_BYTES;

const KIND_CHECKPOINT: u8 = 1;
const KIND_STORED: u8 = 2;
const KIND_ASSIGNED: u8 = 3;
const KIND_DELIVERED: u8 = 4;
const KIND_REMEMBERED: u8 = 5;

/// The idempotent-producer fields of a batch a client sent: a retry carries the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
}

impl ClientIdentity {
    /// Whether the batch is idempotent (a producer id of -1 is not, and is never deduplicated).
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
}

/// The scheduler's producer identity for one delivered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SchedulerStamp {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub sequence: i32,
}

/// One timer log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Checkpoint {
        next_entry_id: u64,
    },
    Stored {
        entry_id: u64,
        deliver_at_ms: i64,
        stored_at_ms: i64,
        client: ClientIdentity,
        batch: Bytes,
    },
    Assigned {
        entry_id: u64,
        stamp: SchedulerStamp,
        /// The partition's log end offset when the identity was given (-1: not known).
        scan_from_offset: i64,
    },
    Delivered {
        entry_id: u64,
        delivered_at_ms: i64,
    },
    Remembered {
        client: ClientIdentity,
        entry_id: u64,
        deliver_at_ms: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("entry body of {bytes} bytes exceeds ENTRY_BODY_BYTES_MAX ({ENTRY_BODY_BYTES_MAX})")]
    TooLong { bytes: usize },
    #[error("entry checksum {stored:08x} does not match its body ({computed:08x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("entry version {0} is not known (this build reads version {ENTRY_VERSION})")]
    UnknownVersion(u8),
    #[error("entry kind {0} is not known")]
    UnknownKind(u8),
    #[error("entry of kind {kind} is {bytes} bytes, too short for its fields")]
    Short { kind: u8, bytes: usize },
}

fn put_identity(out: &mut Vec<u8>, c: &ClientIdentity) {
    out.put_i64(c.producer_id);
    out.put_i16(c.producer_epoch);
    out.put_i32(c.first_sequence);
    out.put_i32(c.last_sequence);
}

fn get_identity(b: &mut &[u8]) -> ClientIdentity {
    ClientIdentity {
        producer_id: b.get_i64(),
        producer_epoch: b.get_i16(),
        first_sequence: b.get_i32(),
        last_sequence: b.get_i32(),
    }
}

/// Appends `entry` as one frame to `out`.
pub fn encode(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u64(0); // length and checksum, filled in below
    out.put_u8(ENTRY_VERSION);
    match entry {
        Entry::Checkpoint { next_entry_id } => {
            out.put_u8(KIND_CHECKPOINT);
            out.put_u64(*next_entry_id);
        }
        Entry::Stored {
            entry_id,
            deliver_at_ms,
            stored_at_ms,
            client,
            batch,
        } => {
            out.put_u8(KIND_STORED);
            out.put_u64(*entry_id);
            out.put_i64(*deliver_at_ms);
            out.put_i64(*stored_at_ms);
            put_identity(out, client);
            out.put_slice(batch);
        }
        Entry::Assigned {
            entry_id,
            stamp,
            scan_from_offset,
        } => {
            out.put_u8(KIND_ASSIGNED);
            out.put_u64(*entry_id);
            out.put_i64(stamp.producer_id);
            out.put_i16(stamp.producer_epoch);
            out.put_i32(stamp.sequence);
            out.put_i64(*scan_from_offset);
        }
        Entry::Delivered {
            entry_id,
            delivered_at_ms,
        } => {
            out.put_u8(KIND_DELIVERED);
            out.put_u64(*entry_id);
            out.put_i64(*delivered_at_ms);
        }
        Entry::Remembered {
            client,
            entry_id,
            deliver_at_ms,
        } => {
            out.put_u8(KIND_REMEMBERED);
            put_identity(out, client);
            out.put_u64(*entry_id);
            out.put_i64(*deliver_at_ms);
        }
    }
    let body_start = start + FRAME_HEADER_BYTES;
    let body_len = (out.len() - body_start) as u32;
    let crc = crc32c::crc32c(&out[body_start..]);
    out[start..start + 4].copy_from_slice(&body_len.to_be_bytes());
    out[start + 4..body_start].copy_from_slice(&crc.to_be_bytes());
}

/// The frame header's body length and checksum; the length is checked against
/// [`ENTRY_BODY_BYTES_MAX`] here, before anything is allocated for the body.
pub fn frame_header(header: [u8; FRAME_HEADER_BYTES]) -> Result<(usize, u32), EntryError> {
    let [a, b, c, d, e, f, g, h] = header;
    let length = u32::from_be_bytes([a, b, c, d]) as usize;
    if length > ENTRY_BODY_BYTES_MAX {
        return Err(EntryError::TooLong { bytes: length });
    }
    Ok((length, u32::from_be_bytes([e, f, g, h])))
}

/// Decodes a body read after a frame header (`crc` from [`frame_header`]). `body` is shared,
/// so a `Stored` entry's batch is a view of it, not a copy.
pub fn decode_body(body: Bytes, crc: u32) -> Result<Entry, EntryError> {
    let computed = crc32c::crc32c(&body);
    if computed != crc {
        return Err(EntryError::Checksum {
            stored: crc,
            computed,
        });
    }
    let (version, kind) = match body.get(..2) {
        Some(&[v, k]) => (v, k),
        _ => {
            return Err(EntryError::Short {
                kind: 0,
                bytes: body.len(),
            })
        }
    };
    if version != ENTRY_VERSION {
        return Err(EntryError::UnknownVersion(version));
    }
    let need = match kind {
        KIND_CHECKPOINT => 2 + 8,
        KIND_STORED => STORED_FIXED_BYTES,
        KIND_ASSIGNED => 2 + 8 + 8 + 2 + 4,
        KIND_DELIVERED => 2 + 8 + 8,
        KIND_REMEMBERED => 2 + 18 + 8 + 8,
        other => return Err(EntryError::UnknownKind(other)),
    };
    // Only a `Stored` body is longer than its fields (its batch follows them), and an
    // `Assigned` body may end before its last field (written before that field existed).
    let exact = match kind {
        KIND_STORED => true,
        KIND_ASSIGNED => body.len() == need || body.len() == need + 8,
        _ => body.len() == need,
    };
    if body.len() < need || (kind != KIND_STORED && !exact) {
        return Err(EntryError::Short {
            kind,
            bytes: body.len(),
        });
    }
    let mut b = &body[2..];
    Ok(match kind {
        KIND_CHECKPOINT => Entry::Checkpoint {
            next_entry_id: b.get_u64(),
        },
        KIND_STORED => Entry::Stored {
            entry_id: b.get_u64(),
            deliver_at_ms: b.get_i64(),
            stored_at_ms: b.get_i64(),
            client: get_identity(&mut b),
            batch: body.slice(STORED_FIXED_BYTES..),
        },
        KIND_ASSIGNED => Entry::Assigned {
            entry_id: b.get_u64(),
            stamp: SchedulerStamp {
                producer_id: b.get_i64(),
                producer_epoch: b.get_i16(),
                sequence: b.get_i32(),
            },
            scan_from_offset: if b.len() >= 8 { b.get_i64() } else { -1 },
        },
        KIND_DELIVERED => Entry::Delivered {
            entry_id: b.get_u64(),
            delivered_at_ms: b.get_i64(),
        },
        _ => Entry::Remembered {
            client: get_identity(&mut b),
            entry_id: b.get_u64(),
            deliver_at_ms: b.get_i64(),
        },
    })
}

/// What [`decode`] found at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// An entry and the bytes its frame took.
    Entry(Entry, usize),
    /// The buffer ends inside a frame (at the end of a file: a torn write).
    Incomplete,
}

/// Decodes the frame at the start of `buf`.
pub fn decode(buf: &Bytes) -> Result<Decoded, EntryError> {
    let Some(header) = buf.get(..FRAME_HEADER_BYTES) else {
        return Ok(Decoded::Incomplete);
    };
    let mut fixed = [0u8; FRAME_HEADER_BYTES];
    fixed.copy_from_slice(header);
    let (length, crc) = frame_header(fixed)?;
    let end = FRAME_HEADER_BYTES + length;
    if buf.len() < end {
        return Ok(Decoded::Incomplete);
    }
    let entry = decode_body(buf.slice(FRAME_HEADER_BYTES..end), crc)?;
    Ok(Decoded::Entry(entry, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ClientIdentity {
        ClientIdentity {
            producer_id: 7,
            producer_epoch: 1,
            first_sequence: 3,
            last_sequence: 4,
        }
    }

    fn every_kind() -> Vec<Entry> {
        vec![
            Entry::Checkpoint { next_entry_id: 42 },
            Entry::Stored {
                entry_id: 1,
                deliver_at_ms: 1_700_000_000_000,
                stored_at_ms: 1_699_999_999_000,
                client: client(),
                batch: Bytes::from_static(b"batch bytes"),
            },
            Entry::Assigned {
                entry_id: 1,
                stamp: SchedulerStamp {
                    producer_id: 9,
                    producer_epoch: 0,
                    sequence: 12,
                },
                scan_from_offset: 77,
            },
            Entry::Delivered {
                entry_id: 1,
                delivered_at_ms: 5,
            },
            Entry::Remembered {
                client: client(),
                entry_id: 1,
                deliver_at_ms: -3,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_and_a_stored_batch_sits_at_its_offset() {
        for entry in every_kind() {
            let mut out = Vec::new();
            encode(&entry, &mut out);
            let buf = Bytes::from(out);
            assert_eq!(
                decode(&buf).unwrap(),
                Decoded::Entry(entry.clone(), buf.len())
            );
            if let Entry::Stored { batch, .. } = &entry {
                assert_eq!(&buf[STORED_BATCH_OFFSET..], &batch[..]);
            }
        }
    }

    #[test]
    fn a_torn_frame_is_incomplete_and_a_flipped_bit_is_a_checksum_error() {
        let mut out = Vec::new();
        encode(&every_kind()[1], &mut out);
        for cut in 0..out.len() {
            let torn = Bytes::copy_from_slice(&out[..cut]);
            assert_eq!(decode(&torn).unwrap(), Decoded::Incomplete, "cut at {cut}");
        }
        for i in FRAME_HEADER_BYTES..out.len() {
            let mut damaged = out.clone();
            damaged[i] ^= 0x10;
            assert!(
                matches!(
                    decode(&Bytes::from(damaged)),
                    Err(EntryError::Checksum { .. })
                ),
                "byte {i}"
            );
        }
    }

    #[test]
    fn an_assigned_entry_written_without_its_scan_offset_reads_as_unknown() {
        let mut out = Vec::new();
        encode(&every_kind()[2], &mut out);
        let body = &out[FRAME_HEADER_BYTES..out.len() - 8];
        let mut old = (body.len() as u32).to_be_bytes().to_vec();
        old.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
        old.extend_from_slice(body);
        let Ok(Decoded::Entry(
            Entry::Assigned {
                scan_from_offset,
                stamp,
                ..
            },
            _,
        )) = decode(&Bytes::from(old))
        else {
            panic!("decodes")
        };
        assert_eq!((scan_from_offset, stamp.sequence), (-1, 12));
    }

    #[test]
    fn an_oversized_length_is_refused_before_reading_the_body() {
        let mut header = [0u8; FRAME_HEADER_BYTES];
        header[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            frame_header(header),
            Err(EntryError::TooLong { .. })
        ));
    }

    #[test]
    fn unknown_versions_and_kinds_and_short_bodies_are_refused() {
        let framed = |body: &[u8]| {
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
            out.extend_from_slice(body);
            Bytes::from(out)
        };
        assert_eq!(decode(&framed(&[2, 1])), Err(EntryError::UnknownVersion(2)));
        assert_eq!(decode(&framed(&[1, 99])), Err(EntryError::UnknownKind(99)));
        assert!(matches!(
            decode(&framed(&[1, KIND_DELIVERED, 0])),
            Err(EntryError::Short { .. })
        ));
        assert!(matches!(
            decode(&framed(&[1])),
            Err(EntryError::Short { .. })
        ));
    }
}
