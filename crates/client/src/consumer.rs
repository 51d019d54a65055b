//! The consumer: assign partitions, seek, and poll records with long-polling fetches sent to
//! each partition's leader. Records of a partition come back in offset order; every batch's
//! CRC is checked before its records are returned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tinymq_protocol::batch::{BatchIter, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{check, ClientError};

/// Where a partition without a position starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
}

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub client: ClientConfig,
    pub start_from: StartFrom,
    /// Longest a fetch waits on the broker for data (long polling).
    pub max_wait: Duration,
    pub min_bytes: u32,
    /// Bytes per fetch response, across partitions.
    pub max_bytes: u32,
    pub partition_bytes_max: u32,
}

impl ConsumerConfig {
    pub fn new(bootstrap: &str) -> ConsumerConfig {
        ConsumerConfig {
            client: ClientConfig::new(bootstrap),
            start_from: StartFrom::Latest,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 16 << 20,
            partition_bytes_max: 1 << 20,
        }
    }
}

/// A record as consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

type PartitionKey = (String, u32);

/// A consumer of explicitly assigned partitions.
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use std::time::Duration;
/// use tinymq_client::{Consumer, ConsumerConfig, StartFrom};
/// let mut config = ConsumerConfig::new("127.0.0.1:21581");
/// config.start_from = StartFrom::Earliest;
/// let mut consumer = Consumer::new(config)?;
/// consumer.assign("orders", None).await?; // every partition
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     println!("{}/{} {:?}", record.partition, record.offset, record.value);
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    /// Next offset to read per assigned partition; `None` until resolved by `start_from`.
    positions: BTreeMap<PartitionKey, Option<i64>>,
}

impl Consumer {
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        Ok(Consumer {
            cluster: Cluster::new(config.client.clone())?,
            config,
            positions: BTreeMap::new(),
        })
    }

    /// Adds partitions of `topic` to the assignment (`None`: every partition).
    pub async fn assign(
        &mut self,
        topic: &str,
        partitions: Option<Vec<u32>>,
    ) -> Result<(), ClientError> {
        let route = self.cluster.refresh(topic).await?;
        let all: Vec<u32> = (0..route.partition_count()).collect();
        for p in partitions.unwrap_or(all) {
            if p >= route.partition_count() {
                return Err(ClientError::Server {
                    code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message: format!("{topic} has no partition {p}"),
                });
            }
            self.positions.entry((topic.to_string(), p)).or_insert(None);
        }
        Ok(())
    }

    pub fn seek(&mut self, topic: &str, partition: u32, offset: i64) {
        self.positions
            .insert((topic.to_string(), partition), Some(offset));
    }

    /// The next offset this consumer will read from a partition, once known.
    pub fn position(&self, topic: &str, partition: u32) -> Option<i64> {
        self.positions
            .get(&(topic.to_string(), partition))
            .copied()
            .flatten()
    }

    /// Asks the leader for an offset: `-1` latest, `-2` earliest, or a timestamp.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        let connection = self.cluster.leader(topic, partition).await?;
        let response = connection
            .request(
                &m::ListOffsetsRequest {
                    partitions: vec![m::ListOffsetsPartition {
                        topic: topic.into(),
                        partition,
                        timestamp,
                    }],
                },
                self.config.client.request_timeout,
            )
            .await?;
        let p = response
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty list-offsets response".into()))?;
        check(p.error.as_ref())?;
        Ok(p.offset)
    }

    /// Fixes the start position of every assigned partition that has none yet (by
    /// `start_from`), without fetching. `poll` does this itself; call it to pin "latest" down
    /// before producers start.
    pub async fn resolve_positions(&mut self) -> Result<(), ClientError> {
        let unresolved: Vec<PartitionKey> = self
            .positions
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let timestamp = match self.config.start_from {
            StartFrom::Earliest => -2,
            StartFrom::Latest => -1,
        };
        for key in unresolved {
            let offset = self.list_offset(&key.0, key.1, timestamp).await?;
            self.positions.insert(key, Some(offset));
        }
        Ok(())
    }

    /// Fetches whatever is available, waiting up to `timeout` for something to arrive.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        self.resolve_positions().await?;
        let mut by_leader: HashMap<String, Vec<m::FetchPartition>> = HashMap::new();
        for ((topic, partition), position) in &self.positions {
            let route = self.cluster.route(topic).await?;
            let leader = route
                .leaders
                .get(*partition as usize)
                .cloned()
                .ok_or_else(|| {
                    ClientError::Protocol(format!("no leader for {topic}/{partition}"))
                })?;
            by_leader
                .entry(leader)
                .or_default()
                .push(m::FetchPartition {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: position.expect("resolved above"),
                    partition_bytes_max: self.config.partition_bytes_max,
                });
        }
        let wait = timeout.min(self.config.max_wait);
        let fetches = by_leader.into_iter().map(|(leader, partitions)| {
            let cluster = self.cluster.clone();
            let request = m::FetchRequest {
                max_wait_ms: wait.as_millis() as u32,
                min_bytes: self.config.min_bytes,
                max_bytes: self.config.max_bytes,
                partitions,
            };
            let timeout = wait + self.config.client.request_timeout;
            tokio::spawn(async move {
                cluster
                    .connection(&leader)
                    .await?
                    .request(&request, timeout)
                    .await
            })
        });
        let mut records = Vec::new();
        let mut first_error = None;
        for fetch in fetches.collect::<Vec<_>>() {
            let response = match fetch.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            };
            for p in response.partitions {
                if let Err(e) = self.take_records(p, &mut records) {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if records.is_empty() => Err(e),
            _ => Ok(records),
        }
    }

    /// Decodes one partition's fetch result, appending records at or after its position.
    fn take_records(
        &mut self,
        p: m::FetchPartitionResult,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<(), ClientError> {
        if let Err(e) = check(p.error.as_ref()) {
            if e.needs_metadata_refresh() {
                self.cluster.invalidate(&p.topic);
            }
            return Err(e);
        }
        let key = (p.topic.clone(), p.partition);
        let Some(Some(mut position)) = self.positions.get(&key).copied() else {
            return Ok(());
        };
        for batch in BatchIter::new(p.records) {
            let batch = batch?;
            if batch.is_control() {
                position = position.max(batch.next_offset());
                continue;
            }
            for record in batch.records(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)? {
                if record.offset < position {
                    continue;
                }
                position = record.offset + 1;
                out.push(ConsumerRecord {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset: record.offset,
                    timestamp_ms: record.timestamp_ms,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value))
                        .collect(),
                });
            }
        }
        self.positions.insert(key, Some(position));
        Ok(())
    }
}
