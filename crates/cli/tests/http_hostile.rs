//! Hostile clients of a real `tinymq server`'s HTTP listener (issue 15 review): clients that
//! trickle their request, floods past `http_connections_max`, malformed requests and bodies.
//! Each test asserts what the listener does (closes, refuses, answers 4xx and a JSON body),
//! never how fast.

mod common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::BIN;

/// A `tinymq server` with `--http 127.0.0.1:0` and `extra` flags.
struct Node {
    native: String,
    http: String,
    node: common::http::Node,
}

impl Node {
    fn start(extra: &[&str]) -> Node {
        let node = common::http::Node::start(extra);
        Node {
            native: node.native.clone(),
            http: node.http.clone(),
            node,
        }
    }

    /// Sends `raw` on a new connection and reads until the server closes it: (status, body).
    fn raw(&self, raw: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(&self.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(raw).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {answer:?}"));
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// `tinymq ARGS` against this node, `stdin` fed in; panics unless it succeeds.
    fn tool(&self, args: &[&str], stdin: &[u8]) {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("TINYMQ_BOOTSTRAP", &self.native);
        let out = common::run_with_input(&mut cmd, stdin);
        assert!(out.status.success(), "tinymq {args:?}: {out:?}");
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.raw(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
    }

    /// `/metrics` as series → value (bounded wait for a free place under the limit).
    fn scrape(&self) -> BTreeMap<String, f64> {
        common::retry(100, Duration::from_millis(100), || {
            let mut s = TcpStream::connect(&self.http).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let req = "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
            s.write_all(req.as_bytes()).ok()?;
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text.starts_with("HTTP/1.1 200").then(|| {
                text.lines()
                    .filter(|l| l.starts_with("tinymq_"))
                    .filter_map(|l| l.rsplit_once(' '))
                    .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                    .collect()
            })
        })
        .expect("no scrape answered")
    }
}

/// Whether the server has closed (or answered on) `s`, without blocking long.
fn server_done(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut byte = [0u8; 1];
    let waiting =
        |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
    !matches!(s.read(&mut byte), Err(e) if waiting(&e))
}

/// A slowloris client: request headers one byte every 200 ms, never finishing. Returns whether
/// the server closed the connection before the client gave up (`bytes` bytes later).
fn trickle_headers(http: &str, bytes: usize) -> bool {
    let mut s = TcpStream::connect(http).unwrap();
    s.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\nX-Pad: ")
        .unwrap();
    for _ in 0..bytes {
        if server_done(&mut s) || s.write_all(b"a").is_err() {
            return true;
        }
        // Not a wait: the slow client trickles its header a byte at a time.
        std::thread::sleep(Duration::from_millis(200));
    }
    server_done(&mut s)
}

#[test]
fn clients_trickling_their_headers_lose_their_place() {
    let node = Node::start(&[
        "--http-connections-max",
        "2",
        "--http-request-timeout-ms",
        "1000",
        "--http-idle-timeout-ms",
        "1000",
    ]);
    // As many slow clients as the listener has places: each moves a byte well within the idle
    // timeout, so only a bound on the whole request can free the places.
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let http = node.http.clone();
            std::thread::spawn(move || trickle_headers(&http, 150))
        })
        .collect();
    for t in slow {
        assert!(
            t.join().unwrap(),
            "a client sending its headers a byte at a time kept its connection"
        );
    }
    assert_eq!(node.get("/health/live").0, 200);
    let samples = node.scrape();
    assert_eq!(
        samples.get("tinymq_http_requests_slow_closed_total"),
        Some(&2.0),
        "{samples:?}"
    );
}

/// The answer's headers (lower-case names) and body.
fn headers_of(raw: &str) -> Vec<String> {
    raw.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::to_ascii_lowercase)
        .collect()
}

#[test]
fn a_wrong_method_gets_a_json_405_naming_the_allowed_ones() {
    let node = Node::start(&[]);
    for (method, path, problem) in [
        ("DELETE", "/metrics", false),
        ("POST", "/health/live", false),
        ("POST", "/", false),
        ("PUT", "/api/v1/topics", true),
        ("PATCH", "/api/v1/groups/g", true),
    ] {
        let mut s = TcpStream::connect(&node.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        let headers = headers_of(&raw);
        assert!(
            headers[0].starts_with("http/1.1 405"),
            "{method} {path}: {raw}"
        );
        assert!(
            headers.iter().any(|h| h.starts_with("allow: ")),
            "{method} {path}: no Allow header: {raw}"
        );
        let body = raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{method} {path}: body {body:?} is not JSON: {e}"));
        assert_eq!(json["status"], 405, "{method} {path}: {json}");
        assert!(json["detail"].is_string(), "{method} {path}: {json}");
        if problem {
            // Under /api/v1 every error is a problem document with a code.
            assert!(
                headers.contains(&"content-type: application/problem+json".to_string()),
                "{method} {path}: {raw}"
            );
            assert_eq!(json["code"], "INVALID_REQUEST", "{method} {path}: {json}");
        }
    }
}

/// Bytes of the JSON a page of messages may take, whatever the records hold (a few times
/// `HTTP_MESSAGES_PAGE_BYTES_MAX`, the compressed bytes a page reads).
const PAGE_JSON_BYTES_BOUND: usize = 16 << 20;

#[test]
fn a_page_of_messages_is_bounded_in_bytes_not_only_in_records() {
    let node = Node::start(&[]);
    node.tool(&["topic", "create", "z", "--partitions", "1"], b"");
    // 20 records of ~1 MB of 0x01 bytes: valid UTF-8, each byte `\u0001` in JSON; zstd packs
    // them into a few KB, so one page's read (1 MiB of batches) holds all of them.
    let mut input = Vec::new();
    for _ in 0..20 {
        input.extend(std::iter::repeat_n(1u8, 1_000_000 - 200));
        input.push(b'\n');
    }
    node.tool(
        &["produce", "z", "--compression", "zstd", "--partition", "0"],
        &input,
    );
    let (status, body) = node.get("/api/v1/topics/z/partitions/0/messages?limit=1000");
    assert_eq!(status, 200);
    assert!(
        body.len() <= PAGE_JSON_BYTES_BOUND,
        "a page of messages took {} bytes of JSON",
        body.len()
    );
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let got = page["messages"].as_array().unwrap().len();
    assert!(got >= 1, "a page returns at least one record: {page}");
    assert_eq!(
        page["next_offset"], got,
        "the next page starts after this one"
    );
}

#[test]
fn an_absurd_http_connections_max_is_refused_not_a_panic() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--http-connections-max", "18446744073709551615"])
        .arg("--data")
        .arg(data.path())
        .env("TINYMQ_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with it: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("http_connections_max"), "{stderr}");
}

#[test]
fn bad_http_limits_stop_a_server_on_the_default_address_too() {
    // Without --http the server would listen on the default address, and runs without HTTP
    // when that is taken; limits no listener could use are a mistake in the flags all the
    // same, refused before anything binds.
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0"])
        .args([
            "--http-request-timeout-ms",
            "10",
            "--http-idle-timeout-ms",
            "5",
        ])
        .arg("--data")
        .arg(data.path())
        .env("TINYMQ_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..100 {
        exited = child.try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = exited.unwrap_or_else(|| panic!("still running with bad limits: {stderr}"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("http_idle_timeout_ms"), "{stderr}");
}

#[test]
fn sigterm_stops_a_server_while_a_client_holds_a_half_sent_request() {
    // An idle timeout far longer than the test's patience: only a bounded shutdown ends it.
    let mut node = Node::start(&[
        "--http-request-timeout-ms",
        "1000",
        "--http-idle-timeout-ms",
        "600000",
    ]);
    let mut half = TcpStream::connect(&node.http).unwrap();
    half.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    let mut answered = TcpStream::connect(&node.http).unwrap();
    answered
        .write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    answered.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    // SAFETY: a signal to our own child process.
    let rc = unsafe { libc::kill(node.node.child().id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let mut status = None;
    for _ in 0..600 {
        status = node.node.child().try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = status.expect("the server did not stop on SIGTERM while a request was half sent");
    assert!(status.success(), "{status:?}");
}

/// Sends `head` then a body of `len` bytes in chunks of 256 (chunked framing, no declared
/// length); returns the status the server answered, reading what it sent even if it stopped
/// reading the body.
fn chunked_status(http: &str, head: &str, len: usize) -> u16 {
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let chunk = format!("100\r\n{}\r\n", "a".repeat(256));
    for _ in 0..len / 256 {
        if s.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

#[test]
fn bodies_past_http_body_bytes_max_are_refused_whatever_their_framing() {
    let node = Node::start(&["--http-body-bytes-max", "1024"]);
    for (method, path) in [
        ("POST", "/api/v1/topics"),
        ("PATCH", "/api/v1/topics/t"),
        ("POST", "/api/v1/topics/t/messages"),
        ("POST", "/api/v1/groups/g/offsets"),
    ] {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let status = chunked_status(&node.http, &head, 64 * 1024);
        assert_eq!(status, 413, "{method} {path} with a chunked body of 64 KiB");
        // A declared length past the limit is refused before the body is read, naming it.
        let (status, body) = node.raw(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                 Content-Length: 2048\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(status, 413, "{method} {path}: {body}");
        assert!(
            body.contains("http_body_bytes_max"),
            "{method} {path}: {body}"
        );
    }
}

#[test]
fn malformed_requests_get_4xx_and_the_listener_keeps_serving() {
    let node = Node::start(&[]);
    let many_headers: String = (0..1000).map(|i| format!("X-{i}: a\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("garbage", b"\x00\x01GARBAGE garbage\r\n\r\n".to_vec(), 400),
        ("HTTP/0.9", b"GET /health/live\r\n\r\n".to_vec(), 400),
        (
            "1 MiB header",
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\nX-A: {}\r\n\r\n",
                "a".repeat(1 << 20)
            )
            .into_bytes(),
            431,
        ),
        (
            "1000 header lines",
            format!("GET / HTTP/1.1\r\nHost: t\r\n{many_headers}\r\n").into_bytes(),
            431,
        ),
        (
            "100 KB URI",
            format!(
                "GET /metrics?{} HTTP/1.1\r\nHost: t\r\n\r\n",
                "a".repeat(100_000)
            )
            .into_bytes(),
            414,
        ),
        (
            "two Content-Lengths",
            b"POST /api/v1/topics HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\
              Content-Length: 5\r\n\r\nabcde"
                .to_vec(),
            400,
        ),
        (
            "an absurd Content-Length",
            b"POST /api/v1/topics HTTP/1.1\r\nHost: t\r\n\
              Content-Length: 99999999999999999999999\r\n\r\n"
                .to_vec(),
            400,
        ),
        (
            "HTTP/1.0",
            b"GET /health/live HTTP/1.0\r\n\r\n".to_vec(),
            200,
        ),
    ];
    for (what, raw, want) in cases {
        assert_eq!(node.raw(&raw).0, want, "{what}");
    }
    // Three pipelined requests on one connection get three answers, in order.
    let mut s = TcpStream::connect(&node.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let one = "GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n";
    let last = "GET /nowhere HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    s.write_all(format!("{one}{one}{last}").as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let statuses: Vec<&str> = answer
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &answer[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "200", "404"], "{answer}");
    assert_eq!(node.get("/health/live").0, 200);
}

#[test]
fn a_flood_past_http_connections_max_is_refused_and_counted() {
    let node = Node::start(&["--http-connections-max", "4"]);
    let mut flood: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(&node.http).unwrap())
        .collect();
    // The listener accepts in order: each connection past the first four is closed at once,
    // the four stay open.
    let closed = |s: &mut TcpStream, wait: Duration| {
        s.set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0u8; 1];
        !matches!(s.read(&mut byte), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    };
    for (i, s) in flood.iter_mut().enumerate().skip(4) {
        assert!(closed(s, Duration::from_secs(10)), "connection {i} kept");
    }
    for (i, s) in flood.iter_mut().enumerate().take(4) {
        assert!(
            !closed(s, Duration::from_millis(200)),
            "connection {i} closed"
        );
    }
    drop(flood);
    // The scrape may itself be refused (and retried) while the server sees the four close.
    let samples = node.scrape();
    let refused = samples["tinymq_http_connections_refused_total"];
    assert!(refused >= 46.0, "refused {refused}");
    assert_eq!(node.get("/health/live").0, 200);
}

#[test]
fn a_malformed_chunked_body_is_a_400_not_a_413() {
    let node = Node::start(&[]);
    let head = "POST /api/v1/topics HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    for (what, framing) in [
        ("a chunk size that is not hex", "zz\r\n{}\r\n0\r\n\r\n"),
        (
            "a chunk size past u64",
            "ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
        ),
    ] {
        let (status, body) = node.raw(format!("{head}{framing}").as_bytes());
        assert_eq!(status, 400, "{what}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["code"], "MALFORMED_BODY", "{what}: {json}");
    }
}

#[test]
fn a_loopback_listener_refuses_api_requests_for_other_host_names() {
    // DNS rebinding: a web page at evil.example whose name is made to resolve to 127.0.0.1
    // is, to the browser, the same origin as the listener; only the Host header tells.
    let node = Node::start(&[]);
    let port = node.http.rsplit_once(':').unwrap().1.to_string();
    let request = |method: &str, path: &str, host: &str| {
        node.raw(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
                 Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
    };
    node.tool(&["topic", "create", "kept"], b"");
    let evil = format!("evil.example:{port}");
    for (method, path) in [
        ("GET", "/api/v1/topics"),
        ("GET", "/api/v1/topics/kept/partitions/0/messages"),
        ("DELETE", "/api/v1/topics/kept"),
    ] {
        let (status, body) = request(method, path, &evil);
        assert_eq!(status, 403, "{method} {path} for {evil}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["status"], 403, "{json}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "[::1]".to_string(),
    ] {
        let (status, body) = request("GET", "/api/v1/topics/kept", &host);
        assert_eq!(status, 200, "for {host}: {body}");
    }
    // What the page at / shows needs no cluster data: it stays reachable by any name.
    assert_eq!(request("GET", "/health/live", &evil).0, 200);
}
