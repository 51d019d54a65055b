//! The leader-epoch cache of one partition and its checkpoint file, `leader-epoch-checkpoint`:
//! for each leader epoch that wrote to the log, the offset of its first batch. A follower asks
//! its leader where its own latest epoch ends ([`LeaderEpochCache::end_offset_for`]) and
//! truncates a divergent tail to that point (KIP-101/279).
//!
//! The cache itself and its rules (entries, assignment, lookup, truncation at both ends) are
//! `tinymq_replication`'s [`LeaderEpochCache`], the one the replication rules and their
//! simulation use; this module keeps it durable: the checkpoint format, writing it, and making
//! it agree with the log at open.
//!
//! The cache is derived from the batch headers (each carries `partitionLeaderEpoch`), but
//! scanning them all at every open would cost a read per batch, so it is kept in memory and
//! in the checkpoint, which the log writes **before** the first batch of a new epoch (see
//! `docs/storage.md`, "Leader epochs and truncation"). After a crash the checkpoint may hold
//! entries the log never reached, never lack one it holds; [`recover`] drops the former and
//! rebuilds from the headers when the file is missing, damaged or disagrees with the log.
//!
//! ```text
//! <crc32c of everything after this line: 8 lowercase hex digits>\n
//! 1\n                          format version
//! <n>\n                        number of entries
//! <epoch> <start_offset>\n     n times, decimal, epochs and start offsets strictly increasing
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use tinymq_replication::{EpochError, LeaderEpochCache};

use crate::checkpoint_text::{self, number};
use crate::recovery::RecoveryReport;
use crate::segment::{read_batch_meta, Segment};
use crate::storage::Storage;

/// The checkpoint's file name inside the partition directory.
pub(crate) const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const CHECKPOINT_VERSION: u32 = 1;
/// A checkpoint file larger than this is treated as damaged (and rebuilt) rather than read:
/// about half a million leader elections, more than any partition sees.
pub(crate) const CHECKPOINT_BYTES_MAX: u64 = 16 << 20;

/// The checkpoint file's bytes for `cache`.
pub(crate) fn encode(cache: &LeaderEpochCache) -> Vec<u8> {
    let mut body = format!("{CHECKPOINT_VERSION}\n{}\n", cache.entries().len());
    for (epoch, start) in cache.entries() {
        body.push_str(&format!("{epoch} {start}\n"));
    }
    checkpoint_text::framed(&body)
}

/// Parses a checkpoint file; the error says why it is not one.
pub(crate) fn decode(bytes: &[u8]) -> Result<LeaderEpochCache, String> {
    let body = checkpoint_text::body(bytes)?;
    let mut lines = body.split('\n');
    let version = lines.next().unwrap_or_default();
    if version != CHECKPOINT_VERSION.to_string() {
        return Err(format!("unknown version {version:?}"));
    }
    let count: usize = number(lines.next().unwrap_or_default())?;
    let entries = lines
        .map(|line| {
            let (epoch, start) = line.split_once(' ').ok_or(format!("bad entry {line:?}"))?;
            Ok((number(epoch)?, number(start)?))
        })
        .collect::<Result<Vec<(i32, i64)>, String>>()?;
    if entries.len() != count {
        return Err(format!("{} entries, header says {count}", entries.len()));
    }
    LeaderEpochCache::from_entries(entries).map_err(|e| format!("entries not increasing: {e}"))
}

pub(crate) fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE)
}

/// Replaces the checkpoint so that a crash leaves the old or the new one whole, through the
/// storage layer's one atomic replace (its `.tmp` file is one recovery removes as a leftover).
pub(crate) fn store(storage: &dyn Storage, dir: &Path, cache: &LeaderEpochCache) -> io::Result<()> {
    tinymq_storage::replace_file(storage, &checkpoint_path(dir), &encode(cache))?;
    Ok(())
}

/// Reads the checkpoint; the inner error says why there is no usable one.
fn load(storage: &dyn Storage, dir: &Path) -> Result<LeaderEpochCache, String> {
    let path = checkpoint_path(dir);
    if !storage.exists(&path) {
        return Err("missing".into());
    }
    let read = || -> io::Result<Result<LeaderEpochCache, String>> {
        let file = storage.open(&path, false)?;
        let len = file.byte_len()?;
        if len > CHECKPOINT_BYTES_MAX {
            return Ok(Err(format!("{len} bytes, over {CHECKPOINT_BYTES_MAX}")));
        }
        // Bounded just above.
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(decode(&bytes))
    };
    read().unwrap_or_else(|e| Err(format!("unreadable: {e}")))
}

/// Applies the rule the log follows when appending one batch: a batch whose epoch is newer
/// than the latest starts an entry ([`LeaderEpochCache::assign`]). Negative epochs (no epoch)
/// and older ones are skipped. Refused only for a newer epoch at an offset below the latest
/// epoch's start, which no log the broker wrote holds.
pub(crate) fn observe(
    cache: &mut LeaderEpochCache,
    epoch: i32,
    base_offset: i64,
) -> Result<(), EpochError> {
    let is_new = epoch >= 0 && cache.latest_epoch().is_none_or(|latest| epoch > latest);
    if is_new {
        cache.assign(epoch, base_offset)?;
    }
    Ok(())
}

/// Walks the batch headers of `segment` into `cache`. A header that does not parse (bit rot
/// in an older segment, which recovery does not read whole), or one the cache refuses, ends
/// the walk of that segment.
fn scan_segment(segment: &Segment, cache: &mut LeaderEpochCache) -> io::Result<()> {
    let file = &*segment.log_file()?;
    let mut position = 0;
    while position < segment.size_bytes {
        let why = match read_batch_meta(file, position, segment.size_bytes)? {
            Ok(meta) => match observe(cache, meta.leader_epoch, meta.base_offset) {
                Ok(()) => {
                    position = meta.end_position();
                    continue;
                }
                Err(e) => e.to_string(),
            },
            Err(why) => why,
        };
        tracing::warn!(segment = segment.base_offset, position, %why,
            "unreadable batch header while rebuilding the leader-epoch cache");
        break;
    }
    Ok(())
}

/// The cache built from every batch header of the log: O(batches), only when needed.
fn rebuild(segments: &BTreeMap<i64, Segment>) -> io::Result<LeaderEpochCache> {
    let mut cache = LeaderEpochCache::new();
    for segment in segments.values() {
        scan_segment(segment, &mut cache)?;
    }
    Ok(cache)
}

/// Whether `cache` says what the active segment's headers say: its entries from the active
/// segment's base on are exactly those the headers start. Older segments were written under
/// the checkpoint-first rule and fsynced when they rolled, so they are trusted.
fn agrees_with_active(cache: &LeaderEpochCache, active: &Segment) -> io::Result<bool> {
    let mut derived = cache.clone();
    derived.truncate_from_end(active.base_offset);
    scan_segment(active, &mut derived)?;
    Ok(derived == *cache)
}

/// Loads the checkpoint of a just-recovered log and makes it agree with the log: entries the
/// log does not reach are dropped (and those below its start trimmed); a missing, damaged or
/// disagreeing checkpoint is rebuilt from the batch headers. Rewrites the file if anything
/// changed. Fails only on I/O errors reading segments or writing the file.
pub(crate) fn recover(
    storage: &dyn Storage,
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    report: &mut RecoveryReport,
) -> io::Result<LeaderEpochCache> {
    let (Some(first), Some(active)) = (segments.values().next(), segments.values().next_back())
    else {
        return Ok(LeaderEpochCache::new());
    };
    let (log_start, log_end) = (first.base_offset, active.next_offset);
    let loaded = load(storage, dir);
    let mut cache = loaded.clone().unwrap_or_default();
    cache.truncate_from_start(log_start);
    cache.truncate_from_end(log_end);
    let problem = match &loaded {
        Err(why) => Some(why.clone()),
        Ok(_) if !agrees_with_active(&cache, active)? => {
            Some("disagrees with the batch headers of the active segment".into())
        }
        Ok(_) => None,
    };
    if let Some(why) = problem {
        cache = rebuild(segments)?;
        cache.truncate_from_start(log_start);
        let quiet = why == "missing" && cache.entries().is_empty();
        if !quiet {
            tracing::warn!(dir = %dir.display(), %why, "leader-epoch checkpoint rebuilt from the log");
            report.leader_epochs_rebuilt = Some(why);
        }
    }
    let missing_and_empty = loaded.is_err() && cache.entries().is_empty();
    if loaded.as_ref() != Ok(&cache) && !missing_and_empty {
        store(storage, dir, &cache)?;
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tinymq_replication::EpochEnd;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        LeaderEpochCache::from_entries(entries.to_vec()).expect("well formed")
    }

    #[test]
    fn the_checkpoint_round_trips_and_damage_is_detected() {
        let c = cache(&[(0, 0), (3, 17), (9, 4000)]);
        let bytes = encode(&c);
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.ends_with("\n1\n3\n0 0\n3 17\n9 4000\n"), "{text}");
        assert_eq!(decode(&bytes), Ok(c));
        assert_eq!(
            decode(&encode(&LeaderEpochCache::new())),
            Ok(LeaderEpochCache::new())
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad).is_err(), "a flipped bit at {i} is caught");
            assert!(decode(&bytes[..i]).is_err(), "a cut at {i} is caught");
        }
        // The example in docs/storage.md, byte for byte.
        let documented = cache(&[(0, 0), (4, 1520), (7, 88211)]);
        assert_eq!(
            encode(&documented),
            b"b94979af\n1\n3\n0 0\n4 1520\n7 88211\n"
        );
        // A well-sealed body with entries out of order is refused too.
        let body = "1\n2\n5 10\n4 20\n";
        let sealed = format!("{:08x}\n{body}", crc32c::crc32c(body.as_bytes()));
        assert!(decode(sealed.as_bytes())
            .unwrap_err()
            .contains("increasing"));
    }

    #[test]
    fn checkpoints_written_in_format_1_read_back_unchanged() {
        // Files as tinymq has written them since format 1 (before the cache moved to
        // tinymq-replication): the bytes are fixed here, not produced by `encode`, so a
        // change that stops reading existing data directories fails.
        /// A checkpoint file's bytes and the `(epoch, start_offset)` entries it holds.
        type Fixture<'a> = (&'a [u8], &'a [(i32, i64)]);
        let files: [Fixture; 4] = [
            (
                b"b94979af\n1\n3\n0 0\n4 1520\n7 88211\n",
                &[(0, 0), (4, 1520), (7, 88211)],
            ),
            (b"f7f112ba\n1\n0\n", &[]),
            (b"860ad9b8\n1\n1\n2 0\n", &[(2, 0)]),
            (
                b"1afd8cc8\n1\n3\n2 0\n4 6\n9 12\n",
                &[(2, 0), (4, 6), (9, 12)],
            ),
        ];
        for (bytes, entries) in files {
            let text = String::from_utf8_lossy(bytes);
            let read = decode(bytes).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(read.entries(), entries, "{text:?}");
            assert_eq!(encode(&read), bytes, "{text:?} is written the same way");
        }
    }

    /// The model: the epoch of every offset below `log_end`, answered by brute force.
    fn model_end_offset(epochs_by_offset: &[i32], requested: i32) -> Option<EpochEnd> {
        let epoch = epochs_by_offset
            .iter()
            .copied()
            .filter(|&e| e <= requested)
            .max()?;
        let end = epochs_by_offset
            .iter()
            .position(|&e| e > epoch)
            .unwrap_or(epochs_by_offset.len());
        Some(EpochEnd {
            epoch,
            end_offset: end as i64,
        })
    }

    proptest! {
        /// A log written by a sequence of leaders (each epoch newer, each writing some
        /// offsets) answers OffsetsForLeaderEpoch as a scan of every offset's epoch would.
        #[test]
        fn end_offset_for_epoch_matches_a_brute_force_model(
            runs in proptest::collection::vec((1i32..4, 1usize..6), 1..8),
            requested in -1i32..30,
        ) {
            let mut c = LeaderEpochCache::new();
            let mut by_offset = Vec::new();
            let mut epoch = -1;
            for (step, len) in runs {
                epoch += step;
                for _ in 0..len {
                    observe(&mut c, epoch, by_offset.len() as i64).unwrap();
                    by_offset.push(epoch);
                }
            }
            let log_end = by_offset.len() as i64;
            prop_assert_eq!(c.end_offset_for(requested, log_end), model_end_offset(&by_offset, requested));
            prop_assert_eq!(decode(&encode(&c)), Ok(c.clone()));
            // Truncating the log and the cache at any offset keeps them in agreement.
            for cut in 0..=by_offset.len() {
                let mut t = c.clone();
                t.truncate_from_end(cut as i64);
                for r in -1..30 {
                    prop_assert_eq!(t.end_offset_for(r, cut as i64), model_end_offset(&by_offset[..cut], r));
                }
            }
        }
    }
}
