//! Removing the data of deleted partitions without holding anything up. Deciding that a
//! partition's data goes takes one rename of its directory to `<dir>.<unique>.deleted`: cheap,
//! done on the spot, and from then on a topic created again under the same name finds no old
//! files. The files themselves are removed later by one worker thread, one directory at a
//! time, so removing thousands of partitions delays neither the metadata, nor the opening of
//! other partitions, nor requests (only the disk is shared).
//!
//! The worker keeps no queue: a wake-up makes it scan the data directory for `*.deleted`
//! directories, so its memory is bounded whatever is deleted, and a deletion that a previous
//! run did not finish (a stop or a crash in the middle) is finished at start-up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};

/// The name ending of a directory whose data is being removed.
pub const DELETED_SUFFIX: &str = ".deleted";

/// The background remover of `*.deleted` directories in one data directory.
#[derive(Debug)]
pub struct Deleter {
    /// Capacity one: a wake-up already pending covers every rename made before the scan.
    wake: SyncSender<()>,
}

impl Deleter {
    /// Starts the worker thread; it scans `data_dir` at once (finishing an earlier run's
    /// deletions) and again after each [`Deleter::wake`]. It stops when the `Deleter` is dropped.
    pub fn start(data_dir: &Path) -> std::io::Result<Deleter> {
        let (wake, woken) = sync_channel(1);
        let dir = data_dir.to_path_buf();
        std::thread::Builder::new()
            .name("tinymq-deleter".into())
            .spawn(move || remove_on_wake(&dir, &woken))?;
        let deleter = Deleter { wake };
        deleter.wake();
        Ok(deleter)
    }

    /// Asks for a scan (after renames); never blocks.
    pub fn wake(&self) {
        match self.wake.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Disconnected(())) => {
                tracing::error!("the deletion worker stopped; deleted data stays until a restart")
            }
        }
    }
}

/// Renames `dir` out of the way (to `<dir>.<unique>.deleted`) for the worker to remove; a
/// directory that does not exist is nothing to do. Returns the new path, if any.
pub fn retire(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    // Unique within the process (the counter) and across runs (the clock), so a second
    // deletion of the same partition never collides with a first one not yet removed.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let Some(name) = dir.file_name() else {
        return Err(std::io::Error::other(format!(
            "{} has no directory name",
            dir.display()
        )));
    };
    let mut retired_name = name.to_os_string();
    retired_name.push(format!(".{nanos:x}-{n}{DELETED_SUFFIX}"));
    let retired = dir.with_file_name(retired_name);
    match std::fs::rename(dir, &retired) {
        Ok(()) => Ok(Some(retired)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a data-directory entry named `name` is data being removed.
pub fn is_retired(name: &str) -> bool {
    name.ends_with(DELETED_SUFFIX)
}

fn remove_on_wake(data_dir: &Path, woken: &Receiver<()>) {
    while woken.recv().is_ok() {
        if let Err(e) = remove_retired(data_dir) {
            tracing::warn!(dir = %data_dir.display(), error = %e, "cannot list deleted partition data; retried at the next deletion");
        }
    }
}

/// Removes every `*.deleted` directory in `data_dir`, one at a time; a failure is logged and
/// retried at the next scan.
fn remove_retired(data_dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !is_retired(&entry.file_name().to_string_lossy()) || !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::debug!(dir = %path.display(), "deleted partition data removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "cannot remove deleted partition data; retried at the next deletion")
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wait_until_gone(path: &Path) -> bool {
        (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            !path.exists()
        })
    }

    #[test]
    fn a_retired_directory_is_renamed_at_once_and_removed_in_the_background() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("orders-3");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.log"), b"old records").unwrap();
        let deleter = Deleter::start(tmp.path()).unwrap();

        let retired = retire(&dir).unwrap().expect("renamed");
        assert!(!dir.exists(), "the name is free for a new topic at once");
        let name = retired.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("orders-3.") && is_retired(&name), "{name}");
        // A second deletion of the same partition while the first is not yet removed.
        std::fs::create_dir(&dir).unwrap();
        let again = retire(&dir).unwrap().expect("renamed");
        assert_ne!(again, retired);

        deleter.wake();
        assert!(wait_until_gone(&retired) && wait_until_gone(&again));
        assert_eq!(retire(&dir).unwrap(), None, "nothing left to retire");
    }

    #[test]
    fn deletions_left_by_an_earlier_run_are_finished_at_start_and_nothing_else_is_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let left = tmp.path().join("t-0.17-0.deleted");
        std::fs::create_dir_all(left.join("nested")).unwrap();
        let live = tmp.path().join("t-1");
        std::fs::create_dir(&live).unwrap();
        std::fs::write(tmp.path().join("x.deleted"), b"a file, not a directory").unwrap();

        let _deleter = Deleter::start(tmp.path()).unwrap();
        assert!(wait_until_gone(&left));
        assert!(live.exists());
        assert!(tmp.path().join("x.deleted").exists());
    }
}
