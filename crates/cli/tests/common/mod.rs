//! Helpers for tests that run real `tinymq` processes on 127.0.0.1 with ephemeral ports and
//! temporary data directories.
#![allow(dead_code)]

pub mod cluster;
pub mod consume;
pub mod frames;
pub mod http;
pub mod kafka;
pub mod prometheus;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use bytes::BytesMut;
use prost::Message;
use tinymq_protocol::frame::{FrameDecoder, FrameHeader};
use tinymq_protocol::{messages as m, Frame, OpCode, Request};

pub const BIN: &str = env!("CARGO_BIN_EXE_tinymq");

/// How long [`Server::terminate`] waits for an exit after SIGTERM: past the binary's own bound
/// on a shutdown (`tinymq` exits with an error once its shutdown deadline passes).
pub const TERMINATE_WAIT: Duration = Duration::from_secs(150);

/// A `tinymq server` child process.
pub struct Server {
    child: Child,
    pub addr: String,
    pub data: PathBuf,
}

impl Server {
    pub fn start(data: &Path) -> Server {
        Server::start_with(data, &[])
    }

    pub fn start_with(data: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(data, extra, &[])
    }

    pub fn start_with_env(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["server", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Server::spawn(&args, data, env)
    }

    /// `tinymq broker --id ID --listen LISTEN --meta META --data DATA`.
    pub fn start_broker(id: u32, listen: &str, meta: &str, data: &Path) -> Server {
        let id = id.to_string();
        let args = ["broker", "--id", &id, "--listen", listen, "--meta", meta];
        Server::spawn(&args, data, &[])
    }

    /// [`Server::start_broker`] with extra flags.
    pub fn start_broker_with(
        id: u32,
        listen: &str,
        meta: &str,
        data: &Path,
        extra: &[&str],
    ) -> Server {
        let id = id.to_string();
        let mut args = vec!["broker", "--id", &id, "--listen", listen, "--meta", meta];
        args.extend_from_slice(extra);
        Server::spawn(&args, data, &[])
    }

    /// Runs `tinymq ARGS --data DATA` and waits for the line naming its address; later lines
    /// (a Kafka listener's address) are read and dropped, so the server never writes to a
    /// closed pipe.
    fn spawn(args: &[&str], data: &Path, env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--data")
            .arg(data)
            .envs(env.iter().copied())
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tinymq server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        stdout
            .read_line(&mut line)
            .expect("server prints its address");
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let addr = line
            .trim()
            .strip_prefix("tinymq listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            data: data.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: the process gets no chance to flush anything.
    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM and wait (bounded: [`TERMINATE_WAIT`]) for the process to exit. A server that
    /// has not exited by then is killed and the test fails naming it, instead of hanging the
    /// test binary until the runner's timeout.
    pub fn terminate(&mut self) -> ExitStatus {
        // SAFETY: sending a signal to our own child process.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill -TERM");
        let deadline = std::time::Instant::now() + TERMINATE_WAIT;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "server {} (pid {}) did not exit within {TERMINATE_WAIT:?} of SIGTERM",
            self.addr,
            self.child.id()
        );
    }

    /// Resident memory of the server, from /proc.
    pub fn rss_kib(&self) -> u64 {
        rss_kib_of(self.child.id())
    }

    /// Runs a `tinymq` tool against this server.
    pub fn tool(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("TINYMQ_BOOTSTRAP", &self.addr);
        cmd
    }

    /// Runs a tool to completion, feeding `stdin`; panics on failure.
    pub fn run_tool(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_succeeding(&mut self.tool(args), stdin)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of process `pid`, from /proc.
pub fn rss_kib_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

// ---- MetaServer nodes ----------------------------------------------------------------------

/// A `tinymq meta` child process.
pub struct MetaProc {
    child: Child,
}

impl MetaProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for MetaProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts MetaServer node `id` of the group at `addrs` (node i+1 at addrs[i]).
pub fn start(id: u64, addrs: &[String], dir: &std::path::Path) -> MetaProc {
    start_with(id, addrs, dir, &[])
}

/// Like [`start`], with extra flags (limits).
pub fn start_with(id: u64, addrs: &[String], dir: &std::path::Path, extra: &[&str]) -> MetaProc {
    let peers: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect();
    let child = Command::new(BIN)
        .args([
            "meta",
            "--id",
            &id.to_string(),
            "--listen",
            &addrs[id as usize - 1],
            "--peers",
            &peers.join(","),
        ])
        .args(extra)
        .arg("--data")
        .arg(dir.join(format!("meta-{id}")))
        .env("TINYMQ_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    MetaProc { child }
}

/// The leader as seen by `addr`, once one is known (bounded wait).
pub fn leader(addr: &str, not: Option<u64>) -> u64 {
    for _ in 0..200 {
        if let Ok(out) = Command::new(BIN)
            .args(["cluster", "status", "--json", "--bootstrap", addr])
            .output()
        {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                if let Some(l) = v["leader"].as_u64().filter(|l| Some(*l) != not) {
                    return l;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no leader seen by {addr}");
}

/// A port that was free a moment ago (for processes that must keep their address across
/// restarts).
/// Runs `cmd` to its end with `stdin` as its input, capturing stdout and stderr. The input is
/// written from a thread, so a tool that prints a lot before reading cannot block on a full pipe.
pub fn run_with_input(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tinymq");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("tool output");
    writer.join().expect("stdin writer");
    out
}

/// [`run_with_input`], failing the test (with the command and its stderr) unless it succeeds.
pub fn run_succeeding(cmd: &mut Command, stdin: &[u8]) -> Output {
    let out = run_with_input(cmd, stdin);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Calls `attempt` up to `attempts` times, `pause` apart, until it gives a value; `None` when
/// it never did, for the caller to fail saying what it waited for.
pub fn retry<T>(
    attempts: u32,
    pause: Duration,
    mut attempt: impl FnMut() -> Option<T>,
) -> Option<T> {
    for _ in 0..attempts {
        if let Some(value) = attempt() {
            return Some(value);
        }
        std::thread::sleep(pause);
    }
    None
}

/// A port free now, for a process a test starts (and may restart) on a known address. Taken
/// below the kernel's ephemeral range (`ip_local_port_range`, 32768–60999 by default): a port
/// from `bind(0)` is in that range, and once released, any `connect()` on the machine (another
/// test binary's, run alongside by scripts/run-tests.py) may take it as its local port before
/// the server it was meant for binds it. Each test process starts at its own place in the
/// range and moves on, so two processes rarely try the same port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral_low.min(32_768).saturating_sub(LOW);
    if span > 0 {
        let _ = NEXT.compare_exchange(
            u32::MAX,
            std::process::id().wrapping_mul(2_654_435_761) % span,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        for _ in 0..span {
            let port = LOW + NEXT.fetch_add(1, Ordering::Relaxed) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A blocking raw-protocol connection, for tests that speak bytes.
pub struct RawClient {
    pub stream: TcpStream,
    buf: BytesMut,
    next_id: u32,
}

impl RawClient {
    pub fn connect(addr: &str) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        RawClient {
            stream,
            buf: BytesMut::new(),
            next_id: 1,
        }
    }

    pub fn handshaken(addr: &str) -> RawClient {
        RawClient::handshaken_as(addr, m::NodeRole::Client)
    }

    /// Handshaken as `role` (a broker or MetaServer node may send node-to-node operations).
    pub fn handshaken_as(addr: &str, role: m::NodeRole) -> RawClient {
        let mut c = RawClient::connect(addr);
        let r = c.call(&m::HandshakeRequest {
            min_version: 1,
            max_version: 1,
            cluster_id: String::new(),
            client_id: "raw-test".into(),
            role: role.into(),
            node_id: 0,
        });
        assert!(r.error.is_none(), "{:?}", r.error);
        c
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn send_frame(&mut self, op: u8, body: &[u8]) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = BytesMut::new();
        FrameHeader::request(op, id, body.len() as u32).encode(&mut out);
        out.extend_from_slice(body);
        self.stream.write_all(&out).expect("send");
        id
    }

    /// The next frame, or `None` at EOF.
    pub fn read_frame(&mut self) -> Option<Frame> {
        let decoder = FrameDecoder::new(64 << 20);
        loop {
            if let Some(frame) = decoder
                .decode(&mut self.buf)
                .expect("valid frame from server")
            {
                return Some(frame);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// True once the server has closed the connection (EOF or reset), after draining frames.
    pub fn closed_by_server(&mut self) -> bool {
        while self.read_frame().is_some() {}
        true
    }

    pub fn call<R: Request>(&mut self, request: &R) -> R::Response {
        let id = self.send_frame(R::OP.code(), &request.encode_to_vec());
        let frame = self.read_frame().expect("response");
        assert_eq!(frame.header.message_id, id);
        assert_eq!(frame.header.op_code(), R::OP.code());
        R::Response::decode(frame.body).expect("decodable response")
    }
}

pub fn error_code(frame: &Frame) -> u32 {
    m::ErrorResponse::decode(frame.body.clone())
        .expect("error body")
        .error
        .map_or(0, |e| e.code)
}

pub fn op(code: OpCode) -> u8 {
    code.code()
}

/// Whether the server closed `stream` (EOF or reset) within its read timeout; a timeout is
/// not a close.
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

/// A process stopped with SIGSTOP; SIGCONT when dropped, so that a failing test leaves nothing
/// frozen behind.
pub struct Frozen(i32);

impl Frozen {
    pub fn stop(server: &Server) -> Frozen {
        Frozen::pid(server.pid())
    }

    /// Stops the child process `pid` (a MetaServer node, say).
    pub fn pid(pid: u32) -> Frozen {
        let pid = pid as i32;
        // SAFETY: sending a signal to our own child process.
        let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(rc, 0, "kill -STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above; the process is still our child (whatever owns it outlives this
        // guard).
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}
