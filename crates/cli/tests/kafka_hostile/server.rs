//! A `tinymq server` with a Kafka listener, for the hostile-input tests.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::common::{retry, BIN};
use super::wire::{api_versions, supported_table, READ_WAIT};

/// A `tinymq server` with a Kafka listener, in its own data directory.
pub struct KafkaServer {
    pub child: Child,
    pub native: String,
    pub kafka: String,
    /// Variables for the native tools (the admin's login, with `--auth scram`).
    tool_env: Vec<(&'static str, String)>,
    _data: tempfile::TempDir,
}

impl KafkaServer {
    pub fn start(extra: &[&str]) -> KafkaServer {
        KafkaServer::start_with_admin(extra, None)
    }

    /// With `admin_password`: the server's first super user `admin` has it (for `--auth
    /// scram`), and the native tools log in as admin.
    pub fn start_with_admin(extra: &[&str], admin_password: Option<&str>) -> KafkaServer {
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
            .envs(admin_password.map(|p| ("TINYMQ_ADMIN_PASSWORD", p)))
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
            tool_env: admin_password
                .map(|p| {
                    vec![
                        ("TINYMQ_USER", "admin".into()),
                        ("TINYMQ_PASSWORD", p.into()),
                    ]
                })
                .unwrap_or_default(),
            _data: data,
        };
        // With --auth scram, `admin` is written shortly after the server listens.
        let created = retry(100, Duration::from_millis(100), || {
            let created = server.tool(&["topic", "create", "good"]).output().unwrap();
            created.status.success().then_some(())
        });
        assert!(created.is_some(), "topic good never created");
        server
    }

    pub fn connect(&mut self) -> TcpStream {
        let stream = match TcpStream::connect(&self.kafka) {
            Ok(stream) => stream,
            Err(e) => panic!("connect to the Kafka port: {e} ({})", self.exit_status()),
        };
        stream.set_read_timeout(Some(READ_WAIT)).unwrap();
        stream.set_write_timeout(Some(READ_WAIT)).unwrap();
        stream
    }

    pub fn tool(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("TINYMQ_BOOTSTRAP", &self.native);
        cmd.envs(self.tool_env.iter().map(|(k, v)| (*k, v)));
        cmd
    }

    /// Resident memory, from /proc.
    pub fn rss_kib(&self) -> u64 {
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
    pub fn exit_status(&mut self) -> String {
        let exited = retry(20, Duration::from_millis(100), || {
            self.child.try_wait().expect("try_wait")
        });
        exited.map_or("the server is still running".into(), |s| {
            format!("the server exited: {s}")
        })
    }

    /// After a case: still running, answers a fresh ApiVersions, and serves native clients.
    pub fn assert_healthy(&mut self, after: &str) {
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
