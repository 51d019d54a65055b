//! Kafka bytes by hand, for sending what a client library never would, and reading
//! answers back over blocking sockets.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use tinymq_kafka::api_versions::SUPPORTED;

/// Kafka's API keys used here.
pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const METADATA: i16 = 3;
pub const DELETE_RECORDS: i16 = 21;
pub const API_VERSIONS: i16 = 18;
/// Kafka's UNSUPPORTED_VERSION error code.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// How long a test waits for any one answer or close before failing (as the connections
/// [`KafkaServer::connect_raw`](super::common::kafka::KafkaServer::connect_raw) makes).
pub const READ_WAIT: Duration = super::common::kafka::RAW_WAIT;

/// A request frame with a version-1 header (API key, version, correlation id, client id);
/// `flexible` adds the empty tagged-field section of a version-2 header.
pub fn request(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    request_as(api_key, version, correlation_id, b"hostile", flexible, body)
}

pub fn request_as(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &[u8],
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    let mut frame = Vec::with_capacity(16 + client_id.len() + body.len());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    if flexible {
        frame.push(0);
    }
    frame.extend_from_slice(body);
    let size = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

/// The next response frame's bytes (without the size), or `None` once the server closed.
pub fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    if !read_fully(stream, &mut size) {
        return None;
    }
    let size = u32::from_be_bytes(size) as usize;
    assert!(size < 64 << 20, "response size {size}");
    let mut body = vec![0u8; size];
    assert!(
        read_fully(stream, &mut body),
        "closed in the middle of a response"
    );
    Some(body)
}

/// `false` at EOF or reset before the first byte; panics on a timeout (neither answered nor
/// closed within READ_WAIT).
pub fn read_fully(stream: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut filled = 0;
    while filled < buf.len() {
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                assert_eq!(filled, 0, "closed in the middle of a response");
                return false;
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return false,
            Err(e) => panic!("neither answered nor closed: {e}"),
        }
    }
    true
}

/// Asserts the server closes `stream` without sending anything.
pub fn assert_closed_silently(stream: &mut TcpStream, case: &str) {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(_) => panic!("{case}: the server answered instead of closing"),
        Err(e) => panic!("{case}: the server neither answered nor closed: {e}"),
    }
}

/// Sends `bytes`, then tells the server nothing more will come; the server must close.
pub fn send_then_half_close(stream: &mut TcpStream, bytes: &[u8]) {
    // A server that closes early may reset the rest of the write: that is a close too.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
}

/// Reads until the server closes; the bytes it sent on the way.
pub fn drain_until_closed(stream: &mut TcpStream, case: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("{case}: the server did not close: {e}"),
        }
    }
}

/// An ApiVersions response of version 0.
#[derive(Debug)]
pub struct ApiVersionsV0 {
    pub correlation_id: i32,
    pub error_code: i16,
    pub apis: Vec<(i16, i16, i16)>,
}

pub fn supported_table() -> Vec<(i16, i16, i16)> {
    SUPPORTED
        .iter()
        .map(|(key, min, max)| (*key as i16, *min, *max))
        .collect()
}

/// An ApiVersions answer of `version` 0, 1 or 2 (1 and 2 add `throttle_time_ms` at the end).
pub fn parse_api_versions(frame: &[u8], version: i16) -> ApiVersionsV0 {
    let i16_at = |at: usize| i16::from_be_bytes([frame[at], frame[at + 1]]);
    let i32_at = |at: usize| i32::from_be_bytes(frame[at..at + 4].try_into().unwrap());
    let count = i32_at(6);
    assert!((0..1000).contains(&count), "ApiVersions count {count}");
    let apis = (0..count as usize)
        .map(|i| {
            let at = 10 + 6 * i;
            (i16_at(at), i16_at(at + 2), i16_at(at + 4))
        })
        .collect();
    let throttle_bytes = if version == 0 { 0 } else { 4 };
    assert_eq!(
        frame.len(),
        10 + 6 * count as usize + throttle_bytes,
        "ApiVersions v{version} length"
    );
    ApiVersionsV0 {
        correlation_id: i32_at(0),
        error_code: i16_at(4),
        apis,
    }
}

/// Sends ApiVersions of `version` (≤ 2: no tagged fields) and reads the answer, which is
/// written at version 0 when `version` is not served.
pub fn api_versions(
    stream: &mut TcpStream,
    version: i16,
    correlation_id: i32,
) -> Option<ApiVersionsV0> {
    stream
        .write_all(&request(API_VERSIONS, version, correlation_id, false, &[]))
        .ok()?;
    let answered_at = if (0..=2).contains(&version) {
        version
    } else {
        0
    };
    read_frame(stream).map(|frame| parse_api_versions(&frame, answered_at))
}

/// A small deterministic generator, so that a failing garbage case can be replayed.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// What came back for a request of `correlation_id` before the close: "closed" or
/// "answered"; panics on an answer to something else.
pub fn drain_until_closed_or_answered(stream: &mut TcpStream, correlation_id: i32) -> &'static str {
    match read_frame(stream) {
        None => "closed",
        Some(frame) => {
            assert!(frame.len() >= 4, "response of {} bytes", frame.len());
            let id = i32::from_be_bytes(frame[..4].try_into().unwrap());
            assert_eq!(id, correlation_id, "answer to another request");
            "answered"
        }
    }
}

pub enum Outcome {
    Closed,
    Waiting,
    Answered(Vec<u8>),
}

pub fn read_or_wait(stream: &mut TcpStream) -> Outcome {
    let mut size = [0u8; 4];
    match stream.read(&mut size[..1]) {
        Ok(0) => return Outcome::Closed,
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Outcome::Closed,
        Err(_) => return Outcome::Waiting,
    }
    stream.set_read_timeout(Some(READ_WAIT)).unwrap();
    assert!(read_fully(stream, &mut size[1..]), "cut inside a size");
    let size = u32::from_be_bytes(size) as usize;
    assert!((4..64 << 20).contains(&size), "response size {size}");
    let mut frame = vec![0u8; size];
    assert!(read_fully(stream, &mut frame), "cut inside a response");
    Outcome::Answered(frame)
}

/// A connection to `addr` (IPv4) whose receive buffer is small, set before connecting (a
/// buffer shrunk after the handshake, below the segment size, makes loopback TCP drop
/// segments and back off): answers left unread push back on the server after a few KiB.
pub fn connect_with_small_receive_buffer(addr: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let addr: std::net::SocketAddrV4 = addr.parse().expect("an IPv4 address");
    let receive_buffer_bytes: libc::c_int = 16 * 1024;
    let sockaddr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a new socket this function owns until it hands it to TcpStream; the option
    // value and the address are live locals of the sizes passed.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &receive_buffer_bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let rc = libc::connect(
            fd,
            &sockaddr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    };
    stream.set_read_timeout(Some(READ_WAIT)).unwrap();
    stream.set_write_timeout(Some(READ_WAIT)).unwrap();
    stream
}
