//! Requests for partition data run as background tasks that outlive a `poll`: a fetch per
//! leader and an offset lookup per partition without a position. `poll` starts what is due,
//! waits up to its timeout for answers, and applies whichever arrived; a request still in
//! flight is picked up by a later `poll`. So a leader that hangs (stopped process, lost host)
//! holds up only its own partitions, never the others, and a cancelled `poll` loses no answer.
//! A fetch still unanswered [`FETCH_CHECK_MARGIN`] past its long-poll wait checks the route
//! through other nodes and is given up once they name a new leader (a stopped leader would
//! otherwise hold its partitions for the whole request timeout); offset lookups do the same
//! (`Cluster::list_offset`).
//!
//! An answer is applied only if it still fits: the partition is assigned, not being released,
//! and (for a fetch) still at the offset the fetch asked for.

use std::collections::HashMap;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};
use tokio::time::Instant;

use super::partitions::PartitionKey;
use super::Consumer;
use crate::error::ClientError;

/// How long past its long-poll wait a fetch may stay unanswered before the route is checked.
pub const FETCH_CHECK_MARGIN: Duration = Duration::from_secs(2);

/// A finished background request.
pub(super) enum Answer {
    Fetched {
        requested: Vec<(PartitionKey, i64)>,
        result: Result<m::FetchResponse, ClientError>,
    },
    Resolved {
        key: PartitionKey,
        result: Result<i64, ClientError>,
    },
}

impl Consumer {
    /// Starts what is due, then applies answers until records are buffered or `wait` passed.
    pub(super) async fn fetch(&mut self, wait: Duration) -> Result<(), ClientError> {
        let deadline = Instant::now() + wait;
        loop {
            self.start_lookups();
            self.start_fetches(wait).await?;
            if self.parts.has_buffered(&self.paused) {
                return Ok(());
            }
            if self.in_flight.is_empty() {
                // Nothing to fetch (no assignment yet, all paused or unavailable): wait
                // instead of spinning.
                tokio::time::sleep_until(deadline).await;
                return Ok(());
            }
            let Ok(Some(joined)) =
                tokio::time::timeout_at(deadline, self.in_flight.join_next()).await
            else {
                return Ok(());
            };
            let answer = joined.map_err(|e| ClientError::Protocol(e.to_string()))?;
            self.apply(answer)?;
            while let Some(joined) = self.in_flight.try_join_next() {
                self.apply(joined.map_err(|e| ClientError::Protocol(e.to_string()))?)?;
            }
        }
    }

    /// Looks up the start offset of every partition without a position (by `start_from`).
    fn start_lookups(&mut self) {
        let (start_from, isolation) = (self.config.start_from, self.config.isolation);
        for key in self.parts.unresolved(std::time::Instant::now()) {
            self.parts.set_busy(&key, true);
            let cluster = self.cluster.clone();
            self.in_flight.spawn(async move {
                let result = start_from.offset(&cluster, &key.0, key.1, isolation).await;
                Answer::Resolved { key, result }
            });
        }
    }

    /// One long-polling fetch per leader for the fetchable partitions.
    async fn start_fetches(&mut self, wait: Duration) -> Result<(), ClientError> {
        let mut by_leader: HashMap<String, Vec<(PartitionKey, i64)>> = HashMap::new();
        for (key, offset) in self
            .parts
            .fetchable(&self.paused, std::time::Instant::now())
        {
            let leader = match self.cluster.route(&key.0).await {
                Ok(route) => route.leader(key.1).map(str::to_string),
                Err(e) => Err(e),
            };
            match leader {
                Ok(leader) => by_leader.entry(leader).or_default().push((key, offset)),
                Err(e) if e.is_retriable() => self.now_unavailable(&key, &e),
                Err(e) => return Err(e),
            }
        }
        for (leader, requested) in by_leader {
            let request = m::FetchRequest {
                max_wait_ms: wait.as_millis() as u32,
                min_bytes: self.config.min_bytes,
                max_bytes: self.config.max_bytes,
                partitions: requested
                    .iter()
                    .map(|((topic, partition), offset)| m::FetchPartition {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *offset,
                        partition_bytes_max: self.config.partition_bytes_max,
                        ..Default::default()
                    })
                    .collect(),
                filter: self.config.filter.clone().unwrap_or_default(),
                isolation_level: self.config.isolation.level(),
                ..Default::default()
            };
            for (key, _) in &requested {
                self.parts.set_busy(key, true);
            }
            let cluster = self.cluster.clone();
            let timeout = wait + self.config.client.request_timeout;
            // A fetch unanswered well past its long-poll wait watches the route: a read is
            // always safe to give up, and its partitions move on to the new leader.
            let first_check = wait + FETCH_CHECK_MARGIN;
            let watched: Vec<PartitionKey> = requested.iter().map(|(k, _)| k.clone()).collect();
            self.in_flight.spawn(async move {
                let result = match cluster.connection(&leader).await {
                    Ok(connection) => tokio::select! {
                        r = connection.request(&request, timeout) => r,
                        moved = cluster.leader_moved(&watched, &leader, first_check) => Err(moved),
                    },
                    Err(e) => Err(e),
                };
                Answer::Fetched { requested, result }
            });
        }
        Ok(())
    }

    /// Applies one answer. Errors a retry may cure make partitions unavailable for a backoff;
    /// others end `poll`, unless records are buffered to return first.
    fn apply(&mut self, answer: Answer) -> Result<(), ClientError> {
        match answer {
            Answer::Resolved { key, result } => {
                self.parts.set_busy(&key, false);
                match result {
                    Ok(offset) => {
                        self.parts.resolve(&key, offset);
                        self.now_available(&key);
                    }
                    Err(e) => self.partition_failed(&key, e)?,
                }
            }
            Answer::Fetched { requested, result } => {
                for (key, _) in &requested {
                    self.parts.set_busy(key, false);
                }
                // A refusal of the whole fetch (an invalid filter, say) fails every partition.
                let checked = result.and_then(|response| {
                    crate::error::check(response.error.as_ref()).map(|()| response)
                });
                let response = match checked {
                    Ok(response) => response,
                    Err(e) => {
                        for (key, _) in &requested {
                            self.partition_failed(key, e.clone())?;
                        }
                        return Ok(());
                    }
                };
                let offsets: HashMap<&PartitionKey, i64> =
                    requested.iter().map(|(k, o)| (k, *o)).collect();
                for p in response.partitions {
                    let key = (p.topic.clone(), p.partition);
                    let Some(requested) = offsets.get(&key).copied() else {
                        continue; // not asked for
                    };
                    let sparse = self.config.filter.is_some();
                    let committed = self.config.isolation == super::Isolation::ReadCommitted;
                    match self.parts.buffer(p, requested, sparse, committed) {
                        Ok(()) => self.now_available(&key),
                        Err(e) => self.partition_failed(&key, e)?,
                    }
                }
            }
        }
        Ok(())
    }

    /// A request for one partition failed: an offset the log no longer has is reset by the
    /// start policy (as Kafka's `auto.offset.reset`), a retriable error makes the partition
    /// unavailable for a backoff, and any other error is returned.
    fn partition_failed(
        &mut self,
        key: &PartitionKey,
        error: ClientError,
    ) -> Result<(), ClientError> {
        if error.code() == Some(ErrorCode::OFFSET_OUT_OF_RANGE) {
            tracing::warn!(topic = %key.0, partition = key.1, %error,
                "position out of range; starting again by the start policy");
            self.parts.reset(key);
            return Ok(());
        }
        if error.is_retriable() {
            self.now_unavailable(key, &error);
            return Ok(());
        }
        if self.parts.has_buffered(&self.paused) {
            tracing::warn!(topic = %key.0, partition = key.1, %error, "partition failed");
            return Ok(());
        }
        Err(error)
    }
}
