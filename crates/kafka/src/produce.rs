//! Produce: a Kafka ProduceRequest as one native ProduceRequest, admitted (so written) before
//! the connection reads its next request, as a native produce is.
//!
//! Each record batch of a Kafka partition becomes one native ProducePartition (a Kafka
//! producer may send several batches back to back; the native request takes one per entry,
//! and writes entries naming the same partition in request order). The batches are stored as
//! they came: Kafka's RecordBatch v2 is tinymq's batch format.
//!
//! A transactional producer's batches (attribute bit 4) pass as they are: the partition keeps
//! their transaction open until the coordinator's marker (see `tinymq_broker::txn`).

mod split;

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use crate::answers::Answers;
use crate::context::{Ctx, Pending, Reply};
use crate::errors::{kafka_code_for, message_of, Resource};
use crate::leader;

/// What became of one Kafka partition's records on their way to the broker.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    /// Sent as this many native ProducePartitions, in order.
    Native { batches: usize },
    /// Answered here, without the broker.
    Refused { code: i16, message: String },
}

/// The Kafka request's topics and partitions in order, each with its [`Slot`], and the native
/// request carrying the batches.
#[derive(Debug)]
struct Plan {
    topics: Vec<(TopicName, Vec<(i32, Slot)>)>,
    native: m::ProduceRequest,
}

/// Admits the request (written before this returns); the pending response follows the
/// native one. acks = 0: the native write is still awaited (its flush wait raises the high
/// watermark), but no response is sent unless it failed (then the connection is closed).
pub(crate) async fn admit(ctx: &Arc<Ctx>, version: i16, request: ProduceRequest) -> Pending {
    let acks = request.acks;
    let Plan { topics, native } = plan(request);
    let call = if native.partitions.is_empty() {
        None
    } else {
        Some(ctx.admit(OpCode::Produce, &native).await)
    };
    // Written: the request's record bytes need not live on through the flush wait.
    drop(native);
    let ctx = Arc::clone(ctx);
    Box::pin(async move {
        let native = match call {
            Some(call) => call.finish::<m::ProduceResponse>().await,
            None => Ok(Some(m::ProduceResponse::default())),
        };
        let native = native.and_then(|r| {
            r.ok_or_else(|| ErrorCode::UNKNOWN_SERVER_ERROR.with_message("no produce response"))
        });
        let response = respond(&ctx, version, topics, native);
        if acks == 0 {
            return unacknowledged(&response);
        }
        Reply::send(ResponseKind::Produce(response))
    })
}

/// acks = 0: nothing to send, unless a partition failed (here or at the broker); then the
/// connection is closed, as Kafka does, so the producer (which hears nothing else) refreshes
/// its metadata.
fn unacknowledged(response: &ProduceResponse) -> Reply {
    let failed = response
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter().map(move |p| (t, p)))
        .find(|(_, p)| p.error_code != 0);
    match failed {
        Some((t, p)) => Reply::Close(format!(
            "a produce with acks=0 failed ({} partition {}: error {}{}); closing as Kafka does",
            t.name.as_str(),
            p.index,
            p.error_code,
            p.error_message
                .as_ref()
                .map(|m| format!(", {}", m.as_str()))
                .unwrap_or_default()
        )),
        None => Reply::Nothing,
    }
}

/// Splits the request into native partitions, refusing here what the broker need not see.
fn plan(request: ProduceRequest) -> Plan {
    let mut native = m::ProduceRequest {
        // acks = 0 is sent as 1: the broker then answers (it waits for the flush policy
        // either way), so a failure is seen and the connection closed (see `unacknowledged`).
        acks: match request.acks {
            0 => 1,
            acks => i32::from(acks),
        },
        // Kafka's timeout is at least 0; the native 0 means the default wait (30 s).
        timeout_ms: u32::try_from(request.timeout_ms).unwrap_or(0),
        partitions: Vec::new(),
        // The broker verifies a transaction's first batch to a partition with its coordinator.
        transactional_id: request
            .transactional_id
            .as_ref()
            .map_or(String::new(), |id| id.0.to_string()),
    };
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let name = topic.name.as_str().to_owned();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let slot = slot(&name, data.index, data.records, &mut native.partitions);
            partitions.push((data.index, slot));
        }
        topics.push((topic.name, partitions));
    }
    Plan { topics, native }
}

/// One Kafka partition's batches appended to `out` as native partitions.
fn slot(
    topic: &str,
    index: i32,
    records: Option<bytes::Bytes>,
    out: &mut Vec<m::ProducePartition>,
) -> Slot {
    let Ok(partition) = u32::try_from(index) else {
        return refused(K::UnknownTopicOrPartition, "negative partition index");
    };
    let batches = match split::batches(&records.unwrap_or_default()) {
        Ok(batches) => batches,
        Err(why) => return refused(K::CorruptMessage, &why),
    };
    let count = batches.len();
    out.extend(batches.into_iter().map(|records| m::ProducePartition {
        topic: topic.to_owned(),
        partition,
        records,
    }));
    Slot::Native { batches: count }
}

fn refused(code: K, message: &str) -> Slot {
    Slot::Refused {
        code: code.code(),
        message: message.to_owned(),
    }
}

/// The Kafka response: each partition's native results (or local refusal) in request order.
fn respond(
    ctx: &Ctx,
    version: i16,
    topics: Vec<(TopicName, Vec<(i32, Slot)>)>,
    native: Result<m::ProduceResponse, m::Error>,
) -> ProduceResponse {
    let mut results = Results::new(native);
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    let responses = topics
        .into_iter()
        .map(|(name, partitions)| {
            let partition_responses = partitions
                .into_iter()
                .map(|(index, slot)| {
                    let answer = match slot {
                        Slot::Refused { code, message } => Answer::refused(code, message),
                        Slot::Native { batches } => results.take(name.as_str(), index, batches),
                    };
                    answer.into_kafka(ctx, version, name.as_str(), index, &mut endpoints)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(name)
                .with_partition_responses(partition_responses)
        })
        .collect();
    let mut response = ProduceResponse::default().with_responses(responses);
    if version >= 10 {
        response = response.with_node_endpoints(endpoints);
    }
    response
}

/// The native answers, combined per Kafka partition.
struct Results(Answers<m::ProducePartitionResult>);

impl Results {
    fn new(native: Result<m::ProduceResponse, m::Error>) -> Results {
        Results(Answers::new(native))
    }

    /// The combined answer for a partition's `batches` batches: the first batch's offset, or
    /// the first error (batches before it are written; a retry of an idempotent producer's
    /// batches is recognised as a duplicate).
    fn take(&mut self, topic: &str, index: i32, batches: usize) -> Answer {
        if let Some(error) = &self.0.failed {
            return Answer::native(Some(error.clone()), -1, -1, 0);
        }
        let Ok(partition) = u32::try_from(index) else {
            return Answer::missing();
        };
        let mut combined: Option<Answer> = None;
        for _ in 0..batches {
            let Some(r) = self.0.take(topic, partition) else {
                return Answer::missing();
            };
            let answer =
                Answer::native(r.error, r.base_offset, r.log_start_offset, r.current_leader);
            combined = match combined {
                None => Some(answer),
                Some(first) if first.code != 0 => Some(first),
                Some(_) if answer.code != 0 => Some(answer),
                Some(first) => Some(Answer {
                    log_start_offset: answer.log_start_offset.max(first.log_start_offset),
                    ..first
                }),
            };
        }
        combined.unwrap_or_else(Answer::missing)
    }
}

/// One Kafka partition's answer before encoding.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    code: i16,
    message: Option<String>,
    base_offset: i64,
    log_start_offset: i64,
    /// With NOT_LEADER_OR_FOLLOWER: the native current leader (0 = unknown).
    current_leader: u32,
}

impl Answer {
    fn native(error: Option<m::Error>, base_offset: i64, log_start: i64, leader: u32) -> Answer {
        Answer {
            code: kafka_code_for(error.as_ref(), Resource::Topic),
            message: message_of(error.as_ref()),
            base_offset,
            log_start_offset: log_start,
            current_leader: leader,
        }
    }

    fn refused(code: i16, message: String) -> Answer {
        Answer {
            code,
            message: Some(message),
            base_offset: -1,
            log_start_offset: -1,
            current_leader: 0,
        }
    }

    fn missing() -> Answer {
        Answer::refused(
            K::UnknownServerError.code(),
            "the broker's answer left this partition out".to_owned(),
        )
    }

    fn into_kafka(
        self,
        ctx: &Ctx,
        version: i16,
        topic: &str,
        index: i32,
        endpoints: &mut Vec<NodeEndpoint>,
    ) -> PartitionProduceResponse {
        let mut out = PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(self.code)
            .with_base_offset(self.base_offset)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(self.log_start_offset);
        if version >= 8 {
            out = out.with_error_message(self.message.map(StrBytes::from_string));
        }
        let not_leader = self.code == K::NotLeaderOrFollower.code();
        let named = u32::try_from(index)
            .ok()
            .filter(|_| not_leader && version >= 10)
            .and_then(|p| leader::named(ctx, topic, p, self.current_leader));
        if let Some((leader, address)) = named {
            let node_id = crate::metadata::broker_id(leader.node_id);
            out = out.with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(node_id)
                    .with_leader_epoch(leader.epoch),
            );
            if let Some((host, port)) = address {
                if !endpoints.iter().any(|e| e.node_id == node_id) {
                    endpoints.push(
                        NodeEndpoint::default()
                            .with_node_id(node_id)
                            .with_host(StrBytes::from_string(host))
                            .with_port(i32::from(port)),
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
