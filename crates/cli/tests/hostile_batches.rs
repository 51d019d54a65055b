//! Record batches whose CRC is right but whose header lies, sent to a real server: each is
//! refused with its code before anything is written, the partition still accepts a valid batch
//! at the next offset, and the server restarts cleanly (after SIGTERM and after SIGKILL) with
//! exactly the valid records.

mod common;

use bytes::Bytes;
use common::{RawClient, Server};
use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::batch::{
    BatchIter, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, BATCH_MAGIC,
};
use tinymq_protocol::{messages as m, ErrorCode};

const TOPIC: &str = "hostile";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn produce(c: &mut RawClient, records: Bytes) -> m::ProducePartitionResult {
    let response = c.call(&m::ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: TOPIC.into(),
            partition: 0,
            records,
        }],
        transactional_id: String::new(),
    });
    assert!(response.error.is_none(), "{:?}", response.error);
    response.partitions.into_iter().next().expect("one result")
}

fn log_end(c: &mut RawClient) -> i64 {
    let response = c.call(&m::ListOffsetsRequest {
        partitions: vec![m::ListOffsetsPartition {
            topic: TOPIC.into(),
            partition: 0,
            timestamp: -1,
        }],
        isolation_level: 0,
    });
    let p = &response.partitions[0];
    assert!(p.error.is_none(), "{:?}", p.error);
    p.offset
}

/// Every value in the partition, in offset order, checking offsets are contiguous from 0.
fn read_all(c: &mut RawClient) -> Vec<String> {
    let response = c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: TOPIC.into(),
            partition: 0,
            offset: 0,
            partition_bytes_max: 1 << 20,
            ..Default::default()
        }],
        ..Default::default()
    });
    let p = &response.partitions[0];
    assert!(p.error.is_none(), "{:?}", p.error);
    let mut values = Vec::new();
    for batch in BatchIter::new(p.records.clone()) {
        for record in batch.unwrap().records(1 << 20).unwrap() {
            assert_eq!(record.offset, values.len() as i64, "contiguous offsets");
            values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
        }
    }
    values
}

/// One valid record, with the given producer fields.
fn valid(value: &str, producer: (i64, i16, i32)) -> CraftedBatch {
    let mut b = CraftedBatch::honest(now_ms(), &[value.as_bytes()]);
    (b.producer_id, b.producer_epoch, b.base_sequence) = producer;
    b
}

struct Case {
    name: &'static str,
    batch: Bytes,
    code: ErrorCode,
}

fn hostile_cases(allocated_id: i64) -> Vec<Case> {
    let none = (-1, -1, -1);
    let three = || CraftedBatch::honest(now_ms(), &[b"a", b"b", b"c"]);
    let with = |f: &dyn Fn(&mut CraftedBatch)| {
        let mut b = three();
        f(&mut b);
        b.encode()
    };
    let mut cases = vec![
        Case {
            name: "count 0 with lastOffsetDelta 2^31-1 (the case from the field)",
            batch: {
                let mut b = CraftedBatch::honest(now_ms(), &[]);
                b.last_offset_delta = i32::MAX;
                b.encode()
            },
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "count disagrees with the records",
            batch: with(&|b| {
                b.record_count = 2;
                b.last_offset_delta = 1;
            }),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "lastOffsetDelta disagrees with the count",
            batch: with(&|b| b.last_offset_delta = 1_000_000),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "offset deltas out of order",
            batch: with(&|b| b.records.swap(0, 2)),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "wrong magic",
            batch: with(&|b| b.magic = BATCH_MAGIC - 1),
            code: ErrorCode::CORRUPT_MESSAGE,
        },
        Case {
            name: "unknown compression codec",
            batch: with(&|b| b.attributes = 6),
            code: ErrorCode::UNSUPPORTED_COMPRESSION,
        },
        Case {
            name: "control bit",
            batch: with(&|b| b.attributes = ATTR_CONTROL),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "transactional bit without idempotence",
            batch: with(&|b| b.attributes = ATTR_TRANSACTIONAL),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "log-append-time bit from a producer",
            batch: with(&|b| b.attributes = ATTR_LOG_APPEND_TIME),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "unknown attribute bit",
            batch: with(&|b| b.attributes = 1 << 9),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "max timestamp that is not the records' largest",
            batch: with(&|b| b.max_timestamp = i64::MAX),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "timestamp a day ahead of the broker's clock",
            batch: valid("future", none)
                .tap(|b| {
                    b.base_timestamp += 86_400_000;
                    b.max_timestamp += 86_400_000;
                })
                .encode(),
            code: ErrorCode::INVALID_TIMESTAMP,
        },
        Case {
            name: "producer id never handed out",
            batch: valid("x", (i64::MAX - 1, 0, 0)).encode(),
            code: ErrorCode::UNKNOWN_PRODUCER_ID,
        },
        Case {
            name: "sequence overflow (negative base sequence)",
            batch: valid("x", (allocated_id, 0, i32::MIN)).encode(),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "producer fields half set",
            batch: valid("x", (allocated_id, -1, 0)).encode(),
            code: ErrorCode::INVALID_RECORD,
        },
        Case {
            name: "a producer with no state here starting past sequence 0",
            batch: valid("x", (allocated_id, 0, 5)).encode(),
            code: ErrorCode::UNKNOWN_PRODUCER_ID,
        },
        Case {
            name: "two batches in one partition entry",
            batch: [valid("x", none).encode(), valid("y", none).encode()]
                .concat()
                .into(),
            code: ErrorCode::INVALID_RECORD,
        },
    ];
    // The field report needed 68 of these to break the log; send many more.
    for _ in 0..3 {
        cases.push(Case {
            name: "count 0 again",
            batch: {
                let mut b = CraftedBatch::honest(now_ms(), &[]);
                b.last_offset_delta = i32::MAX;
                b.encode()
            },
            code: ErrorCode::INVALID_RECORD,
        });
    }
    cases
}

trait Tap: Sized {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
impl Tap for CraftedBatch {}

fn allocate_producer_id(c: &mut RawClient) -> i64 {
    let response = c.call(&m::InitProducerIdRequest {
        transactional_id: String::new(),
        producer_id: -1,
        producer_epoch: -1,
        transaction_timeout_ms: 0,
    });
    assert!(response.error.is_none(), "{:?}", response.error);
    response.producer_id
}

/// Sends every hostile case, each followed by a valid batch; returns the values written.
fn attack(c: &mut RawClient, round: &str) -> Vec<String> {
    let producer = allocate_producer_id(c);
    let mut written = Vec::new();
    for (i, case) in hostile_cases(producer).into_iter().enumerate() {
        let before = log_end(c);
        let result = produce(c, case.batch);
        let error = result
            .error
            .unwrap_or_else(|| panic!("{} accepted", case.name));
        assert_eq!(
            error.code,
            u32::from(case.code.code()),
            "{}: {}",
            case.name,
            error.message
        );
        assert!(
            !error.message.is_empty(),
            "{}: a message says why",
            case.name
        );
        assert_eq!(
            log_end(c),
            before,
            "{}: the partition is unchanged",
            case.name
        );
        let value = format!("{round}-{i}");
        let ok = produce(c, valid(&value, (-1, -1, -1)).encode());
        assert!(ok.error.is_none(), "after {}: {:?}", case.name, ok.error);
        assert_eq!(
            ok.base_offset, before,
            "after {}: the next offset",
            case.name
        );
        written.push(value);
    }
    // An idempotent producer still works from sequence 0 after all that.
    for seq in 0..3 {
        let value = format!("{round}-idempotent-{seq}");
        let ok = produce(c, valid(&value, (producer, 0, seq)).encode());
        assert!(ok.error.is_none(), "{:?}", ok.error);
        written.push(value);
    }
    written
}

#[test]
fn lying_batches_are_refused_and_the_partition_and_restarts_stay_healthy() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    let created = c.call(&m::CreateTopicRequest {
        name: TOPIC.into(),
        config: None,
        validate_only: false,
    });
    assert!(created.error.is_none(), "{:?}", created.error);
    let mut expected = attack(&mut c, "first");
    assert_eq!(read_all(&mut c), expected);

    // A clean restart, then another round, then a SIGKILL and a restart.
    assert!(server.terminate().success());
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert_eq!(read_all(&mut c), expected, "after a clean restart");
    expected.extend(attack(&mut c, "second"));
    server.kill9();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert_eq!(read_all(&mut c), expected, "after SIGKILL");
    let ok = produce(&mut c, valid("last", (-1, -1, -1)).encode());
    assert_eq!(ok.base_offset, expected.len() as i64, "{:?}", ok.error);
}

/// Sends `batch` as a half of group `hostile` for the topic; the answer's error, if any, and
/// the half's id.
fn half_send(c: &mut RawClient, batch: Bytes) -> (Option<m::Error>, i64) {
    let response = c.call(&m::HalfSendRequest {
        group: "hostile".into(),
        topic: TOPIC.into(),
        partition: 0,
        records: batch,
        check_after_ms: 3_600_000,
        timeout_ms: 10_000,
        request_id: String::new(),
    });
    (response.error, response.half_id)
}

#[test]
fn lying_batches_sent_as_half_messages_are_refused_or_never_appended() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    let created = c.call(&m::CreateTopicRequest {
        name: TOPIC.into(),
        config: None,
        validate_only: false,
    });
    assert!(created.error.is_none(), "{:?}", created.error);
    let found = c.call(&m::FindCoordinatorRequest {
        group_id: "hostile".into(),
        key_type: 2,
    });
    assert!(found.error.is_none(), "{:?}", found.error);
    let producer = allocate_producer_id(&mut c);
    let mut expected = Vec::new();
    for case in hostile_cases(producer) {
        // The coordinator may still be opening or loading its partition right after it was
        // created (a client retries these).
        let mut attempts = 0;
        let (error, id) = loop {
            attempts += 1;
            assert!(
                attempts < 400,
                "{}: the coordinator never came up",
                case.name
            );
            let (error, id) = half_send(&mut c, case.batch.clone());
            match &error {
                Some(e)
                    if matches!(
                        e.error_code(),
                        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS | ErrorCode::NOT_COORDINATOR
                    ) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                _ => break (error, id),
            }
        };
        match error {
            Some(e) => {
                assert_eq!(
                    e.code,
                    u32::from(case.code.code()),
                    "{}: {}",
                    case.name,
                    e.message
                );
                assert!(!e.message.is_empty(), "{}", case.name);
            }
            None => {
                // Only what the partition checks at append time (timestamps, producer ids,
                // which a half's append replaces) passes the store; the commit then either
                // appends or rolls the half back, saying why.
                assert!(
                    matches!(
                        case.code,
                        ErrorCode::INVALID_TIMESTAMP | ErrorCode::UNKNOWN_PRODUCER_ID
                    ),
                    "{} stored as a half",
                    case.name
                );
                let end = c.call(&m::HalfEndRequest {
                    group: "hostile".into(),
                    half_id: id,
                    topic: TOPIC.into(),
                    commit: true,
                    checked: false,
                });
                // A timestamp the topic refuses is refused at the append, which rolls the
                // half back; new producer fields replace the lying ones.
                let refused_at_append = case.code == ErrorCode::INVALID_TIMESTAMP;
                assert_eq!(
                    end.error.is_some(),
                    refused_at_append,
                    "{}: {:?}",
                    case.name,
                    end.error
                );
                match end.error {
                    None => {
                        let batch = tinymq_protocol::batch::RecordBatch::parse(case.batch.clone());
                        expected.push(batch.unwrap().record_count() as usize);
                    }
                    Some(e) => {
                        assert_eq!(
                            e.error_code(),
                            ErrorCode::HALF_MESSAGE_RESOLVED,
                            "{}: {}",
                            case.name,
                            e.message
                        );
                        assert!(
                            e.message.contains("refused by"),
                            "{}: {}",
                            case.name,
                            e.message
                        );
                    }
                }
            }
        }
    }
    // The partition holds the records of exactly the commits that succeeded, and takes more.
    assert!(!expected.is_empty(), "no hostile case was committed");
    assert_eq!(read_all(&mut c).len(), expected.iter().sum::<usize>());
    let ok = produce(&mut c, valid("after", (-1, -1, -1)).encode());
    assert!(ok.error.is_none(), "{:?}", ok.error);
    let listed = c.call(&m::HalfListRequest::default());
    assert!(listed.halves.is_empty(), "{:?}", listed.halves);
    // A HalfSend retried with its request id is answered with the half the first stored.
    let send = |c: &mut RawClient| {
        c.call(&m::HalfSendRequest {
            group: "hostile".into(),
            topic: TOPIC.into(),
            partition: 0,
            records: valid("retried", (-1, -1, -1)).encode(),
            check_after_ms: 3_600_000,
            timeout_ms: 0,
            request_id: "attempt-of-one-send".into(),
        })
    };
    let (first, again) = (send(&mut c), send(&mut c));
    assert!(
        first.error.is_none() && again.error.is_none(),
        "{first:?} {again:?}"
    );
    assert_eq!(first.half_id, again.half_id);
    assert_eq!(c.call(&m::HalfListRequest::default()).halves.len(), 1);
}
