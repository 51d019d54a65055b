//! Fetch: a Kafka FetchRequest (v4..=12) as one native FetchRequest, long poll included
//! (`max_wait_ms`, `min_bytes`), and its records returned verbatim: whole batches as the log
//! holds them, the first of which may start before the requested offset (clients skip the
//! records below it, as they do with Kafka).
//!
//! No fetch sessions (KIP-227): every answer says session 0, which tells a client that no
//! session was created, so it keeps sending full fetches; a request naming a session we never
//! handed out gets FETCH_SESSION_ID_NOT_FOUND. Kafka's byte bounds are applied to the native
//! answer (see [`bounds`]). Transactions (KIP-98): `isolation_level` is passed through (1,
//! read committed, reads below the last stable offset), and the native answer's last stable
//! offset and aborted transactions are Kafka's (aborted transactions from v4, the oldest
//! version served).

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
};
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use tinymq_protocol::{messages as m, OpCode};

use crate::answers::Answers;
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};
use crate::leader;
use bounds::Budget;

mod bounds;

pub(crate) async fn handle(ctx: Arc<Ctx>, version: i16, request: FetchRequest) -> FetchResponse {
    if request.session_id != 0 {
        // Only a session we created could be continued, and we create none.
        let code = K::FetchSessionIdNotFound.code();
        return FetchResponse::default().with_error_code(code);
    }
    let (topics, native) = plan(&request);
    let answer = ctx
        .call::<_, m::FetchResponse>(OpCode::Fetch, &native)
        .await;
    let mut results = Results::new(answer);
    let mut budget = Budget::new(request.max_bytes);
    let responses = topics
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, partition_max_bytes)| {
                    let result = results.take(name.as_str(), index).map(|mut r| {
                        r.records = budget.take(r.records, partition_max_bytes);
                        r
                    });
                    partition_data(&ctx, version, name.as_str(), index, result)
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(name)
                .with_partitions(partitions)
        })
        .collect();
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 7 {
        response = response.with_error_code(results.top_level_code());
    }
    response
}

/// Bytes of records an answer carries.
pub(crate) fn records_bytes(response: &FetchResponse) -> usize {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref())
        .map(|r| r.len())
        .sum()
}

/// A Kafka topic's partitions asked for: index and `partition_max_bytes`.
type Asked = Vec<(i32, i32)>;

/// The Kafka topics and partitions in request order, and the native request.
fn plan(request: &FetchRequest) -> (Vec<(TopicName, Asked)>, m::FetchRequest) {
    // min_bytes 0 is Kafka's "answer at once"; the native fetch waits for at least one byte.
    let max_wait_ms = match request.min_bytes {
        ..=0 => 0,
        _ => u32::try_from(request.max_wait_ms).unwrap_or(0),
    };
    let mut native = m::FetchRequest {
        filter: String::new(),
        max_wait_ms,
        min_bytes: u32::try_from(request.min_bytes).unwrap_or(0),
        max_bytes: u32::try_from(request.max_bytes).unwrap_or(0),
        partitions: Vec::new(),
        replica_id: 0,
        // Kafka's 0 and 1 are the native ones; anything else the broker refuses.
        isolation_level: u32::try_from(request.isolation_level).unwrap_or(u32::MAX),
    };
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut indexes = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            indexes.push((p.partition, p.partition_max_bytes));
            // A negative index is answered here (no native partition is sent for it).
            let Ok(partition) = u32::try_from(p.partition) else {
                continue;
            };
            native.partitions.push(m::FetchPartition {
                topic: topic.topic.as_str().to_owned(),
                partition,
                offset: p.fetch_offset,
                // Kafka's 0 would mean "nothing"; the native 0 means "the fetch's budget".
                partition_bytes_max: u32::try_from(p.partition_max_bytes).unwrap_or(0).max(1),
                ..Default::default()
            });
        }
        topics.push((topic.topic.clone(), indexes));
    }
    (topics, native)
}

/// The native results, each partition's or the error it gets instead.
struct Results(Answers<m::FetchPartitionResult>);

impl Results {
    fn new(answer: Result<m::FetchResponse, m::Error>) -> Results {
        Results(Answers::new(answer))
    }

    /// The native result for one requested partition, or the error it gets instead.
    fn take(&mut self, topic: &str, index: i32) -> Result<m::FetchPartitionResult, (i16, String)> {
        if let Some(error) = &self.0.failed {
            let code = kafka_code_for(Some(error), Resource::Topic);
            return Err((code, error.message.clone()));
        }
        let Ok(partition) = u32::try_from(index) else {
            let code = K::UnknownTopicOrPartition.code();
            return Err((code, "negative partition index".into()));
        };
        self.0.take(topic, partition).ok_or_else(|| {
            let code = K::UnknownServerError.code();
            (code, "the broker's answer left this partition out".into())
        })
    }

    /// The response-level error code (v7+): set only when the whole request failed.
    fn top_level_code(&self) -> i16 {
        kafka_code_for(self.0.failed.as_ref(), Resource::Topic)
    }
}

/// One partition's Kafka answer.
fn partition_data(
    ctx: &Ctx,
    version: i16,
    topic: &str,
    index: i32,
    result: Result<m::FetchPartitionResult, (i16, String)>,
) -> PartitionData {
    let data = PartitionData::default()
        .with_partition_index(index)
        .with_aborted_transactions(Some(Vec::new()))
        .with_records(Some(bytes::Bytes::new()));
    let result = match result {
        Ok(result) => result,
        Err((code, _)) => {
            return data
                .with_error_code(code)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
        }
    };
    let code = kafka_code_for(result.error.as_ref(), Resource::Topic);
    let aborted = result
        .aborted_transactions
        .iter()
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(a.producer_id))
                .with_first_offset(a.first_offset)
        })
        .collect();
    let mut data = data
        .with_error_code(code)
        .with_high_watermark(result.high_watermark)
        .with_last_stable_offset(result.last_stable_offset)
        .with_log_start_offset(result.log_start_offset)
        .with_aborted_transactions(Some(aborted))
        .with_records(Some(result.records));
    if version >= 12 && code == K::NotLeaderOrFollower.code() {
        let named = u32::try_from(index)
            .ok()
            .and_then(|p| leader::named(ctx, topic, p, result.current_leader));
        if let Some((leader, _)) = named {
            data = data.with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(crate::metadata::broker_id(leader.node_id))
                    .with_leader_epoch(leader.epoch),
            );
        }
    }
    data
}

#[cfg(test)]
mod tests;
