//! Putting responses on the socket: the buffers of every response queued at the moment go out
//! together in vectored writes (one `writev` for many frames, none of them joined into one
//! buffer first), and file ranges go straight from the page cache with `sendfile`. A peer that
//! accepts no bytes for the stall limit gets an error, which ends the connection.
//!
//! A frame that carries file ranges is completed only if its sources still hold the intended
//! bytes: its last byte is held back until every range before it has been handed to the kernel
//! and [`FileSource::unchanged`] confirms it (a log truncated in between would otherwise have
//! sent bytes of the new log under the old frame's lengths). When it does not, the frame stays
//! incomplete and the connection is closed, which a client treats like any lost connection.
//! Under TLS the bytes must be encrypted, so there is no `sendfile`: file ranges are read a
//! bounded chunk at a time and written through the TLS stream, with the same check.
//!
//! `sendfile` queues references to page-cache pages rather than copies, so a page rewritten in
//! place after the call could still change what leaves: services send only ranges that
//! nothing rewrites (the broker: records below the high watermark).

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::{FileRange, FileSource, Part};

/// Buffers given to one `writev` at most (Linux's `IOV_MAX` is 1024).
const IOVECS_MAX: usize = 64;
/// Bytes asked of one `sendfile` at most.
const SENDFILE_CHUNK_BYTES: u64 = 4 << 20;
/// Bytes of a file without a descriptor read and written at a time.
const COPY_CHUNK_BYTES: u64 = 64 * 1024;

/// Writes responses to one socket; buffers wait in `pending` until [`Writer::flush`] or until
/// a file range must follow them.
pub(crate) struct Writer<'a> {
    stream: Stream<'a>,
    stall_max: Duration,
    pending: Vec<Bytes>,
}

/// Where the bytes go: the socket itself, or a TLS stream that encrypts them first.
enum Stream<'a> {
    Tcp(&'a TcpStream),
    Tls(&'a mut (dyn AsyncWrite + Unpin + Send)),
}

/// The held-back last byte of a frame with file ranges.
enum LastByte {
    Buffer(Bytes),
    File(FileRange),
}

impl<'a> Writer<'a> {
    pub(crate) fn new(stream: &'a TcpStream, stall_max: Duration) -> Writer<'a> {
        Writer {
            stream: Stream::Tcp(stream),
            stall_max,
            pending: Vec::new(),
        }
    }

    /// A writer through TLS (file ranges are copied, not sent with `sendfile`).
    pub(crate) fn tls(
        stream: &'a mut (dyn AsyncWrite + Unpin + Send),
        stall_max: Duration,
    ) -> Writer<'a> {
        Writer {
            stream: Stream::Tls(stream),
            stall_max,
            pending: Vec::new(),
        }
    }

    /// Writes a response frame's parts, or queues its buffers for the next flush.
    pub(crate) async fn response(&mut self, parts: &[Part]) -> io::Result<()> {
        let sources: Vec<&Arc<dyn FileSource>> = parts
            .iter()
            .filter_map(|p| match p {
                Part::File(range) if range.len > 0 => Some(&range.source),
                _ => None,
            })
            .collect();
        if sources.is_empty() {
            for part in parts {
                if let Part::Bytes(bytes) = part {
                    self.push(bytes.clone()).await?;
                }
            }
            return Ok(());
        }
        let Some((last_index, last)) = split_last_byte(parts) else {
            return Ok(());
        };
        for (i, part) in parts.iter().enumerate() {
            let part = match (i.cmp(&last_index), part) {
                (std::cmp::Ordering::Greater, _) => break,
                (std::cmp::Ordering::Equal, Part::Bytes(b)) => Part::Bytes(b.slice(..b.len() - 1)),
                (std::cmp::Ordering::Equal, Part::File(range)) => Part::File(FileRange {
                    len: range.len - 1,
                    ..range.clone()
                }),
                (std::cmp::Ordering::Less, part) => clone_part(part),
            };
            match part {
                Part::Bytes(bytes) => self.push(bytes).await?,
                Part::File(range) => {
                    self.flush().await?;
                    self.send_file(&range).await?;
                }
            }
        }
        let last = match last {
            LastByte::Buffer(byte) => byte,
            LastByte::File(range) => {
                let mut byte = [0u8; 1];
                read_exact(&*range.source, &mut byte, range.position)?;
                Bytes::copy_from_slice(&byte)
            }
        };
        if !sources.iter().all(|s| s.unchanged()) {
            return Err(io::Error::other(
                "a file range changed while it was sent (the log was truncated); the frame is abandoned",
            ));
        }
        self.push(last).await
    }

    async fn push(&mut self, bytes: Bytes) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.pending.push(bytes);
        if self.pending.len() >= IOVECS_MAX {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes every queued buffer.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        let stream = match &mut self.stream {
            Stream::Tcp(stream) => *stream,
            Stream::Tls(stream) => {
                return flush_tls(&mut **stream, &mut self.pending, self.stall_max).await
            }
        };
        let mut first = 0;
        while first < self.pending.len() {
            let slices: Vec<IoSlice<'_>> = self.pending[first..]
                .iter()
                .take(IOVECS_MAX)
                .map(|b| IoSlice::new(b))
                .collect();
            let mut written = match stream.try_write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    writable(stream, self.stall_max).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            while written > 0 {
                let buffer = &mut self.pending[first];
                let n = written.min(buffer.len());
                buffer.advance(n);
                written -= n;
                if buffer.is_empty() {
                    first += 1;
                }
            }
        }
        self.pending.clear();
        Ok(())
    }

    /// Sends a file range: from the page cache with `sendfile` when the file has a
    /// descriptor, else read and written a chunk at a time.
    async fn send_file(&mut self, range: &FileRange) -> io::Result<()> {
        let Stream::Tcp(stream) = self.stream else {
            return self.copy_file(range).await;
        };
        let Some(file_fd) = range.source.fd().map(|fd| fd.as_raw_fd()) else {
            return self.copy_file(range).await;
        };
        let (mut position, end) = (range.position, range.position.saturating_add(range.len));
        while position < end {
            let count = (end - position).min(SENDFILE_CHUNK_BYTES);
            let sent = stream.try_io(Interest::WRITABLE, || {
                sendfile(stream, file_fd, position, count)
            });
            match sent {
                Ok(0) => return Err(file_ended(range)),
                Ok(n) => position += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    writable(stream, self.stall_max).await?
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn copy_file(&mut self, range: &FileRange) -> io::Result<()> {
        let (mut position, end) = (range.position, range.position.saturating_add(range.len));
        while position < end {
            let len = (end - position).min(COPY_CHUNK_BYTES) as usize;
            let mut chunk = vec![0u8; len];
            read_exact(&*range.source, &mut chunk, position)?;
            self.push(Bytes::from(chunk)).await?;
            self.flush().await?;
            position += len as u64;
        }
        Ok(())
    }
}

fn stalled() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the peer accepted no bytes for the write stall limit",
    )
}

async fn writable(stream: &TcpStream, stall_max: Duration) -> io::Result<()> {
    match tokio::time::timeout(stall_max, stream.writable()).await {
        Ok(ready) => ready,
        Err(_) => Err(stalled()),
    }
}

/// Writes every buffer through TLS and flushes the records out; each write that takes no
/// bytes for `stall_max` fails.
async fn flush_tls(
    stream: &mut (dyn AsyncWrite + Unpin + Send),
    pending: &mut Vec<Bytes>,
    stall_max: Duration,
) -> io::Result<()> {
    for buffer in pending.iter_mut() {
        while !buffer.is_empty() {
            let n = tokio::time::timeout(stall_max, stream.write(buffer))
                .await
                .map_err(|_| stalled())??;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buffer.advance(n);
        }
    }
    pending.clear();
    tokio::time::timeout(stall_max, stream.flush())
        .await
        .map_err(|_| stalled())?
}

fn clone_part(part: &Part) -> Part {
    match part {
        Part::Bytes(b) => Part::Bytes(b.clone()),
        Part::File(range) => Part::File(range.clone()),
    }
}

/// The index of the frame's last non-empty part and its last byte.
fn split_last_byte(parts: &[Part]) -> Option<(usize, LastByte)> {
    let (index, part) = parts.iter().enumerate().rfind(|(_, p)| !p.is_empty())?;
    let last = match part {
        Part::Bytes(b) => LastByte::Buffer(b.slice(b.len() - 1..)),
        Part::File(range) => LastByte::File(FileRange {
            position: range.position + range.len - 1,
            len: 1,
            source: range.source.clone(),
        }),
    };
    Some((index, last))
}

fn read_exact(source: &dyn FileSource, mut buf: &mut [u8], mut position: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match source.read_at(buf, position)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                position += n as u64;
            }
        }
    }
    Ok(())
}

fn file_ended(range: &FileRange) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "the file ended inside the range {}..+{} being sent (truncated meanwhile)",
            range.position, range.len
        ),
    )
}

/// One `sendfile(2)` from `file` at `position` into the (non-blocking) socket.
fn sendfile(
    socket: &TcpStream,
    file: std::os::fd::RawFd,
    position: u64,
    count: u64,
) -> io::Result<u64> {
    let mut offset = libc::off_t::try_from(position)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file position past off_t"))?;
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    // SAFETY: both descriptors are open for the call (the socket is borrowed, the file is
    // kept open by the range's source), and `offset` is a valid, exclusively borrowed off_t.
    let sent = unsafe { libc::sendfile(socket.as_raw_fd(), file, &mut offset, count) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as u64)
}

/// Whether every page of `len` bytes of `file` from `position` is in the page cache now, so
/// that sending it cannot wait for the disk (checked on a blocking thread before a range is
/// handed to the writer, which runs on an async thread). A page evicted in between costs one
/// disk read on the writer; that is the only way the writer touches the disk.
pub fn in_page_cache(file: BorrowedFd<'_>, position: u64, len: u64) -> io::Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    };
    let start = position - position % page;
    let end = position
        .checked_add(len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range past u64"))?;
    let map_len = usize::try_from(end - start)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range too long to map"))?;
    let offset = libc::off_t::try_from(start)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file position past off_t"))?;
    let pages = map_len.div_ceil(page as usize);
    let mut resident = vec![0u8; pages];
    // SAFETY: a fresh read-only shared mapping of an open file, never dereferenced here: it
    // only names the pages for mincore, whose vector has one byte per page of the mapping,
    // and it is unmapped before returning.
    unsafe {
        let address = libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset,
        );
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let outcome = libc::mincore(address, map_len, resident.as_mut_ptr());
        let error = io::Error::last_os_error();
        libc::munmap(address, map_len);
        if outcome != 0 {
            return Err(error);
        }
    }
    Ok(resident.iter().all(|page| page & 1 == 1))
}
