//! A damaged partition never stops a broker. Real `tinymq server` processes over real files:
//! after a stop, one partition's segment is damaged by hand; the restarted server serves every
//! other partition in full, and the damaged one either serves the records before the damage
//! (the rest is cut, with a WARN) or, when it cannot be opened at all, answers
//! `STORAGE_ERROR` with the reason and accepts no writes, until a later change lets it open.
//! And no produce, however its batch headers lie about offsets, leaves a partition unable to
//! take a valid write or the server unable to restart (issue 10).

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use common::frames::create;
use common::RawClient;
use tinymq_protocol::batch::{
    compute_crc, field, BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput,
    BATCH_HEADER_BYTES,
};
use tinymq_protocol::{messages as m, ErrorCode};

/// Batches produced to each partition, and records per batch.
const BATCHES: u32 = 5;
const RECORDS: u32 = 3;
/// Every partition of the test, as (topic, partition).
const PARTITIONS: [(&str, u32); 3] = [("orders", 0), ("orders", 1), ("audit", 0)];

/// A `tinymq server` whose log lines (stderr) go to a file the test reads.
struct LoggedServer {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl LoggedServer {
    fn start(data: &Path, log: &Path) -> LoggedServer {
        let mut child = Command::new(common::BIN)
            .args(["server", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(File::create(log).expect("log file"))
            .spawn()
            .expect("spawn tinymq server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server prints its address once started");
        let addr = line
            .trim()
            .strip_prefix("tinymq listening on ")
            .unwrap_or_else(|| {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                panic!("the server did not start ({line:?}); its log:\n{log}")
            })
            .to_string();
        LoggedServer {
            child,
            addr,
            log: log.to_path_buf(),
        }
    }

    fn client(&self) -> RawClient {
        RawClient::handshaken(&self.addr)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).expect("server log")
    }

    /// SIGTERM and a clean exit.
    fn terminate(mut self) {
        // SAFETY: sending a signal to our own child process.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill -TERM");
        assert!(
            self.child.wait().expect("wait").success(),
            "SIGTERM exits 0"
        );
    }

    /// SIGKILL: nothing is flushed or closed.
    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn value(topic: &str, partition: u32, batch: u32, record: u32) -> String {
    format!("{topic}-{partition}-batch-{batch}-record-{record}")
}

fn batch_of(topic: &str, partition: u32, batch: u32) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for r in 0..RECORDS {
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(value(topic, partition, batch, r).as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

/// Values of `BATCHES` batches of one partition, in order.
fn expected(topic: &str, partition: u32, batches: u32) -> Vec<String> {
    (0..batches)
        .flat_map(|b| (0..RECORDS).map(move |r| value(topic, partition, b, r)))
        .collect()
}

/// Produces batch `batch` of one partition; returns the result for it.
fn produce(
    c: &mut RawClient,
    topic: &str,
    partition: u32,
    batch: u32,
) -> m::ProducePartitionResult {
    produce_bytes(c, topic, partition, batch_of(topic, partition, batch))
}

fn produce_bytes(
    c: &mut RawClient,
    topic: &str,
    partition: u32,
    records: Bytes,
) -> m::ProducePartitionResult {
    c.call(&m::ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: topic.into(),
            partition,
            records,
        }],
        transactional_id: String::new(),
    })
    .partitions
    .remove(0)
}

/// The batch of issue 10: a bare 61-byte header with a valid CRC, no records (count 0), and a
/// last offset delta of `i32::MAX`.
fn bare_header() -> Bytes {
    let mut b = vec![0u8; BATCH_HEADER_BYTES];
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(
        field::BATCH_LENGTH,
        &(BATCH_HEADER_BYTES as i32 - 12).to_be_bytes(),
    );
    put(field::MAGIC, &[2]);
    put(field::LAST_OFFSET_DELTA, &i32::MAX.to_be_bytes());
    put(field::PRODUCER_ID, &(-1i64).to_be_bytes());
    put(field::PRODUCER_EPOCH, &(-1i16).to_be_bytes());
    put(field::BASE_SEQUENCE, &(-1i32).to_be_bytes());
    let crc = compute_crc(&b);
    b[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

fn fetch(c: &mut RawClient, topic: &str, partition: u32, offset: i64) -> m::FetchPartitionResult {
    c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: topic.into(),
            partition,
            offset,
            partition_bytes_max: 1 << 20,
            ..Default::default()
        }],
        ..Default::default()
    })
    .partitions
    .remove(0)
}

/// Every record value below the high watermark, fetched from offset 0.
fn all_values(c: &mut RawClient, topic: &str, partition: u32) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let result = fetch(c, topic, partition, offset);
        assert!(
            result.error.is_none(),
            "{topic}/{partition}: {:?}",
            result.error
        );
        if result.records.is_empty() {
            assert_eq!(
                offset, result.high_watermark,
                "{topic}/{partition} read to its end"
            );
            return values;
        }
        for batch in BatchIter::new(result.records) {
            let batch = batch.unwrap();
            for record in batch.records(1 << 20).unwrap() {
                if record.offset >= offset {
                    values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
                }
            }
            offset = batch.next_offset();
        }
    }
}

/// Starts a server, creates `orders` (2 partitions) and `audit` (1), and writes `BATCHES`
/// batches to each partition.
fn populated(data: &Path, log: &Path) -> LoggedServer {
    let server = LoggedServer::start(data, log);
    let mut c = server.client();
    create(&mut c, "orders", 2);
    create(&mut c, "audit", 1);
    for batch in 0..BATCHES {
        for (topic, partition) in PARTITIONS {
            let result = produce(&mut c, topic, partition, batch);
            assert!(
                result.error.is_none(),
                "{topic}/{partition}: {:?}",
                result.error
            );
            assert_eq!(result.base_offset, i64::from(batch * RECORDS));
        }
    }
    server
}

fn segment(data: &Path, topic: &str, partition: u32) -> PathBuf {
    data.join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log")
}

/// Byte positions where each batch of a segment file starts.
fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        starts.push(at);
        let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        at += 12 + length as usize;
    }
    starts
}

fn code_of(error: &Option<m::Error>) -> Option<ErrorCode> {
    error.as_ref().map(|e| e.error_code())
}

#[test]
fn a_corrupt_batch_is_cut_at_restart_and_every_other_record_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    populated(&data, &tmp.path().join("first.log")).terminate();

    // Flip one byte inside the first record of orders/0's third batch: its CRC fails.
    let path = segment(&data, "orders", 0);
    let mut bytes = std::fs::read(&path).unwrap();
    let starts = batch_starts(&bytes);
    assert_eq!(starts.len(), BATCHES as usize);
    bytes[starts[2] + 70] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let server = LoggedServer::start(&data, &tmp.path().join("second.log"));
    let mut c = server.client();
    assert_eq!(
        all_values(&mut c, "orders", 1),
        expected("orders", 1, BATCHES)
    );
    assert_eq!(
        all_values(&mut c, "audit", 0),
        expected("audit", 0, BATCHES)
    );
    // The damaged partition keeps the two batches before the damage.
    assert_eq!(all_values(&mut c, "orders", 0), expected("orders", 0, 2));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), starts[2] as u64);
    let log = server.log_text();
    assert!(log.contains("recovery cut the log"), "{log}");
    assert!(log.contains("CRC mismatch"), "{log}");
    // And it takes writes again, at the first offset cut.
    let result = produce(&mut c, "orders", 0, 9);
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(result.base_offset, i64::from(2 * RECORDS));
}

#[test]
fn an_unopenable_partition_answers_storage_error_and_the_others_are_served() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    populated(&data, &tmp.path().join("first.log")).kill9();

    // orders/1's segment file becomes a directory: opening its log fails with an I/O error,
    // whoever runs the test (root included).
    let path = segment(&data, "orders", 1);
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();

    let server = LoggedServer::start(&data, &tmp.path().join("second.log"));
    let mut c = server.client();
    assert_eq!(
        all_values(&mut c, "orders", 0),
        expected("orders", 0, BATCHES)
    );
    assert_eq!(
        all_values(&mut c, "audit", 0),
        expected("audit", 0, BATCHES)
    );

    let fetched = fetch(&mut c, "orders", 1, 0);
    assert_eq!(code_of(&fetched.error), Some(ErrorCode::STORAGE_ERROR));
    let message = &fetched.error.as_ref().unwrap().message;
    assert!(
        message.starts_with("orders/1 cannot be opened on broker 1: "),
        "{message}"
    );
    assert!(message.contains("orders-1"), "names the path: {message}");
    let produced = produce(&mut c, "orders", 1, 9);
    assert_eq!(code_of(&produced.error), Some(ErrorCode::STORAGE_ERROR));
    let listed = c
        .call(&m::ListOffsetsRequest {
            partitions: vec![m::ListOffsetsPartition {
                topic: "orders".into(),
                partition: 1,
                timestamp: -1,
            }],
            isolation_level: 0,
        })
        .partitions
        .remove(0);
    assert_eq!(code_of(&listed.error), Some(ErrorCode::STORAGE_ERROR));
    assert!(path.is_dir(), "nothing was written in its place");

    // The rest of the broker works: writes elsewhere, and describing the topic.
    let result = produce(&mut c, "orders", 0, 9);
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(result.base_offset, i64::from(BATCHES * RECORDS));
    let described = c.call(&m::DescribeTopicRequest {
        name: "orders".into(),
    });
    assert!(described.error.is_none(), "{:?}", described.error);
    let ends: Vec<i64> = described
        .partitions
        .iter()
        .map(|p| p.log_end_offset)
        .collect();
    assert_eq!(ends, vec![i64::from((BATCHES + 1) * RECORDS), -1]);
    let log = server.log_text();
    assert!(log.contains("cannot open partition"), "{log}");

    // Once the cause is gone, the next metadata change opens it (its data was the file).
    // The broker reconciles the change in the background: poll until the partition opens (a
    // refused produce writes nothing, so retrying it adds no record).
    std::fs::remove_dir(&path).unwrap();
    create(&mut c, "trigger", 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let result = produce(&mut c, "orders", 1, 10);
        if result.error.is_none() {
            break;
        }
        assert_eq!(code_of(&result.error), Some(ErrorCode::STORAGE_ERROR));
        assert!(std::time::Instant::now() < deadline, "{:?}", result.error);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn batches_lying_about_their_offsets_leave_the_partition_writable_and_the_server_restartable() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = LoggedServer::start(&data, &tmp.path().join("first.log"));
    let mut c = server.client();
    create(&mut c, "hostile", 1);
    // More than the 68 that used to break the partition for good. Whether the broker takes
    // or refuses them, the answer must be a proper one, never a failed worker.
    for i in 0..100 {
        let result = produce_bytes(&mut c, "hostile", 0, bare_header());
        let code = code_of(&result.error);
        assert!(
            matches!(
                code,
                None | Some(ErrorCode::INVALID_RECORD) | Some(ErrorCode::CORRUPT_MESSAGE)
            ),
            "request {i}: {:?}",
            result.error
        );
    }
    let valid = produce(&mut c, "hostile", 0, 0);
    assert!(valid.error.is_none(), "{:?}", valid.error);
    server.kill9();

    let server = LoggedServer::start(&data, &tmp.path().join("second.log"));
    let mut c = server.client();
    let fetched = fetch(&mut c, "hostile", 0, valid.base_offset);
    assert!(fetched.error.is_none(), "{:?}", fetched.error);
    let batch = BatchIter::new(fetched.records).next().unwrap().unwrap();
    assert_eq!(batch.base_offset(), valid.base_offset);
    let values: Vec<String> = batch
        .records(1 << 20)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, expected("hostile", 0, 1));
    let again = produce(&mut c, "hostile", 0, 1);
    assert!(again.error.is_none(), "{:?}", again.error);
    assert!(again.base_offset > valid.base_offset);
}
