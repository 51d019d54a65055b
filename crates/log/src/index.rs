//! The sparse indexes beside each segment: the offset index and the time index.
//!
//! An index is a file of fixed-size big-endian entries, in order. Its entries live in memory:
//! the file is read once when the log opens and written once, whole, when its segment rolls
//! (then fsynced with the segment), so no index file is held open and the append path never
//! writes one. Both indexes are derived data: the active segment's are rebuilt from its
//! batches at every open (recovery checks the whole active segment), and any other index
//! that disagrees with its log is rebuilt too.
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
use std::path::Path;

use crate::storage::Storage;

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

/// A sparse index: its entries, in memory.
#[derive(Debug)]
pub(crate) struct SparseIndex<E: IndexEntry> {
    entries: Vec<E>,
}

impl<E: IndexEntry> SparseIndex<E> {
    /// An index with no entries.
    pub fn empty() -> SparseIndex<E> {
        SparseIndex {
            entries: Vec::new(),
        }
    }

    /// Loads the entries of the file at `path`. Returns `None` when there is no such file or
    /// it is not a well-formed index (length not a multiple of the entry size, more than
    /// `entries_max` entries, or entries out of order): the caller rebuilds. `entries_max`
    /// bounds the memory a garbage file can claim; an index has at most one entry per batch
    /// of its log. The file is closed again before this returns.
    pub fn load(
        storage: &dyn Storage,
        path: &Path,
        entries_max: u64,
    ) -> io::Result<Option<SparseIndex<E>>> {
        if !storage.exists(path) {
            return Ok(None);
        }
        let file = storage.open(path, false)?;
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
        Ok(Some(SparseIndex { entries }))
    }

    /// The file image of the index.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.entries.len() * E::BYTES];
        for (entry, out) in self.entries.iter().zip(bytes.chunks_exact_mut(E::BYTES)) {
            entry.encode(out);
        }
        bytes
    }

    #[cfg(test)]
    pub fn entries(&self) -> &[E] {
        &self.entries
    }

    pub fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    /// Appends an entry (in memory); one that does not follow the last entry is refused
    /// (callers add entries for batches in offset order, so that is a bug, not bad data).
    pub fn append(&mut self, entry: E) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            if !entry.follows(last) {
                return Err(crate::segment::broken_invariant(format!(
                    "index entry {entry:?} does not follow {last:?}"
                )));
            }
        }
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

/// Writes an index's file image to `path` durably: the whole file, then `fdatasync`.
pub(crate) fn store_index_file(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = storage.open(path, true)?;
    file.set_len(0)?;
    file.write_all_at(bytes, 0)?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStorage;

    fn store(fs: &FaultyStorage, bytes: &[u8]) {
        store_index_file(fs, Path::new("/p/0.index"), bytes).unwrap();
    }

    fn load(fs: &FaultyStorage, entries_max: u64) -> Option<SparseIndex<OffsetEntry>> {
        SparseIndex::load(fs, Path::new("/p/0.index"), entries_max).unwrap()
    }

    #[test]
    fn append_store_load_and_floor() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/p")).unwrap();
        assert!(load(&fs, 100).is_none(), "no file");
        let mut index = SparseIndex::<OffsetEntry>::empty();
        for (o, p) in [(0, 0), (10, 4096), (25, 8200)] {
            index
                .append(OffsetEntry {
                    relative_offset: o,
                    position: p,
                })
                .unwrap();
        }
        store(&fs, &index.encode());
        let loaded = load(&fs, 100).unwrap();
        assert_eq!(loaded.entries(), index.entries());
        assert_eq!(loaded.floor(9).unwrap().position, 0);
        assert_eq!(loaded.floor(10).unwrap().position, 4096);
        assert_eq!(loaded.floor(1000).unwrap().position, 8200);
        assert_eq!(loaded.lower(10).unwrap().position, 0);
        assert!(loaded.lower(0).is_none());

        assert!(load(&fs, 2).is_none(), "more entries than the log can have");
        assert!(
            index
                .append(OffsetEntry {
                    relative_offset: 24,
                    position: 9000
                })
                .is_err(),
            "an entry out of order is refused"
        );
        assert_eq!(index.entries().len(), 3);
        let mut torn = index.encode();
        torn.extend_from_slice(&[1, 2, 3]);
        store(&fs, &torn);
        assert!(load(&fs, 100).is_none(), "torn entry");
        // Sorted offsets but a position going backwards: garbage, rebuilt.
        let mut backwards = vec![0u8; 16];
        for (i, (o, p)) in [(0u32, 4096u32), (10, 0)].into_iter().enumerate() {
            OffsetEntry {
                relative_offset: o,
                position: p,
            }
            .encode(&mut backwards[i * 8..]);
        }
        store(&fs, &backwards);
        assert!(load(&fs, 100).is_none());
    }
}
