//! What the front end counts for metrics: connections (open, accepted, refused, idle-closed),
//! authentications (succeeded, failed)
//! and, per operation, requests, errors by code and latency. Recording a request is a few
//! relaxed atomic adds into slots fixed at start (indexed by operation and error code): no
//! lock, no allocation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tinymq_protocol::frame::FRAME_HEADER_BYTES;
use tinymq_protocol::stats::{Histogram, HistogramSnapshot, LATENCY_BOUNDS_NANOS};
use tinymq_protocol::{ErrorCode, OpCode};

use crate::{Part, Response};

/// Error codes with a slot of their own; a larger code (a future one) is not counted by code.
const ERROR_SLOTS: usize = 128;
const _: () = assert!(ErrorCode::ALL.len() <= ERROR_SLOTS);

/// For each 7-bit operation code, its slot in [`RequestStats`], or `u8::MAX` when no
/// operation has the code.
const OP_SLOTS: [u8; 128] = {
    let mut slots = [u8::MAX; 128];
    let mut i = 0;
    while i < OpCode::ALL.len() {
        slots[OpCode::ALL[i] as usize] = i as u8;
        i += 1;
    }
    slots
};

/// What the accept loop and the connections count: a few atomic adds per connection and per
/// request.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub(crate) open: AtomicU64,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) idle_closed: AtomicU64,
    pub(crate) auth_succeeded: AtomicU64,
    pub(crate) auth_failed: AtomicU64,
    /// Requests served, by operation.
    pub requests: RequestStats,
}

impl ConnectionStats {
    /// Connections being served now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections accepted and served since start.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections refused since start because `connections_max` were open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts a connection closed for staying idle, by a listener that serves its own framing
    /// (the Kafka port) over [`crate::accept_connections`].
    pub fn count_idle_close(&self) {
        self.idle_closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections closed since start because they stayed idle for `idle_timeout_ms`.
    pub fn idle_closed(&self) -> u64 {
        self.idle_closed.load(Ordering::Relaxed)
    }

    /// Authenticate exchanges that succeeded since start.
    pub fn auth_succeeded(&self) -> u64 {
        self.auth_succeeded.load(Ordering::Relaxed)
    }

    /// Authenticate exchanges that failed since start (wrong password, unknown user, bad
    /// message, refused mechanism).
    pub fn auth_failed(&self) -> u64 {
        self.auth_failed.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct OpSlot {
    count: AtomicU64,
    errors: [AtomicU64; ERROR_SLOTS],
    duration: Histogram,
}

/// Per operation: requests answered, errors by code, and time from the request's arrival to
/// its response being ready (not counting the wait to write it to a slow peer).
#[derive(Debug)]
pub struct RequestStats {
    slots: Box<[OpSlot]>,
}

impl Default for RequestStats {
    fn default() -> RequestStats {
        let slots = OpCode::ALL
            .iter()
            .map(|_| OpSlot {
                count: AtomicU64::new(0),
                errors: [const { AtomicU64::new(0) }; ERROR_SLOTS],
                duration: Histogram::new(LATENCY_BOUNDS_NANOS),
            })
            .collect();
        RequestStats { slots }
    }
}

/// One operation's figures at scrape time.
#[derive(Debug, Clone)]
pub struct OpSnapshot {
    pub op: OpCode,
    pub count: u64,
    /// Codes with at least one error.
    pub errors: Vec<(ErrorCode, u64)>,
    /// In nanoseconds.
    pub duration: HistogramSnapshot,
}

impl RequestStats {
    fn slot(&self, op_code: u8) -> Option<&OpSlot> {
        let i = *OP_SLOTS.get(usize::from(op_code))?;
        self.slots.get(usize::from(i))
    }

    /// One request of `op_code` answered after `elapsed`, with `response` (none for produce
    /// with acks = 0): counts the error its response carries, if any.
    pub fn record(&self, op_code: u8, elapsed: Duration, response: Option<&Response>) {
        let Some(slot) = self.slot(op_code) else {
            return;
        };
        slot.count.fetch_add(1, Ordering::Relaxed);
        slot.duration.record_duration(elapsed);
        if let Some(code) = response.and_then(response_error) {
            Self::count_error(slot, code);
        }
    }

    /// An error inside a response beyond its own (e.g. one partition's, in a produce), which
    /// the service counts itself.
    pub fn record_error(&self, op: OpCode, code: u32) {
        if let Some(slot) = self.slot(op.code()) {
            Self::count_error(slot, code);
        }
    }

    fn count_error(slot: &OpSlot, code: u32) {
        if code == 0 {
            return;
        }
        if let Some(c) = usize::try_from(code).ok().and_then(|i| slot.errors.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every operation with at least one request.
    pub fn snapshot(&self) -> Vec<OpSnapshot> {
        OpCode::ALL
            .iter()
            .zip(self.slots.iter())
            .filter(|(_, slot)| slot.count.load(Ordering::Relaxed) > 0)
            .map(|(&op, slot)| OpSnapshot {
                op,
                count: slot.count.load(Ordering::Relaxed),
                errors: ErrorCode::ALL
                    .iter()
                    .filter_map(|&code| {
                        let n = slot.errors.get(usize::from(code.code()))?;
                        let n = n.load(Ordering::Relaxed);
                        (n > 0).then_some((code, n))
                    })
                    .collect(),
                duration: slot.duration.snapshot(),
            })
            .collect()
    }
}

/// The code of a response's own error (field 1 of every response body, an `Error` whose
/// field 1 is the code), read from the encoded frame without decoding the rest; `None` when
/// it carries none.
fn response_error(response: &Response) -> Option<u32> {
    let Some(Part::Bytes(first)) = response.parts.first() else {
        return None;
    };
    let mut body = first.get(FRAME_HEADER_BYTES..)?;
    // A fetch answer carries its frame header as a part of its own; the body starts in the next.
    if body.is_empty() {
        let Some(Part::Bytes(second)) = response.parts.get(1) else {
            return None;
        };
        body = second;
    }
    // Field 1, length-delimited: the `Error` message.
    if *body.first()? != 0x0A {
        return None;
    }
    body = &body[1..];
    let len = prost::encoding::decode_varint(&mut body).ok()?;
    let mut error = body.get(..usize::try_from(len).ok()?)?;
    // Its field 1, a varint: the code (absent when 0).
    if *error.first()? != 0x08 {
        return None;
    }
    error = &error[1..];
    let code = prost::encoding::decode_varint(&mut error).ok()?;
    u32::try_from(code).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinymq_protocol::messages as m;

    #[test]
    fn a_response_error_is_read_from_the_frame() {
        let failed = crate::error_frame(7, 1, ErrorCode::NOT_LEADER, "moved".into());
        let ok = crate::encode_response(7, 2, &m::ProduceResponse::default());
        let stats = RequestStats::default();
        let produce = OpCode::Produce.code();
        stats.record(produce, Duration::from_millis(1), Some(&failed.into()));
        stats.record(produce, Duration::from_millis(2), Some(&ok.into()));
        stats.record(produce, Duration::from_millis(3), None);
        stats.record(0x7F, Duration::from_millis(3), None);
        let snap = stats.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].op, OpCode::Produce);
        assert_eq!(snap[0].count, 3);
        assert_eq!(snap[0].errors, vec![(ErrorCode::NOT_LEADER, 1)]);
        assert_eq!(snap[0].duration.count(), 3);
        assert_eq!(snap[0].duration.sum, 6_000_000);
    }

    /// A fetch answer is written as parts: the frame header alone, then the body.
    #[test]
    fn a_response_error_is_read_when_the_header_is_a_part_of_its_own() {
        let whole = crate::error_frame(7, 1, ErrorCode::SHUTTING_DOWN, "bye".into());
        let (header, body) = whole.split_at(FRAME_HEADER_BYTES);
        let split = Response {
            parts: vec![
                Part::Bytes(bytes::Bytes::copy_from_slice(header)),
                Part::Bytes(bytes::Bytes::copy_from_slice(body)),
            ],
            held: None,
        };
        let stats = RequestStats::default();
        stats.record(OpCode::Fetch.code(), Duration::from_millis(1), Some(&split));
        let snap = stats.snapshot();
        assert_eq!(snap[0].errors, vec![(ErrorCode::SHUTTING_DOWN, 1)]);
    }
}
