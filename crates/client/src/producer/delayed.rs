//! Delayed sends (docs/queues.md, "Delayed delivery"): [`Producer::send_at`] sends one record
//! in a batch of its own with `ProduceDelayed` (operation 53); the partition's leader keeps it
//! in its timer log and appends it to the partition at the deliver-at time. Routed as `send`
//! routes (the record's partition, else its key's hash, else the next partition in turn);
//! retried on retriable errors (timeouts, `NOT_LEADER`, …) with the same bytes until the
//! producer's `delivery_timeout`. With idempotence the batch carries the producer's id and a
//! sequence of the producer's delayed sends, so the leader stores a retried batch once.
//!
//! Memory is bounded (review finding 12): each send in flight holds its encoded batch until
//! answered, so `send_at` first waits for room under [`DELAYED_SENDS_IN_FLIGHT_MAX`] sends
//! and [`DELAYED_SEND_BYTES_IN_FLIGHT_MAX`] bytes, as `send` waits when a partition queue is
//! full. The bounds are per process, shared by every producer in it (a producer has no field
//! for them yet: the producer's own struct is outside this module).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use tinymq_protocol::batch::{BatchBuilder, ProducerStamp, BATCH_HEADER_BYTES};
use tinymq_protocol::messages as m;
use tokio::sync::{oneshot, Semaphore};

use super::{partition_for_key, queue, Producer, ProducerRecord};
use crate::error::ClientError;

/// Most delayed sends waiting for their answer in this process; `send_at` waits past it.
pub const DELAYED_SENDS_IN_FLIGHT_MAX: usize = 10_000;
/// Most bytes of encoded batches of delayed sends waiting for their answer in this process
/// (256 MiB); a larger batch takes all of them.
pub const DELAYED_SEND_BYTES_IN_FLIGHT_MAX: u32 = 256 << 20;

static SENDS_IN_FLIGHT: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(DELAYED_SENDS_IN_FLIGHT_MAX)));
static BYTES_IN_FLIGHT: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(DELAYED_SEND_BYTES_IN_FLIGHT_MAX as usize)));

/// Where and when a delayed record will appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedMetadata {
    pub topic: Arc<str>,
    pub partition: u32,
    /// The deliver-at time the broker accepted (ms since the epoch): the one asked for, or
    /// the time it was stored if that was later.
    pub deliver_at_ms: i64,
}

/// Resolves once the leader has the record durably in its timer log.
pub struct DelayedDelivery {
    answer: oneshot::Receiver<Result<DelayedMetadata, ClientError>>,
}

impl Future for DelayedDelivery {
    type Output = Result<DelayedMetadata, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.answer).poll(cx).map(|answer| {
            answer.unwrap_or_else(|_| {
                Err(ClientError::Protocol("the delayed send was dropped".into()))
            })
        })
    }
}

impl Producer {
    /// Sends `record` to `topic`, to become visible to consumers at `deliver_at_ms` (ms since
    /// the Unix epoch; a time in the past means now; at most 7 days ahead of the broker's
    /// clock, else `INVALID_DELIVERY_TIME`). Each delivered record carries the header
    /// `tinymq.deliver-at`. The returned future resolves with the time the broker accepted.
    /// Waits while [`DELAYED_SENDS_IN_FLIGHT_MAX`] sends or
    /// [`DELAYED_SEND_BYTES_IN_FLIGHT_MAX`] bytes are in flight in this process.
    pub async fn send_at(
        &self,
        topic: &str,
        record: ProducerRecord,
        deliver_at_ms: i64,
    ) -> Result<DelayedDelivery, ClientError> {
        let state = self.topic(topic).await?;
        let count = state.partition_count()?;
        let partition = match (record.partition, &record.key) {
            (Some(p), _) => self.check_partition(&state, p, count)?,
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => state.next_batch_partition.fetch_add(1, Ordering::Relaxed) % count,
        };
        let stamp = match self.inner.identity.get(&self.inner.cluster).await? {
            Some(identity) => ProducerStamp {
                producer_id: identity.producer_id,
                producer_epoch: identity.producer_epoch,
                // Sequences of delayed sends are the producer's own, apart from each
                // partition's produce sequence: the leader deduplicates them by identity.
                base_sequence: self.inner.delayed_sequence.fetch_add(1, Ordering::Relaxed)
                    & 0x7fff_ffff,
            },
            None => ProducerStamp::NONE,
        };
        let mut builder = BatchBuilder::new(self.inner.config.compression, stamp);
        let timestamp = record.timestamp_ms.unwrap_or_else(queue::now_ms);
        record.with_input(timestamp, |input| builder.push(input));
        let batch = builder
            .build()
            .map_err(|e| ClientError::Protocol(format!("cannot encode the record: {e}")))?;
        let (tell, answer) = oneshot::channel();
        let delivery = DelayedDelivery { answer };
        let too_large = state.message_bytes_max.filter(|limit| batch.len() > *limit);
        if let Some(limit) = too_large {
            let _ = tell.send(Err(ClientError::RecordTooLarge {
                topic: topic.to_string(),
                bytes: batch.len().max(BATCH_HEADER_BYTES),
                limit,
            }));
            return Ok(delivery);
        }
        let request = m::ProduceDelayedRequest {
            topic: topic.to_string(),
            partition,
            deliver_at_ms,
            records: batch,
            timeout_ms: self.inner.cluster.config.request_timeout.as_millis() as u32,
        };
        let permits = in_flight_permits(request.records.len()).await?;
        let producer = self.clone();
        let name = state.name.clone();
        tokio::spawn(async move {
            let outcome = producer.send_delayed(&request).await;
            drop(permits);
            let _ = tell.send(outcome.map(|deliver_at_ms| DelayedMetadata {
                topic: name,
                partition,
                deliver_at_ms,
            }));
        });
        Ok(delivery)
    }

    /// Sends the request to the partition's leader until it is answered, a non-retriable
    /// error comes back, or `delivery_timeout` passes.
    async fn send_delayed(&self, request: &m::ProduceDelayedRequest) -> Result<i64, ClientError> {
        let cluster = &self.inner.cluster;
        let operation = format!("delayed send to {}/{}", request.topic, request.partition);
        let timeout = self.inner.config.delivery_timeout;
        crate::retry::retrying(&operation, timeout, ClientError::is_retriable, |_| async {
            let attempt = async {
                let leader = cluster.leader(&request.topic, request.partition).await?;
                let response = leader
                    .request(request, cluster.config.request_timeout)
                    .await?;
                crate::error::check(response.error.as_ref())?;
                Ok(response.deliver_at_ms)
            };
            let outcome: Result<i64, ClientError> = attempt.await;
            if outcome.as_ref().is_err_and(|e| e.is_retriable()) {
                // The leader may have moved: look it up again before the next attempt.
                cluster.invalidate(&request.topic);
            }
            outcome
        })
        .await
    }
}

/// Room for one more delayed send of `batch_bytes` (held until it is answered).
async fn in_flight_permits(
    batch_bytes: usize,
) -> Result<
    (
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::OwnedSemaphorePermit,
    ),
    ClientError,
> {
    let closed = |_| ClientError::Protocol("the delayed send limit was closed".into());
    let send = SENDS_IN_FLIGHT
        .clone()
        .acquire_owned()
        .await
        .map_err(closed)?;
    let bytes = u32::try_from(batch_bytes)
        .unwrap_or(u32::MAX)
        .clamp(1, DELAYED_SEND_BYTES_IN_FLIGHT_MAX);
    let bytes = BYTES_IN_FLIGHT
        .clone()
        .acquire_many_owned(bytes)
        .await
        .map_err(closed)?;
    Ok((send, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delayed_sends_wait_for_room_and_get_it_back_when_answered() {
        let before = BYTES_IN_FLIGHT.available_permits();
        let held = in_flight_permits(usize::MAX).await.unwrap();
        assert_eq!(
            BYTES_IN_FLIGHT.available_permits(),
            before - DELAYED_SEND_BYTES_IN_FLIGHT_MAX as usize,
            "a batch larger than the bound takes all of it"
        );
        let waiting = tokio::spawn(in_flight_permits(10));
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "the next send waits while the bound is used up"
        );
        drop(held);
        let next = waiting.await.unwrap().unwrap();
        assert_eq!(BYTES_IN_FLIGHT.available_permits(), before - 10);
        drop(next);
        assert_eq!(BYTES_IN_FLIGHT.available_permits(), before);
    }
}
