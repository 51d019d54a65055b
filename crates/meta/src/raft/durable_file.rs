//! Replacing a small file so that a crash leaves the old or the new contents whole: temp file,
//! fsync, rename, directory fsync. Used for the Raft vote and the snapshot.

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
