//! The format of `raft-log.jsonl` and its replay: what a line looks like, how it is checked, and
//! which damage is cut and which stops the node.
//!
//! A line is `<crc32c of the JSON, 8 lowercase hex digits> <JSON>\n`; the JSON is one [`Line`]
//! (an entry, a truncation, a purge or a committed-index hint). Lines written by earlier
//! versions are the bare JSON (they start with `{`); they are accepted on replay, and the file
//! is then rewritten in the checksummed form.
//!
//! Replay reads the lines in order. The last line is cut if it has no newline, fails its
//! checksum or does not parse: it is taken for a write torn by a crash, never fsynced and so
//! never acknowledged.
//! Such a line anywhere else, or a line that contradicts those before it (an entry that does
//! not follow the previous one, a truncation or purge going back behind a purge), is
//! [`DamagedLog`]: the node does not start, and the error names the file, line and byte offset.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use openraft::{Entry, LogId};
use serde::{Deserialize, Serialize};
use tinymq_storage::{FileReader, Storage};

use super::TypeConfig;

pub(super) const LOG_FILE: &str = "raft-log.jsonl";

/// The length of the checksum field and the space after it.
const CHECKSUM_PREFIX_BYTES: usize = 9;

#[derive(Serialize, Deserialize)]
pub(super) enum Line {
    Entry(Entry<TypeConfig>),
    /// Entries at and after this index were removed.
    Truncate(u64),
    /// Entries up to and including this log id were removed (covered by a snapshot).
    Purge(LogId<u64>),
    /// Entries up to and including this log id are committed.
    Committed(LogId<u64>),
}

/// Appends `line` to `out` in the checksummed form, newline included.
pub(super) fn encode(line: &Line, out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    out.extend_from_slice(b"00000000 ");
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::other)?;
    let json_start = start + CHECKSUM_PREFIX_BYTES;
    let crc = crc32c::crc32c(&out[json_start..]);
    out[start..json_start - 1].copy_from_slice(format!("{crc:08x}").as_bytes());
    out.push(b'\n');
    Ok(())
}

/// Decodes one line (without its newline); the flag says it is in the legacy, unchecksummed form.
fn decode(bytes: &[u8]) -> Result<(Line, bool), String> {
    if matches!(bytes.first(), Some(b'{' | b'"')) {
        let line = serde_json::from_slice(bytes)
            .map_err(|e| format!("an unchecksummed (legacy) line that is not valid JSON: {e}"))?;
        return Ok((line, true));
    }
    let (Some(digits), Some(b' '), Some(json)) = (
        bytes.get(..CHECKSUM_PREFIX_BYTES - 1),
        bytes.get(CHECKSUM_PREFIX_BYTES - 1),
        bytes.get(CHECKSUM_PREFIX_BYTES..),
    ) else {
        return Err("no checksum field (8 hex digits and a space)".into());
    };
    let stored = std::str::from_utf8(digits)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|s| u32::from_str_radix(s, 16).ok())
        .ok_or("the checksum field is not 8 hex digits")?;
    let computed = crc32c::crc32c(json);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        ));
    }
    let line = serde_json::from_slice(json)
        .map_err(|e| format!("the checksum matches but the JSON does not parse: {e}"))?;
    Ok((line, false))
}

/// The state the log file describes.
#[derive(Debug, Default, Clone)]
pub(super) struct Live {
    pub entries: BTreeMap<u64, Entry<TypeConfig>>,
    pub last_purged: Option<LogId<u64>>,
    pub committed: Option<LogId<u64>>,
}

impl Live {
    /// The log id of the last entry, or of the last purged one when no entry is left.
    pub fn last_log_id(&self) -> Option<LogId<u64>> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.last_purged)
    }

    /// How many lines a rewritten file holds for this state.
    pub fn lines(&self) -> u64 {
        self.entries.len() as u64
            + u64::from(self.last_purged.is_some())
            + u64::from(self.committed.is_some())
    }

    /// The lines of a file holding exactly this state.
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        if let Some(id) = self.last_purged {
            encode(&Line::Purge(id), &mut out)?;
        }
        for entry in self.entries.values() {
            encode(&Line::Entry(entry.clone()), &mut out)?;
        }
        if let Some(id) = self.committed {
            encode(&Line::Committed(id), &mut out)?;
        }
        Ok(out)
    }

    /// Refuses a line the writer could not have written after the lines before it.
    pub fn check(&self, line: &Line) -> Result<(), String> {
        match line {
            Line::Entry(entry) => follows(self.last_log_id(), &entry.log_id),
            Line::Truncate(since) => match self.last_purged.filter(|p| *since <= p.index) {
                Some(purged) => Err(format!(
                    "a truncation from index {since} reaches the purged entries (up to {purged})"
                )),
                None => Ok(()),
            },
            Line::Purge(upto) => match self.last_purged.filter(|p| upto < p) {
                Some(purged) => Err(format!("a purge up to {upto} goes back before {purged}")),
                None => Ok(()),
            },
            Line::Committed(_) => Ok(()),
        }
    }

    /// [`Live::check`] for a batch, as if each line were applied before the next.
    pub fn check_batch(&self, lines: &[Line]) -> Result<(), String> {
        let mut last = self.last_log_id();
        for line in lines {
            match line {
                Line::Entry(entry) => {
                    follows(last, &entry.log_id)?;
                    last = Some(entry.log_id);
                }
                other => self.check(other)?,
            }
        }
        Ok(())
    }

    /// Applies a line that passed [`Live::check`].
    pub fn apply(&mut self, line: Line) {
        match line {
            Line::Entry(entry) => {
                self.entries.insert(entry.log_id.index, entry);
            }
            Line::Truncate(since) => {
                self.entries.split_off(&since);
            }
            Line::Purge(upto) => {
                self.entries = match upto.index.checked_add(1) {
                    Some(first_kept) => self.entries.split_off(&first_kept),
                    None => BTreeMap::new(),
                };
                self.last_purged = Some(upto);
            }
            Line::Committed(id) => self.committed = Some(id),
        }
    }
}

/// Refuses an entry that does not directly follow `last` (a hole or an overlap, which the writer
/// never produces: openraft truncates before it overwrites), or whose term goes back.
fn follows(last: Option<LogId<u64>>, id: &LogId<u64>) -> Result<(), String> {
    let Some(last) = last else {
        return Ok(());
    };
    if last.index.checked_add(1) != Some(id.index) {
        return Err(format!("entry {id} does not follow the last log id {last}"));
    }
    if id.leader_id < last.leader_id {
        return Err(format!(
            "entry {id} has an older term than {last} before it"
        ));
    }
    Ok(())
}

/// A log file that must not be replayed: damage before the last line, or lines that contradict
/// each other. The node refuses to start rather than run without entries it may have promised.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path}: line {line} (byte offset {offset}) {problem}; the MetaServer node will not start on \
     this Raft log, because entries after that line could be lost. Restore the node's data \
     directory from a backup; or, if the other nodes of its group are running and have a \
     leader, move the directory aside and restart this node with an empty one, so that it \
     copies the log from the leader"
)]
pub(super) struct DamagedLog {
    pub path: PathBuf,
    pub line: u64,
    pub offset: u64,
    pub problem: String,
}

/// The outcome of replaying the file.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    pub live: Live,
    /// Lines accepted (the file's lines, minus a torn last one).
    pub lines: u64,
    /// Bytes accepted: the file is cut to this length.
    pub good_bytes: u64,
    /// Some line was in the unchecksummed form of earlier versions.
    pub legacy: bool,
    /// Why the last line was cut, if it was.
    pub torn: Option<String>,
}

/// Replays `path` through `storage` (a missing file is an empty log). I/O errors and
/// [`DamagedLog`] (as `InvalidData`) are errors; a torn last line is reported in
/// [`Replayed::torn`].
pub(super) fn replay(storage: &dyn Storage, path: &Path) -> std::io::Result<Replayed> {
    let mut out = Replayed::default();
    let file = match storage.open(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::new(FileReader::new(&*file, 0));
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf)?;
        if read == 0 {
            return Ok(out);
        }
        let number = out.lines + 1;
        let offset = out.good_bytes;
        let damaged = |problem: String| {
            let error = DamagedLog {
                path: path.to_path_buf(),
                line: number,
                offset,
                problem,
            };
            std::io::Error::new(std::io::ErrorKind::InvalidData, error)
        };
        let Some(body) = buf.strip_suffix(b"\n") else {
            out.torn = Some(format!(
                "line {number} (byte offset {offset}) has no newline"
            ));
            return Ok(out);
        };
        match decode(body) {
            Ok((line, legacy)) => {
                out.legacy |= legacy;
                out.live.check(&line).map_err(|problem| {
                    damaged(format!("contradicts the lines before it: {problem}"))
                })?;
                out.live.apply(line);
            }
            Err(problem) if reader.fill_buf()?.is_empty() => {
                out.torn = Some(format!("line {number} (byte offset {offset}): {problem}"));
                return Ok(out);
            }
            Err(problem) => {
                return Err(damaged(format!(
                    "is damaged ({problem}) and more lines follow it"
                )));
            }
        }
        out.lines += 1;
        out.good_bytes += read as u64;
    }
}
