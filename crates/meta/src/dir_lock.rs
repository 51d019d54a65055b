//! The exclusive lock on a data directory: one process serves a directory at a time. Two
//! processes writing the same segment and Raft files would overwrite each other's
//! acknowledged records, so a broker and a MetaServer node take this lock before they read
//! or write anything in their directory, and hold it for as long as they run.
//!
//! The lock is an advisory `flock` on `<dir>/.lock`, which the kernel drops when the holder
//! exits however it exits: the file's existence means nothing, so a file left behind by a
//! `kill -9` never blocks a restart. The holder writes its pid into the file, only so that the
//! refusal can name it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file's name inside the directory it guards.
pub const LOCK_FILE: &str = ".lock";

#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    #[error("data directory {dir} is in use by another process, {holder} (it holds {dir}/{LOCK_FILE}): a data directory serves one tinymq process at a time")]
    Held { dir: String, holder: String },
    #[error("cannot lock data directory {dir}: {source}")]
    Io { dir: String, source: std::io::Error },
}

/// A held lock on a data directory; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    /// Open for as long as the lock is held: closing it releases the `flock`.
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Locks `dir` (created if missing) for this process, or fails at once if another process
    /// (or another open lock in this one) holds it. Blocking file I/O: call it off the async
    /// threads.
    pub fn acquire(dir: &Path) -> Result<DirLock, DirLockError> {
        let io = |source| DirLockError::Io {
            dir: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: the holder's pid stays readable for the refusal.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(DirLockError::Held {
                    dir: dir.display().to_string(),
                    holder: holder(&path),
                })
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DirLock {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Names the holder from the pid in the lock file.
fn holder(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(pid) => format!("pid {pid}"),
            // The holder locked the file but has not written its pid yet.
            Err(_) => "pid not yet written".to_string(),
        },
        Err(e) => format!("pid unreadable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_is_refused_until_released_and_a_stale_file_does_not_count() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        // A file left by a process that died: its content and existence mean nothing.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(LOCK_FILE), "999999999\n").unwrap();

        let held = DirLock::acquire(&dir).unwrap();
        let pid = std::process::id();
        assert_eq!(
            std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(),
            format!("{pid}\n")
        );
        // A second lock, even in the same process, is refused and names the holder.
        let refused = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(refused.contains(&format!("pid {pid}")), "{refused}");
        assert!(refused.contains(&dir.display().to_string()), "{refused}");

        drop(held);
        let again = DirLock::acquire(&dir).unwrap();
        assert_eq!(again.dir(), dir);
    }
}
