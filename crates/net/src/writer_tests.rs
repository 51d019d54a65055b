//! The response writer over a real loopback socket and real files: frames of buffers and file
//! ranges arrive byte for byte (with `sendfile`, through the copy fallback, and from a file
//! deleted before it was sent), several frames go out in one flush, and a frame whose file
//! changed or ended early is never completed. The same through a stream that is not a socket
//! (how TLS is written: no `sendfile`, file ranges copied in bounded pieces).

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::writer::Writer;
use crate::{FileRange, FileSource, Part};

/// A real file; `with_fd` false hides its descriptor (as in-memory storage has none), and
/// `changed` plays a truncation.
struct TestFile {
    file: std::fs::File,
    with_fd: bool,
    changed: AtomicBool,
}

impl FileSource for TestFile {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.with_fd.then(|| self.file.as_fd())
    }
    fn read_at(&self, buf: &mut [u8], position: u64) -> std::io::Result<usize> {
        self.file.read_at(buf, position)
    }
    fn unchanged(&self) -> bool {
        !self.changed.load(Ordering::SeqCst)
    }
}

/// A file holding `content`, already unlinked when `deleted`.
fn file(content: &[u8], with_fd: bool, deleted: bool) -> Arc<TestFile> {
    let mut named = tempfile::NamedTempFile::new().expect("temp file");
    named.write_all(content).expect("write");
    let (file, path) = named.keep().expect("keep");
    if deleted {
        std::fs::remove_file(&path).expect("unlink");
    }
    Arc::new(TestFile {
        file,
        with_fd,
        changed: AtomicBool::new(false),
    })
}

fn range(source: &Arc<TestFile>, position: u64, len: u64) -> Part {
    Part::File(FileRange {
        source: source.clone(),
        position,
        len,
    })
}

async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr"));
    let (client, accepted) = tokio::join!(client, listener.accept());
    (accepted.expect("accept").0, client.expect("connect"))
}

/// Everything the peer receives until the server side closes.
async fn receive_all(mut client: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut out))
        .await
        .expect("the writer finishes")
        .expect("read");
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[tokio::test]
async fn frames_of_buffers_and_file_ranges_arrive_byte_for_byte() {
    let big = pattern(3 << 20, 7);
    let sent_from_fd = file(&big, true, false);
    let copied = file(&pattern(200_000, 9), false, false);
    let deleted = file(&pattern(100_000, 11), true, true);
    let frames: Vec<Vec<Part>> = vec![
        vec![Part::Bytes(Bytes::from_static(b"head-1"))],
        vec![
            Part::Bytes(Bytes::from_static(b"head-2")),
            range(&sent_from_fd, 5, (3 << 20) - 10),
            Part::Bytes(Bytes::from_static(b"tail-2")),
        ],
        vec![
            Part::Bytes(Bytes::from_static(b"head-3")),
            range(&copied, 1000, 150_000),
        ],
        vec![range(&deleted, 0, 100_000)],
        vec![
            Part::Bytes(Bytes::new()),
            Part::Bytes(Bytes::from_static(b"x")),
        ],
    ];
    let mut expected = Vec::new();
    for parts in &frames {
        for part in parts {
            match part {
                Part::Bytes(b) => expected.extend_from_slice(b),
                Part::File(r) => {
                    let mut bytes = vec![0u8; r.len as usize];
                    r.source.read_at(&mut bytes, r.position).expect("read");
                    expected.extend_from_slice(&bytes);
                }
            }
        }
    }
    let (server, client) = pair().await;
    let reader = tokio::spawn(receive_all(client));
    let mut writer = Writer::new(&server, Duration::from_secs(10));
    for parts in &frames {
        writer.response(parts).await.expect("written");
    }
    writer.flush().await.expect("flushed");
    drop(server);
    let received = reader.await.expect("reader");
    assert_eq!(received.len(), expected.len());
    assert!(received == expected, "the bytes differ");
}

#[tokio::test]
async fn a_frame_whose_file_changed_is_never_completed() {
    for with_fd in [true, false] {
        let source = file(&pattern(300_000, 3), with_fd, false);
        source.changed.store(true, Ordering::SeqCst);
        let frame = vec![
            Part::Bytes(Bytes::from_static(b"head")),
            range(&source, 0, 300_000),
        ];
        let (server, client) = pair().await;
        let reader = tokio::spawn(receive_all(client));
        let mut writer = Writer::new(&server, Duration::from_secs(10));
        let outcome = writer.response(&frame).await;
        assert!(outcome.is_err(), "the writer reports the change");
        drop(writer);
        drop(server);
        let received = reader.await.expect("reader");
        assert_eq!(received.len(), 4 + 300_000 - 1, "all but the last byte");
    }
}

#[tokio::test]
async fn through_a_tls_like_stream_ranges_are_copied_and_a_changed_file_still_stops_the_frame() {
    let content = pattern(1 << 20, 13);
    let source = file(&content, true, false);
    let (mut near, mut far) = tokio::io::duplex(64 * 1024);
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        far.read_to_end(&mut out).await.expect("read");
        out
    });
    let mut writer = Writer::tls(&mut near, Duration::from_secs(10));
    let frame = [
        Part::Bytes(Bytes::from_static(b"head")),
        range(&source, 0, 1 << 20),
    ];
    writer.response(&frame).await.expect("written");
    writer.flush().await.expect("flushed");
    source.changed.store(true, Ordering::SeqCst);
    let outcome = writer.response(&frame).await;
    assert!(outcome.is_err(), "the writer reports the change");
    drop(writer);
    drop(near);
    let received = reader.await.expect("reader");
    let mut expected = b"head".to_vec();
    expected.extend_from_slice(&content);
    assert!(
        received[..expected.len()] == expected[..],
        "the first frame whole"
    );
    assert_eq!(
        received.len(),
        2 * expected.len() - 1,
        "all of the second frame but its last byte"
    );
}

#[tokio::test]
async fn a_range_past_the_end_of_its_file_fails_instead_of_padding() {
    let source = file(&pattern(100_000, 5), true, false);
    source.file.set_len(50_000).expect("truncate");
    let (server, client) = pair().await;
    let reader = tokio::spawn(receive_all(client));
    let mut writer = Writer::new(&server, Duration::from_secs(10));
    let outcome = writer.response(&[range(&source, 0, 100_000)]).await;
    assert!(outcome.is_err());
    drop(writer);
    drop(server);
    assert_eq!(reader.await.expect("reader").len(), 50_000);
}

#[test]
fn page_cache_residency_of_a_file_just_written() {
    let source = file(&pattern(1 << 20, 1), true, false);
    let fd = source.file.as_fd();
    assert!(crate::in_page_cache(fd, 0, 1 << 20).expect("mincore"));
    assert!(crate::in_page_cache(fd, 4097, 10_000).expect("mincore"));
    assert!(crate::in_page_cache(fd, 0, 0).expect("empty range"));
}
