//! The log against hostile data: batches whose headers claim huge offset deltas, segment files
//! crafted by hand (offsets outside a segment's range or past `i64::MAX`, lengths past the
//! end, offsets going backwards, garbage indexes, a file past 4 GiB), and a reader that must
//! not wait for a roll's fsync. Whatever comes in, nothing panics, every valid write is
//! accepted, and the log opens again.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tinymq_protocol::batch::{
    compute_crc, field, stamp_base_offset, BatchIter, RecordBatch, BATCH_HEADER_BYTES,
};
use tinymq_protocol::ErrorCode;

use crate::fault::FaultyStorage;
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::tests::{all_values, batch, dir, expected_values, open, small_segments, T0};
use crate::{FlushPolicy, LogConfig, LogError, PartitionLog, Storage};

const OFFSETS_PER_SEGMENT: i64 = 1 << 32;

/// Recomputes a batch's CRC after its header was patched.
fn reseal(b: &mut [u8]) {
    let crc = compute_crc(b);
    b[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// `batch(id, 1, T0)` with its last offset delta set to `delta` (CRC recomputed): one record
/// that claims `delta + 1` offsets.
fn with_delta(id: u32, delta: i32) -> BytesMut {
    let mut b = batch(id, 1, T0);
    b[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4].copy_from_slice(&delta.to_be_bytes());
    reseal(&mut b);
    b
}

/// The batch of issue 10: a bare 61-byte header (no records, recordCount 0) claiming
/// `delta + 1` offsets, with a valid CRC.
fn bare_header(base_offset: i64, delta: i32) -> Vec<u8> {
    let mut b = vec![0u8; BATCH_HEADER_BYTES];
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(field::BASE_OFFSET, &base_offset.to_be_bytes());
    put(
        field::BATCH_LENGTH,
        &((BATCH_HEADER_BYTES - 12) as i32).to_be_bytes(),
    );
    put(field::MAGIC, &[2]);
    put(field::LAST_OFFSET_DELTA, &delta.to_be_bytes());
    put(field::BASE_TIMESTAMP, &T0.to_be_bytes());
    put(field::MAX_TIMESTAMP, &T0.to_be_bytes());
    put(field::PRODUCER_ID, &(-1i64).to_be_bytes());
    put(field::PRODUCER_EPOCH, &(-1i16).to_be_bytes());
    put(field::BASE_SEQUENCE, &(-1i32).to_be_bytes());
    reseal(&mut b);
    b
}

/// `batch(id, 2, T0)` as the log would store it at `base_offset`.
fn stored(id: u32, base_offset: i64) -> BytesMut {
    let mut b = batch(id, 2, T0);
    stamp_base_offset(&mut b, base_offset);
    b
}

/// Every batch in the log as (base offset, last offset, record values), walked by each
/// batch's next offset (a batch may claim more offsets than it has records).
fn batches_in(log: &PartitionLog) -> Vec<(i64, i64, Vec<String>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        assert!(!read.records.is_empty(), "read at {offset} returns data");
        for b in BatchIter::new(read.records) {
            let b = b.unwrap();
            if b.last_offset() >= offset {
                out.push((b.base_offset(), b.last_offset(), values_of(&b)));
            }
            offset = b.next_offset();
        }
    }
    out
}

/// The record values of a batch whose last offset delta may overstate its records (the
/// protocol's decoder refuses those, so the delta is put right on a copy first).
fn values_of(b: &RecordBatch) -> Vec<String> {
    let mut bytes = b.as_bytes().to_vec();
    let delta = b.record_count().max(1) - 1;
    bytes[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&delta.to_be_bytes());
    reseal(&mut bytes);
    RecordBatch::parse(Bytes::from(bytes))
        .unwrap()
        .records(1 << 20)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect()
}

/// Writes `bytes` as the `.log` file of segment `base` (fsynced, directory too).
fn write_segment(fs: &FaultyStorage, base: i64, bytes: &[u8]) {
    fs.create_dir_all(&dir()).unwrap();
    let file = fs
        .open(&segment_path(&dir(), base, LOG_SUFFIX), true)
        .unwrap();
    file.set_len(0).unwrap();
    file.write_all_at(bytes, 0).unwrap();
    file.sync_data().unwrap();
    fs.sync_dir(&dir()).unwrap();
}

#[test]
fn huge_offset_deltas_roll_segments_and_every_append_succeeds() {
    let fs = FaultyStorage::new();
    // An index entry for every batch: the path that panicked in issue 10.
    let config = LogConfig {
        index_interval_bytes: 1,
        ..LogConfig::default()
    };
    let (log, _) = open(&fs, config.clone());
    let mut expected = Vec::new();
    for id in 0..12u32 {
        let delta = if id % 3 == 2 { 0 } else { i32::MAX };
        let info = log.append(&mut with_delta(id, delta), 0).unwrap();
        assert_eq!(info.last_offset - info.base_offset, i64::from(delta));
        expected.push((
            info.base_offset,
            info.last_offset,
            expected_values([(id, 1)]),
        ));
    }
    assert!(log.log_end_offset() > 3 * OFFSETS_PER_SEGMENT);
    assert!(log.segment_count() >= 4, "{} segments", log.segment_count());

    // Two such batches in one write take exactly 2^32 offsets: a fresh segment holds them.
    let mut two = with_delta(100, i32::MAX);
    two.extend_from_slice(&with_delta(101, i32::MAX));
    let info = log.append(&mut two, 0).unwrap();
    assert_eq!(info.log_end_offset - info.base_offset, OFFSETS_PER_SEGMENT);
    let middle = info.base_offset + i64::from(i32::MAX);
    expected.push((info.base_offset, middle, expected_values([(100, 1)])));
    expected.push((middle + 1, info.last_offset, expected_values([(101, 1)])));

    // Three take more than any segment can address: refused, nothing changes.
    let end = log.log_end_offset();
    let mut three = two.clone();
    three.extend_from_slice(&with_delta(102, i32::MAX));
    let err = log.append(&mut three, 0).unwrap_err();
    assert!(matches!(err, LogError::OffsetSpanTooLarge { .. }), "{err}");
    assert_eq!(err.error_code(), ErrorCode::INVALID_RECORD);
    assert_eq!(log.log_end_offset(), end);

    // A plain batch still goes in right after.
    let info = log.append(&mut batch(200, 2, T0), 0).unwrap();
    assert_eq!(info.base_offset, end);
    expected.push((end, end + 1, expected_values([(200, 2)])));
    assert_eq!(batches_in(&log), expected);

    drop(log);
    let (log, report) = open(&fs, config);
    assert_eq!(report.truncations, vec![]);
    assert_eq!(
        report.indexes_rebuilt, 0,
        "rolled segments' indexes are valid"
    );
    assert_eq!(batches_in(&log), expected);
    assert_eq!(
        log.append(&mut batch(201, 1, T0), 0).unwrap().base_offset,
        end + 2
    );
}

#[test]
fn the_bare_headers_of_issue_10_are_stored_and_the_log_reopens() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    for _ in 0..200 {
        log.append(&mut bare_header(0, i32::MAX), 0).unwrap();
    }
    let end = 200 * (1i64 << 31);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.segment_count(), 100, "two such batches per segment");
    drop(log);

    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(log.log_end_offset(), end);
    let info = log.append(&mut batch(1, 3, T0), 0).unwrap();
    assert_eq!(info.base_offset, end);
    let read = log.read(end, 1 << 20, None).unwrap();
    let got: Vec<_> = BatchIter::new(read.records).map(Result::unwrap).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].base_offset(), end);
}

#[test]
fn a_segment_left_by_issue_10_opens_with_the_batches_past_its_range_cut() {
    // What a broker before the fix left on disk: 68 bare headers in segment 0, claiming
    // offsets far past the 2^32 its indexes can encode. Its restart used to panic.
    let fs = FaultyStorage::new();
    let file: Vec<u8> = (0..68)
        .flat_map(|k| bare_header(k * (1i64 << 31), i32::MAX))
        .collect();
    write_segment(&fs, 0, &file);

    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.truncations.len(), 1, "{report:?}");
    let cut = &report.truncations[0];
    assert_eq!(cut.position, 2 * BATCH_HEADER_BYTES as u64);
    assert_eq!(cut.bytes_cut, 66 * BATCH_HEADER_BYTES as u64);
    assert!(
        cut.reason.contains("outside segment 0's range"),
        "{}",
        cut.reason
    );
    assert_eq!(log.log_end_offset(), OFFSETS_PER_SEGMENT);
    // The next append rolls to a new segment rather than failing.
    let info = log.append(&mut batch(7, 2, T0), 0).unwrap();
    assert_eq!(info.base_offset, OFFSETS_PER_SEGMENT);
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn crafted_batches_are_cut_where_they_start_and_the_log_goes_on() {
    let mutate = |f: fn(&mut BytesMut)| {
        let mut b = stored(9, 4);
        f(&mut b);
        b
    };
    let cases: Vec<(&str, BytesMut, &str)> = vec![
        (
            "offsets past the segment's range",
            stored(9, 5_000_000_000),
            "outside segment 0's range",
        ),
        (
            "base + delta past i64::MAX",
            {
                let mut b = with_delta(9, 5);
                stamp_base_offset(&mut b, i64::MAX - 1);
                b
            },
            "pass the largest offset",
        ),
        (
            "offsets going backwards",
            stored(9, 1),
            "below the expected 4",
        ),
        (
            "a length past the end of the file",
            mutate(|b| b[field::BATCH_LENGTH..][..4].copy_from_slice(&i32::MAX.to_be_bytes())),
            "past the end",
        ),
        (
            "a negative length",
            mutate(|b| b[field::BATCH_LENGTH..][..4].copy_from_slice(&(-5i32).to_be_bytes())),
            "below the header size",
        ),
        (
            "a negative offset delta",
            mutate(|b| {
                b[field::LAST_OFFSET_DELTA..][..4].copy_from_slice(&(-3i32).to_be_bytes());
                reseal(b);
            }),
            "negative",
        ),
        (
            "a CRC mismatch",
            mutate(|b| {
                let last = b.len() - 1;
                b[last] ^= 0x40;
            }),
            "CRC mismatch",
        ),
        ("a wrong magic", mutate(|b| b[field::MAGIC] = 7), "magic"),
    ];
    for (case, bad, reason) in cases {
        let fs = FaultyStorage::new();
        let mut file = stored(0, 0).to_vec();
        file.extend_from_slice(&stored(1, 2));
        let good_bytes = file.len() as u64;
        file.extend_from_slice(&bad);
        file.extend_from_slice(&stored(2, 6)); // after the bad batch: lost with it
        write_segment(&fs, 0, &file);

        let (log, report) = open(&fs, LogConfig::default());
        assert_eq!(report.truncations.len(), 1, "{case}: {report:?}");
        let cut = &report.truncations[0];
        assert_eq!(cut.position, good_bytes, "{case}");
        assert!(cut.reason.contains(reason), "{case}: {}", cut.reason);
        assert_eq!(log.log_end_offset(), 4, "{case}");
        assert_eq!(
            all_values(&log),
            expected_values([(0, 2), (1, 2)]),
            "{case}"
        );
        assert_eq!(
            log.append(&mut batch(3, 1, T0), 0).unwrap().base_offset,
            4,
            "{case}"
        );
    }
}

#[test]
fn a_segment_named_below_the_end_of_the_one_before_is_deleted() {
    let fs = FaultyStorage::new();
    let mut first = stored(0, 0).to_vec();
    first.extend_from_slice(&stored(1, 2));
    write_segment(&fs, 0, &first);
    // Offsets 2 and 3 again, in a segment named 2: offsets would go backwards.
    write_segment(&fs, 2, &stored(5, 2));
    write_segment(&fs, 9, &stored(6, 9));

    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.segments_deleted, vec![2, 9]);
    assert_eq!(report.truncations.len(), 1);
    assert!(report.truncations[0].reason.contains("starts below"));
    assert_eq!(log.segment_count(), 1);
    assert_eq!(all_values(&log), expected_values([(0, 2), (1, 2)]));
    assert_eq!(log.append(&mut batch(3, 1, T0), 0).unwrap().base_offset, 4);
}

#[test]
fn the_last_offsets_of_i64_are_usable_and_exhaustion_is_an_error() {
    let fs = FaultyStorage::new();
    let base = i64::MAX - 10;
    write_segment(&fs, base, &[]);
    let (log, _) = open(&fs, LogConfig::default());
    assert_eq!(log.log_end_offset(), base);
    let info = log.append(&mut with_delta(0, 8), 0).unwrap();
    assert_eq!(info.last_offset, i64::MAX - 2);
    let info = log.append(&mut batch(1, 1, T0), 0).unwrap();
    assert_eq!(info.log_end_offset, i64::MAX, "the largest end offset");
    let err = log.append(&mut batch(2, 1, T0), 0).unwrap_err();
    assert!(matches!(err, LogError::OffsetsExhausted { .. }), "{err}");
    assert_eq!(err.error_code(), ErrorCode::STORAGE_ERROR);
    // Reads at and around the end work.
    assert!(log
        .read(i64::MAX, 1 << 20, None)
        .unwrap()
        .records
        .is_empty());
    assert_eq!(batches_in(&log).len(), 2);
    assert!(log.truncate_to(-1).is_err(), "no negative offsets");
    drop(log);

    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(log.log_end_offset(), i64::MAX);
}

#[test]
fn garbage_index_files_are_rebuilt() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..150 {
        log.append(&mut batch(id, 5, T0 + i64::from(id)), 0)
            .unwrap();
    }
    log.close().unwrap();
    drop(log);
    let bases: Vec<i64> = fs
        .list(&dir())
        .unwrap()
        .iter()
        .filter_map(|p| crate::segment::parse_segment_path(p, LOG_SUFFIX))
        .collect();
    assert!(bases.len() >= 5, "four rolled segments to spoil");
    let overwrite = |base: i64, suffix: &str, bytes: &[u8]| {
        let file = fs.open(&segment_path(&dir(), base, suffix), false).unwrap();
        file.set_len(0).unwrap();
        file.write_all_at(bytes, 0).unwrap();
        file.sync_data().unwrap();
    };
    let entry =
        |relative: u32, position: u32| [relative.to_be_bytes(), position.to_be_bytes()].concat();
    // Entries out of order.
    overwrite(
        bases[0],
        INDEX_SUFFIX,
        &[entry(9, 900), entry(3, 300)].concat(),
    );
    // In order, but pointing into the middle of batches.
    overwrite(bases[1], INDEX_SUFFIX, &[entry(1, 7), entry(2, 9)].concat());
    // Far more entries than the log has batches (a garbage length must not size memory).
    overwrite(bases[2], INDEX_SUFFIX, &vec![0xEE; 8 * 4096]);
    // A time index naming an offset past the segment's end.
    let time_entry = [T0.to_be_bytes().to_vec(), u32::MAX.to_be_bytes().to_vec()].concat();
    overwrite(bases[3], TIME_INDEX_SUFFIX, &time_entry);

    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.indexes_rebuilt, 4, "{report:?}");
    assert_eq!(report.truncations, vec![]);
    assert_eq!(all_values(&log), expected_values((0..150).map(|i| (i, 5))));
    // Batch 46 holds T0+46..=T0+50; its last record is the first at T0+50.
    assert_eq!(
        log.offset_for_timestamp(T0 + 50).unwrap(),
        Some((234, T0 + 50))
    );
}

#[test]
fn a_segment_file_past_4_gib_opens_with_the_garbage_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t-0");
    let (log, _) = PartitionLog::open(&path, LogConfig::default()).unwrap();
    for id in 0..3 {
        log.append(&mut batch(id, 2, T0), 0).unwrap();
    }
    let size = log.size_bytes();
    drop(log);
    // A sparse file: 5 GiB of which only the first batches hold data.
    let log_path = segment_path(&path, 0, LOG_SUFFIX);
    let huge = 5u64 << 30;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log_path)
        .unwrap()
        .set_len(huge)
        .unwrap();

    let (log, report) = PartitionLog::open(&path, LogConfig::default()).unwrap();
    assert_eq!(report.truncations.len(), 1);
    assert_eq!(report.truncations[0].position, size);
    assert_eq!(report.bytes_cut(), huge - size);
    assert_eq!(std::fs::metadata(&log_path).unwrap().len(), size);
    assert_eq!(all_values(&log), expected_values([(0, 2), (1, 2), (2, 2)]));
    assert_eq!(log.append(&mut batch(3, 1, T0), 0).unwrap().base_offset, 6);
}

#[test]
fn a_read_proceeds_while_a_roll_waits_for_its_fsync() {
    let fs = FaultyStorage::new();
    // Under `os` the only fsyncs are the roll's, so a held fsync is the roll's.
    let config = LogConfig {
        flush: FlushPolicy::Os,
        ..small_segments()
    };
    let (log, _) = open(&fs, config.clone());
    let log = Arc::new(log);
    let one = batch(0, 5, T0).len() as u64;
    let mut id = 0;
    while log.size_bytes() + one <= config.segment_bytes {
        log.append(&mut batch(id, 5, T0), 0).unwrap();
        id += 1;
    }
    assert_eq!(log.segment_count(), 1);
    let end = log.log_end_offset();

    fs.hold_syncs();
    let appender = {
        let log = log.clone();
        std::thread::spawn(move || log.append(&mut batch(id, 5, T0), 0))
    };
    assert!(
        fs.wait_for_held_sync(Duration::from_secs(60)),
        "the append rolls and fsyncs the old segment"
    );
    // The roll is stuck in its fsync. A fetch must not wait for it.
    let (tx, rx) = mpsc::channel();
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let read = log.read(0, 1 << 20, None).map(|r| r.records);
            let _ = tx.send((read, all_values(&log), log.segment_count()));
        })
    };
    let (read, values, segments) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the read is not blocked behind the roll's fsync");
    assert!(!read.unwrap().is_empty());
    assert_eq!(values, expected_values((0..id).map(|i| (i, 5))));
    assert_eq!(
        segments, 1,
        "the new segment is not in the map before the fsync ends"
    );
    assert!(
        !appender.is_finished(),
        "the roll is still waiting for its fsync"
    );

    fs.release_syncs();
    reader.join().unwrap();
    let info = appender.join().unwrap().unwrap();
    assert_eq!(info.base_offset, end);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.durable_offset(), end, "the rolled segment is durable");
    assert_eq!(all_values(&log), expected_values((0..=id).map(|i| (i, 5))));
}

#[test]
fn the_crafted_batches_pass_the_protocol_checks() {
    // The crafted batches above are real batches, not garbage the CRC check would catch.
    for b in [
        Bytes::from(bare_header(0, i32::MAX)),
        with_delta(0, i32::MAX).freeze(),
    ] {
        let parsed = RecordBatch::parse(b).unwrap();
        assert_eq!(parsed.last_offset_delta(), i32::MAX);
    }
}
