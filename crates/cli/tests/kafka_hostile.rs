//! Hostile input on the Kafka port (`--kafka-listen`), over raw sockets: bad size prefixes,
//! truncated frames, garbage, unknown API keys, versions out of range, lying array counts,
//! floods of pipelined requests, and more connections than `connections_max`. Each case gets
//! the answer Kafka's protocol gives (ApiVersions' UNSUPPORTED_VERSION with the table) or a
//! close; after each, the server is alive, answers a fresh ApiVersions and serves native
//! clients.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{retry, BIN};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, StrBytes};
use tinymq_kafka::api_versions::SUPPORTED;

/// Kafka's API keys used here.
const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const METADATA: i16 = 3;
const DELETE_RECORDS: i16 = 21;
const API_VERSIONS: i16 = 18;
/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = 35;
/// How long a test waits for any one answer or close before failing.
const READ_WAIT: Duration = Duration::from_secs(10);

/// A `tinymq server` with a Kafka listener, in its own data directory.
struct KafkaServer {
    child: Child,
    native: String,
    kafka: String,
    _data: tempfile::TempDir,
}

impl KafkaServer {
    fn start(extra: &[&str]) -> KafkaServer {
        let data = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(BIN)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--kafka-listen",
                "127.0.0.1:0",
            ])
            .args(["--http", "off", "--data"])
            .arg(data.path())
            .args(extra)
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tinymq server");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut line = || lines.next().expect("a line").expect("stdout");
        let native = line()
            .strip_prefix("tinymq listening on ")
            .expect("native address first")
            .to_string();
        let kafka = line()
            .strip_prefix("tinymq kafka listening on ")
            .expect("Kafka address second")
            .to_string();
        // Keeps the pipe open (and drained) so that later lines never fail to print.
        std::thread::spawn(move || lines.for_each(drop));
        let server = KafkaServer {
            child,
            native,
            kafka,
            _data: data,
        };
        let created = server.tool(&["topic", "create", "good"]).output().unwrap();
        assert!(created.status.success(), "{created:?}");
        server
    }

    fn connect(&mut self) -> TcpStream {
        let stream = match TcpStream::connect(&self.kafka) {
            Ok(stream) => stream,
            Err(e) => panic!("connect to the Kafka port: {e} ({})", self.exit_status()),
        };
        stream.set_read_timeout(Some(READ_WAIT)).unwrap();
        stream.set_write_timeout(Some(READ_WAIT)).unwrap();
        stream
    }

    fn tool(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("TINYMQ_BOOTSTRAP", &self.native);
        cmd
    }

    /// Resident memory, from /proc.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server process exists");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// How the server process ended, once it has (waiting a moment for an exit under way),
    /// for failure messages.
    fn exit_status(&mut self) -> String {
        let exited = retry(20, Duration::from_millis(100), || {
            self.child.try_wait().expect("try_wait")
        });
        exited.map_or("the server is still running".into(), |s| {
            format!("the server exited: {s}")
        })
    }

    /// After a case: still running, answers a fresh ApiVersions, and serves native clients.
    fn assert_healthy(&mut self, after: &str) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("the server exited after {after}: {status}");
        }
        let mut probe = self.connect();
        let Some(answer) = api_versions(&mut probe, 0, 4242) else {
            panic!(
                "no ApiVersions answer after {after}; {}",
                self.exit_status()
            );
        };
        assert_eq!(answer.correlation_id, 4242, "after {after}");
        assert_eq!(answer.error_code, 0, "after {after}");
        assert_eq!(answer.apis, supported_table(), "after {after}");
        let listed = self.tool(&["topic", "list"]).output().unwrap();
        assert!(
            listed.status.success(),
            "topic list after {after}: {listed:?}"
        );
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains("good"),
            "topic list after {after}: {listed:?}"
        );
    }
}

impl Drop for KafkaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- Kafka bytes, by hand (the point is to send what a client library never would) ---------

/// A request frame with a version-1 header (API key, version, correlation id, client id);
/// `flexible` adds the empty tagged-field section of a version-2 header.
fn request(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    request_as(api_key, version, correlation_id, b"hostile", flexible, body)
}

fn request_as(
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
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
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
fn read_fully(stream: &mut TcpStream, buf: &mut [u8]) -> bool {
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
fn assert_closed_silently(stream: &mut TcpStream, case: &str) {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(_) => panic!("{case}: the server answered instead of closing"),
        Err(e) => panic!("{case}: the server neither answered nor closed: {e}"),
    }
}

/// Sends `bytes`, then tells the server nothing more will come; the server must close.
fn send_then_half_close(stream: &mut TcpStream, bytes: &[u8]) {
    // A server that closes early may reset the rest of the write: that is a close too.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
}

/// Reads until the server closes; the bytes it sent on the way.
fn drain_until_closed(stream: &mut TcpStream, case: &str) -> Vec<u8> {
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
struct ApiVersionsV0 {
    correlation_id: i32,
    error_code: i16,
    apis: Vec<(i16, i16, i16)>,
}

fn supported_table() -> Vec<(i16, i16, i16)> {
    SUPPORTED
        .iter()
        .map(|(key, min, max)| (*key as i16, *min, *max))
        .collect()
}

/// An ApiVersions answer of `version` 0, 1 or 2 (1 and 2 add `throttle_time_ms` at the end).
fn parse_api_versions(frame: &[u8], version: i16) -> ApiVersionsV0 {
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
fn api_versions(
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
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

// ---- the cases ------------------------------------------------------------------------------

#[test]
fn bad_sizes_truncation_garbage_and_unknown_apis_are_closed_and_the_server_keeps_serving() {
    let frame_bytes_max: usize = 1 << 20;
    let mut server = KafkaServer::start(&["--frame-bytes-max", &frame_bytes_max.to_string()]);
    server.assert_healthy("start");

    // A request of exactly frame_bytes_max is read (ApiVersions ignores its body) ...
    let mut c = server.connect();
    let header_bytes = request(API_VERSIONS, 0, 1, false, &[]).len() - 4;
    let padded = request(
        API_VERSIONS,
        0,
        1,
        false,
        &vec![0; frame_bytes_max - header_bytes],
    );
    c.write_all(&padded).unwrap();
    let answer = parse_api_versions(&read_frame(&mut c).expect("answered"), 0);
    assert_eq!((answer.correlation_id, answer.error_code), (1, 0));
    // ... one byte more is refused from its size alone: nothing sent after the prefix.
    let mut c = server.connect();
    c.write_all(&((frame_bytes_max + 1) as u32).to_be_bytes())
        .unwrap();
    assert_closed_silently(&mut c, "size frame_bytes_max + 1");
    server.assert_healthy("size frame_bytes_max + 1");

    // The largest size a prefix can say: refused before anything is allocated.
    let rss_before = server.rss_kib();
    let mut c = server.connect();
    c.write_all(&i32::MAX.to_be_bytes()).unwrap();
    assert_closed_silently(&mut c, "size i32::MAX");
    assert!(
        server.rss_kib() < rss_before + 16 * 1024,
        "no 2 GiB allocation"
    );
    server.assert_healthy("size i32::MAX");

    // Negative sizes, and sizes too small to hold a request header.
    for size in [-1i32, i32::MIN, -8, 0, 1, 4, 7] {
        let mut c = server.connect();
        let mut bytes = size.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        c.write_all(&bytes).unwrap();
        assert_closed_silently(&mut c, &format!("size {size}"));
        server.assert_healthy(&format!("size {size}"));
    }

    // Truncated: a size prefix cut short, and a frame cut short, then end of input.
    let whole = request(API_VERSIONS, 0, 3, false, &[0; 100]);
    for cut in [1, 2, 3, 4, 5, 12, whole.len() - 1] {
        let mut c = server.connect();
        send_then_half_close(&mut c, &whole[..cut]);
        assert_closed_silently(&mut c, &format!("frame cut after {cut} bytes"));
    }
    // The same, with the socket closed outright (nothing to read back).
    for cut in [2, 20] {
        let mut c = server.connect();
        c.write_all(&whole[..cut]).unwrap();
        drop(c);
    }
    server.assert_healthy("truncated frames");

    // Other protocols on the Kafka port: HTTP, a TLS ClientHello, a native tinymq handshake.
    let native_frame = {
        let mut out = bytes::BytesMut::new();
        tinymq_protocol::frame::FrameHeader::request(
            tinymq_protocol::OpCode::Handshake.code(),
            1,
            0,
        )
        .encode(&mut out);
        out.to_vec()
    };
    let tls_hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    let others: [(&str, &[u8]); 3] = [
        ("HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("TLS ClientHello", &tls_hello),
        ("native handshake", &native_frame),
    ];
    for (what, bytes) in others {
        let mut c = server.connect();
        send_then_half_close(&mut c, bytes);
        assert_closed_silently(&mut c, what);
        server.assert_healthy(what);
    }

    // Random garbage, of many lengths.
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for len in [1, 3, 8, 64, 1000, 4096, 65536, 300_000] {
        let mut c = server.connect();
        let garbage = rng.bytes(len);
        send_then_half_close(&mut c, &garbage);
        drain_until_closed(&mut c, &format!("{len} bytes of garbage"));
    }
    server.assert_healthy("garbage");

    // Unknown API keys: Kafka's protocol cannot answer them (the header's shape depends on
    // the key), so the connection is closed.
    for api_key in [-1i16, 99, 9999, i16::MAX, i16::MIN] {
        let mut c = server.connect();
        c.write_all(&request(api_key, 0, 5, false, &[])).unwrap();
        assert_closed_silently(&mut c, &format!("API key {api_key}"));
    }
    server.assert_healthy("unknown API keys");

    // An API Kafka defines but this listener does not serve: answered (with its correlation
    // id) or closed, never left hanging.
    let mut c = server.connect();
    c.write_all(&request(DELETE_RECORDS, 0, 6, false, &[0; 16]))
        .unwrap();
    let sent = drain_until_closed_or_answered(&mut c, 6);
    eprintln!("DeleteRecords v0: {sent}");
    server.assert_healthy("an API not served");

    // ApiVersions of a version above ours: version 0 answer, UNSUPPORTED_VERSION and the whole
    // table, and the connection stays open for the retry at a version we serve.
    let mut c = server.connect();
    c.write_all(&request(API_VERSIONS, 99, 7, true, &[1, 2, 3]))
        .unwrap();
    let answer = parse_api_versions(&read_frame(&mut c).expect("ApiVersions v99 answered"), 0);
    assert_eq!(answer.correlation_id, 7);
    assert_eq!(answer.error_code, UNSUPPORTED_VERSION);
    assert_eq!(answer.apis, supported_table());
    let retry_answer = api_versions(&mut c, 0, 8).expect("the retry is answered");
    assert_eq!(
        (retry_answer.correlation_id, retry_answer.error_code),
        (8, 0)
    );
    // A negative version is just as unknown.
    let mut c = server.connect();
    let answer = api_versions(&mut c, -1, 9).expect("ApiVersions v-1 answered");
    assert_eq!(
        (answer.correlation_id, answer.error_code),
        (9, UNSUPPORTED_VERSION)
    );
    assert_eq!(answer.apis, supported_table());
    server.assert_healthy("ApiVersions out of range");

    // Any other API at a version no Kafka defines: its response could not be written at that
    // version, so the connection is closed.
    let mut c = server.connect();
    c.write_all(&request(METADATA, 99, 10, true, &[0; 8]))
        .unwrap();
    assert_closed_silently(&mut c, "Metadata v99");
    server.assert_healthy("Metadata v99");
}

/// What came back for a request of `correlation_id` before the close: "closed" or
/// "answered"; panics on an answer to something else.
fn drain_until_closed_or_answered(stream: &mut TcpStream, correlation_id: i32) -> &'static str {
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

/// Array counts far larger than the bytes that follow them. kafka-protocol 0.18 reserves
/// `count` elements before reading any; without a guard that is an allocation of many GiB
/// and the process aborts.
#[test]
fn huge_array_counts_do_not_crash_the_server() {
    let mut server = KafkaServer::start(&[]);
    server.assert_healthy("start");
    let huge = i32::MAX.to_be_bytes();
    let mut produce_one_topic = Vec::new();
    produce_one_topic.extend_from_slice(&(-1i16).to_be_bytes()); // transactional_id: null
    produce_one_topic.extend_from_slice(&1i16.to_be_bytes()); // acks
    produce_one_topic.extend_from_slice(&5000i32.to_be_bytes()); // timeout_ms
    produce_one_topic.extend_from_slice(&1i32.to_be_bytes()); // one topic ...
    produce_one_topic.extend_from_slice(&4i16.to_be_bytes());
    produce_one_topic.extend_from_slice(b"good");
    produce_one_topic.extend_from_slice(&huge); // ... with i32::MAX partitions
    let mut fetch = Vec::new();
    for field in [-1i32, 500, 1, 1 << 20] {
        // replica_id, max_wait_ms, min_bytes, max_bytes
        fetch.extend_from_slice(&field.to_be_bytes());
    }
    fetch.push(0); // isolation_level
    fetch.extend_from_slice(&huge); // topics
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("Metadata v1 topics", request(METADATA, 1, 1, false, &huge)),
        ("Metadata v4 topics", request(METADATA, 4, 2, false, &huge)),
        (
            "Metadata v1 one million topics",
            request(METADATA, 1, 3, false, &(1i32 << 20).to_be_bytes()),
        ),
        // Flexible: a compact array's length is an unsigned varint, here 2^32 - 2 elements.
        (
            "Metadata v12 topics",
            request(METADATA, 12, 4, true, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ),
        (
            "Produce v3 topics",
            request(
                PRODUCE,
                3,
                5,
                false,
                &[&produce_one_topic[..8], &huge[..]].concat(),
            ),
        ),
        (
            "Produce v3 partitions",
            request(PRODUCE, 3, 6, false, &produce_one_topic),
        ),
        ("Fetch v4 topics", request(FETCH, 4, 7, false, &fetch)),
    ];
    for (case, bytes) in cases {
        let mut c = server.connect();
        send_then_half_close(&mut c, &bytes);
        let sent = drain_until_closed(&mut c, case);
        // A request that cannot be parsed is closed without an answer.
        assert!(sent.is_empty(), "{case}: answered {sent:?}");
        server.assert_healthy(case);
    }
}

/// Random request bodies behind a valid header, for every API and version served: each is
/// answered (with its correlation id) or closed, and the server survives them all.
#[test]
fn random_bodies_for_every_supported_api_and_version_do_not_crash_the_server() {
    let mut server = KafkaServer::start(&[]);
    server.assert_healthy("start");
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut answered = 0;
    let mut closed = 0;
    for (api_key, min, max) in SUPPORTED {
        let key = *api_key as i16;
        for version in *min..=*max {
            let flexible = api_key.request_header_version(version) >= 2;
            for _ in 0..3 {
                let len = (rng.next() % 200) as usize;
                let body = rng.bytes(len);
                let correlation_id = (rng.next() & 0x7fff_ffff) as i32;
                let mut c = server.connect();
                // Requests that may legally wait (a long poll, a rebalance) are not waited for.
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                send_then_half_close(
                    &mut c,
                    &request(key, version, correlation_id, flexible, &body),
                );
                match read_or_wait(&mut c) {
                    Outcome::Closed => closed += 1,
                    Outcome::Waiting => {}
                    Outcome::Answered(frame) => {
                        let id = i32::from_be_bytes(frame[..4].try_into().unwrap());
                        assert_eq!(id, correlation_id, "{api_key:?} v{version}");
                        answered += 1;
                    }
                }
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("the server exited after random {api_key:?} v{version} bodies: {status}");
            }
        }
        server.assert_healthy(&format!("random {api_key:?} bodies"));
    }
    eprintln!("random bodies: {answered} answered, {closed} closed");
}

enum Outcome {
    Closed,
    Waiting,
    Answered(Vec<u8>),
}

fn read_or_wait(stream: &mut TcpStream) -> Outcome {
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

/// 10,000 pipelined requests (8 KiB each) from one connection that reads its answers
/// slowly: the server reads no faster than it can answer (`requests_in_flight_max`), so its
/// memory stays flat, every answer comes back in order, and other clients are served
/// meanwhile.
#[test]
fn a_flood_of_pipelined_requests_read_slowly_keeps_memory_bounded() {
    const REQUESTS: usize = 10_000;
    const CLIENT_ID_BYTES: usize = 8 * 1024;
    let mut server = KafkaServer::start(&[]);
    server.assert_healthy("start");
    let rss_before = server.rss_kib();

    let flood = server.connect();
    shrink_receive_buffer(&flood);
    let mut writer = flood.try_clone().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let writing = {
        let written = written.clone();
        std::thread::spawn(move || {
            let client_id = vec![b'f'; CLIENT_ID_BYTES];
            for i in 0..REQUESTS {
                let frame = request_as(API_VERSIONS, 0, i as i32, &client_id, false, &[]);
                writer.write_all(&frame).expect("the server keeps reading");
                written.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Until the writer stops making progress (the server stopped reading) or is done.
    let mut last = usize::MAX;
    let stalled = retry(600, Duration::from_millis(100), || {
        let now = written.load(Ordering::Relaxed);
        let same = now == last || now == REQUESTS;
        last = now;
        same.then_some(now)
    })
    .expect("the writer settles");
    eprintln!("flood: {stalled} of {REQUESTS} requests written before anything was read");
    let rss_stalled = server.rss_kib();

    // Another client is served while the flooding one reads nothing.
    let mut other = server.connect();
    let answer = api_versions(&mut other, 2, 77).expect("the other client is answered");
    assert_eq!((answer.correlation_id, answer.error_code), (77, 0));
    let listed = server.tool(&["topic", "list"]).output().unwrap();
    assert!(listed.status.success(), "{listed:?}");

    // Now read, slowly, every answer in order, sampling the server's memory on the way.
    let mut reader = flood;
    let mut rss_peak = rss_stalled;
    for i in 0..REQUESTS {
        let frame = read_frame(&mut reader).unwrap_or_else(|| panic!("closed after {i} answers"));
        let answer = parse_api_versions(&frame, 0);
        assert_eq!((answer.correlation_id, answer.error_code), (i as i32, 0));
        if i % 500 == 0 {
            rss_peak = rss_peak.max(server.rss_kib());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    writing.join().expect("all requests written");
    let total_mib = (REQUESTS * CLIENT_ID_BYTES) >> 20;
    let grown_mib = rss_peak.saturating_sub(rss_before) / 1024;
    eprintln!("flood: {total_mib} MiB sent; server RSS {rss_before} KiB before, {rss_stalled} KiB stalled, {rss_peak} KiB peak");
    assert!(
        grown_mib < 24,
        "the server's memory grew {grown_mib} MiB for a {total_mib} MiB flood"
    );
    server.assert_healthy("a flood");
}

/// A small receive buffer, so that unread answers push back on the server sooner.
fn shrink_receive_buffer(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let bytes: libc::c_int = 16 * 1024;
    // SAFETY: setsockopt on a socket this process owns, with a c_int option value.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_RCVBUF");
}

/// Twice `connections_max` connections: the first `connections_max` are served, the rest
/// closed; once the first ones go, new connections are served again.
#[test]
fn connections_over_connections_max_are_closed_and_the_listener_recovers() {
    const CONNECTIONS_MAX: usize = 8;
    let mut server = KafkaServer::start(&["--connections-max", &CONNECTIONS_MAX.to_string()]);
    let mut open = Vec::new();
    let mut served = Vec::new();
    for i in 0..2 * CONNECTIONS_MAX {
        let mut c = server.connect();
        if let Some(answer) = api_versions(&mut c, 0, i as i32) {
            assert_eq!((answer.correlation_id, answer.error_code), (i as i32, 0));
            served.push(i);
            open.push(c);
        }
    }
    assert_eq!(served, (0..CONNECTIONS_MAX).collect::<Vec<_>>());
    // The held connections are still served.
    for (i, c) in open.iter_mut().enumerate() {
        let answer = api_versions(c, 1, 1000 + i as i32).expect("a held connection is served");
        assert_eq!(answer.correlation_id, 1000 + i as i32);
    }
    drop(open);
    // The server frees a slot when it sees the close, which takes a moment: until
    // connections_max new ones are served at once.
    let again = retry(100, Duration::from_millis(100), || {
        let mut held = Vec::new();
        for i in 0..CONNECTIONS_MAX {
            let mut c = server.connect();
            let answer = api_versions(&mut c, 0, 2000 + i as i32)?;
            assert_eq!(answer.correlation_id, 2000 + i as i32);
            held.push(c);
        }
        Some(held)
    });
    let held = again.expect("served again once the first connections were closed");
    assert!(server.child.try_wait().unwrap().is_none(), "still running");
    // The native port has its own connections_max: it serves while the Kafka port is full.
    let listed = server.tool(&["topic", "list"]).output().unwrap();
    assert!(listed.status.success(), "{listed:?}");
    drop(held);
}

/// docs/kafka.md's table of APIs and versions is the one ApiVersions advertises.
#[test]
fn the_docs_list_exactly_the_apis_and_versions_served() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/kafka.md");
    let page = std::fs::read_to_string(path).expect("docs/kafka.md");
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with("Supported APIs and versions"))
        .expect("a section 'Supported APIs and versions'");
    let mut documented: Vec<(i16, i16, i16)> = section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let key = cells.get(2)?.parse().ok()?;
            let (min, max) = cells.get(3)?.split_once('–')?;
            Some((key, min.parse().ok()?, max.parse().ok()?))
        })
        .collect();
    let mut served = supported_table();
    documented.sort_unstable();
    served.sort_unstable();
    assert_eq!(
        documented, served,
        "docs/kafka.md vs api_versions::SUPPORTED"
    );
}

// ---- valid requests, mutated -----------------------------------------------------------------

/// A plausible request of every API served (naming topic `good`, a group, a record batch),
/// so that mutations of it reach the handlers instead of stopping at the decoder.
fn seed(api_key: ApiKey, version: i16) -> Option<RequestKind> {
    use kafka_protocol::messages::*;
    let s = StrBytes::from_static_str;
    let topic = || TopicName(s("good"));
    let group = || GroupId(s("hostile-group"));
    let request = match api_key {
        ApiKey::Produce => RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![produce_request::TopicProduceData::default()
                    .with_name(topic())
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(record_batch())),
                    ])]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(100)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        ),
        ApiKey::ListOffsets => RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ])]),
        ),
        ApiKey::Metadata => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
            ])))
        }
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(group())
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(0),
                        ]),
                ]),
        ),
        ApiKey::OffsetFetch if version >= 8 => {
            RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group()),
            ]))
        }
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(
            OffsetFetchRequest::default()
                .with_group_id(group())
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(topic())
                        .with_partition_indexes(vec![0]),
                ])),
        ),
        ApiKey::FindCoordinator if version >= 4 => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("hostile-group")]),
        ),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_key(s("hostile-group")),
        ),
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group())
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(bytes::Bytes::from_static(
                    b"\0\0\0\0\0\x01\0\x04good\xff\xff\xff\xff",
                ))]),
        ),
        ApiKey::Heartbeat => RequestKind::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(s("member")),
        ),
        ApiKey::LeaveGroup if version >= 3 => RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group())
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s("member"))
                ]),
        ),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group())
                .with_member_id(s("member")),
        ),
        ApiKey::SyncGroup => RequestKind::SyncGroup(
            SyncGroupRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(s("member"))
                .with_assignments(vec![
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s("member"))
                        .with_assignment(bytes::Bytes::from_static(
                            b"\0\0\0\0\0\x01\0\x04good\0\0\0\x01\0\0\0\0\xff\xff\xff\xff",
                        )),
                ]),
        ),
        ApiKey::DescribeGroups => {
            RequestKind::DescribeGroups(DescribeGroupsRequest::default().with_groups(vec![group()]))
        }
        ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256")),
        ),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"n,,n=hostile,r=abcdefgh")),
        ),
        ApiKey::CreateTopics => RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![create_topics_request::CreatableTopic::default()
                    .with_name(TopicName(s("mutant")))
                    .with_num_partitions(1)
                    .with_replication_factor(1)]),
        ),
        ApiKey::DeleteTopics if version >= 6 => {
            RequestKind::DeleteTopics(DeleteTopicsRequest::default().with_topics(vec![
                delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(TopicName(s("no-such-topic")))),
            ]))
        }
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![TopicName(s("no-such-topic"))]),
        ),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("no-such-group"))]),
        ),
        ApiKey::InitProducerId => RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        ApiKey::DescribeConfigs => {
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("good")),
            ]))
        }
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(
            CreatePartitionsRequest::default()
                .with_timeout_ms(5000)
                .with_validate_only(true)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(topic())
                        .with_count(2),
                ]),
        ),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        _ => return None,
    };
    Some(request)
}

/// One record batch (RecordBatch v2, tinymq's format and Kafka's).
fn record_batch() -> bytes::Bytes {
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: 1,
        key: Some(b"k"),
        value: Some(b"mutant"),
        headers: &[],
    });
    builder.build().expect("a batch")
}

/// Values that break assumptions when they land on a length, a count or a number.
const INTERESTING_I32: [i32; 8] = [0, 1, -1, 0x7fff, 0x8000, i32::MAX, i32::MIN, 0x00ff_ffff];

/// `body` with a few random changes: bytes overwritten, an interesting number written over
/// four bytes, cut short, or grown.
fn mutate(rng: &mut XorShift, body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    for _ in 0..1 + rng.next() % 3 {
        let at = |rng: &mut XorShift, len: usize| (rng.next() as usize) % len.max(1);
        match rng.next() % 4 {
            0 if !out.is_empty() => {
                let i = at(rng, out.len());
                out[i] = rng.next() as u8;
            }
            1 if out.len() >= 4 => {
                let i = at(rng, out.len() - 3);
                let value = INTERESTING_I32[(rng.next() % 8) as usize];
                out[i..i + 4].copy_from_slice(&value.to_be_bytes());
            }
            2 if !out.is_empty() => {
                let keep = at(rng, out.len());
                out.truncate(keep);
            }
            _ => {
                let len = (rng.next() % 16) as usize;
                let more = rng.bytes(len);
                out.extend_from_slice(&more);
            }
        }
    }
    out
}

/// Valid requests of every API and version served, each mutated many times: every mutant is
/// answered with its correlation id and a response that decodes at its version, or the
/// connection is closed; the server survives them all and keeps serving.
#[test]
fn mutated_valid_requests_are_answered_coherently_or_closed() {
    const MUTANTS_PER_VERSION: usize = 12;
    let mut server = KafkaServer::start(&[]);
    server.assert_healthy("start");
    let mut rng = XorShift(0x5851_f42d_4c95_7f2d);
    let (mut answered, mut closed, mut waiting, mut seeds) = (0, 0, 0, 0);
    for (api_key, min, max) in SUPPORTED {
        for version in *min..=*max {
            let Some(seeded) = seed(*api_key, version) else {
                continue;
            };
            let mut body = bytes::BytesMut::new();
            seeded
                .encode(&mut body, version)
                .unwrap_or_else(|e| panic!("seed {api_key:?} v{version}: {e}"));
            seeds += 1;
            let flexible = api_key.request_header_version(version) >= 2;
            for _ in 0..MUTANTS_PER_VERSION {
                let mutant = mutate(&mut rng, &body);
                let correlation_id = (rng.next() & 0x7fff_ffff) as i32;
                let mut c = server.connect();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let frame = request(*api_key as i16, version, correlation_id, flexible, &mutant);
                send_then_half_close(&mut c, &frame);
                match read_or_wait(&mut c) {
                    Outcome::Closed => closed += 1,
                    Outcome::Waiting => {
                        eprintln!("{api_key:?} v{version}: still waiting after 2 s");
                        waiting += 1;
                    }
                    Outcome::Answered(frame) => {
                        let mut frame = bytes::Bytes::from(frame);
                        let header = ResponseHeader::decode(
                            &mut frame,
                            api_key.response_header_version(version),
                        )
                        .unwrap_or_else(|e| panic!("{api_key:?} v{version} header: {e}"));
                        assert_eq!(
                            header.correlation_id, correlation_id,
                            "{api_key:?} v{version}"
                        );
                        ResponseKind::decode(*api_key, &mut frame, version).unwrap_or_else(|e| {
                            panic!("{api_key:?} v{version}: the answer does not decode: {e}")
                        });
                        answered += 1;
                    }
                }
            }
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("the server exited after mutants of {api_key:?} v{version}: {status}");
            }
        }
        server.assert_healthy(&format!("mutated {api_key:?} requests"));
    }
    eprintln!("mutants of {seeds} seeds: {answered} answered, {closed} closed, {waiting} still waiting after 2 s");
    assert!(answered > 0, "some mutants reach the handlers");
}
