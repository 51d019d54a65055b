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
    /// (length not a multiple of the entry size, or keys out of order): the caller rebuilds.
    pub fn load(file: Arc<dyn StorageFile>) -> io::Result<Option<SparseIndex<E>>> {
        let len = file.byte_len()? as usize;
        if len % E::BYTES != 0 {
            return Ok(None);
        }
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)?;
        let entries: Vec<E> = bytes.chunks_exact(E::BYTES).map(E::decode).collect();
        if entries.windows(2).any(|w| w[0].key() > w[1].key()) {
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

    pub fn append(&mut self, entry: E) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            assert!(
                last.key() <= entry.key(),
                "index entries are appended in order"
            );
        }
        let mut bytes = vec![0u8; E::BYTES];
        entry.encode(&mut bytes);
        self.file
            .write_all_at(&bytes, (self.entries.len() * E::BYTES) as u64)?;
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

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
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
        let loaded = SparseIndex::<OffsetEntry>::load(file.clone())
            .unwrap()
            .unwrap();
        assert_eq!(loaded.entries(), index.entries());
        assert_eq!(loaded.floor(9).unwrap().position, 0);
        assert_eq!(loaded.floor(10).unwrap().position, 4096);
        assert_eq!(loaded.floor(1000).unwrap().position, 8200);
        assert_eq!(loaded.lower(10).unwrap().position, 0);
        assert!(loaded.lower(0).is_none());

        file.write_all_at(&[1, 2, 3], 24).unwrap();
        assert!(
            SparseIndex::<OffsetEntry>::load(file).unwrap().is_none(),
            "torn entry"
        );
    }
}
