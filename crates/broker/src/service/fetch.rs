//! The long poll of a fetch: read every requested partition within the byte budgets, answer if
//! enough was read (or an error, or the wait is over), else wait for any of the partitions to
//! move and read again. What a read is differs by fetcher — a consumer reads below the high
//! watermark (`crate::handlers`), a follower below the log end (`crate::replica::serve`), a
//! filtered fetch scans (`crate::filtered_fetch`) — and is a [`PartitionReader`]; the wait,
//! the fetch memory and the connection's turn are the same for all of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tinymq_protocol::{messages as m, ErrorCode};
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::blocking;
use super::read::PartitionRead;
use crate::partition::Partition;
use crate::state::BrokerState;
use crate::topic::TOPIC_MESSAGE_BYTES_MAX;

/// How one kind of fetch reads its partitions.
pub(crate) trait PartitionReader: Clone + Send + Sync + 'static {
    /// A follower's reads: internal topics too, up to the log end, waking when it moves (a
    /// consumer's: client topics, below the high watermark, waking when it moves).
    const FOLLOWER: bool = false;
    /// The partition of `fp` if this fetcher may wait on it here (led here, for its kind).
    fn led(&self, state: &BrokerState, fp: &m::FetchPartition) -> Option<Arc<Partition>> {
        let led = if Self::FOLLOWER {
            state.led_partition_any(&fp.topic, fp.partition)
        } else {
            state.led_partition(&fp.topic, fp.partition)
        };
        led.ok().map(|(partition, _)| partition)
    }
    /// What a wait watches on a partition: its high watermark, or (followers) its log end.
    fn watch(&self, partition: &Partition) -> watch::Receiver<i64> {
        if Self::FOLLOWER {
            partition.watch_log_end()
        } else {
            partition.watch_high_watermark()
        }
    }
    /// Reads every requested partition once, in request order, within `budget` bytes in all:
    /// each result and the bytes it holds.
    fn read(&self, state: &BrokerState, req: &m::FetchRequest, budget: usize)
        -> Vec<PartitionRead>;
    /// Whether a read after a wake-up may run on the connection's task (it reads only what
    /// was just appended, from the page cache) rather than on a blocking thread.
    fn reads_inline_after_wake(&self) -> bool {
        true
    }
    /// Takes each read's results; true when they must be answered now whatever their size.
    fn answer_now(&mut self, _results: &[PartitionRead]) -> bool {
        false
    }
    /// Called once with the answer, for metrics (`stats`: the listener that carried the
    /// fetch).
    fn answered(
        &self,
        _state: &BrokerState,
        _stats: &tinymq_net::ConnectionStats,
        _results: &[PartitionRead],
    ) {
    }
}

/// A fetch's answer before encoding: the response's error and each partition's result with
/// its records (see [`crate::fetch_frame::encode`]).
pub(crate) struct FetchAnswer {
    pub error: Option<m::Error>,
    pub partitions: Vec<PartitionRead>,
}

/// What a fetch's answer holds: its share of the broker's fetch memory (release it once the
/// response is encoded) and the connection's turn for fetch responses (hold it until the
/// response is written).
pub struct FetchHold {
    pub memory: OwnedSemaphorePermit,
    pub turn: OwnedSemaphorePermit,
}

/// The record bytes one fetch may return: its `max_bytes` (0 = the cap) within the broker's
/// `fetch_bytes_max`.
pub(crate) fn fetch_budget(state: &BrokerState, req: &m::FetchRequest) -> usize {
    let fetch_bytes_max = state.config.fetch_bytes_max as usize;
    match req.max_bytes {
        0 => fetch_bytes_max,
        asked => (asked as usize).min(fetch_bytes_max),
    }
}

/// The answer of a fetch refused as a whole.
pub(crate) fn refused(error: m::Error) -> (FetchAnswer, Option<FetchHold>) {
    let answer = FetchAnswer {
        error: Some(error),
        partitions: vec![],
    };
    (answer, None)
}

/// Answers a fetch, with the reservation of the broker's fetch memory its records were read
/// under (hold it until the response is encoded). The reservation is taken for each read (not
/// while a long poll waits) and covers the budget plus one whole batch, the most a read
/// returns; it is cut to the bytes actually read.
///
/// The caller has refused a request naming more than `REQUEST_PARTITIONS_MAX` partitions
/// (`handlers::fetch`, the one entry, does so before anything else).
///
/// `turns` is the connection's one-at-a-time permit for fetch responses (see
/// `connection.rs`): taken before each read, given back while a long poll waits, and returned
/// in the [`FetchHold`], to be held until the response is written.
pub(crate) async fn long_poll<R: PartitionReader>(
    state: Arc<BrokerState>,
    req: m::FetchRequest,
    turns: Arc<tokio::sync::Semaphore>,
    mut reader: R,
    stats: Arc<tinymq_net::ConnectionStats>,
) -> (FetchAnswer, Option<FetchHold>) {
    let wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(state.config.fetch_wait_max);
    let deadline = tokio::time::Instant::from_std(Instant::now() + wait);
    let min_bytes = req.min_bytes.max(1) as usize;
    let budget = fetch_budget(&state, &req);
    let reserve = budget
        .saturating_add(TOPIC_MESSAGE_BYTES_MAX as usize)
        .min(state.config.fetch_memory_bytes_max as usize);
    let req = Arc::new(req);
    let mut woken = false;
    loop {
        // Subscribe before reading, so an append between the read and the wait is not missed.
        let watches: Vec<_> = req
            .partitions
            .iter()
            .filter_map(|fp| reader.led(&state, fp))
            .map(|p| {
                let mut w = reader.watch(&p);
                w.borrow_and_update();
                w
            })
            .collect();
        let Ok(turn) = turns.clone().acquire_owned().await else {
            return refused(ErrorCode::SHUTTING_DOWN.to_wire());
        };
        let Ok(mut reservation) = state
            .fetch_memory
            .clone()
            .acquire_many_owned(u32::try_from(reserve).unwrap_or(u32::MAX))
            .await
        else {
            return refused(ErrorCode::SHUTTING_DOWN.to_wire());
        };
        // A read after a wake-up runs inline: it reads only what was appended during the
        // wait, written through the page cache a moment ago, so it costs a few `pread`s of
        // cached pages, less than the hop to a blocking thread and back (which on two busy
        // cores is what the e2e tail was made of). The first read may reach old, cold data
        // anywhere in the log and goes to the blocking pool.
        let results = if woken && reader.reads_inline_after_wake() {
            reader.read(&state, &req, budget)
        } else {
            let (s, r, once) = (state.clone(), req.clone(), reader.clone());
            match blocking(move || once.read(&s, &r, budget)).await {
                Ok(read) => read,
                Err(e) => return refused(e),
            }
        };
        let total: usize = results.iter().map(|(_, records)| records.len()).sum();
        let any_error = results
            .iter()
            .any(|(r, _)| r.error.is_some() || r.diverging_epoch.is_some());
        let answer_now = reader.answer_now(&results);
        if total >= min_bytes
            || answer_now
            || any_error
            || watches.is_empty()
            || tokio::time::Instant::now() >= deadline
        {
            // Keep only what the records hold (a read never exceeds the reservation).
            drop(reservation.split(reservation.num_permits().saturating_sub(total)));
            reader.answered(&state, &stats, &results);
            let answer = FetchAnswer {
                error: None,
                partitions: results,
            };
            let hold = FetchHold {
                memory: reservation,
                turn,
            };
            return (answer, Some(hold));
        }
        drop((reservation, turn));
        wait_for_any(watches, deadline).await;
        woken = true;
    }
}

/// Waits until any of the watched offsets moves, or until `deadline`.
pub(crate) async fn wait_for_any(
    mut watches: Vec<watch::Receiver<i64>>,
    deadline: tokio::time::Instant,
) {
    let mut changes: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = watches
        .iter_mut()
        .map(|w| {
            let mut w = w.clone();
            Box::pin(async move {
                let _ = w.changed().await;
            }) as Pin<Box<dyn Future<Output = ()> + Send>>
        })
        .collect();
    let any = std::future::poll_fn(|cx| {
        if changes.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let _ = tokio::time::timeout_at(deadline, any).await;
}

/// Reads each requested partition with `read_one(index in the request, partition, budget
/// left)`, the budget shrinking by what each read returned.
pub(crate) fn read_each(
    req: &m::FetchRequest,
    budget: usize,
    mut read_one: impl FnMut(usize, &m::FetchPartition, usize) -> PartitionRead,
) -> Vec<PartitionRead> {
    let mut left = budget;
    req.partitions
        .iter()
        .enumerate()
        .map(|(i, fp)| {
            let read = read_one(i, fp, left);
            left = left.saturating_sub(read.1.len());
            read
        })
        .collect()
}
