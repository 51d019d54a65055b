//! Disk work for the Raft storage on tokio's blocking pool, never on the async threads. (Files
//! replaced whole — the vote, the snapshot, the rewritten Raft log, `node-id` — go through
//! `tinymq_storage::replace_file`.)

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
