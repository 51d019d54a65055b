//! Request handlers: one async function per operation, from a decoded request to its response.
//! Disk work runs on blocking threads; no lock is held across an `.await`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::partition::{Partition, PartitionError, PendingAppend};
use crate::state::BrokerState;
use crate::topic::{validate_topic_name, TopicSettings};

fn ok() -> Option<m::Error> {
    None
}

fn err(code: ErrorCode, message: impl Into<String>) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// Runs blocking disk work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, m::Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("worker failed: {e}")))
}

fn unknown_partition(topic: &str, partition: u32) -> m::Error {
    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        .with_message(format!("unknown topic or partition {topic}/{partition}"))
}

pub async fn create_topic(
    state: Arc<BrokerState>,
    req: m::CreateTopicRequest,
) -> m::CreateTopicResponse {
    let fail = |error: m::Error| m::CreateTopicResponse {
        error: Some(error),
        config: None,
    };
    if let Err((code, msg)) = validate_topic_name(&req.name) {
        return fail(code.with_message(msg));
    }
    let settings = match TopicSettings::from_wire(req.config.as_ref(), &state.config.topic_defaults)
    {
        Ok(s) => s,
        Err((code, msg)) => return fail(code.with_message(msg)),
    };
    if req.validate_only {
        if state.metadata.topic(&req.name).is_some() {
            return fail(
                ErrorCode::TOPIC_ALREADY_EXISTS
                    .with_message(format!("topic {} already exists", req.name)),
            );
        }
        return m::CreateTopicResponse {
            error: ok(),
            config: Some(settings.to_wire()),
        };
    }
    let name = req.name.clone();
    let result = blocking(move || {
        state
            .metadata
            .create_topic(&name, settings.clone())
            .map_err(|e| e.error_code().with_message(e.to_string()))?;
        match state.open_topic(&name, settings.clone(), true) {
            Ok(topic) => {
                state.insert_topic(&name, topic);
                tracing::info!(topic = %name, partitions = settings.partitions, "topic created");
                Ok(settings)
            }
            Err(e) => {
                // Leave no topic behind that has no partitions.
                let _ = state.metadata.delete_topic(&name);
                Err(e.error_code().with_message(e.to_string()))
            }
        }
    })
    .await;
    match result.and_then(|r| r) {
        Ok(settings) => m::CreateTopicResponse {
            error: ok(),
            config: Some(settings.to_wire()),
        },
        Err(e) => fail(e),
    }
}

pub async fn delete_topic(
    state: Arc<BrokerState>,
    req: m::DeleteTopicRequest,
) -> m::DeleteTopicResponse {
    let result = blocking(move || {
        state
            .metadata
            .delete_topic(&req.name)
            .map_err(|e| e.error_code().with_message(e.to_string()))?;
        if let Some(topic) = state.remove_topic(&req.name) {
            for partition in &topic.partitions {
                crate::state::remove_partition_dir(
                    &state.config.data_dir,
                    &req.name,
                    partition.index,
                )
                .map_err(|e| e.error_code().with_message(e.to_string()))?;
            }
        }
        tracing::info!(topic = %req.name, "topic deleted");
        Ok(())
    })
    .await;
    m::DeleteTopicResponse {
        error: result.and_then(|r| r).err(),
    }
}

pub fn list_topics(state: &BrokerState) -> m::ListTopicsResponse {
    m::ListTopicsResponse {
        error: ok(),
        names: state.topic_names(),
    }
}

fn partition_state(state: &BrokerState, p: &Partition) -> m::PartitionState {
    let node = state.config.node_id;
    m::PartitionState {
        partition: p.index,
        leader: node,
        leader_epoch: 0,
        replicas: vec![node],
        isr: vec![node],
        log_start_offset: p.log.log_start_offset(),
        log_end_offset: p.log.log_end_offset(),
        high_watermark: p.high_watermark(),
        size_bytes: p.log.size_bytes(),
    }
}

pub fn describe_topic(
    state: &BrokerState,
    req: m::DescribeTopicRequest,
) -> m::DescribeTopicResponse {
    let Some(topic) = state.topic(&req.name) else {
        return m::DescribeTopicResponse {
            error: err(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("unknown topic {}", req.name),
            ),
            ..Default::default()
        };
    };
    m::DescribeTopicResponse {
        error: ok(),
        name: req.name,
        config: Some(topic.settings.to_wire()),
        partitions: topic
            .partitions
            .iter()
            .map(|p| partition_state(state, p))
            .collect(),
    }
}

pub fn metadata(state: &BrokerState, req: m::MetadataRequest) -> m::MetadataResponse {
    let node = state.config.node_id;
    let names = if req.topics.is_empty() {
        state.topic_names()
    } else {
        req.topics
    };
    let topics = names
        .into_iter()
        .map(|name| match state.topic(&name) {
            None => m::TopicRoutes {
                error: err(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("unknown topic {name}"),
                ),
                name,
                partitions: vec![],
            },
            Some(topic) => m::TopicRoutes {
                name,
                error: ok(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| m::PartitionRoute {
                        partition: p.index,
                        error: ok(),
                        leader: node,
                        leader_epoch: 0,
                        replicas: vec![node],
                        isr: vec![node],
                    })
                    .collect(),
            },
        })
        .collect();
    m::MetadataResponse {
        error: ok(),
        cluster_id: state.metadata.cluster_id(),
        brokers: vec![m::BrokerAddress {
            node_id: node,
            host: state.advertised.ip().to_string(),
            port: u32::from(state.advertised.port()),
        }],
        topics,
    }
}

/// One partition of a produce request after its write: where to wait, or why it failed.
type PartitionWrite = (
    String,
    u32,
    Result<(Arc<Partition>, PendingAppend), m::Error>,
);

/// A produce request whose batches are written and that waits for the flush policy.
pub struct PreparedProduce {
    acks: i32,
    timeout: Duration,
    partitions: Vec<PartitionWrite>,
}

impl PreparedProduce {
    pub fn acks(&self) -> i32 {
        self.acks
    }
}

/// The first half of a produce: checks and writes every partition's batches, in request order.
/// The connection runs this before reading its next frame, so the produce requests of one
/// connection are stored in the order they were sent, whatever their `acks`.
pub async fn produce_write(
    state: Arc<BrokerState>,
    req: m::ProduceRequest,
) -> Result<PreparedProduce, m::ProduceResponse> {
    if !matches!(req.acks, -1..=1) {
        return Err(m::ProduceResponse {
            error: err(
                ErrorCode::INVALID_REQUIRED_ACKS,
                format!("acks must be -1, 0 or 1, got {}", req.acks),
            ),
            partitions: vec![],
        });
    }
    let timeout = Duration::from_millis(u64::from(req.timeout_ms).max(1))
        .min(state.config.produce_timeout_max);
    let acks = req.acks;
    let written = blocking(move || {
        req.partitions
            .into_iter()
            .map(|p| {
                let outcome = match state.partition(&p.topic, p.partition) {
                    None => Err(unknown_partition(&p.topic, p.partition)),
                    Some(partition) => {
                        let batch_max = partition_batch_max(&state, &p.topic);
                        match partition.write(p.records, batch_max) {
                            Ok(pending) => Ok((partition, pending)),
                            Err(PartitionError { code, message }) => {
                                Err(code.with_message(message))
                            }
                        }
                    }
                };
                (p.topic, p.partition, outcome)
            })
            .collect()
    })
    .await;
    match written {
        Ok(partitions) => Ok(PreparedProduce {
            acks,
            timeout,
            partitions,
        }),
        Err(e) => Err(m::ProduceResponse {
            error: Some(e),
            partitions: vec![],
        }),
    }
}

/// The second half: waits (concurrently across partitions) for each write to meet its flush
/// policy, and builds the response.
pub async fn produce_finish(prepared: PreparedProduce) -> m::ProduceResponse {
    let timeout = prepared.timeout;
    let waits: Vec<_> = prepared
        .partitions
        .into_iter()
        .map(|(topic, partition, written)| {
            let task = tokio::spawn(async move {
                let (p, pending) = written?;
                let log_start = p.log.log_start_offset();
                let work = blocking(move || p.finish(pending));
                match tokio::time::timeout(timeout, work).await {
                    Ok(Ok(Ok(offset))) => Ok((offset, log_start)),
                    Ok(Ok(Err(PartitionError { code, message }))) => {
                        Err(code.with_message(message))
                    }
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                        "append not confirmed within {} ms; it may still complete",
                        timeout.as_millis()
                    ))),
                }
            });
            (topic, partition, task)
        })
        .collect();
    let mut results = Vec::with_capacity(waits.len());
    for (topic, partition, task) in waits {
        let outcome = task
            .await
            .unwrap_or_else(|e| Err(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())));
        let (error, base_offset, log_start_offset) = match outcome {
            Ok((offset, log_start)) => (None, offset, log_start),
            Err(e) => (Some(e), -1, -1),
        };
        results.push(m::ProducePartitionResult {
            topic,
            partition,
            error,
            base_offset,
            log_append_time_ms: -1,
            log_start_offset,
        });
    }
    m::ProduceResponse {
        error: ok(),
        partitions: results,
    }
}

fn partition_batch_max(state: &BrokerState, topic: &str) -> u32 {
    state
        .topic(topic)
        .map_or(0, |t| t.settings.message_bytes_max)
}

/// Reads every requested partition once, within the byte budgets.
fn read_partitions(
    state: &BrokerState,
    req: &m::FetchRequest,
) -> (Vec<m::FetchPartitionResult>, usize) {
    let mut budget = req.max_bytes.max(1) as usize;
    let mut total = 0;
    let results = req
        .partitions
        .iter()
        .map(|fp| {
            let mut result = m::FetchPartitionResult {
                topic: fp.topic.clone(),
                partition: fp.partition,
                error: ok(),
                high_watermark: -1,
                log_start_offset: -1,
                records: Bytes::new(),
            };
            let Some(partition) = state.partition(&fp.topic, fp.partition) else {
                result.error = Some(unknown_partition(&fp.topic, fp.partition));
                return result;
            };
            let hw = partition.high_watermark();
            result.high_watermark = hw;
            result.log_start_offset = partition.log.log_start_offset();
            if budget == 0 {
                return result;
            }
            let limit = (fp.partition_bytes_max.max(1) as usize).min(budget);
            match partition.log.read(fp.offset, limit, Some(hw)) {
                Ok(read) => {
                    budget = budget.saturating_sub(read.records.len());
                    total += read.records.len();
                    result.records = read.records;
                }
                Err(e) => result.error = Some(e.error_code().with_message(e.to_string())),
            }
            result
        })
        .collect();
    (results, total)
}

/// Waits until any of the high watermarks moves, or until `deadline`.
async fn wait_for_any(
    mut watches: Vec<tokio::sync::watch::Receiver<i64>>,
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

pub async fn fetch(state: Arc<BrokerState>, req: m::FetchRequest) -> m::FetchResponse {
    let wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(state.config.fetch_wait_max);
    let deadline = tokio::time::Instant::from_std(Instant::now() + wait);
    let min_bytes = req.min_bytes.max(1) as usize;
    let req = Arc::new(req);
    loop {
        // Subscribe before reading, so an append between the read and the wait is not missed.
        let watches: Vec<_> = req
            .partitions
            .iter()
            .filter_map(|fp| state.partition(&fp.topic, fp.partition))
            .map(|p| {
                let mut w = p.watch_high_watermark();
                w.borrow_and_update();
                w
            })
            .collect();
        let (s, r) = (state.clone(), req.clone());
        let (results, total) = match blocking(move || read_partitions(&s, &r)).await {
            Ok(read) => read,
            Err(e) => {
                return m::FetchResponse {
                    error: Some(e),
                    partitions: vec![],
                }
            }
        };
        let any_error = results.iter().any(|r| r.error.is_some());
        if total >= min_bytes
            || any_error
            || watches.is_empty()
            || tokio::time::Instant::now() >= deadline
        {
            return m::FetchResponse {
                error: ok(),
                partitions: results,
            };
        }
        wait_for_any(watches, deadline).await;
    }
}

pub async fn list_offsets(
    state: Arc<BrokerState>,
    req: m::ListOffsetsRequest,
) -> m::ListOffsetsResponse {
    let result = blocking(move || {
        req.partitions
            .into_iter()
            .map(|lp| {
                let mut out = m::ListOffsetsPartitionResult {
                    topic: lp.topic.clone(),
                    partition: lp.partition,
                    error: ok(),
                    offset: -1,
                    timestamp: -1,
                };
                let Some(p) = state.partition(&lp.topic, lp.partition) else {
                    out.error = Some(unknown_partition(&lp.topic, lp.partition));
                    return out;
                };
                match lp.timestamp {
                    -1 => out.offset = p.high_watermark(),
                    -2 => out.offset = p.log.log_start_offset(),
                    ts => match p.log.offset_for_timestamp(ts) {
                        Ok(Some((offset, timestamp))) if offset < p.high_watermark() => {
                            out.offset = offset;
                            out.timestamp = timestamp;
                        }
                        Ok(_) => {}
                        Err(e) => out.error = Some(e.error_code().with_message(e.to_string())),
                    },
                }
                out
            })
            .collect()
    })
    .await;
    match result {
        Ok(partitions) => m::ListOffsetsResponse {
            error: ok(),
            partitions,
        },
        Err(e) => m::ListOffsetsResponse {
            error: Some(e),
            partitions: vec![],
        },
    }
}

pub async fn init_producer_id(
    state: Arc<BrokerState>,
    req: m::InitProducerIdRequest,
) -> m::InitProducerIdResponse {
    if !req.transactional_id.is_empty() {
        return m::InitProducerIdResponse {
            error: err(
                ErrorCode::INVALID_REQUEST,
                "transactions are not supported yet",
            ),
            producer_id: -1,
            producer_epoch: -1,
        };
    }
    match blocking(move || state.metadata.allocate_producer_id()).await {
        Ok(Ok(producer_id)) => m::InitProducerIdResponse {
            error: ok(),
            producer_id,
            producer_epoch: 0,
        },
        Ok(Err(e)) => m::InitProducerIdResponse {
            error: Some(e.error_code().with_message(e.to_string())),
            producer_id: -1,
            producer_epoch: -1,
        },
        Err(e) => m::InitProducerIdResponse {
            error: Some(e),
            producer_id: -1,
            producer_epoch: -1,
        },
    }
}
