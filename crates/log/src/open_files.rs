//! The bounded set of open segment files: an LRU shared by every log of a process, so that
//! the file descriptors a broker holds do not grow with its partitions or segments.
//!
//! A segment's `.log` file is opened on first use (a read, a write, an fsync, recovery) and
//! stays open while it is among the `limit` most recently used; past that, the least recently
//! used one is closed. A caller gets an `Arc` of the open file and keeps it for the length of
//! one operation, so a file closed by the cache while a read or write still uses it is really
//! closed only when that operation ends: the limit bounds the files held between operations,
//! and operations in flight (at most one per reader or writer thread) may add to it.
//!
//! Closing a file that holds unsynced writes and reopening it later loses nothing: `fdatasync`
//! on any descriptor of a file flushes all of its dirty pages, and a write-back error not yet
//! reported is reported to a descriptor opened after it (Linux ≥ 4.16, `errseq`).
//!
//! Index files are never held open: their entries live in memory, are read once when a log
//! opens and written once when a segment rolls (see `index.rs`).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::storage::{Storage, StorageFile};

/// Default of `open_segment_files_max`: segment files kept open between operations.
pub const OPEN_SEGMENT_FILES_MAX_DEFAULT: usize = 4096;

/// Identifies one segment's file in the cache; unique within the process.
pub(crate) type FileId = u64;

static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_file_id() -> FileId {
    NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed)
}

/// An LRU of open segment files with a limit on how many it keeps.
pub struct OpenFiles {
    limit: AtomicUsize,
    lru: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    /// Each cached file and the tick of its last use.
    files: HashMap<FileId, (Arc<dyn StorageFile>, u64)>,
    /// The cached files by the tick of their last use: the first is the next to close.
    by_use: BTreeMap<u64, FileId>,
    tick: u64,
}

impl Lru {
    fn touch(&mut self, id: FileId) -> Option<Arc<dyn StorageFile>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, used) = self.files.get_mut(&id)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, id);
        Some(file.clone())
    }

    fn evict_to(&mut self, limit: usize) {
        while self.files.len() > limit {
            let Some((_, id)) = self.by_use.pop_first() else {
                break;
            };
            self.files.remove(&id);
        }
    }
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles")
            .field("limit", &self.limit())
            .field("open", &self.open_count())
            .finish()
    }
}

/// Two handles are equal when they are the same cache (so `LogConfig` stays comparable).
impl PartialEq for OpenFiles {
    fn eq(&self, other: &OpenFiles) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for OpenFiles {}

impl OpenFiles {
    /// A cache keeping at most `limit` files open (at least one).
    pub fn new(limit: usize) -> OpenFiles {
        OpenFiles {
            limit: AtomicUsize::new(limit.max(1)),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// The process-wide cache every log uses unless its config names another, with the
    /// default limit until [`OpenFiles::set_limit`] changes it.
    pub fn shared() -> Arc<OpenFiles> {
        static SHARED: OnceLock<Arc<OpenFiles>> = OnceLock::new();
        SHARED
            .get_or_init(|| Arc::new(OpenFiles::new(OPEN_SEGMENT_FILES_MAX_DEFAULT)))
            .clone()
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the limit (at least one), closing the least recently used files over it.
    pub fn set_limit(&self, limit: usize) {
        let limit = limit.max(1);
        self.limit.store(limit, Ordering::Relaxed);
        self.lru.lock().evict_to(limit);
    }

    /// Files the cache holds open now.
    pub fn open_count(&self) -> usize {
        self.lru.lock().files.len()
    }

    /// The open file `id`, opening `path` if the cache does not hold it. The file is opened
    /// without the cache's lock; two callers racing to open it keep the first one cached.
    pub(crate) fn get(
        &self,
        id: FileId,
        storage: &dyn Storage,
        path: &Path,
    ) -> io::Result<Arc<dyn StorageFile>> {
        if let Some(file) = self.lru.lock().touch(id) {
            return Ok(file);
        }
        let opened = storage.open(path, false)?;
        Ok(self.insert(id, opened))
    }

    /// Caches `file` as `id` (unless another caller did first: then theirs is returned).
    pub(crate) fn insert(&self, id: FileId, file: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        let mut lru = self.lru.lock();
        if let Some(cached) = lru.touch(id) {
            return cached;
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.files.insert(id, (file.clone(), tick));
        lru.by_use.insert(tick, id);
        lru.evict_to(self.limit());
        file
    }

    /// Closes file `id` if the cache holds it: its segment is gone.
    pub(crate) fn forget(&self, id: FileId) {
        let mut lru = self.lru.lock();
        if let Some((_, used)) = lru.files.remove(&id) {
            lru.by_use.remove(&used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStorage;
    use std::path::PathBuf;

    #[test]
    fn the_least_recently_used_file_is_closed_past_the_limit() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let paths: Vec<PathBuf> = (0..4).map(|i| PathBuf::from(format!("/d/{i}"))).collect();
        for p in &paths {
            fs.open(p, true).unwrap().write_all_at(b"x", 0).unwrap();
        }
        let cache = OpenFiles::new(2);
        let ids: Vec<FileId> = paths.iter().map(|_| next_file_id()).collect();
        cache.get(ids[0], &fs, &paths[0]).unwrap();
        cache.get(ids[1], &fs, &paths[1]).unwrap();
        cache.get(ids[0], &fs, &paths[0]).unwrap(); // 1 is now the least recently used
        cache.get(ids[2], &fs, &paths[2]).unwrap();
        assert_eq!(cache.open_count(), 2);
        let lru = cache.lru.lock();
        assert!(lru.files.contains_key(&ids[0]) && lru.files.contains_key(&ids[2]));
        drop(lru);

        // A file closed by the cache opens again on its next use and reads the same bytes.
        let again = cache.get(ids[1], &fs, &paths[1]).unwrap();
        let mut byte = [0u8];
        again.read_exact_at(&mut byte, 0).unwrap();
        assert_eq!(&byte, b"x");
        assert_eq!(cache.open_count(), 2);

        cache.forget(ids[1]);
        assert_eq!(cache.open_count(), 1);
        cache.set_limit(0);
        assert_eq!(cache.limit(), 1, "at least one");
        assert!(cache.get(ids[3], &fs, Path::new("/d/missing")).is_err());
        assert_eq!(cache.open_count(), 1);
    }
}
