//! A fetch's records, and its response frame as parts for the front end's writer: the
//! protobuf around each partition's records is encoded by hand (tags and lengths are known
//! before the records are read), so the records themselves go out as they are — a range of
//! the segment file sent from the page cache with `sendfile`, or the buffer they were read
//! into — and never through an encoder's copy. The bytes on the wire are exactly what prost
//! would encode for the same `FetchResponse` (fields in tag order, defaults omitted); a test
//! compares the two.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_varint, encoded_len_varint};
use prost::Message;
use tinymq_log::FileSlice;
use tinymq_net::{FileRange, FileSource, Part};
use tinymq_protocol::frame::FrameHeader;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::partition::Partition;

/// Record ranges at least this long are sent with `sendfile` when their pages are in the page
/// cache; shorter ones are copied out with one `pread` and written from that buffer, which
/// costs less than the page-cache check, the `sendfile` and the held-back last byte they
/// would need (see BENCHMARKS.md, "Fetch path").
pub(crate) const SENDFILE_BYTES_MIN: u64 = 64 * 1024;

/// `FetchResponse.partitions` (field 2) and `FetchPartitionResult.records` (field 6), both
/// length-delimited (wire type 2).
const PARTITIONS_TAG: u8 = (2 << 3) | 2;
const RECORDS_TAG: u8 = (6 << 3) | 2;

/// One partition's records: read into memory, or a range of a segment file.
pub(crate) enum Records {
    Bytes(Bytes),
    File(Arc<LogRange>),
}

impl Records {
    pub(crate) fn len(&self) -> usize {
        match self {
            Records::Bytes(b) => b.len(),
            Records::File(range) => usize::try_from(range.slice.len).unwrap_or(usize::MAX),
        }
    }

    /// The offset after the last batch (`None` when there is none): every record from the
    /// requested offset up to it is in the records.
    pub(crate) fn end_offset(&self) -> Option<i64> {
        match self {
            Records::File(range) => Some(range.slice.next_offset),
            Records::Bytes(bytes) => {
                let (mut rest, mut end) = (&bytes[..], None);
                while let Some(header) = tinymq_protocol::batch::BatchHeader::new(rest) {
                    end = Some(header.last_offset().saturating_add(1));
                    match tinymq_protocol::batch::batch_size(rest) {
                        Ok(Some(size)) if size <= rest.len() => rest = &rest[size..],
                        _ => break,
                    }
                }
                end
            }
        }
    }

    /// Records in the batches (the offsets they span), for metrics: from the slice for a file
    /// range, from the batch headers (no record is decoded) for bytes read into memory.
    pub(crate) fn record_count(&self) -> u64 {
        match self {
            Records::File(range) => range.slice.records,
            Records::Bytes(bytes) => {
                let (mut rest, mut count) = (&bytes[..], 0u64);
                while let Some(header) = tinymq_protocol::batch::BatchHeader::new(rest) {
                    let spanned = i64::from(header.last_offset_delta()).saturating_add(1);
                    count = count.saturating_add(u64::try_from(spanned).unwrap_or(0));
                    match tinymq_protocol::batch::batch_size(rest) {
                        Ok(Some(size)) if size <= rest.len() => rest = &rest[size..],
                        _ => break,
                    }
                }
                count
            }
        }
    }
}

/// A range of a partition's segment file, held open until it has been sent; the partition is
/// kept to tell whether a truncation has rewritten the range meanwhile.
pub(crate) struct LogRange {
    partition: Arc<Partition>,
    slice: FileSlice,
}

impl FileSource for LogRange {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.slice.file.as_fd()
    }

    fn read_at(&self, buf: &mut [u8], position: u64) -> std::io::Result<usize> {
        self.slice.file.read_at(buf, position)
    }

    fn unchanged(&self) -> bool {
        self.partition.log.unchanged_since(&self.slice)
    }
}

/// Whole batches of `partition` from `offset`, below `offset_limit` (the high watermark for
/// consumers, none for followers), within `bytes_max` (one batch at least). Runs on a blocking
/// thread: the batch-header walk and any copy read the disk, and so does the page-cache check
/// that decides between the two forms.
pub(crate) fn read_records(
    partition: &Arc<Partition>,
    offset: i64,
    bytes_max: usize,
    offset_limit: Option<i64>,
) -> Result<Records, m::Error> {
    let to_wire = |e: tinymq_log::LogError| e.error_code().with_message(e.to_string());
    let read = partition
        .log
        .read_slice(offset, bytes_max, offset_limit)
        .map_err(to_wire)?;
    let Some(slice) = read.slice else {
        return Ok(Records::Bytes(Bytes::new()));
    };
    // Only ranges below the high watermark (`offset_limit`, consumers) go by `sendfile`: the
    // kernel queues references to the page-cache pages, not copies, so a later rewrite of a
    // page would change bytes already handed over. No truncation cuts below the high
    // watermark (only in-sync replicas become leaders, and a deposed leader truncates only
    // where its log diverges from the new leader's, at or above any high watermark it
    // served); a follower's read up to the log end may be truncated, so it is copied (and the
    // copy checked, as every copy is).
    if offset_limit.is_some() && slice.len >= SENDFILE_BYTES_MIN {
        let cached = slice
            .file
            .as_fd()
            .map(|fd| tinymq_net::in_page_cache(fd, slice.position, slice.len).unwrap_or(false));
        if cached == Some(true) {
            let partition = partition.clone();
            return Ok(Records::File(Arc::new(LogRange { partition, slice })));
        }
    }
    copy_slice(partition, &slice, offset, bytes_max, offset_limit).map(Records::Bytes)
}

/// The bytes of `slice` (taken for a read of `offset`, `bytes_max`, `offset_limit`), copied
/// with one `pread`.
pub(crate) fn copy_slice(
    partition: &Partition,
    slice: &FileSlice,
    offset: i64,
    bytes_max: usize,
    offset_limit: Option<i64>,
) -> Result<Bytes, m::Error> {
    let to_wire = |e: tinymq_log::LogError| e.error_code().with_message(e.to_string());
    let len = usize::try_from(slice.len).map_err(|_| {
        ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("a read of {} bytes", slice.len))
    })?;
    let mut bytes = vec![0u8; len];
    let read_ok = slice.file.read_exact_at(&mut bytes, slice.position).is_ok();
    if read_ok && partition.log.unchanged_since(slice) {
        return Ok(Bytes::from(bytes));
    }
    // A truncation overlapped the copy (or the file ended early because of one): the log's
    // own read redoes it consistently.
    partition
        .log
        .read(offset, bytes_max, offset_limit)
        .map(|read| read.records)
        .map_err(to_wire)
}

/// Encodes a fetch response frame: `results` each with its records (`result.records` is
/// ignored and replaced by them). Equal, byte for byte, to prost's encoding of the
/// `FetchResponse` with the records in place.
pub(crate) fn encode(
    op_code: u8,
    message_id: u32,
    error: Option<m::Error>,
    results: Vec<(m::FetchPartitionResult, Records)>,
) -> Vec<Part> {
    let mut parts = Vec::with_capacity(2 + 2 * results.len());
    let mut buf = BytesMut::with_capacity(64 + 64 * results.len());
    m::FetchResponse {
        error,
        partitions: vec![],
    }
    .encode(&mut buf)
    .expect("BytesMut grows");
    for (mut head, records) in results {
        head.records = Bytes::new();
        // Fields after `records` (7 to 12) are encoded after them.
        let tail = m::FetchPartitionResult {
            current_leader: std::mem::take(&mut head.current_leader),
            diverging_epoch: head.diverging_epoch.take(),
            log_end_offset: std::mem::take(&mut head.log_end_offset),
            next_offset: std::mem::take(&mut head.next_offset),
            last_stable_offset: std::mem::take(&mut head.last_stable_offset),
            aborted_transactions: std::mem::take(&mut head.aborted_transactions),
            ..Default::default()
        };
        let records_len = records.len() as u64;
        let records_field = match records_len {
            0 => 0,
            n => 1 + encoded_len_varint(n) as u64 + n,
        };
        let message_len = head.encoded_len() as u64 + records_field + tail.encoded_len() as u64;
        buf.put_u8(PARTITIONS_TAG);
        encode_varint(message_len, &mut buf);
        head.encode(&mut buf).expect("BytesMut grows");
        if records_len > 0 {
            buf.put_u8(RECORDS_TAG);
            encode_varint(records_len, &mut buf);
            parts.push(Part::Bytes(buf.split().freeze()));
            parts.push(match records {
                Records::Bytes(bytes) => Part::Bytes(bytes),
                Records::File(range) => Part::File(FileRange {
                    position: range.slice.position,
                    len: range.slice.len,
                    source: range,
                }),
            });
        }
        tail.encode(&mut buf).expect("BytesMut grows");
    }
    parts.push(Part::Bytes(buf.freeze()));
    let body_len: u64 = parts.iter().map(Part::len).sum();
    // A body is built from the fetch's bounded budget (`fetch_bytes_max` ≤ u32): it fits.
    let body_len = u32::try_from(body_len).unwrap_or(u32::MAX);
    let mut header = BytesMut::with_capacity(12);
    FrameHeader::response(op_code & 0x7F, message_id, body_len).encode(&mut header);
    parts.insert(0, Part::Bytes(header.freeze()));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(n: u32, records: &[u8]) -> m::FetchPartitionResult {
        m::FetchPartitionResult {
            topic: format!("t{n}"),
            partition: n,
            error: (n % 3 == 1).then(|| ErrorCode::NOT_LEADER.with_message("moved")),
            high_watermark: i64::from(n) * 1000,
            log_start_offset: i64::from(n),
            records: Bytes::copy_from_slice(records),
            current_leader: n % 2,
            diverging_epoch: (n % 4 == 3).then_some(m::DivergingEpoch {
                epoch: 5,
                end_offset: 77,
            }),
            log_end_offset: i64::from(n % 3) * 300,
            // Filtered fetches only; a large value takes a 9-byte varint.
            next_offset: [0, 5, 1 << 40][n as usize % 3],
            last_stable_offset: [0, -1, 1 << 33][n as usize % 3],
            aborted_transactions: (0..n % 3)
                .map(|i| m::AbortedTransaction {
                    producer_id: i64::from(i) + 7,
                    first_offset: i64::from(n) * 100,
                })
                .collect(),
        }
    }

    fn flatten(parts: &[Part]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::File(range) => {
                    let mut bytes = vec![0u8; range.len as usize];
                    let mut done = 0;
                    while done < bytes.len() {
                        let n = range
                            .source
                            .read_at(&mut bytes[done..], range.position + done as u64)
                            .expect("read");
                        assert!(n > 0, "the range is inside the file");
                        done += n;
                    }
                    out.extend_from_slice(&bytes);
                }
            }
        }
        out
    }

    #[test]
    fn hand_encoding_equals_prost_for_every_field_combination() {
        for count in 0..6u32 {
            let sizes = [0usize, 1, 127, 128, 300, 20_000];
            let results: Vec<m::FetchPartitionResult> = (0..count)
                .map(|n| {
                    let len = sizes[n as usize % sizes.len()];
                    result(n, &vec![n as u8; len])
                })
                .collect();
            let error = (count == 2).then(|| ErrorCode::SHUTTING_DOWN.to_wire());
            let expected = tinymq_net::encode_response(
                8,
                41,
                &m::FetchResponse {
                    error: error.clone(),
                    partitions: results.clone(),
                },
            );
            let with_records = results
                .into_iter()
                .map(|r| {
                    let records = Records::Bytes(r.records.clone());
                    (r, records)
                })
                .collect();
            let parts = encode(8, 41, error, with_records);
            assert_eq!(flatten(&parts), expected.to_vec(), "{count} partitions");
        }
    }
}
