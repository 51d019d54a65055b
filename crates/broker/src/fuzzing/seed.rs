//! Seeds for the request-path fuzz target: named scenarios, and the bytes `arbitrary` reads
//! back as each of them (the corpus files under `fuzz/corpus/request_path/`).

use super::{OffsetPick, Op, Produce, Scenario};

/// The bytes that `arbitrary` turns back into `scenario` (as the fuzz target reads its
/// input): how committed seeds are written. Integers little-endian, `bool` one byte, `Option`
/// a flag byte then the value, a `Vec` a 1 byte before each element and a 0 after the last,
/// an enum variant a `u32` that `arbitrary` maps to its index (`(v × count) >> 32`).
pub fn seed_bytes(scenario: &Scenario) -> Vec<u8> {
    let mut out = vec![scenario.segment_kib, scenario.flush];
    for op in &scenario.ops {
        out.push(1);
        seed_op(&mut out, op);
    }
    out.push(0);
    out
}

fn variant(out: &mut Vec<u8>, index: u64, count: u64) {
    let v = (index << 32).div_ceil(count);
    out.extend_from_slice(&(v as u32).to_le_bytes());
}

fn bytes_vec(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.extend_from_slice(&[1, *b]);
    }
    out.push(0);
}

fn seed_op(out: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Produce(p) => {
            variant(out, 0, 8);
            seed_produce(out, p);
        }
        Op::Retry(i) => {
            variant(out, 1, 8);
            out.push(*i);
        }
        Op::Fetch { offset, bytes_max } => {
            variant(out, 2, 8);
            match offset {
                OffsetPick::Start => variant(out, 0, 3),
                OffsetPick::End => variant(out, 1, 3),
                OffsetPick::Exact(o) => {
                    variant(out, 2, 3);
                    out.extend_from_slice(&o.to_le_bytes());
                }
            }
            out.extend_from_slice(&bytes_max.to_le_bytes());
        }
        Op::ListOffsets(ts) => {
            variant(out, 3, 8);
            out.extend_from_slice(&ts.to_le_bytes());
        }
        Op::InitProducerId => variant(out, 4, 8),
        Op::Reopen { clean } => {
            variant(out, 5, 8);
            out.push(u8::from(*clean));
        }
        Op::Damage { file, at, bytes } => {
            variant(out, 6, 8);
            out.push(*file);
            out.extend_from_slice(&at.to_le_bytes());
            bytes_vec(out, bytes);
        }
        Op::Tear { file, bytes } => {
            variant(out, 7, 8);
            out.push(*file);
            out.extend_from_slice(&bytes.to_le_bytes());
        }
    }
}

fn seed_produce(out: &mut Vec<u8>, produce: &Produce) {
    match produce {
        Produce::Honest {
            values,
            compression,
            producer,
        } => {
            variant(out, 0, 3);
            for v in values {
                out.push(1);
                bytes_vec(out, v);
            }
            out.push(0);
            out.push(*compression);
            match producer {
                None => out.push(0),
                Some(p) => out.extend_from_slice(&[1, *p]),
            }
        }
        Produce::Crafted {
            magic,
            attributes,
            last_offset_delta,
            timestamp_offset_ms,
            max_timestamp_offset_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
            records,
        } => {
            variant(out, 1, 3);
            out.extend_from_slice(&magic.to_le_bytes());
            out.extend_from_slice(&attributes.to_le_bytes());
            out.extend_from_slice(&last_offset_delta.to_le_bytes());
            out.extend_from_slice(&timestamp_offset_ms.to_le_bytes());
            out.extend_from_slice(&max_timestamp_offset_ms.to_le_bytes());
            out.extend_from_slice(&producer_id.to_le_bytes());
            out.extend_from_slice(&producer_epoch.to_le_bytes());
            out.extend_from_slice(&base_sequence.to_le_bytes());
            out.extend_from_slice(&record_count.to_le_bytes());
            for (offset_delta, timestamp_delta, value) in records {
                out.push(1);
                out.extend_from_slice(&offset_delta.to_le_bytes());
                out.extend_from_slice(&timestamp_delta.to_le_bytes());
                bytes_vec(out, value);
            }
            out.push(0);
        }
        Produce::Raw(bytes) => {
            variant(out, 2, 3);
            bytes_vec(out, bytes);
        }
    }
}

/// Named scenarios committed as seeds (`fuzz/corpus/request_path/`), written by
/// `cargo run -p tinymq-broker --example write_request_path_seeds`.
pub fn seeds() -> Vec<(&'static str, Scenario)> {
    let honest = |values: &[&[u8]], compression: u8, producer: Option<u8>| {
        Op::Produce(Produce::Honest {
            values: values.iter().map(|v| v.to_vec()).collect(),
            compression,
            producer,
        })
    };
    let crafted = |last_offset_delta: i32, record_count: i32, records: usize, attributes: i16| {
        Op::Produce(Produce::Crafted {
            magic: 2,
            attributes,
            last_offset_delta,
            timestamp_offset_ms: 0,
            max_timestamp_offset_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count,
            records: (0..records as i32).map(|i| (i, 0, vec![b'r'; 8])).collect(),
        })
    };
    let scenario = |segment_kib: u8, flush: u8, ops: Vec<Op>| Scenario {
        segment_kib,
        flush,
        ops,
    };
    // The field report: count 0 and lastOffsetDelta 2^31-1, 70 times, then a restart.
    let mut field_case: Vec<Op> = (0..70).map(|_| crafted(i32::MAX, 0, 0, 0)).collect();
    field_case.push(honest(&[b"after"], 0, None));
    field_case.push(Op::Reopen { clean: false });
    let rolls: Vec<Op> = (0..40)
        .map(|i| honest(&[&[b'v'; 300][..], &[i; 200][..]], i % 3, None))
        .chain([
            Op::Reopen { clean: false },
            Op::Fetch {
                offset: OffsetPick::Start,
                bytes_max: 5000,
            },
        ])
        .collect();
    vec![
        ("field_case_count_0", scenario(64, 1, field_case)),
        (
            "idempotent_retries_and_reopens",
            scenario(
                4,
                0,
                vec![
                    Op::InitProducerId,
                    honest(&[b"a", b"b"], 0, Some(0)),
                    honest(&[b"c"], 1, Some(0)),
                    Op::Retry(1),
                    Op::Reopen { clean: false },
                    Op::Retry(1),
                    Op::Retry(0),
                    honest(&[b"d"], 2, Some(0)),
                    Op::Reopen { clean: true },
                    Op::Retry(3),
                    Op::Fetch {
                        offset: OffsetPick::Exact(1),
                        bytes_max: 100,
                    },
                    Op::ListOffsets(0),
                    Op::ListOffsets(-2),
                ],
            ),
        ),
        ("small_segments_roll", scenario(1, 2, rolls)),
        (
            "damage_and_tear",
            scenario(
                2,
                1,
                vec![
                    honest(&[&[b'x'; 700][..]], 0, None),
                    honest(&[&[b'y'; 700][..]], 0, None),
                    honest(&[&[b'z'; 700][..]], 0, None),
                    Op::Damage {
                        file: 0,
                        at: 100,
                        bytes: vec![0xFF; 16],
                    },
                    honest(&[b"w"], 0, None),
                    Op::Tear { file: 3, bytes: 30 },
                    Op::Damage {
                        file: 1,
                        at: 0,
                        bytes: vec![0; 8],
                    },
                    Op::Fetch {
                        offset: OffsetPick::Start,
                        bytes_max: 4000,
                    },
                ],
            ),
        ),
        (
            "lying_headers",
            scenario(
                16,
                1,
                vec![
                    crafted(5, 3, 3, 0),
                    crafted(2, 2, 3, 0),
                    crafted(2, 3, 3, 1 << 5),
                    crafted(2, 3, 3, 1 << 4),
                    crafted(2, 3, 3, 7),
                    crafted(-1, -1, 0, 0),
                    Op::Produce(Produce::Raw(vec![0; 61])),
                    crafted(2, 3, 3, 0),
                ],
            ),
        ),
    ]
}
