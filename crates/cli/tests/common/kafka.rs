//! Kafka-listener helpers for the process tests: a `tinymq server` (or broker) started with
//! `--kafka-listen 127.0.0.1:0`, its native and Kafka addresses read from the lines it prints,
//! and a blocking Kafka client that frames kafka-protocol's client-side request types (request
//! header, correlation ids) over a TcpStream and decodes their responses.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::{closed_by_server, retry, rss_kib_of, run_succeeding, BIN};

/// How long [`Kafka`] waits for any one response before the test fails.
pub const RESPONSE_WAIT: Duration = Duration::from_secs(60);
/// How long a raw connection ([`KafkaServer::connect_raw`]) waits for any one read or write:
/// the hostile-input tests wait this long for an answer or a close.
pub const RAW_WAIT: Duration = Duration::from_secs(10);
/// Largest response [`Kafka`] reads; a larger size prefix fails the test before allocating.
pub const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// The client id of every [`Kafka`] request.
const CLIENT_ID: &str = "tinymq-kafka-test";

/// How to start a [`KafkaServer`]: which role, extra flags and variables, where the log goes,
/// which data directory. [`KafkaServer::start`] and friends cover the usual cases.
pub struct Launch {
    args: Vec<String>,
    kafka: bool,
    env: Vec<(String, String)>,
    tool_env: Vec<(String, String)>,
    log: Option<PathBuf>,
    data: Option<PathBuf>,
}

impl Launch {
    /// `tinymq server --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 --http off`.
    pub fn server() -> Launch {
        Launch::role(&["server", "--http", "off"])
    }

    /// `tinymq broker --id ID --meta META --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0`.
    pub fn broker(id: u32, meta: &str) -> Launch {
        Launch::role(&["broker", "--id", &id.to_string(), "--meta", meta])
    }

    /// `tinymq ARGS --listen 127.0.0.1:0`.
    fn role(args: &[&str]) -> Launch {
        let listen = ["--listen", "127.0.0.1:0"];
        Launch {
            args: args.iter().chain(&listen).map(|a| a.to_string()).collect(),
            kafka: true,
            env: Vec::new(),
            tool_env: Vec::new(),
            log: None,
            data: None,
        }
    }

    /// No `--kafka-listen`: the server's `kafka` address is empty.
    pub fn without_kafka(mut self) -> Launch {
        self.kafka = false;
        self
    }

    /// More flags, after the role's.
    pub fn args(mut self, extra: &[&str]) -> Launch {
        self.args.extend(extra.iter().map(|a| a.to_string()));
        self
    }

    /// The server's first super user `admin` has `password` (for `--auth scram`), and
    /// [`KafkaServer::tool`] logs in as admin.
    pub fn admin_password(mut self, password: &str) -> Launch {
        self.env
            .push(("TINYMQ_ADMIN_PASSWORD".into(), password.into()));
        self.tool_env = vec![
            ("TINYMQ_USER".into(), "admin".into()),
            ("TINYMQ_PASSWORD".into(), password.into()),
        ];
        self
    }

    /// The server's log, at info, goes to the file `log` (else to the test's stderr at warn).
    pub fn log_to(mut self, log: &Path) -> Launch {
        self.log = Some(log.to_path_buf());
        self
    }

    /// Keeps the data in `dir`, which outlives the server (to start another on the same data);
    /// else a temporary directory removed with the server.
    pub fn data(mut self, dir: &Path) -> Launch {
        self.data = Some(dir.to_path_buf());
        self
    }

    /// Starts the process and reads the addresses it prints.
    pub fn start(self) -> KafkaServer {
        let (data, temporary) = match self.data {
            Some(dir) => (dir, None),
            None => {
                let temporary = tempfile::tempdir().expect("temporary data directory");
                (temporary.path().to_path_buf(), Some(temporary))
            }
        };
        let mut command = Command::new(BIN);
        command.args(&self.args);
        if self.kafka {
            command.args(["--kafka-listen", "127.0.0.1:0"]);
        }
        command.arg("--data").arg(&data).env("TINYMQ_LOG", "warn");
        match &self.log {
            Some(log) => {
                let file = std::fs::File::create(log).expect("log file");
                command.env("TINYMQ_LOG", "info").stderr(Stdio::from(file))
            }
            None => command.stderr(Stdio::inherit()),
        };
        let mut child = command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn tinymq");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let native = read_address(&mut stdout, "tinymq listening on ");
        let kafka = if self.kafka {
            read_address(&mut stdout, "tinymq kafka listening on ")
        } else {
            String::new()
        };
        // Keep reading, so that a later line never meets a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        KafkaServer {
            child,
            native,
            kafka,
            tool_env: self.tool_env,
            data,
            _temporary: temporary,
        }
    }
}

fn read_address(stdout: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("server prints its addresses");
    line.trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("expected {prefix:?}..., got {line:?}"))
        .to_string()
}

/// A `tinymq server` or broker child process with a Kafka listener; killed when dropped.
pub struct KafkaServer {
    child: Child,
    /// The native address (for `tinymq` tools).
    pub native: String,
    /// The Kafka listener's address; empty when started [`Launch::without_kafka`].
    pub kafka: String,
    /// Variables for the native tools (the admin's login).
    tool_env: Vec<(String, String)>,
    data: PathBuf,
    _temporary: Option<tempfile::TempDir>,
}

impl KafkaServer {
    /// A standalone server (MetaServer and broker in one process) on ephemeral ports.
    pub fn start() -> KafkaServer {
        Launch::server().start()
    }

    /// [`KafkaServer::start`] with `extra` flags.
    pub fn start_with(extra: &[&str]) -> KafkaServer {
        Launch::server().args(extra).start()
    }

    /// Broker `id` of the cluster whose MetaServer is at `meta`, with a Kafka listener.
    pub fn broker(id: u32, meta: &str) -> KafkaServer {
        Launch::broker(id, meta).start()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// A `tinymq` tool command bootstrapped at the native address (logged in as the admin
    /// when started with [`Launch::admin_password`]).
    pub fn tool(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command.args(args).env("TINYMQ_BOOTSTRAP", &self.native);
        command.envs(self.tool_env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Runs [`KafkaServer::tool`] to its end with `stdin`; asserts it succeeds, returns stdout.
    pub fn run_tool(&self, args: &[&str], stdin: &[u8]) -> String {
        let out = run_succeeding(&mut self.tool(args), stdin);
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// `tinymq topic create NAME --partitions N` through the native protocol.
    pub fn create_topic(&self, name: &str, partitions: u32) {
        let partitions = partitions.to_string();
        self.run_tool(&["topic", "create", name, "--partitions", &partitions], b"");
    }

    /// A Kafka client connection to the Kafka listener.
    pub fn connect(&self) -> Kafka {
        Kafka::connect(&self.kafka)
    }

    /// A plain socket to the Kafka listener, reads and writes bounded by [`RAW_WAIT`]; a
    /// refused connection fails the test saying whether the server exited.
    pub fn connect_raw(&mut self) -> TcpStream {
        let stream = match TcpStream::connect(&self.kafka) {
            Ok(stream) => stream,
            Err(e) => panic!("connect to the Kafka port: {e} ({})", self.exit_status()),
        };
        stream.set_read_timeout(Some(RAW_WAIT)).expect("timeout");
        stream.set_write_timeout(Some(RAW_WAIT)).expect("timeout");
        stream
    }

    /// Kills the process with SIGKILL (`kill -9`) and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// How the process ended, if it has.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// How the server process ended, once it has (waiting a moment for an exit under way),
    /// for failure messages.
    pub fn exit_status(&mut self) -> String {
        let exited = retry(20, Duration::from_millis(100), || self.try_wait());
        exited.map_or("the server is still running".into(), |s| {
            format!("the server exited: {s}")
        })
    }

    /// Resident memory of the server, from /proc.
    pub fn rss_kib(&self) -> u64 {
        rss_kib_of(self.child.id())
    }

    /// Bytes of `topic`'s log segments on disk, every partition (`DATA/TOPIC-P/*.log`).
    pub fn stored_log_bytes(&self, topic: &str) -> u64 {
        let prefix = format!("{topic}-");
        let mut bytes = 0;
        for dir in std::fs::read_dir(&self.data).expect("data directory") {
            let dir = dir.expect("data directory entry").path();
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let is_partition = name
                .strip_prefix(&prefix)
                .is_some_and(|p| p.parse::<u32>().is_ok());
            if !is_partition {
                continue;
            }
            for file in std::fs::read_dir(&dir).expect("partition directory") {
                let file = file.expect("partition directory entry").path();
                if file.extension().is_some_and(|e| e == "log") {
                    bytes += file.metadata().expect("segment metadata").len();
                }
            }
        }
        bytes
    }
}

impl Drop for KafkaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Kafka connection speaking kafka-protocol's client-side types; requests may be sent
/// ahead of reading their responses, which must come back in order.
pub struct Kafka {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Kafka {
    pub fn connect(addr: &str) -> Kafka {
        let stream = TcpStream::connect(addr).expect("connect to the Kafka port");
        stream
            .set_read_timeout(Some(RESPONSE_WAIT))
            .expect("timeout");
        Kafka {
            stream,
            next_correlation_id: 1,
        }
    }

    /// Sends `request` as `version`; returns its correlation id.
    pub fn send<R: Request>(&mut self, version: i16, request: &R) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .expect("request header");
        request.encode(&mut body, version).expect("request body");
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_u32(body.len() as u32);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).expect("write request");
        correlation_id
    }

    /// Reads the next response, which must answer `correlation_id` and be read whole.
    pub fn receive<R: Request>(&mut self, version: i16, correlation_id: i32) -> R::Response {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("response size");
        let size = u32::from_be_bytes(size) as usize;
        assert!(size <= RESPONSE_BYTES_MAX, "response of {size} bytes");
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).expect("response");
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .expect("response header");
        assert_eq!(header.correlation_id, correlation_id, "responses in order");
        let response = R::Response::decode(&mut body, version).expect("response body");
        assert_eq!(body.remaining(), 0, "bytes left after the response");
        response
    }

    /// Sends `request` and reads its response.
    pub fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let correlation_id = self.send(version, request);
        self.receive::<R>(version, correlation_id)
    }

    /// Whether the server closed the connection (EOF or reset) instead of answering; waiting
    /// out [`RESPONSE_WAIT`] is not a close.
    pub fn closed(&mut self) -> bool {
        closed_by_server(&mut self.stream)
    }
}

/// DescribeConfigs (at `version`) of one topic, every config.
fn describe_topic_configs(
    k: &mut Kafka,
    version: i16,
    topic: &str,
) -> kafka_protocol::messages::describe_configs_response::DescribeConfigsResult {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let resource = DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configuration_keys(None);
    let mut response = k.call(
        version,
        &DescribeConfigsRequest::default().with_resources(vec![resource]),
    );
    assert_eq!(response.results.len(), 1, "{response:?}");
    response.results.remove(0)
}

/// DescribeConfigs (at `version`) of one topic: its error code and (name, value) pairs.
pub fn topic_configs(k: &mut Kafka, version: i16, topic: &str) -> (i16, Vec<(String, String)>) {
    let result = describe_topic_configs(k, version, topic);
    let configs = result
        .configs
        .iter()
        .map(|c| {
            let value = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
            (c.name.to_string(), value)
        })
        .collect();
    (result.error_code, configs)
}

/// DescribeConfigs (at `version`, 1 or later) of one topic: each config's source (Kafka's
/// `ConfigSource`: 1 a topic override, 5 the default).
pub fn topic_config_sources(
    k: &mut Kafka,
    version: i16,
    topic: &str,
) -> std::collections::BTreeMap<String, i8> {
    let result = describe_topic_configs(k, version, topic);
    result
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.config_source))
        .collect()
}
