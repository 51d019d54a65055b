//! The record batch: Kafka's RecordBatch v2 ("magic 2") layout, tinymq's one batch format on
//! the wire, on disk and in replication.
//!
//! ```text
//! offset size field                 meaning
//!      0    8 baseOffset            offset of the first record; stamped by the leader
//!      8    4 batchLength           bytes after this field (total size - 12)
//!     12    4 partitionLeaderEpoch  stamped by the leader
//!     16    1 magic                 2
//!     17    4 crc                   CRC-32C (Castagnoli) of bytes 21..end, unsigned
//!     21    2 attributes            bits 0-2 compression, 3 timestamp type (1 = log append
//!                                   time), 4 transactional, 5 control (see [`control`])
//!     23    4 lastOffsetDelta       offset of the last record - baseOffset
//!     27    8 baseTimestamp         timestamp of the first record (ms since the Unix epoch)
//!     35    8 maxTimestamp          largest timestamp in the batch
//!     43    8 producerId            -1 when not idempotent
//!     51    2 producerEpoch         -1 when not idempotent
//!     53    4 baseSequence          sequence of the first record; -1 when not idempotent
//!     57    4 recordCount           number of records
//!     61    … records               see [`record`]; compressed as one block when bits 0-2 ≠ 0
//! ```
//!
//! All integers are big-endian. The CRC starts at `attributes`, so the leader can stamp
//! `baseOffset` and `partitionLeaderEpoch` in place without recomputing it.
//!
//! Transactions (KIP-98): a transactional producer sets bit 4 on its data batches, always
//! together with its idempotent producer fields; the partition's leader closes the
//! transaction with a control batch (bits 4 and 5, one marker record: [`control`]), which
//! only brokers write.

pub mod compact;
mod compression;
pub mod control;
pub mod craft;
mod parts;
mod record;
pub mod varint;

use bytes::{BufMut, Bytes, BytesMut};

pub use compression::Compression;
pub use parts::{encode_batch_header, BatchHeaderFields};
pub use record::{encode_record, record_bytes, Record, RecordHeader, RecordInput};

/// Size of the fixed batch header.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength`'s coverage begins (baseOffset + batchLength).
pub const BATCH_LENGTH_PREFIX_BYTES: usize = 12;
/// Default bound on the decompressed records of one batch when a server decodes it.
pub const BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT: usize = 64 << 20;
/// The only batch format version tinymq accepts.
pub const BATCH_MAGIC: i8 = 2;

/// Byte offsets of the header fields.
pub mod field {
    pub const BASE_OFFSET: usize = 0;
    pub const BATCH_LENGTH: usize = 8;
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const BASE_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORD_COUNT: usize = 57;
    pub const RECORDS: usize = 61;
}

const _: () = assert!(field::RECORDS == BATCH_HEADER_BYTES);
const _: () = assert!(field::CRC + 4 == field::ATTRIBUTES);

/// Attribute bits 0-2: the compression codec.
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit: timestamps were set by the broker at append time.
pub const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;
/// Attribute bit: the batch belongs to a transaction (KIP-98) of its producer.
pub const ATTR_TRANSACTIONAL: i16 = 1 << 4;
/// Attribute bit: a control batch (a transaction marker, [`control`]), written by brokers.
pub const ATTR_CONTROL: i16 = 1 << 5;
/// Attribute bit (Kafka's compaction): the batch's base timestamp is a delete horizon.
pub const ATTR_DELETE_HORIZON: i16 = 1 << 6;
/// The attribute bits a producer may set: compression, and transactional together with
/// idempotent producer fields ([`RecordBatch::check_producer_fields`]). Timestamp type,
/// control and delete-horizon batches are written by brokers (or by features tinymq does not
/// have yet); any higher bit is unknown.
pub const ATTR_PRODUCER_BITS: i16 = ATTR_COMPRESSION_MASK | ATTR_TRANSACTIONAL;

/// `producerId`, `producerEpoch` and `baseSequence` of a batch without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;

/// What [`RecordBatch::verify`] found in a batch whose header describes its records exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    pub record_count: i32,
    /// Smallest and largest record timestamp (create time).
    pub timestamp_min: i64,
    pub timestamp_max: i64,
    /// Records with a null key (which a compacted topic refuses).
    pub keyless_records: i32,
}

/// Why bytes are not a valid record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is smaller than the batch header")]
    LengthTooSmall(i32),
    #[error("unsupported batch magic {0} (only 2 is supported)")]
    BadMagic(i8),
    #[error("batch CRC mismatch: stored 0x{stored:08X}, computed 0x{computed:08X}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("batch header says {header} records but {found} were found")]
    RecordCountMismatch { header: i32, found: usize },
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(u8),
    #[error("decompressed records exceed the limit of {limit} bytes")]
    DecompressedTooLarge { limit: usize },
    #[error("corrupt batch: {0}")]
    Corrupt(String),
    #[error("compression failed: {0}")]
    Compression(String),
    /// The CRC is right but a header field does not describe the batch's records (count,
    /// offset deltas, timestamps) or is not allowed from a producer (attribute bits, producer
    /// fields).
    #[error("invalid batch header: {0}")]
    InvalidHeader(String),
}

/// The fixed header of a batch, read in place from raw bytes that have not been parsed (the
/// log reads headers from segment files this way). Holds exactly [`BATCH_HEADER_BYTES`] bytes,
/// so no accessor can run past them; nothing is checked beyond that.
#[derive(Debug, Clone, Copy)]
pub struct BatchHeader<'a>(&'a [u8; BATCH_HEADER_BYTES]);

impl<'a> BatchHeader<'a> {
    /// The header at the front of `bytes`, or `None` when fewer than
    /// [`BATCH_HEADER_BYTES`] bytes are there.
    pub fn new(bytes: &'a [u8]) -> Option<BatchHeader<'a>> {
        bytes.first_chunk().map(BatchHeader)
    }
    /// The header held in a header-sized array.
    pub fn of(bytes: &'a [u8; BATCH_HEADER_BYTES]) -> BatchHeader<'a> {
        BatchHeader(bytes)
    }
    /// The header's bytes.
    pub fn bytes(&self) -> &'a [u8; BATCH_HEADER_BYTES] {
        self.0
    }
    pub fn base_offset(&self) -> i64 {
        read_i64(self.0, field::BASE_OFFSET)
    }
    pub fn batch_length(&self) -> i32 {
        read_i32(self.0, field::BATCH_LENGTH)
    }
    pub fn magic(&self) -> i8 {
        self.0[field::MAGIC] as i8
    }
    pub fn crc(&self) -> u32 {
        read_i32(self.0, field::CRC) as u32
    }
    pub fn attributes(&self) -> i16 {
        read_i16(self.0, field::ATTRIBUTES)
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        read_i32(self.0, field::LAST_OFFSET_DELTA)
    }
    pub fn max_timestamp(&self) -> i64 {
        read_i64(self.0, field::MAX_TIMESTAMP)
    }
    pub fn record_count(&self) -> i32 {
        read_i32(self.0, field::RECORD_COUNT)
    }
    pub fn producer_id(&self) -> i64 {
        read_i64(self.0, field::PRODUCER_ID)
    }
    pub fn producer_epoch(&self) -> i16 {
        read_i16(self.0, field::PRODUCER_EPOCH)
    }
    pub fn base_sequence(&self) -> i32 {
        read_i32(self.0, field::BASE_SEQUENCE)
    }
    /// Sequence of the last record, wrapping at i32::MAX like Kafka's.
    pub fn last_sequence(&self) -> i32 {
        last_sequence(self.base_sequence(), self.last_offset_delta())
    }
    /// The last offset, saturating like [`RecordBatch::last_offset`].
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }
}

/// The sequence of a batch's last record: `base + delta`, wrapping at i32::MAX like Kafka's.
fn last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    let seq = i64::from(base_sequence) + i64::from(last_offset_delta);
    (seq % (i64::from(i32::MAX) + 1)) as i32
}

fn read_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn read_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn read_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The total size of the batch starting at the front of `buf`, read from its length field, or
/// `None` when fewer than 12 bytes are there. The size is not validated beyond being ≥ the
/// header; use it to split a stream of batches.
pub fn batch_size(buf: &[u8]) -> Result<Option<usize>, BatchError> {
    if buf.len() < BATCH_LENGTH_PREFIX_BYTES {
        return Ok(None);
    }
    let length = read_i32(buf, field::BATCH_LENGTH);
    if length < (BATCH_HEADER_BYTES - BATCH_LENGTH_PREFIX_BYTES) as i32 {
        return Err(BatchError::LengthTooSmall(length));
    }
    Ok(Some(BATCH_LENGTH_PREFIX_BYTES + length as usize))
}

/// Computes the CRC a batch should carry (over attributes to the end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[field::ATTRIBUTES..])
}

/// Writes `base_offset` into a batch in place; the CRC stays valid.
pub fn stamp_base_offset(batch: &mut [u8], base_offset: i64) {
    assert!(batch.len() >= BATCH_HEADER_BYTES, "stamping a whole batch");
    batch[field::BASE_OFFSET..field::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Writes the partition leader epoch into a batch in place; the CRC stays valid.
pub fn stamp_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    assert!(batch.len() >= BATCH_HEADER_BYTES, "stamping a whole batch");
    batch[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// One record batch whose framing, magic and CRC have been checked. Header fields are read
/// straight from the bytes; records are decoded on demand by [`RecordBatch::records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
}

impl RecordBatch {
    /// Checks that `bytes` is exactly one batch: length field, magic, CRC, and header sanity.
    /// Records are not decoded; [`RecordBatch::validate_records`] does that.
    pub fn parse(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let size = batch_size(&bytes)?.ok_or(BatchError::Truncated {
            needed: BATCH_LENGTH_PREFIX_BYTES,
            available: bytes.len(),
        })?;
        if bytes.len() < size {
            return Err(BatchError::Truncated {
                needed: size,
                available: bytes.len(),
            });
        }
        if bytes.len() > size {
            return Err(BatchError::Corrupt(format!(
                "{} bytes follow the batch's end",
                bytes.len() - size
            )));
        }
        let magic = bytes[field::MAGIC] as i8;
        if magic != BATCH_MAGIC {
            return Err(BatchError::BadMagic(magic));
        }
        let batch = RecordBatch { bytes };
        let computed = compute_crc(&batch.bytes);
        if computed != batch.crc() {
            return Err(BatchError::CrcMismatch {
                stored: batch.crc(),
                computed,
            });
        }
        if batch.record_count() < 0 || batch.last_offset_delta() < 0 {
            return Err(BatchError::InvalidHeader(format!(
                "negative record count {} or last offset delta {}",
                batch.record_count(),
                batch.last_offset_delta()
            )));
        }
        Compression::from_attributes(batch.attributes())?;
        Ok(batch)
    }

    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn base_offset(&self) -> i64 {
        read_i64(&self.bytes, field::BASE_OFFSET)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        read_i32(&self.bytes, field::PARTITION_LEADER_EPOCH)
    }
    pub fn crc(&self) -> u32 {
        read_i32(&self.bytes, field::CRC) as u32
    }
    pub fn attributes(&self) -> i16 {
        read_i16(&self.bytes, field::ATTRIBUTES)
    }
    pub fn compression(&self) -> Compression {
        Compression::from_attributes(self.attributes()).expect("checked by parse")
    }
    pub fn last_offset_delta(&self) -> i32 {
        read_i32(&self.bytes, field::LAST_OFFSET_DELTA)
    }
    /// Offset of the last record (base offset + last offset delta; saturating, since a base
    /// offset read from untrusted bytes may be anything).
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.last_offset_delta()))
    }
    /// The offset right after this batch (saturating like [`RecordBatch::last_offset`]).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    pub fn base_timestamp(&self) -> i64 {
        read_i64(&self.bytes, field::BASE_TIMESTAMP)
    }
    pub fn max_timestamp(&self) -> i64 {
        read_i64(&self.bytes, field::MAX_TIMESTAMP)
    }
    pub fn producer_id(&self) -> i64 {
        read_i64(&self.bytes, field::PRODUCER_ID)
    }
    pub fn producer_epoch(&self) -> i16 {
        read_i16(&self.bytes, field::PRODUCER_EPOCH)
    }
    pub fn base_sequence(&self) -> i32 {
        read_i32(&self.bytes, field::BASE_SEQUENCE)
    }
    /// Sequence of the last record, wrapping at i32::MAX like Kafka's.
    pub fn last_sequence(&self) -> i32 {
        last_sequence(self.base_sequence(), self.last_offset_delta())
    }
    pub fn record_count(&self) -> i32 {
        read_i32(&self.bytes, field::RECORD_COUNT)
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & ATTR_LOG_APPEND_TIME != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }

    /// Decodes every record, decompressing at most `decompressed_bytes_max` bytes, and checks
    /// that the count agrees with the header and the offset deltas increase within its
    /// range (a compacted batch has gaps; [`RecordBatch::verify`] is the producer's rule).
    pub fn records(&self, decompressed_bytes_max: usize) -> Result<Vec<Record>, BatchError> {
        let payload = self.bytes.slice(field::RECORDS..);
        let records_bytes = match self.compression() {
            Compression::None => payload,
            codec => Bytes::from(codec.decompress(&payload, decompressed_bytes_max)?),
        };
        let header_count = self.record_count();
        // Every record takes at least 7 bytes; a larger count is a lie and must not size an
        // allocation.
        let capacity = (header_count as usize).min(records_bytes.len() / 7);
        let mut records = Vec::with_capacity(capacity);
        let mut cursor = 0;
        let timestamp_base = self.base_timestamp();
        while cursor < records_bytes.len() {
            let mut record = record::decode_record(
                &records_bytes,
                &mut cursor,
                self.base_offset(),
                timestamp_base,
            )?;
            if self.is_log_append_time() {
                record.timestamp_ms = self.max_timestamp();
            }
            records.push(record);
        }
        if records.len() != header_count as usize {
            return Err(BatchError::RecordCountMismatch {
                header: header_count,
                found: records.len(),
            });
        }
        // A compacted batch keeps its offsets with gaps between them (and may hold no record
        // at all, kept for its offsets): deltas increase and stay within the header's range.
        let mut previous = None;
        for (i, record) in records.iter().enumerate() {
            let delta = record.offset.wrapping_sub(self.base_offset());
            if previous.is_some_and(|p| delta <= p)
                || !(0..=i64::from(self.last_offset_delta())).contains(&delta)
            {
                return Err(BatchError::Corrupt(format!(
                    "record {i} has offset delta {delta} (after {previous:?}, last {})",
                    self.last_offset_delta()
                )));
            }
            previous = Some(delta);
        }
        Ok(records)
    }

    /// The first record at offset `from_offset` or later whose timestamp is at or after
    /// `timestamp_ms`, as (offset, timestamp), found by walking the records without keeping
    /// them (nothing is allocated per record; a compressed batch is decompressed once, within
    /// `decompressed_bytes_max`). `from_offset` skips records below a log start inside the
    /// batch.
    pub fn first_at_or_after(
        &self,
        timestamp_ms: i64,
        from_offset: i64,
        decompressed_bytes_max: usize,
    ) -> Result<Option<(i64, i64)>, BatchError> {
        if self.is_log_append_time() {
            let ts = self.max_timestamp();
            let last = self
                .base_offset()
                .saturating_add(i64::from(self.last_offset_delta()));
            let offset = self.base_offset().max(from_offset);
            return Ok((ts >= timestamp_ms && offset <= last).then_some((offset, ts)));
        }
        let records_bytes = self.records_section(decompressed_bytes_max)?;
        let mut cursor = 0;
        while cursor < records_bytes.len() {
            let raw = record::parse_record(&records_bytes, cursor)?;
            let ts = self.base_timestamp().saturating_add(raw.timestamp_delta);
            let offset = self
                .base_offset()
                .saturating_add(i64::from(raw.offset_delta));
            if ts >= timestamp_ms && offset >= from_offset {
                return Ok(Some((offset, ts)));
            }
            cursor = raw.end;
        }
        Ok(None)
    }

    /// The records section, decompressed (within `decompressed_bytes_max`) when compressed.
    fn records_section(
        &self,
        decompressed_bytes_max: usize,
    ) -> Result<std::borrow::Cow<'_, [u8]>, BatchError> {
        let payload = &self.bytes[field::RECORDS..];
        Ok(match self.compression() {
            Compression::None => std::borrow::Cow::Borrowed(payload),
            codec => std::borrow::Cow::Owned(codec.decompress(payload, decompressed_bytes_max)?),
        })
    }

    /// Full validation: [`RecordBatch::verify`], keeping only whether it passed.
    pub fn validate_records(&self, decompressed_bytes_max: usize) -> Result<(), BatchError> {
        self.verify(decompressed_bytes_max).map(drop)
    }

    /// Checks that the header describes the records exactly, decompressing at most
    /// `decompressed_bytes_max` bytes and allocating nothing per record: at least one record;
    /// `recordCount` equals the records found; offset deltas are 0, 1, 2, …;
    /// `lastOffsetDelta = recordCount − 1`; every timestamp (base + delta) is representable
    /// and `maxTimestamp` is the largest of them (for create-time batches).
    pub fn verify(&self, decompressed_bytes_max: usize) -> Result<BatchSummary, BatchError> {
        let header_count = self.record_count();
        if header_count < 1 {
            return Err(BatchError::InvalidHeader(format!(
                "record count {header_count}: a batch holds at least one record"
            )));
        }
        if self.last_offset_delta() != header_count - 1 {
            return Err(BatchError::InvalidHeader(format!(
                "last offset delta {} does not match {header_count} records",
                self.last_offset_delta()
            )));
        }
        let records_bytes = self.records_section(decompressed_bytes_max)?;
        let base_timestamp = self.base_timestamp();
        let (mut found, mut cursor) = (0i32, 0usize);
        let (mut timestamp_min, mut timestamp_max) = (i64::MAX, i64::MIN);
        let mut keyless_records = 0i32;
        while cursor < records_bytes.len() {
            let raw = record::parse_record(&records_bytes, cursor)?;
            keyless_records += i32::from(raw.key.is_none());
            if raw.offset_delta != found {
                return Err(BatchError::InvalidHeader(format!(
                    "record {found} has offset delta {} (expected {found})",
                    raw.offset_delta
                )));
            }
            let timestamp = base_timestamp
                .checked_add(raw.timestamp_delta)
                .ok_or_else(|| {
                    BatchError::InvalidHeader(format!(
                        "record {found}: timestamp {base_timestamp} + {} overflows",
                        raw.timestamp_delta
                    ))
                })?;
            timestamp_min = timestamp_min.min(timestamp);
            timestamp_max = timestamp_max.max(timestamp);
            cursor = raw.end;
            // Deltas are checked equal to the count so far, so this cannot pass i32::MAX
            // before a delta mismatch is reported.
            found = found.saturating_add(1);
        }
        if found != header_count {
            return Err(BatchError::RecordCountMismatch {
                header: header_count,
                found: found as usize,
            });
        }
        if !self.is_log_append_time() && self.max_timestamp() != timestamp_max {
            return Err(BatchError::InvalidHeader(format!(
                "max timestamp {} is not the records' largest ({timestamp_max})",
                self.max_timestamp()
            )));
        }
        Ok(BatchSummary {
            record_count: found,
            timestamp_min,
            timestamp_max,
            keyless_records,
        })
    }

    /// The rules for a batch as a producer sends it, before [`RecordBatch::verify`]: only
    /// compression and transactional attribute bits; producer id, epoch and base sequence
    /// either all "none" (-1) or all non-negative, and all non-negative on a transactional
    /// batch (a transaction belongs to an idempotent producer).
    pub fn check_producer_fields(&self) -> Result<(), BatchError> {
        let attributes = self.attributes();
        if attributes & !ATTR_PRODUCER_BITS != 0 {
            return Err(BatchError::InvalidHeader(format!(
                "attributes 0x{attributes:04X}: a producer may set only the compression and \
                 transactional bits (log-append time, control and higher bits are refused)"
            )));
        }
        let (id, epoch, sequence) = (
            self.producer_id(),
            self.producer_epoch(),
            self.base_sequence(),
        );
        let none = id == NO_PRODUCER_ID && epoch == NO_PRODUCER_EPOCH && sequence == NO_SEQUENCE;
        let idempotent = id >= 0 && epoch >= 0 && sequence >= 0;
        if !(none || idempotent) {
            return Err(BatchError::InvalidHeader(format!(
                "producer id {id}, epoch {epoch}, base sequence {sequence}: either all -1 \
                 (no idempotence) or all non-negative"
            )));
        }
        if self.is_transactional() && !idempotent {
            return Err(BatchError::InvalidHeader(
                "a transactional batch needs a producer id, epoch and base sequence (all -1 \
                 here): transactions belong to idempotent producers"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Splits a buffer of back-to-back batches. Each item is a parsed (CRC-checked) batch sharing
/// the buffer's memory; a truncated or corrupt batch ends the iteration with an error.
pub struct BatchIter {
    rest: Bytes,
}

impl BatchIter {
    pub fn new(bytes: Bytes) -> BatchIter {
        BatchIter { rest: bytes }
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = match batch_size(&self.rest) {
            Ok(Some(size)) if size <= self.rest.len() => {
                RecordBatch::parse(self.rest.split_to(size))
            }
            Ok(Some(size)) => Err(BatchError::Truncated {
                needed: size,
                available: self.rest.len(),
            }),
            Ok(None) => Err(BatchError::Truncated {
                needed: BATCH_LENGTH_PREFIX_BYTES,
                available: self.rest.len(),
            }),
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.rest.clear();
        }
        Some(result)
    }
}

/// Identity of an idempotent producer, written into each batch it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerStamp {
    /// The stamp of a producer without idempotence.
    pub const NONE: ProducerStamp = ProducerStamp {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
}

/// Builds one batch from records. Offsets start at 0 (the leader stamps the real base offset).
#[derive(Debug)]
pub struct BatchBuilder {
    compression: Compression,
    /// Attribute bits besides the codec's: transactional, or control for a marker.
    attributes: i16,
    producer: ProducerStamp,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    record_count: i32,
    records: BytesMut,
}

impl BatchBuilder {
    pub fn new(compression: Compression, producer: ProducerStamp) -> BatchBuilder {
        BatchBuilder {
            compression,
            attributes: 0,
            producer,
            base_timestamp: None,
            max_timestamp: i64::MIN,
            record_count: 0,
            records: BytesMut::new(),
        }
    }

    /// Sets the attribute bits besides the codec's ([`ATTR_TRANSACTIONAL`] for a
    /// transaction's batch; brokers add [`ATTR_CONTROL`] for a marker). Codec bits in `bits`
    /// are ignored.
    pub fn with_attributes(mut self, bits: i16) -> BatchBuilder {
        self.attributes = bits & !ATTR_COMPRESSION_MASK;
        self
    }

    pub fn record_count(&self) -> i32 {
        self.record_count
    }

    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Size of the batch if built now without compression.
    pub fn uncompressed_bytes(&self) -> usize {
        BATCH_HEADER_BYTES + self.records.len()
    }

    /// Adds a record; returns its offset delta.
    pub fn push(&mut self, record: &RecordInput<'_>) -> i32 {
        let base_timestamp = *self.base_timestamp.get_or_insert(record.timestamp_ms);
        let offset_delta = self.record_count;
        record::encode_record(
            &mut self.records,
            record,
            offset_delta,
            record.timestamp_ms - base_timestamp,
        );
        self.max_timestamp = self.max_timestamp.max(record.timestamp_ms);
        self.record_count += 1;
        offset_delta
    }

    /// Encodes the batch. At least one record must have been pushed.
    pub fn build(self) -> Result<Bytes, BatchError> {
        assert!(self.record_count > 0, "a batch holds at least one record");
        let payload = match self.compression {
            Compression::None => self.records.freeze(),
            codec => Bytes::from(codec.compress(&self.records)?),
        };
        let total = BATCH_HEADER_BYTES + payload.len();
        let batch_length = i32::try_from(total - BATCH_LENGTH_PREFIX_BYTES)
            .map_err(|_| BatchError::Compression("batch larger than 2 GiB".into()))?;
        let mut out = BytesMut::with_capacity(total);
        out.put_i64(0);
        out.put_i32(batch_length);
        out.put_i32(-1); // partition leader epoch: stamped by the leader
        out.put_i8(BATCH_MAGIC);
        out.put_u32(0); // CRC: filled in below
        out.put_i16(self.compression.attribute_bits() | self.attributes);
        out.put_i32(self.record_count - 1);
        out.put_i64(self.base_timestamp.expect("at least one record"));
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer.producer_id);
        out.put_i16(self.producer.producer_epoch);
        out.put_i32(self.producer.base_sequence);
        out.put_i32(self.record_count);
        debug_assert_eq!(out.len(), BATCH_HEADER_BYTES);
        out.put_slice(&payload);
        let crc = compute_crc(&out);
        out[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests;
