//! A minimal Kafka client for the data-path tests: a `tinymq server` with a Kafka listener,
//! requests framed and encoded with kafka-protocol's own types over a plain TcpStream, and
//! record batches built and read with tinymq-protocol's batch codec (Kafka's RecordBatch v2).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tinymq_protocol::batch::{
    BatchBuilder, BatchIter, Compression, ProducerStamp, Record, RecordInput,
};

use super::common;

/// A `tinymq server --kafka-listen 127.0.0.1:0` child process and its two addresses.
pub struct KafkaServer {
    child: Child,
    pub native: String,
    pub kafka: String,
    _data: tempfile::TempDir,
}

impl KafkaServer {
    /// A standalone server (MetaServer and broker in one process).
    pub fn start() -> KafkaServer {
        KafkaServer::spawn(&["server", "--listen", "127.0.0.1:0"])
    }

    /// Broker `id` of the cluster whose MetaServer is at `meta`.
    pub fn broker(id: u32, meta: &str) -> KafkaServer {
        let id = id.to_string();
        let listen = format!("127.0.0.1:{}", common::free_port());
        KafkaServer::spawn(&["broker", "--id", &id, "--listen", &listen, "--meta", meta])
    }

    /// Runs `tinymq ARGS --kafka-listen 127.0.0.1:PORT --data DIR`; reads both addresses.
    fn spawn(args: &[&str]) -> KafkaServer {
        let data = tempfile::tempdir().unwrap();
        let kafka_listen = format!("127.0.0.1:{}", common::free_port());
        let mut child = Command::new(common::BIN)
            .args(args)
            .args(["--kafka-listen", &kafka_listen])
            .arg("--data")
            .arg(data.path())
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                .to_string()
        };
        let native = line("tinymq listening on ");
        let kafka = line("tinymq kafka listening on ");
        // Keep reading stdout so the server never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        KafkaServer {
            child,
            native,
            kafka,
            _data: data,
        }
    }

    /// Runs `tinymq ARGS --bootstrap NATIVE` with `stdin`; asserts it succeeds, returns stdout.
    pub fn tool(&self, args: &[&str], stdin: &[u8]) -> String {
        let out = common::run_with_input(
            Command::new(common::BIN)
                .args(args)
                .env("TINYMQ_BOOTSTRAP", &self.native),
            stdin,
        );
        assert!(
            out.status.success(),
            "tinymq {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let partitions = partitions.to_string();
        self.tool(&["topic", "create", name, "--partitions", &partitions], b"");
    }

    pub fn connect(&self) -> Kafka {
        Kafka::connect(&self.kafka)
    }
}

impl Drop for KafkaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Kafka connection.
pub struct Kafka {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Kafka {
    pub fn connect(addr: &str) -> Kafka {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
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
            .with_client_id(Some(StrBytes::from_static_str("kafka_data-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).unwrap();
        correlation_id
    }

    /// Reads the next response, which must answer `correlation_id`.
    pub fn receive<R: Request>(&mut self, version: i16, correlation_id: i32) -> R::Response {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).unwrap();
        let mut body = Bytes::from(body);
        let header_version = R::Response::header_version(version);
        let header = ResponseHeader::decode(&mut body, header_version).unwrap();
        assert_eq!(header.correlation_id, correlation_id, "responses in order");
        R::Response::decode(&mut body, version).unwrap()
    }

    pub fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let id = self.send(version, request);
        self.receive::<R>(version, id)
    }
}

/// A record to put in a batch: key, value, headers, timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp_ms: i64,
}

impl Rec {
    pub fn new(key: &str, value: &str, timestamp_ms: i64) -> Rec {
        Rec {
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![("h".into(), Some(format!("of {key}").into_bytes()))],
            timestamp_ms,
        }
    }

    pub fn of(record: &Record) -> Rec {
        Rec {
            key: record.key.as_ref().map(|b| b.to_vec()),
            value: record.value.as_ref().map(|b| b.to_vec()),
            headers: record
                .headers
                .iter()
                .map(|h| (h.key.clone(), h.value.as_ref().map(|b| b.to_vec())))
                .collect(),
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// One RecordBatch v2 holding `records`.
pub fn batch(records: &[Rec], compression: Compression, producer: ProducerStamp) -> Bytes {
    let mut builder = BatchBuilder::new(compression, producer);
    for r in records {
        let headers: Vec<(&str, Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        builder.push(&RecordInput {
            timestamp_ms: r.timestamp_ms,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &headers,
        });
    }
    builder.build().unwrap()
}

/// Every record of the whole batches in `records`, with its offset, and the batches' base
/// offsets.
pub fn read_records(records: &Bytes) -> (Vec<(i64, Rec)>, Vec<i64>) {
    let mut out = Vec::new();
    let mut bases = Vec::new();
    for batch in BatchIter::new(records.clone()) {
        let batch = batch.unwrap();
        bases.push(batch.base_offset());
        for record in batch.records(64 << 20).unwrap() {
            out.push((record.offset, Rec::of(&record)));
        }
    }
    (out, bases)
}
