//! The one atomic whole-file replace: a crash at any point leaves either the old contents or
//! the new ones whole, never a mix and never nothing (docs/storage.md, "Atomic replace").
//!
//! 1. The new contents are written to a temporary file (created or cut to empty first).
//! 2. The temporary file is fsynced: its bytes are on disk before any name points at them.
//! 3. It is renamed over the target (`rename(2)` is atomic: readers see old or new).
//! 4. The target's directory is fsynced: the rename itself survives a power cut.
//!
//! A failure before the rename removes the temporary file (best effort; a leftover is
//! harmless, recovery of its directory removes it) and leaves the target as it was. A failure
//! of the directory fsync comes after the rename: the new contents are in place for this
//! process, but a crash may still bring the old ones back ([`ReplaceError::renamed`]).

use std::io;
use std::path::{Path, PathBuf};

use crate::storage::{Storage, StorageFile};

/// The suffix of the temporary file [`replace_file`] writes beside its target.
pub const TEMP_SUFFIX: &str = ".tmp";

/// The step of the replace protocol that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceStep {
    /// Creating or writing the temporary file.
    Write,
    /// Fsyncing the temporary file.
    SyncFile,
    /// Renaming it over the target.
    Rename,
    /// Fsyncing the target's directory (after the rename).
    SyncDir,
}

impl std::fmt::Display for ReplaceStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplaceStep::Write => "writing the temporary file",
            ReplaceStep::SyncFile => "fsyncing the temporary file",
            ReplaceStep::Rename => "renaming it over the file",
            ReplaceStep::SyncDir => "fsyncing the directory",
        })
    }
}

/// A replace that did not complete: which file, at which step, and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("replacing {}: {step} failed: {source}", path.display())]
pub struct ReplaceError {
    pub path: PathBuf,
    pub step: ReplaceStep,
    #[source]
    pub source: io::Error,
}

impl ReplaceError {
    /// Whether the rename happened: the new contents are in place (but, the directory fsync
    /// having failed, not yet sure to survive a crash), and a handle on the old file now names
    /// an unlinked one.
    pub fn renamed(&self) -> bool {
        self.step == ReplaceStep::SyncDir
    }
}

impl From<ReplaceError> for io::Error {
    /// Keeps the kind of the underlying error (`StorageFull` for ENOSPC, …) and the full
    /// message.
    fn from(e: ReplaceError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// `<path>.tmp`: the temporary file [`replace_file`] uses for `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(TEMP_SUFFIX);
    path.with_file_name(name)
}

/// The directory holding `path` (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Replaces `path` with `bytes` atomically and durably, through `<path>.tmp`.
pub fn replace_file(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<(), ReplaceError> {
    replace_file_with(storage, path, &temp_path(path), |out| {
        io::Write::write_all(out, bytes)
    })
}

/// Replaces `path` atomically and durably with what `write` writes, through the temporary
/// file `tmp` (which must be on the same file system; a directory of its own when a longer
/// name would not fit NAME_MAX). For contents streamed out rather than held in memory.
pub fn replace_file_with(
    storage: &dyn Storage,
    path: &Path,
    tmp: &Path,
    write: impl FnOnce(&mut FileWriter<'_>) -> io::Result<()>,
) -> Result<(), ReplaceError> {
    let fail = |step, source| ReplaceError {
        path: path.to_path_buf(),
        step,
        source,
    };
    let before_rename = |step, source| {
        let _ = storage.remove(tmp);
        fail(step, source)
    };
    let written = storage.open(tmp, true).and_then(|file| {
        file.set_len(0)?;
        let mut out = FileWriter::new(&*file);
        write(&mut out)?;
        Ok(file)
    });
    let file = written.map_err(|e| before_rename(ReplaceStep::Write, e))?;
    file.sync_data()
        .map_err(|e| before_rename(ReplaceStep::SyncFile, e))?;
    drop(file);
    storage
        .rename(tmp, path)
        .map_err(|e| before_rename(ReplaceStep::Rename, e))?;
    storage
        .sync_dir(dir_of(path))
        .map_err(|e| fail(ReplaceStep::SyncDir, e))
}

/// Sequential writes to a [`StorageFile`] from position 0, as [`io::Write`].
#[derive(Debug)]
pub struct FileWriter<'a> {
    file: &'a dyn StorageFile,
    position: u64,
}

impl<'a> FileWriter<'a> {
    pub fn new(file: &'a dyn StorageFile) -> FileWriter<'a> {
        FileWriter { file, position: 0 }
    }

    /// Bytes written so far.
    pub fn written_bytes(&self) -> u64 {
        self.position
    }
}

impl io::Write for FileWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all_at(buf, self.position)?;
        self.position += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{CrashMode, Faults, FaultyStorage};
    use crate::OsStorage;

    fn setup() -> (FaultyStorage, PathBuf) {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let path = PathBuf::from("/d/f.json");
        replace_file(&fs, &path, b"old").unwrap();
        (fs, path)
    }

    #[test]
    fn a_replace_survives_a_crash_and_leaves_no_temporary_file() {
        let (fs, path) = setup();
        replace_file(&fs, &path, b"new contents").unwrap();
        fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(fs.contents(&path).unwrap(), b"new contents");
        assert!(!fs.exists(&temp_path(&path)));
    }

    #[test]
    fn enospc_eio_and_torn_writes_are_refused_and_keep_the_old_contents() {
        let faults = [
            Faults {
                space_bytes_left: Some(2),
                ..Faults::default()
            },
            Faults {
                torn_next_write_bytes: Some(3),
                ..Faults::default()
            },
            Faults {
                fail_sync: true,
                ..Faults::default()
            },
        ];
        for fault in faults {
            let (fs, path) = setup();
            fs.set_faults(fault.clone());
            let e = replace_file(&fs, &path, b"new contents").unwrap_err();
            assert!(!e.renamed(), "{fault:?}: {e}");
            assert!(e.to_string().contains("/d/f.json"), "{e}");
            fs.set_faults(Faults::default());
            assert_eq!(fs.contents(&path).unwrap(), b"old", "{fault:?}");
            assert!(!fs.exists(&temp_path(&path)), "{fault:?}");
            fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
            assert_eq!(fs.contents(&path).unwrap(), b"old", "{fault:?}");
            replace_file(&fs, &path, b"later").unwrap();
            assert_eq!(fs.contents(&path).unwrap(), b"later");
        }
    }

    #[test]
    fn enospc_keeps_its_kind_through_io_error() {
        let (fs, path) = setup();
        fs.set_faults(Faults {
            space_bytes_left: Some(0),
            ..Faults::default()
        });
        let e: io::Error = replace_file(&fs, &path, b"x").unwrap_err().into();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    }

    #[test]
    fn a_crash_between_the_rename_and_the_directory_sync_keeps_old_or_new_whole() {
        let (fs, path) = setup();
        // The rename without the directory sync: a crash brings the old name back.
        let file = fs.open(&temp_path(&path), true).unwrap();
        file.write_all_at(b"new", 0).unwrap();
        file.sync_data().unwrap();
        fs.rename(&temp_path(&path), &path).unwrap();
        fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(fs.contents(&path).unwrap(), b"old");
    }

    #[test]
    fn the_real_file_system_replaces_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        replace_file(&OsStorage, &path, b"one").unwrap();
        replace_file(&OsStorage, &path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!temp_path(&path).exists());
        let e = replace_file(&OsStorage, &dir.path().join("missing/f"), b"x").unwrap_err();
        assert_eq!(e.step, ReplaceStep::Write);
    }
}
