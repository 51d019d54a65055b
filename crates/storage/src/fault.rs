//! An in-memory [`Storage`] that models what a disk promises and injects the faults it may
//! show: torn writes, lost unsynced writes (a power cut), EIO on fsync, and ENOSPC.
//!
//! Each file keeps two images: what processes see (`current`) and what survives a crash
//! (`durable`, updated by `sync_data`). Directory entries are durable only after `sync_dir`:
//! a file created but never covered by a directory sync vanishes in a crash, and a removed one
//! comes back. [`FaultyStorage::crash`] applies all of that, as a power cut would.
//!
//! [`FaultyStorage::hold_syncs`] makes every `sync_data` wait until released, so a test can
//! observe what the log allows while an fsync is in progress.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::storage::{Storage, StorageFile};

/// What a crash keeps of the bytes written since a file's last sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Nothing unsynced survives.
    LoseUnsynced,
    /// Unsynced bytes survive up to this many past the durable length (a torn write).
    KeepUnsyncedPrefix(usize),
}

/// Faults to inject into later operations.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Every `sync_data` fails with EIO (and, as on Linux, the unsynced data is lost from the
    /// durable image: a later successful sync does not bring it back).
    pub fail_sync: bool,
    /// Writes that would grow the total stored bytes past this fail with ENOSPC after writing
    /// what fits.
    pub space_bytes_left: Option<u64>,
    /// The next write stores only this many bytes and then fails with EIO.
    pub torn_next_write_bytes: Option<usize>,
}

impl Faults {
    /// One of each way a write can fail — ENOSPC after `bytes`, a write torn after `bytes`,
    /// EIO on fsync — for tests that check a file kind against all of them.
    pub fn each_write_fault(bytes: usize) -> [Faults; 3] {
        [
            Faults {
                space_bytes_left: Some(bytes as u64),
                ..Faults::default()
            },
            Faults {
                torn_next_write_bytes: Some(bytes),
                ..Faults::default()
            },
            Faults {
                fail_sync: true,
                ..Faults::default()
            },
        ]
    }
}

#[derive(Debug, Default)]
struct FileImages {
    current: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug)]
struct SimFile {
    images: Mutex<FileImages>,
    faults: Arc<Mutex<Faults>>,
    gate: Arc<SyncGate>,
}

/// Holds `sync_data` calls while closed, counting those waiting.
#[derive(Debug, Default)]
struct SyncGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    holding: bool,
    waiting: usize,
}

impl SyncGate {
    fn pass(&self) {
        let mut state = self.state.lock();
        if !state.holding {
            return;
        }
        state.waiting += 1;
        self.changed.notify_all();
        while state.holding {
            self.changed.wait(&mut state);
        }
        state.waiting -= 1;
    }
}

#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<PathBuf, Arc<SimFile>>,
    dirs: BTreeSet<PathBuf>,
    /// Names that survive a crash: the file entries as of each directory's last sync.
    durable_names: BTreeMap<PathBuf, Arc<SimFile>>,
}

/// The fault-injecting in-memory file system. Cloning shares the same files.
#[derive(Debug, Default, Clone)]
pub struct FaultyStorage {
    tree: Arc<Mutex<Tree>>,
    faults: Arc<Mutex<Faults>>,
    gate: Arc<SyncGate>,
}

impl FaultyStorage {
    pub fn new() -> FaultyStorage {
        FaultyStorage::default()
    }

    /// Changes the faults injected from now on.
    pub fn set_faults(&self, faults: Faults) {
        *self.faults.lock() = faults;
    }

    /// From now on every file `sync_data` blocks until [`FaultyStorage::release_syncs`].
    pub fn hold_syncs(&self) {
        self.gate.state.lock().holding = true;
    }

    /// Lets held and later `sync_data` calls proceed.
    pub fn release_syncs(&self) {
        self.gate.state.lock().holding = false;
        self.gate.changed.notify_all();
    }

    /// Waits until at least one `sync_data` is held; false if none arrived within `timeout`
    /// (a bound against hanging a test, not a measurement).
    pub fn wait_for_held_sync(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.gate.state.lock();
        while state.waiting == 0 {
            if self
                .gate
                .changed
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                return state.waiting > 0;
            }
        }
        true
    }

    /// Simulates a power cut: every file falls back to its durable image (plus, per `mode`, a
    /// prefix of what was unsynced), and directory entries to their last synced state. Open
    /// handles from before the crash must not be used afterwards.
    pub fn crash(&self, mode: CrashMode) {
        let mut tree = self.tree.lock();
        let survivors = tree.durable_names.clone();
        for file in survivors.values() {
            let mut images = file.images.lock();
            let mut kept = images.durable.clone();
            if let CrashMode::KeepUnsyncedPrefix(extra) = mode {
                let durable_len = kept.len();
                if images.current.len() > durable_len {
                    let end = durable_len.saturating_add(extra).min(images.current.len());
                    kept.extend_from_slice(&images.current[durable_len..end]);
                }
            }
            images.durable = kept.clone();
            images.current = kept;
        }
        tree.files = survivors;
    }

    /// The bytes a process would read from `path` now.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let tree = self.tree.lock();
        tree.files
            .get(path)
            .map(|f| f.images.lock().current.clone())
    }

    /// Overwrites the current bytes of `path` (e.g. to flip a bit) without any fault.
    pub fn poke(&self, path: &Path, position: usize, bytes: &[u8]) {
        let tree = self.tree.lock();
        let file = tree.files.get(path).expect("poke an existing file");
        let mut images = file.images.lock();
        images.current[position..position + bytes.len()].copy_from_slice(bytes);
        images.durable = images.current.clone();
    }

    /// Bytes held by all files, as processes see them.
    pub fn stored_bytes(&self) -> u64 {
        let tree = self.tree.lock();
        tree.files
            .values()
            .map(|f| f.images.lock().current.len() as u64)
            .sum()
    }
}

impl SimFile {
    /// Writes `buf` at `position`, or at the end (under the same lock, as `O_APPEND` does).
    fn write(&self, buf: &[u8], position: Option<u64>) -> io::Result<()> {
        let mut faults = self.faults.lock();
        let mut images = self.images.lock();
        let position = position.map_or(images.current.len(), |p| p as usize);
        let mut to_write = buf.len();
        let mut error = None;
        if let Some(torn) = faults.torn_next_write_bytes.take() {
            to_write = to_write.min(torn);
            error = Some(io::Error::other("injected EIO: torn write"));
        }
        if let Some(left) = faults.space_bytes_left.as_mut() {
            let growth = (position + to_write).saturating_sub(images.current.len()) as u64;
            if growth > *left {
                to_write -= (growth - *left) as usize;
                error = Some(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            *left -= (position + to_write).saturating_sub(images.current.len()) as u64;
        }
        if images.current.len() < position + to_write {
            images.current.resize(position + to_write, 0);
        }
        images.current[position..position + to_write].copy_from_slice(&buf[..to_write]);
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        let images = self.images.lock();
        let start = (position as usize).min(images.current.len());
        let n = buf.len().min(images.current.len() - start);
        buf[..n].copy_from_slice(&images.current[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.write(buf, Some(position))
    }

    fn append_all(&self, buf: &[u8]) -> io::Result<()> {
        self.write(buf, None)
    }

    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.images.lock().current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.images.lock().current.resize(len as usize, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.gate.pass();
        let fail = self.faults.lock().fail_sync;
        let mut images = self.images.lock();
        if fail {
            // Linux may drop the dirty pages and mark them clean after a failed fsync; the data
            // is then lost for good, so the durable image keeps only what it had.
            return Err(io::Error::other("injected EIO on fsync"));
        }
        images.durable = images.current.clone();
        Ok(())
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl Storage for FaultyStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut tree = self.tree.lock();
        if let Some(file) = tree.files.get(path) {
            return Ok(file.clone());
        }
        if !create {
            return Err(not_found(path));
        }
        let parent = path.parent().unwrap_or(Path::new(""));
        if !tree.dirs.contains(parent) {
            return Err(not_found(parent));
        }
        let file = Arc::new(SimFile {
            images: Mutex::new(FileImages::default()),
            faults: self.faults.clone(),
            gate: self.gate.clone(),
        });
        tree.files.insert(path.to_path_buf(), file.clone());
        Ok(file)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree.lock();
        tree.files
            .remove(path)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut tree = self.tree.lock();
        let file = tree.files.remove(from).ok_or_else(|| not_found(from))?;
        tree.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let tree = self.tree.lock();
        tree.files.contains_key(path) || tree.dirs.contains(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let tree = self.tree.lock();
        if !tree.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(tree
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut tree = self.tree.lock();
        // Directories are modelled as durable at once: the log syncs the parent of a
        // partition directory itself, and its tests are about files.
        for ancestor in dir.ancestors() {
            tree.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.faults.lock().fail_sync {
            return Err(io::Error::other("injected EIO on directory fsync"));
        }
        let mut tree = self.tree.lock();
        tree.durable_names.retain(|p, _| p.parent() != Some(dir));
        let entries: Vec<_> = tree
            .files
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, f)| (p.clone(), f.clone()))
            .collect();
        tree.durable_names.extend(entries);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_only_synced_bytes_and_entries() {
        let fs = FaultyStorage::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let a = fs.open(&dir.join("a"), true).unwrap();
        a.write_all_at(b"hello", 0).unwrap();
        a.sync_data().unwrap();
        fs.sync_dir(dir).unwrap();
        a.write_all_at(b" world", 5).unwrap();
        let b = fs.open(&dir.join("b"), true).unwrap();
        b.write_all_at(b"x", 0).unwrap();
        b.sync_data().unwrap();

        fs.crash(CrashMode::KeepUnsyncedPrefix(3));
        assert_eq!(fs.contents(&dir.join("a")).unwrap(), b"hello wo");
        assert!(!fs.exists(&dir.join("b")), "entry never synced");

        fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(fs.contents(&dir.join("a")).unwrap(), b"hello wo");
    }

    #[test]
    fn enospc_and_torn_writes_write_a_prefix_and_fail() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let f = fs.open(Path::new("/d/f"), true).unwrap();
        fs.set_faults(Faults {
            space_bytes_left: Some(4),
            ..Faults::default()
        });
        let err = f.write_all_at(b"abcdef", 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(fs.contents(Path::new("/d/f")).unwrap(), b"abcd");
        assert_eq!(fs.stored_bytes(), 4);

        fs.set_faults(Faults {
            torn_next_write_bytes: Some(2),
            ..Faults::default()
        });
        assert!(f.write_all_at(b"XYZ", 4).is_err());
        f.write_all_at(b"!", 6).unwrap();
        assert_eq!(fs.contents(Path::new("/d/f")).unwrap(), b"abcdXY!");
    }
}
