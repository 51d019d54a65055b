//! What the cleaner has done to a compacted log, kept in `cleaner-offset-checkpoint` in the
//! partition directory (Kafka keeps one such file per log directory; tinymq one per log, like
//! its other checkpoints):
//!
//! ```text
//! <crc32c of everything after this line: 8 lowercase hex digits>\n
//! 1\n                        format version
//! <first dirty offset>\n     records below it were cleaned (the next pass starts there)
//! <gaps below>\n             batches below it may start past the end of the batch before
//! <tombstones due>\n         when a kept tombstone may next be removed, ms (0: none kept)
//! <n>\n                      clean passes remembered, then n lines:
//! <offset> <time ms>\n       records below `offset` were first cleaned by `time ms`
//! ```
//!
//! **Gaps below** is what lets recovery accept a compacted segment: elsewhere a batch that
//! does not start where the one before ended is damage and is cut, but compaction removes
//! whole batches, and a follower copies those gaps from its leader. The file is replaced
//! atomically (a `.tmp` file, fsync, rename, fsync of the directory) **before** any batch
//! after a gap is on disk, so recovery never cuts what compaction or replication left.
//!
//! **Clean passes** date tombstones: a tombstone may be removed `delete_retention` after the
//! pass that first found it below the first dirty offset. The list is bounded
//! ([`CLEAN_PASSES_MAX`]): the two oldest entries merge into the later one, which only keeps
//! tombstones longer. A damaged file is reported and read as "gaps anywhere, nothing
//! cleaned": cleaning starts over, and nothing is cut.

use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint_text;
use crate::storage::Storage;

pub(crate) const CLEANER_FILE: &str = "cleaner-offset-checkpoint";
const FORMAT_VERSION: u32 = 1;
/// Clean passes remembered for dating tombstones.
pub(crate) const CLEAN_PASSES_MAX: usize = 64;
/// A longer file is damaged: the format with every pass is under 3 KiB.
const FILE_BYTES_MAX: u64 = 8 << 10;

/// The cleaner's checkpoint of one log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CleanerCheckpoint {
    pub first_dirty: i64,
    pub gaps_below: i64,
    /// The earliest time a tombstone the last pass kept may be removed; 0 when it kept none.
    /// A log with no new records is cleaned again then.
    pub tombstones_due_ms: i64,
    /// `(offset, time_ms)`, both increasing.
    pub passes: Vec<(i64, i64)>,
}

impl CleanerCheckpoint {
    /// What a damaged file is read as (see the module doc).
    pub fn damaged() -> CleanerCheckpoint {
        CleanerCheckpoint {
            first_dirty: 0,
            gaps_below: i64::MAX,
            tombstones_due_ms: 0,
            passes: Vec::new(),
        }
    }

    /// When the record at `offset` was first found cleaned, if it was.
    pub fn cleaned_at(&self, offset: i64) -> Option<i64> {
        self.passes
            .iter()
            .find(|&&(below, _)| offset < below)
            .map(|&(_, time)| time)
    }

    /// Records a pass that cleaned everything below `offset` by `time_ms`.
    pub fn record_pass(&mut self, offset: i64, time_ms: i64) {
        self.first_dirty = self.first_dirty.max(offset);
        let last = self.passes.last().copied();
        if last.is_some_and(|(below, _)| below >= offset) {
            return;
        }
        let time_ms = last.map_or(time_ms, |(_, t)| t.max(time_ms));
        self.passes.push((offset, time_ms));
        if self.passes.len() > CLEAN_PASSES_MAX {
            // (o1, t1), (o2, t2) → (o2, t2): offsets below o1 now date from t2 ≥ t1.
            self.passes.remove(0);
        }
    }
}

impl CleanerCheckpoint {
    /// Forgets what was cleaned at or after `end` (the log was truncated there); returns
    /// whether anything changed. Records below `end` keep the date they were cleaned by.
    pub fn truncated_to(&mut self, end: i64) -> bool {
        if self.first_dirty <= end {
            return false;
        }
        self.first_dirty = end;
        if let Some(i) = self.passes.iter().position(|&(below, _)| below >= end) {
            self.passes[i].0 = end;
            self.passes.truncate(i + 1);
        }
        true
    }
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(CLEANER_FILE)
}

fn encode(c: &CleanerCheckpoint) -> Vec<u8> {
    let mut body = format!(
        "{FORMAT_VERSION}\n{}\n{}\n{}\n{}\n",
        c.first_dirty,
        c.gaps_below,
        c.tombstones_due_ms,
        c.passes.len()
    );
    for (offset, time) in &c.passes {
        body.push_str(&format!("{offset} {time}\n"));
    }
    checkpoint_text::framed(&body)
}

fn decode(bytes: &[u8]) -> Result<CleanerCheckpoint, String> {
    let mut lines = checkpoint_text::body(bytes)?.split('\n');
    let mut next = || lines.next().unwrap_or_default();
    let version = next();
    if version != FORMAT_VERSION.to_string() {
        return Err(format!("unknown version {version:?}"));
    }
    let first_dirty = checkpoint_text::number(next())?;
    let gaps_below = checkpoint_text::number(next())?;
    let tombstones_due_ms = checkpoint_text::number(next())?;
    let count: usize = checkpoint_text::number(next())?;
    if count > CLEAN_PASSES_MAX {
        return Err(format!("{count} passes, over {CLEAN_PASSES_MAX}"));
    }
    let mut passes: Vec<(i64, i64)> = Vec::with_capacity(count);
    for _ in 0..count {
        let line = next();
        let (offset, time) = line
            .split_once(' ')
            .ok_or_else(|| format!("bad pass line {line:?}"))?;
        let pass = (
            checkpoint_text::number(offset)?,
            checkpoint_text::number(time)?,
        );
        if passes
            .last()
            .is_some_and(|&(o, t)| o >= pass.0 || t > pass.1)
        {
            return Err(format!("pass {line:?} does not follow the one before"));
        }
        passes.push(pass);
    }
    if !next().is_empty() {
        return Err("lines after the passes".into());
    }
    Ok(CleanerCheckpoint {
        first_dirty,
        gaps_below,
        tombstones_due_ms,
        passes,
    })
}

/// Replaces the checkpoint, durably.
pub(crate) fn store(storage: &dyn Storage, dir: &Path, c: &CleanerCheckpoint) -> io::Result<()> {
    tinymq_storage::replace_file(storage, &path(dir), &encode(c))?;
    Ok(())
}

/// The stored checkpoint: `Ok(None)` without one, `Err` (why) for one that cannot be read.
pub(crate) fn load(storage: &dyn Storage, dir: &Path) -> Result<Option<CleanerCheckpoint>, String> {
    checkpoint_text::load(storage, &path(dir), FILE_BYTES_MAX, decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_and_damage_is_named() {
        let mut c = CleanerCheckpoint {
            first_dirty: 0,
            gaps_below: 0,
            tombstones_due_ms: 0,
            passes: Vec::new(),
        };
        assert_eq!(decode(&encode(&c)), Ok(c.clone()));
        c.record_pass(100, 5_000);
        c.record_pass(100, 6_000); // nothing new cleaned: the older date stays
        c.record_pass(250, 7_000);
        c.gaps_below = 250;
        assert_eq!(c.passes, [(100, 5_000), (250, 7_000)]);
        assert_eq!(decode(&encode(&c)), Ok(c.clone()));
        assert_eq!(
            (c.cleaned_at(99), c.cleaned_at(100), c.cleaned_at(250)),
            (Some(5_000), Some(7_000), None)
        );
        let mut flipped = encode(&c);
        let at = flipped.len() - 3;
        flipped[at] ^= 1;
        assert!(decode(&flipped).is_err());
        assert!(decode(b"").is_err());
    }

    #[test]
    fn a_truncation_makes_what_follows_it_dirty_again() {
        let mut c = CleanerCheckpoint::default();
        c.record_pass(100, 1_000);
        c.record_pass(200, 2_000);
        c.record_pass(300, 3_000);
        assert!(!c.truncated_to(300));
        assert!(c.truncated_to(150));
        assert_eq!(
            (c.first_dirty, c.passes.clone()),
            (150, vec![(100, 1_000), (150, 2_000)])
        );
        assert_eq!(c.cleaned_at(120), Some(2_000));
        assert_eq!(c.cleaned_at(150), None);
    }

    #[test]
    fn the_pass_list_is_bounded_and_merging_only_dates_tombstones_later() {
        let mut c = CleanerCheckpoint::default();
        for i in 1..=(CLEAN_PASSES_MAX as i64 + 10) {
            c.record_pass(i * 10, i * 1_000);
        }
        assert_eq!(c.passes.len(), CLEAN_PASSES_MAX);
        // Offset 5 was cleaned at 1 000; it is now dated by the oldest pass kept, later.
        assert!(c.cleaned_at(5).unwrap() > 1_000);
        assert_eq!(decode(&encode(&c)), Ok(c));
    }
}
