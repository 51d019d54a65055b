//! Helpers for the tests of the HTTP listener (metrics, health, REST API, console): real
//! `tinymq` processes started with `--http 127.0.0.1:0`, plain HTTP/1.1 requests over a TCP
//! socket (one connection per request), and the workspace paths of the external test tools.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::BIN;

/// A node's native and HTTP addresses, and requests to its HTTP listener — whether the node
/// is a process ([`Node`]) or runs in the test's process (the in-process harness).
pub struct Endpoints {
    pub native: String,
    pub http: String,
}

/// A `tinymq` process with its native and HTTP addresses ([`Endpoints`], through `Deref`).
pub struct Node {
    child: Child,
    endpoints: Endpoints,
    /// The data directory when the node made its own (dropped after the process is killed).
    _data: Option<tempfile::TempDir>,
}

impl std::ops::Deref for Node {
    type Target = Endpoints;

    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

impl Node {
    /// `tinymq server --http 127.0.0.1:0 EXTRA` in a data directory of its own.
    pub fn start(extra: &[&str]) -> Node {
        let data = tempfile::tempdir().expect("a temporary data directory");
        let mut args = vec!["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Node::spawn_in(&args, data, "tinymq listening on ")
    }

    /// [`Node::spawn`] in `data`, which the node keeps until it is dropped.
    pub fn spawn_in(args: &[&str], data: tempfile::TempDir, prefix: &str) -> Node {
        Node::spawn(args, data.path(), prefix).keeping(data)
    }

    /// This node, owning `data` (removed after the process is killed).
    pub fn keeping(mut self, data: tempfile::TempDir) -> Node {
        self._data = Some(data);
        self
    }

    /// `tinymq meta`, node 1 of a one-node MetaServer on a free port (its `native` address is
    /// the one brokers are given with `--meta`).
    pub fn meta(data: &Path) -> Node {
        let meta_addr = format!("127.0.0.1:{}", super::free_port());
        let peers = format!("1={meta_addr}");
        let args = [
            "meta",
            "--id",
            "1",
            "--listen",
            &meta_addr,
            "--peers",
            &peers,
            "--http",
            "127.0.0.1:0",
        ];
        Node::spawn(&args, data, "tinymq meta listening on ")
    }

    /// `tinymq broker` with id 1, registering with the MetaServer at `meta_addr`.
    pub fn broker(data: &Path, meta_addr: &str) -> Node {
        let args = [
            "broker",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--meta",
            meta_addr,
            "--http",
            "127.0.0.1:0",
        ];
        Node::spawn(&args, data, "tinymq listening on ")
    }

    /// `tinymq server` with its own MetaServer, on ephemeral ports.
    pub fn server(data: &Path) -> Node {
        Node::spawn(
            &["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
            data,
            "tinymq listening on ",
        )
    }

    /// Runs `tinymq ARGS --data DATA`; reads the native port's line (`prefix`), then the HTTP
    /// listener's.
    pub fn spawn(args: &[&str], data: &Path, prefix: &str) -> Node {
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--data")
            .arg(data)
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tinymq");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).expect("a line");
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                .to_string()
        };
        let native = line(prefix);
        let http = line("tinymq http listening on ");
        Node {
            child,
            endpoints: Endpoints { native, http },
            _data: None,
        }
    }

    /// The process, for tests that signal it or wait for it themselves.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Endpoints {
    /// A page of the REST API's messages of `topic`'s `partition` (`query` picks where from).
    pub fn messages(&self, topic: &str, partition: u32, query: &str) -> serde_json::Value {
        self.get(&format!(
            "/api/v1/topics/{topic}/partitions/{partition}/messages?{query}"
        ))
        .expect(200)
    }

    pub fn get(&self, path: &str) -> Response {
        request(&self.http, "GET", path, None)
    }

    pub fn delete(&self, path: &str) -> Response {
        request(&self.http, "DELETE", path, None)
    }

    pub fn post(&self, path: &str, json: &serde_json::Value) -> Response {
        request(&self.http, "POST", path, Some(&json.to_string()))
    }

    pub fn patch(&self, path: &str, json: &serde_json::Value) -> Response {
        request(&self.http, "PATCH", path, Some(&json.to_string()))
    }

    /// GET `path` until it answers 200 (bounded wait): the node has joined its cluster.
    pub fn wait_ok(&self, path: &str) -> Response {
        let mut last = None;
        let ok = super::retry(150, Duration::from_millis(100), || {
            let r = self.get(path);
            if r.status == 200 {
                return Some(r);
            }
            last = Some(r);
            None
        });
        ok.unwrap_or_else(|| panic!("{path} never answered 200: {last:?}"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// Asserts a 2xx-or-not `status` with a JSON body, and returns it.
    pub fn expect(&self, status: u16) -> serde_json::Value {
        assert_eq!(self.status, status, "{}", self.body);
        self.json()
    }

    /// Asserts an RFC 9457 problem document with `status` and `code`; returns its detail.
    pub fn expect_problem(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.body
        );
        let p = self.json();
        assert_eq!(p["status"], status, "{p}");
        assert_eq!(p["code"], code, "{p}");
        assert!(p["type"].is_string() && p["title"].is_string(), "{p}");
        p["detail"].as_str().expect("a detail").to_string()
    }
}

/// One request on its own connection (`Connection: close`), with a JSON body if given.
pub fn request(http: &str, method: &str, path: &str, body: Option<&str>) -> Response {
    let head = match body {
        Some(b) => format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ),
        None => format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
    };
    raw(http, &head)
}

/// Sends `raw` as it is and reads the whole response.
pub fn raw(http: &str, raw: &str) -> Response {
    let mut stream = TcpStream::connect(http).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    stream.write_all(raw.as_bytes()).expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let response = String::from_utf8(response).expect("a UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a whole response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    Response {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `.tools/venv/bin/NAME` (the Python tools of `scripts/install-python-tools.sh`); fails
/// naming that script, and what it would have installed (`installs`), when it is missing.
pub fn venv_tool(name: &str, installs: &str) -> PathBuf {
    let tool = workspace_root().join(".tools/venv/bin").join(name);
    assert!(
        tool.exists(),
        "{} is missing: run scripts/install-python-tools.sh (it {installs})",
        tool.display()
    );
    tool
}
