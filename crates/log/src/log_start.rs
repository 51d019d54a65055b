//! The log start a partition was moved to by deleting records (Kafka's DeleteRecords), kept in
//! the checkpoint file `log-start-offset-checkpoint` of the partition directory, so that
//! records deleted stay deleted across a restart even while the segment holding them is still
//! on disk (whole segments below the log start are removed by the next retention pass).
//!
//! ```text
//! <crc32c of everything after this line: 8 lowercase hex digits>\n
//! 1\n          format version
//! <offset>\n   the log start, decimal
//! ```
//!
//! The file is replaced atomically (the storage layer's one replace: a `.tmp` file, fsync,
//! rename, fsync of the directory) **before** the log start moves in memory, so a deletion
//! that was answered is never undone by a crash. A missing file means no deletion; a damaged
//! one is reported and ignored (the log starts at its first segment), since a checkpoint that
//! cannot be read must not stop the partition from opening.

use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint_text;
use crate::storage::Storage;

/// The checkpoint's file name inside the partition directory.
pub(crate) const LOG_START_FILE: &str = "log-start-offset-checkpoint";
const FORMAT_VERSION: u32 = 1;
/// A longer file is damaged, not read: the format is under 40 bytes.
const FILE_BYTES_MAX: u64 = 64;

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(LOG_START_FILE)
}

fn encode(offset: i64) -> Vec<u8> {
    checkpoint_text::framed(&format!("{FORMAT_VERSION}\n{offset}\n"))
}

/// The offset a checkpoint's bytes hold; the error says why they are not a checkpoint.
fn decode(bytes: &[u8]) -> Result<i64, String> {
    let mut lines = checkpoint_text::body(bytes)?.split('\n');
    let version = lines.next().unwrap_or_default();
    if version != FORMAT_VERSION.to_string() {
        return Err(format!("unknown version {version:?}"));
    }
    let offset = checkpoint_text::number(lines.next().unwrap_or_default())?;
    if lines.next().is_some() {
        return Err("more than one offset".into());
    }
    Ok(offset)
}

/// Replaces the checkpoint with `offset`, durably.
pub(crate) fn store(storage: &dyn Storage, dir: &Path, offset: i64) -> io::Result<()> {
    tinymq_storage::replace_file(storage, &path(dir), &encode(offset))?;
    Ok(())
}

/// The stored log start: `Ok(None)` without a checkpoint, `Err` (why) for one that cannot be
/// read.
pub(crate) fn load(storage: &dyn Storage, dir: &Path) -> Result<Option<i64>, String> {
    checkpoint_text::load(storage, &path(dir), FILE_BYTES_MAX, decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_and_damage_is_named() {
        assert_eq!(decode(&encode(0)), Ok(0));
        assert_eq!(decode(&encode(1 << 40)), Ok(1 << 40));
        let mut flipped = encode(42);
        let last = flipped.len() - 2;
        flipped[last] = b'3';
        assert!(decode(&flipped).unwrap_err().contains("CRC"));
        assert!(decode(b"").is_err());
        assert!(decode(b"zzzzzzzz\n1\n5\n")
            .unwrap_err()
            .contains("CRC line"));
        let body = "1\n-5\n";
        let negative = format!("{:08x}\n{body}", crc32c::crc32c(body.as_bytes()));
        assert!(decode(negative.as_bytes())
            .unwrap_err()
            .contains("bad number"));
    }
}
