//! The file operations durable files need, behind a small trait, so that tests can swap the
//! real file system for one that injects faults (see [`crate::fault`]).
//!
//! Files are read and written at explicit positions (`pread`/`pwrite`), so one open file can be
//! shared by an appender and many readers without a seek position to guard. Logs that several
//! handles may append to (a stale owner and the live one) open with [`Storage::open_append`]
//! and write with [`StorageFile::append_all`]: each append lands at the end, whatever the
//! other handles wrote.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One open file.
pub trait StorageFile: Send + Sync + std::fmt::Debug {
    /// Reads up to `buf.len()` bytes at `position`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `position`, or fails (possibly after writing a part of it).
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()>;
    /// Writes `parts` back to back from `position`, or fails (possibly after writing a part
    /// of them). The real file system does it in one `pwritev`; this default writes the parts
    /// one after the other, which is what a fault-injecting file needs.
    fn write_all_vectored_at(&self, parts: &[&[u8]], mut position: u64) -> io::Result<()> {
        for part in parts {
            self.write_all_at(part, position)?;
            position += part.len() as u64;
        }
        Ok(())
    }
    /// Writes all of `buf` at the current end of the file, or fails (possibly after writing a
    /// part of it). On a handle from [`Storage::open_append`] the end is found by the kernel
    /// (`O_APPEND`), so appends through other handles are never overwritten.
    fn append_all(&self, buf: &[u8]) -> io::Result<()> {
        let end = self.byte_len()?;
        self.write_all_at(buf, end)
    }
    /// Current length in bytes.
    fn byte_len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data (and its length) durable: `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// The OS descriptor, for sending the file's bytes without copying them (`sendfile`);
    /// `None` for files that have none (in-memory test storage).
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Reads exactly `buf.len()` bytes at `position`, failing with `UnexpectedEof` if the file
    /// ends first.
    fn read_exact_at(&self, mut buf: &mut [u8], mut position: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, position)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    position += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// A directory tree of files.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Opens a file for reading and writing, creating it when `create` is set.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens a file for reading and appending ([`StorageFile::append_all`]), creating it when
    /// `create` is set. Positional writes through such a handle land at the end too (Linux
    /// `O_APPEND`), so use `append_all` only.
    fn open_append(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        self.open(path, create)
    }
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from` (`rename(2)`); durable once the directory is
    /// synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// The paths of the files directly inside `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsStorage;

#[derive(Debug)]
struct OsFile {
    file: File,
    /// Opened with `O_APPEND`.
    append: bool,
}

impl StorageFile for OsFile {
    fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
        self.file.read_at(buf, position)
    }
    fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.file.write_all_at(buf, position)
    }
    fn write_all_vectored_at(&self, parts: &[&[u8]], position: u64) -> io::Result<()> {
        pwritev_all(&self.file, parts, position)
    }
    fn append_all(&self, buf: &[u8]) -> io::Result<()> {
        if self.append {
            // `write(2)` on an O_APPEND descriptor: the kernel puts each write at the end.
            io::Write::write_all(&mut &self.file, buf)
        } else {
            let end = self.byte_len()?;
            self.write_all_at(buf, end)
        }
    }
    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(&self.file))
    }
}

/// Parts one `pwritev` call takes; more (no caller has them) go in several calls.
const VECTORED_PARTS_MAX: usize = 4;

/// Writes `parts` back to back at `position` with `pwritev`, continuing after short writes
/// and `EINTR`, without allocating.
fn pwritev_all(file: &File, parts: &[&[u8]], mut position: u64) -> io::Result<()> {
    // The next byte to write is `parts[first][skip]`.
    let (mut first, mut skip) = (0, 0);
    loop {
        while parts.get(first).is_some_and(|part| part.len() == skip) {
            (first, skip) = (first + 1, 0);
        }
        let Some(rest) = parts.get(first..).filter(|rest| !rest.is_empty()) else {
            return Ok(());
        };
        let mut slices = [IoSlice::new(&[]); VECTORED_PARTS_MAX];
        let count = rest.len().min(VECTORED_PARTS_MAX);
        for (i, part) in rest.iter().take(count).enumerate() {
            slices[i] = IoSlice::new(if i == 0 { &part[skip..] } else { part });
        }
        let mut written = match rustix::io::pwritev(file, &slices[..count], position) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        position += written as u64;
        while written > 0 {
            let left = parts[first].len() - skip;
            if written < left {
                skip += written;
                break;
            }
            written -= left;
            (first, skip) = (first + 1, 0);
        }
    }
}

impl Storage for OsStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(OsFile {
            file,
            append: false,
        }))
    }
    fn open_append(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .open(path)?;
        Ok(Arc::new(OsFile { file, append: true }))
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                paths.push(entry.path());
            }
        }
        paths.sort();
        Ok(paths)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
