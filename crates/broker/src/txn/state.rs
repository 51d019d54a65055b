//! One transactional id's state and the rules that move it (Kafka's transaction state machine,
//! KIP-98), as pure functions: each takes the current [`TxnMetadata`] and a request and says
//! what the state becomes, or why not. The coordinator makes each new state durable in
//! `__transaction_state` before it takes effect; nothing here does I/O.
//!
//! ```text
//!            InitProducerId (epoch+1)            AddPartitionsToTxn / AddOffsetsToTxn
//!   (none) ──────────────────────────▶ Empty ─────────────────────────────────▶ Ongoing
//!                                        ▲                                        │
//!                 InitProducerId         │                     EndTxn(commit)     │ EndTxn(abort), or
//!                 (epoch+1)              │              ┌─────────────────────────┤ the timeout or an
//!   CompleteCommit / CompleteAbort ──────┘              ▼                         ▼ InitProducerId
//!          ▲            ▲                        PrepareCommit              PrepareAbort (epoch+1
//!          │            │   markers written            │                         │  unless by EndTxn)
//!          │            └──────────────────────────────┼─────────────────────────┘
//!          └───────────────────────────────────────────┘
//! ```
//!
//! A `Complete*` state takes AddPartitionsToTxn straight to `Ongoing` (the next transaction).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tinymq_protocol::ErrorCode;

/// Most partitions (offsets partitions included) one transaction may touch.
pub const TXN_PARTITIONS_MAX: usize = 10_000;
/// Longest `transaction.timeout.ms` a producer may ask for (Kafka's
/// `transaction.max.timeout.ms`).
pub const TRANSACTION_TIMEOUT_MS_MAX: u32 = 15 * 60 * 1000;
/// The timeout of a producer that asks for none.
pub const TRANSACTION_TIMEOUT_MS_DEFAULT: u32 = 60 * 1000;

/// Kafka's names, which `kafka-transactions.sh` and DescribeTransactions show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    PrepareEpochFence,
    Dead,
}

impl TxnState {
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
            TxnState::Dead => "Dead",
        }
    }

    /// Markers are being written: the id takes no request until they are.
    pub fn is_preparing(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }
}

/// A partition in a transaction.
pub type TxnPartition = (String, u32);

/// What the coordinator holds, and stores, per transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMetadata {
    #[serde(rename = "p")]
    pub producer_id: i64,
    #[serde(rename = "e")]
    pub producer_epoch: i16,
    #[serde(rename = "t")]
    pub timeout_ms: u32,
    #[serde(rename = "s")]
    pub state: TxnState,
    /// The partitions of the open (or ending) transaction.
    #[serde(rename = "tp", default)]
    pub partitions: BTreeSet<TxnPartition>,
    /// When the open transaction began (-1 without one).
    #[serde(rename = "st")]
    pub start_ms: i64,
    /// When the state last changed.
    #[serde(rename = "u")]
    pub update_ms: i64,
}

/// Why a request does not fit the transaction's state: a native error code and its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TxnError {
    pub code: ErrorCode,
    pub message: String,
}

impl TxnError {
    fn new(code: ErrorCode, message: impl Into<String>) -> TxnError {
        TxnError {
            code,
            message: message.into(),
        }
    }
}

/// What InitProducerId does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitStep {
    /// The id needs a fresh producer id (it is new, or its epoch is exhausted): ask again
    /// with one.
    NeedProducerId,
    /// Store this state and answer with its producer id and epoch.
    Ready(TxnMetadata),
    /// A transaction was open: store this (the epoch bumped, PrepareAbort), abort it, and
    /// answer CONCURRENT_TRANSACTIONS (the producer retries and gets the id once aborted).
    AbortFirst(TxnMetadata),
}

/// The epoch after `epoch`, unless it is exhausted.
fn next_epoch(epoch: i16) -> Option<i16> {
    // i16::MAX is left unused, as Kafka does: a bumped marker epoch must stay above.
    (epoch < i16::MAX - 1).then_some(epoch + 1)
}

/// Checks a requested timeout; 0 means the default.
pub fn checked_timeout(timeout_ms: u32) -> Result<u32, TxnError> {
    match timeout_ms {
        0 => Ok(TRANSACTION_TIMEOUT_MS_DEFAULT),
        t if t <= TRANSACTION_TIMEOUT_MS_MAX => Ok(t),
        t => Err(TxnError::new(
            ErrorCode::INVALID_TRANSACTION_TIMEOUT,
            format!(
                "transaction timeout {t} ms is above transaction_timeout_ms_max \
                 {TRANSACTION_TIMEOUT_MS_MAX} ms"
            ),
        )),
    }
}

/// InitProducerId for a transactional id: `current` is its state (None: unknown), `fresh_id`
/// a producer id allocated for it when [`InitStep::NeedProducerId`] asked for one,
/// `expected` the id and epoch the producer says it holds (KIP-360; None when it holds none).
pub fn init_producer_id(
    current: Option<&TxnMetadata>,
    timeout_ms: u32,
    expected: Option<(i64, i16)>,
    fresh_id: Option<i64>,
    now_ms: i64,
) -> Result<InitStep, TxnError> {
    let timeout_ms = checked_timeout(timeout_ms)?;
    let empty = |producer_id, producer_epoch| TxnMetadata {
        producer_id,
        producer_epoch,
        timeout_ms,
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        start_ms: -1,
        update_ms: now_ms,
    };
    let Some(m) = current.filter(|m| m.state != TxnState::Dead) else {
        return Ok(match fresh_id {
            Some(id) => InitStep::Ready(empty(id, 0)),
            None => InitStep::NeedProducerId,
        });
    };
    if m.state.is_preparing() {
        return Err(concurrent(m));
    }
    if let Some((id, epoch)) = expected {
        if (id, epoch) != (m.producer_id, m.producer_epoch) {
            return Err(TxnError::new(
                ErrorCode::PRODUCER_FENCED,
                format!(
                    "this producer holds id {id} epoch {epoch}, but the transactional id is at id \
                     {} epoch {}: a newer instance took it",
                    m.producer_id, m.producer_epoch
                ),
            ));
        }
    }
    if m.state == TxnState::Ongoing {
        let mut next = m.clone();
        next.producer_epoch = next_epoch(m.producer_epoch).unwrap_or(m.producer_epoch);
        next.state = TxnState::PrepareAbort;
        next.update_ms = now_ms;
        return Ok(InitStep::AbortFirst(next));
    }
    Ok(match (next_epoch(m.producer_epoch), fresh_id) {
        (Some(epoch), _) => InitStep::Ready(empty(m.producer_id, epoch)),
        (None, Some(id)) => InitStep::Ready(empty(id, 0)),
        (None, None) => InitStep::NeedProducerId,
    })
}

fn concurrent(m: &TxnMetadata) -> TxnError {
    TxnError::new(
        ErrorCode::CONCURRENT_TRANSACTIONS,
        format!(
            "the transaction is in {}: its markers are being written; retry",
            m.state.name()
        ),
    )
}

/// The producer id and epoch of a request against the id's current ones.
fn check_producer(m: &TxnMetadata, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
    if producer_id != m.producer_id {
        return Err(TxnError::new(
            ErrorCode::INVALID_PRODUCER_ID_MAPPING,
            format!(
                "producer id {producer_id} is not the transactional id's ({})",
                m.producer_id
            ),
        ));
    }
    if epoch != m.producer_epoch {
        return Err(TxnError::new(
            ErrorCode::PRODUCER_FENCED,
            format!(
                "epoch {epoch} is not the current epoch {} of producer {producer_id}: fenced \
                 (a newer instance initialized, or the coordinator aborted a transaction that \
                 passed its timeout)",
                m.producer_epoch
            ),
        ));
    }
    Ok(())
}

/// AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's offsets
/// partition). Returns the new state, or None when nothing changes (all already added).
pub fn add_partitions(
    m: &TxnMetadata,
    producer_id: i64,
    epoch: i16,
    partitions: &[TxnPartition],
    now_ms: i64,
) -> Result<Option<TxnMetadata>, TxnError> {
    check_producer(m, producer_id, epoch)?;
    if m.state.is_preparing() {
        return Err(concurrent(m));
    }
    if m.state == TxnState::Dead {
        return Err(TxnError::new(
            ErrorCode::INVALID_TXN_STATE,
            "the transactional id expired",
        ));
    }
    let ongoing = m.state == TxnState::Ongoing;
    if ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
        return Ok(None);
    }
    let mut next = m.clone();
    if !ongoing {
        next.partitions.clear();
        next.start_ms = now_ms;
    }
    next.partitions.extend(partitions.iter().cloned());
    if next.partitions.len() > TXN_PARTITIONS_MAX {
        return Err(TxnError::new(
            ErrorCode::LIMIT_EXCEEDED,
            format!("a transaction touches at most txn_partitions_max = {TXN_PARTITIONS_MAX} partitions"),
        ));
    }
    next.state = TxnState::Ongoing;
    next.update_ms = now_ms;
    Ok(Some(next))
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndStep {
    /// Already decided this way (a retry): answer success.
    Done,
    /// Store this (PrepareCommit or PrepareAbort), answer success, write the markers.
    Prepare(TxnMetadata),
}

pub fn end_txn(
    m: &TxnMetadata,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<EndStep, TxnError> {
    check_producer(m, producer_id, epoch)?;
    let wanted = if commit { "commit" } else { "abort" };
    match (m.state, commit) {
        (TxnState::Ongoing, _) => {
            let mut next = m.clone();
            next.state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            next.update_ms = now_ms;
            Ok(EndStep::Prepare(next))
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(EndStep::Done),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(concurrent(m)),
        (state, _) => Err(TxnError::new(
            ErrorCode::INVALID_TXN_STATE,
            format!(
                "cannot {wanted}: the transactional id is in {} (no open transaction, or the \
                 other outcome was decided)",
                state.name()
            ),
        )),
    }
}

/// The state once every marker of a `Prepare*` state is written.
pub fn complete(m: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let state = match m.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort | TxnState::PrepareEpochFence => TxnState::CompleteAbort,
        _ => return None,
    };
    Some(TxnMetadata {
        state,
        partitions: BTreeSet::new(),
        start_ms: -1,
        update_ms: now_ms,
        ..m.clone()
    })
}

/// The abort of a transaction open past its timeout: PrepareAbort with the epoch bumped, so
/// the producer that abandoned it is fenced if it comes back.
pub fn timed_out(m: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let open_ms = now_ms.saturating_sub(m.start_ms);
    if m.state != TxnState::Ongoing || open_ms <= i64::from(m.timeout_ms) {
        return None;
    }
    Some(TxnMetadata {
        producer_epoch: next_epoch(m.producer_epoch).unwrap_or(m.producer_epoch),
        state: TxnState::PrepareAbort,
        update_ms: now_ms,
        ..m.clone()
    })
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
