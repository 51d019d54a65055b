//! Disk work for the Raft storage: replacing a file so that a crash leaves the old or the new
//! contents whole (temp file, fsync, rename, directory fsync; used for the vote, the snapshot and
//! the rewritten Raft log), and running such work on tokio's blocking pool, never on the async
//! threads.

use std::io::Write;
use std::path::Path;

pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Runs `work` (file I/O, fsync) on the blocking pool and waits for it.
pub async fn blocking<T, F>(work: F) -> std::io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| std::io::Error::other(format!("a Raft storage task failed: {e}")))?
}
