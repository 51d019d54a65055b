//! The sparse indexes beside each segment: the offset index and the time index.
//!
//! An index is a file of fixed-size big-endian entries, appended in order, mirrored in memory
//! for lookups. Both are derived data: recovery rebuilds them from the log when they disagree
//! with it, so they are never fsynced on the append path, only when the segment rolls or the
//! log closes.
//!
//! ```text
//! .index      8 bytes per entry: relative_offset u32 | position u32
//!             relative_offset = batch base offset - segment base offset;
//!             position = byte position of that batch in the .log file
//! .timeindex 12 bytes per entry: timestamp i64 | relative_offset u32
//!             timestamp = largest record timestamp up to and including that batch;
//!             entries are added only when it grows
//! ```

use std::io;
use std::sync::Arc;

use crate::storage::StorageFile;

/// A fixed-size index entry.
pub(crate) trait IndexEntry: Copy + std::fmt::Debug {
    const BYTES: usize;
    fn encode(&self, out: &mut [u8]);
    fn decode(bytes: &[u8]) -> Self;
    /// The key entries are sorted by (non-decreasing).
    fn key(&self) -> i64;
    /// Whether `self` may follow `previous` in a well-formed index: each entry names a later
    /// batch than the one before.
    fn follows(&self, previous: &Self) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl IndexEntry for OffsetEntry {
    const BYTES: usize = 8;
    fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> OffsetEntry {
        OffsetEntry {
            relative_offset: u32::from_be_bytes(b[..4].try_into().expect("4 bytes")),
            position: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
        }
    }
    fn key(&self) -> i64 {
        i64::from(self.relative_offset)
    }
    fn follows(&self, previous: &OffsetEntry) -> bool {
        self.relative_offset > previous.relative_offset && self.position > previous.position
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl IndexEntry for TimeEntry {
    const BYTES: usize = 12;
    fn encode(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> TimeEntry {
        TimeEntry {
            timestamp: i64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            relative_offset: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
        }
    }
    fn key(&self) -> i64 {
        self.timestamp
    }
    fn follows(&self, previous: &TimeEntry) -> bool {
        // Entries are added only when the largest timestamp grows, each at a later batch.
        self.timestamp > previous.timestamp && self.relative_offset > previous.relative_offset
    }
}

/// A sparse index: entries in memory, mirrored to a file.
#[derive(Debug)]
pub(crate) struct SparseIndex<E: IndexEntry> {
    file: Arc<dyn StorageFile>,
    entries: Vec<E>,
}

impl<E: IndexEntry> SparseIndex<E> {
    /// An index with no entries; any bytes in the file are discarded.
    pub fn empty(file: Arc<dyn StorageFile>) -> io::Result<SparseIndex<E>> {
        file.set_len(0)?;
        Ok(SparseIndex {
            file,
            entries: Vec::new(),
        })
    }

    /// Loads the entries in the file. Returns `None` when the file is not a well-formed index
    /// (length not a multiple of the entry size, more than `entries_max` entries, or entries
    /// out of order): the caller rebuilds. `entries_max` bounds the memory a garbage file can
    /// claim; an index has at most one entry per batch of its log.
    pub fn load(
        file: Arc<dyn StorageFile>,
        entries_max: u64,
    ) -> io::Result<Option<SparseIndex<E>>> {
        let len = file.byte_len()?;
        let entry_bytes = E::BYTES as u64;
        if len % entry_bytes != 0 || len / entry_bytes > entries_max {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)?;
        let entries: Vec<E> = bytes.chunks_exact(E::BYTES).map(E::decode).collect();
        if entries.windows(2).any(|w| !w[1].follows(&w[0])) {
            return Ok(None);
        }
        Ok(Some(SparseIndex { file, entries }))
    }

    #[cfg(test)]
    pub fn entries(&self) -> &[E] {
        &self.entries
    }

    pub fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    pub fn file(&self) -> &Arc<dyn StorageFile> {
        &self.file
    }

    /// Appends an entry; one that does not follow the last entry is refused (callers add
    /// entries for batches in offset order, so that is a bug, not bad data).
    pub fn append(&mut self, entry: E) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            if !entry.follows(last) {
                return Err(crate::segment::broken_invariant(format!(
                    "index entry {entry:?} does not follow {last:?}"
                )));
            }
        }
        let mut bytes = vec![0u8; E::BYTES];
        entry.encode(&mut bytes);
        let position = (self.entries.len() * E::BYTES) as u64;
        self.file.write_all_at(&bytes, position)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The last entry whose key is ≤ `key`.
    pub fn floor(&self, key: i64) -> Option<&E> {
        let count = self.entries.partition_point(|e| e.key() <= key);
        count.checked_sub(1).map(|i| &self.entries[i])
    }

    /// The last entry whose key is < `key`.
    pub fn lower(&self, key: i64) -> Option<&E> {
        let count = self.entries.partition_point(|e| e.key() < key);
        count.checked_sub(1).map(|i| &self.entries[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStorage;
    use crate::storage::Storage;
    use std::path::Path;

    #[test]
    fn append_load_floor_and_truncate() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/p")).unwrap();
        let file = fs.open(Path::new("/p/0.index"), true).unwrap();
        let mut index = SparseIndex::<OffsetEntry>::empty(file.clone()).unwrap();
        for (o, p) in [(0, 0), (10, 4096), (25, 8200)] {
            index
                .append(OffsetEntry {
                    relative_offset: o,
                    position: p,
                })
                .unwrap();
        }
        let loaded = SparseIndex::<OffsetEntry>::load(file.clone(), 100)
            .unwrap()
            .unwrap();
        assert_eq!(loaded.entries(), index.entries());
        assert_eq!(loaded.floor(9).unwrap().position, 0);
        assert_eq!(loaded.floor(10).unwrap().position, 4096);
        assert_eq!(loaded.floor(1000).unwrap().position, 8200);
        assert_eq!(loaded.lower(10).unwrap().position, 0);
        assert!(loaded.lower(0).is_none());

        assert!(
            SparseIndex::<OffsetEntry>::load(file.clone(), 2)
                .unwrap()
                .is_none(),
            "more entries than the log can have"
        );
        assert!(
            index
                .append(OffsetEntry {
                    relative_offset: 24,
                    position: 9000
                })
                .is_err(),
            "an entry out of order is refused, not written"
        );
        assert_eq!(index.entries().len(), 3);
        file.write_all_at(&[1, 2, 3], 24).unwrap();
        assert!(
            SparseIndex::<OffsetEntry>::load(file.clone(), 100)
                .unwrap()
                .is_none(),
            "torn entry"
        );
        // Sorted offsets but a position going backwards: garbage, rebuilt.
        file.set_len(0).unwrap();
        for (o, p) in [(0u32, 4096u32), (10, 0)] {
            let mut bytes = [0u8; 8];
            OffsetEntry {
                relative_offset: o,
                position: p,
            }
            .encode(&mut bytes);
            file.write_all_at(&bytes, u64::from(o / 10) * 8).unwrap();
        }
        assert!(SparseIndex::<OffsetEntry>::load(file, 100)
            .unwrap()
            .is_none());
    }
}
