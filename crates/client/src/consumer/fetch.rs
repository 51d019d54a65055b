//! One fetch round: the fetchable partitions grouped by leader, one long-polling request per
//! leader sent concurrently, and the results buffered. A leader that cannot be reached or
//! answers a retriable error makes only its partitions unavailable for a backoff.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tinymq_protocol::messages as m;

use super::partitions::PartitionKey;
use super::Consumer;
use crate::error::ClientError;

impl Consumer {
    /// Fetches every fetchable partition once, waiting up to `wait` on the brokers.
    pub(super) async fn fetch(&mut self, wait: Duration) -> Result<(), ClientError> {
        let mut by_leader: HashMap<String, Vec<m::FetchPartition>> = HashMap::new();
        for (key, offset) in self.parts.fetchable(&self.paused, Instant::now()) {
            let leader = match self.cluster.route(&key.0).await {
                Ok(route) => route.leader(key.1).map(str::to_string),
                Err(e) => Err(e),
            };
            match leader {
                Ok(leader) => by_leader
                    .entry(leader)
                    .or_default()
                    .push(m::FetchPartition {
                        topic: key.0,
                        partition: key.1,
                        offset,
                        partition_bytes_max: self.config.partition_bytes_max,
                    }),
                Err(e) if e.is_retriable() => self.now_unavailable(&key, &e),
                Err(e) => return Err(e),
            }
        }
        if by_leader.is_empty() {
            // Nothing to fetch (no assignment yet, all paused or unavailable): wait instead
            // of spinning.
            tokio::time::sleep(wait).await;
            return Ok(());
        }
        let fetches: Vec<_> = by_leader
            .into_iter()
            .map(|(leader, partitions)| {
                let keys: Vec<PartitionKey> = partitions
                    .iter()
                    .map(|p| (p.topic.clone(), p.partition))
                    .collect();
                let cluster = self.cluster.clone();
                let request = m::FetchRequest {
                    max_wait_ms: wait.as_millis() as u32,
                    min_bytes: self.config.min_bytes,
                    max_bytes: self.config.max_bytes,
                    partitions,
                };
                let timeout = wait + self.config.client.request_timeout;
                let task = tokio::spawn(async move {
                    cluster
                        .connection(&leader)
                        .await?
                        .request(&request, timeout)
                        .await
                });
                (keys, task)
            })
            .collect();
        let mut fatal = None;
        for (keys, task) in fetches {
            let response = match task.await {
                Ok(Ok(response)) => response,
                Ok(Err(e)) if e.is_retriable() => {
                    keys.iter().for_each(|k| self.now_unavailable(k, &e));
                    continue;
                }
                Ok(Err(e)) => {
                    fatal.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            };
            for p in response.partitions {
                let key = (p.topic.clone(), p.partition);
                match self.parts.buffer(p) {
                    Ok(()) => self.now_available(&key),
                    Err(e) if e.is_retriable() => self.now_unavailable(&key, &e),
                    Err(e) => {
                        fatal.get_or_insert(e);
                    }
                }
            }
        }
        match fatal {
            Some(e) if !self.parts.has_buffered(&self.paused) => Err(e),
            _ => Ok(()),
        }
    }
}
