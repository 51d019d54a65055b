//! Kafka's transaction APIs (KIP-98, KIP-447), each translated to its native request and
//! answered by the broker's transaction coordinator (`tinymq_broker::txn`) or the group
//! coordinator: AddPartitionsToTxn v0..=3, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
//! WriteTxnMarkers (an operator's abort, KIP-664), DescribeTransactions, ListTransactions and
//! DescribeProducers. InitProducerId with a transactional id is in `producer_id`, and
//! FindCoordinator with key type 1 in `groups::admin`.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use crate::context::Ctx;
use crate::errors::{kafka_code_for, message_of, Resource};

/// The Kafka code of a transaction coordinator's answer: a coordinator without a live
/// leader is COORDINATOR_NOT_AVAILABLE, a refusal of the transactional id
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
pub(crate) fn txn_code(error: Option<&m::Error>) -> i16 {
    if error.is_some_and(|e| e.code == u32::from(ErrorCode::LEADER_NOT_AVAILABLE.code())) {
        return K::CoordinatorNotAvailable.code();
    }
    kafka_code_for(error, Resource::TransactionalId)
}

/// The error of a native answer: its top-level one, or the call's failure.
fn error_of<T>(
    answer: &Result<T, m::Error>,
    top: impl Fn(&T) -> Option<&m::Error>,
) -> Option<m::Error> {
    match answer {
        Ok(response) => top(response).filter(|e| !e.is_ok()).cloned(),
        Err(e) => Some(e.clone()),
    }
}

/// A Kafka topic's name and partition indexes as a native `TxnTopic` (negative indexes,
/// which name no partition, left out).
fn txn_topic(name: &str, partitions: &[i32]) -> m::TxnTopic {
    m::TxnTopic {
        topic: name.to_string(),
        partitions: partitions
            .iter()
            .filter_map(|&p| u32::try_from(p).ok())
            .collect(),
    }
}

/// A negative partition index names no partition: it is never sent natively (see
/// [`txn_topic`]), so its answer is said here rather than read from a native one.
fn unknown_partition(partition: i32) -> Option<i16> {
    (partition < 0).then_some(K::UnknownTopicOrPartition.code())
}

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) async fn add_partitions(
    ctx: Arc<Ctx>,
    _version: i16,
    r: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let topics = r
        .v3_and_below_topics
        .iter()
        .map(|t| txn_topic(t.name.0.as_str(), &t.partitions))
        .collect();
    let native = m::AddPartitionsToTxnRequest {
        transactional_id: r.v3_and_below_transactional_id.0.to_string(),
        producer_id: r.v3_and_below_producer_id.0,
        producer_epoch: i32::from(r.v3_and_below_producer_epoch),
        topics,
        verify_only: false,
    };
    // All or nothing, as Kafka: a partition that cannot exist keeps the others out.
    let any_unknown = r
        .v3_and_below_topics
        .iter()
        .any(|t| t.partitions.iter().any(|&p| p < 0));
    let answer: Result<m::AddPartitionsToTxnResponse, m::Error> = if any_unknown {
        Ok(m::AddPartitionsToTxnResponse::default())
    } else {
        ctx.call(OpCode::AddPartitionsToTxn, &native).await
    };
    let whole = error_of(&answer, |a| a.error.as_ref());
    let each = answer.map(|a| a.partitions).unwrap_or_default();
    let code = |topic: &str, p: i32| -> i16 {
        if any_unknown {
            return K::OperationNotAttempted.code();
        }
        let own = each
            .iter()
            .find(|x| x.topic == topic && i64::from(x.partition) == i64::from(p))
            .and_then(|x| x.error.clone());
        match own.or_else(|| whole.clone()) {
            // Kafka's word for "not added because another partition was refused".
            Some(e) if e.error_code() == ErrorCode::INVALID_TXN_STATE && whole.is_none() => {
                K::OperationNotAttempted.code()
            }
            Some(e) if e.error_code() == ErrorCode::AUTHORIZATION_FAILED => {
                K::TopicAuthorizationFailed.code()
            }
            Some(e) if e.error_code() == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => {
                K::UnknownTopicOrPartition.code()
            }
            e => txn_code(e.as_ref()),
        }
    };
    let results = r
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(
                            unknown_partition(p).unwrap_or_else(|| code(t.name.0.as_str(), p)),
                        )
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(partitions)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}

pub(crate) async fn add_offsets(
    ctx: Arc<Ctx>,
    _version: i16,
    r: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let native = m::AddOffsetsToTxnRequest {
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: r.producer_id.0,
        producer_epoch: i32::from(r.producer_epoch),
        group_id: r.group_id.0.to_string(),
    };
    let answer: Result<m::AddOffsetsToTxnResponse, m::Error> =
        ctx.call(OpCode::AddOffsetsToTxn, &native).await;
    let error = error_of(&answer, |a| a.error.as_ref());
    let code = match &error {
        Some(e)
            if e.error_code() == ErrorCode::AUTHORIZATION_FAILED && e.message.contains("group") =>
        {
            K::GroupAuthorizationFailed.code()
        }
        e => txn_code(e.as_ref()),
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}

pub(crate) async fn end_txn(ctx: Arc<Ctx>, _version: i16, r: EndTxnRequest) -> EndTxnResponse {
    let native = m::EndTxnRequest {
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: r.producer_id.0,
        producer_epoch: i32::from(r.producer_epoch),
        commit: r.committed,
    };
    let answer: Result<m::EndTxnResponse, m::Error> = ctx.call(OpCode::EndTxn, &native).await;
    let error = error_of(&answer, |a| a.error.as_ref());
    EndTxnResponse::default().with_error_code(txn_code(error.as_ref()))
}

pub(crate) async fn txn_offset_commit(
    ctx: Arc<Ctx>,
    _version: i16,
    r: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group_id = r.group_id.0.to_string();
    // KIP-447: a member's commit is checked against the classic group it belongs to.
    let checked = if r.member_id.is_empty() || r.generation_id < 0 {
        Ok(())
    } else {
        ctx.state()
            .groups
            .classic_check_commit(
                &group_id,
                r.member_id.as_str(),
                r.group_instance_id.as_ref().map(|s| s.as_str()),
                r.generation_id,
            )
            .map_err(|e| crate::errors::classic_code(Some(e)))
    };
    let offsets = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter_map(|p| {
                Some(m::CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: u32::try_from(p.partition_index).ok()?,
                    offset: p.committed_offset,
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map_or(String::new(), |s| s.to_string()),
                    error: None,
                })
            })
        })
        .collect();
    let native = m::TxnOffsetCommitRequest {
        transactional_id: r.transactional_id.0.to_string(),
        group_id,
        producer_id: r.producer_id.0,
        producer_epoch: i32::from(r.producer_epoch),
        member_id: String::new(),
        generation: -1,
        offsets,
    };
    let (whole, each) = match checked {
        Err(code) => (Some(code), Vec::new()),
        Ok(()) => {
            let answer: Result<m::TxnOffsetCommitResponse, m::Error> =
                ctx.call(OpCode::TxnOffsetCommit, &native).await;
            let error = error_of(&answer, |a| a.error.as_ref());
            let whole = error.map(|e| match e.error_code() {
                ErrorCode::AUTHORIZATION_FAILED if e.message.contains("group") => {
                    K::GroupAuthorizationFailed.code()
                }
                ErrorCode::AUTHORIZATION_FAILED => K::TransactionalIdAuthorizationFailed.code(),
                ErrorCode::LEADER_NOT_AVAILABLE => K::CoordinatorNotAvailable.code(),
                _ => kafka_code_for(Some(&e), Resource::Group),
            });
            (whole, answer.map(|a| a.offsets).unwrap_or_default())
        }
    };
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let own = each
                        .iter()
                        .find(|o| {
                            o.topic == t.name.0.as_str()
                                && i64::from(o.partition) == i64::from(p.partition_index)
                        })
                        .and_then(|o| o.error.as_ref())
                        .filter(|e| !e.is_ok())
                        .map(|e| kafka_code_for(Some(e), Resource::Topic));
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(
                            unknown_partition(p.partition_index)
                                .or(whole)
                                .or(own)
                                .unwrap_or(0),
                        )
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

pub(crate) async fn write_markers(
    ctx: Arc<Ctx>,
    _version: i16,
    r: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    let markers = r
        .markers
        .iter()
        .map(|marker| m::TxnMarker {
            producer_id: marker.producer_id.0,
            producer_epoch: i32::from(marker.producer_epoch),
            commit: marker.transaction_result,
            coordinator_epoch: marker.coordinator_epoch,
            topics: marker
                .topics
                .iter()
                .map(|t| txn_topic(t.name.0.as_str(), &t.partition_indexes))
                .collect(),
        })
        .collect();
    let native = m::WriteTxnMarkersRequest { markers };
    let answer: Result<m::WriteTxnMarkersResponse, m::Error> =
        ctx.call(OpCode::WriteTxnMarkers, &native).await;
    let whole = error_of(&answer, |a| a.error.as_ref());
    let results = answer.map(|a| a.markers).unwrap_or_default();
    let markers = r
        .markers
        .iter()
        .map(|marker| {
            let found = results
                .iter()
                .find(|x| x.producer_id == marker.producer_id.0);
            let topics = marker
                .topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            let own = found
                                .and_then(|f| {
                                    f.partitions.iter().find(|x| {
                                        x.topic == t.name.0.as_str()
                                            && i64::from(x.partition) == i64::from(p)
                                    })
                                })
                                .and_then(|x| x.error.clone());
                            let code = unknown_partition(p).unwrap_or_else(|| {
                                kafka_code_for(whole.as_ref().or(own.as_ref()), Resource::Cluster)
                            });
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name.clone())
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

fn kafka_state(t: &m::TransactionState) -> StrBytes {
    text(t.state.clone())
}

pub(crate) async fn describe_transactions(
    ctx: Arc<Ctx>,
    _version: i16,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
    let native = m::DescribeTransactionsRequest {
        transactional_ids: r
            .transactional_ids
            .iter()
            .map(|t| t.0.to_string())
            .collect(),
    };
    let answer: Result<m::DescribeTransactionsResponse, m::Error> =
        ctx.call(OpCode::DescribeTransactions, &native).await;
    let whole = error_of(&answer, |a| a.error.as_ref());
    let found = answer.map(|a| a.transactions).unwrap_or_default();
    let states = r
        .transactional_ids
        .iter()
        .map(|id| {
            let t = found.iter().find(|t| t.transactional_id == id.0.as_str());
            let error = whole.clone().or_else(|| t.and_then(|t| t.error.clone()));
            let mut state = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_error_code(txn_code(error.as_ref()))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            if let (None, Some(t)) = (error, t) {
                let topics = t
                    .topics
                    .iter()
                    .map(|x| {
                        TopicData::default()
                            .with_topic(TopicName(text(x.topic.clone())))
                            .with_partitions(x.partitions.iter().map(|&p| p as i32).collect())
                    })
                    .collect();
                state = state
                    .with_transaction_state(kafka_state(t))
                    .with_transaction_timeout_ms(t.timeout_ms as i32)
                    .with_transaction_start_time_ms(t.start_ms)
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_producer_epoch(t.producer_epoch as i16)
                    .with_topics(topics);
            }
            state
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub(crate) async fn list_transactions(
    ctx: Arc<Ctx>,
    _version: i16,
    r: ListTransactionsRequest,
) -> ListTransactionsResponse {
    use kafka_protocol::messages::list_transactions_response::TransactionState;
    let native = m::ListTransactionsRequest {
        states: r.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_ids: r.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_min_ms: r.duration_filter,
    };
    let answer: Result<m::ListTransactionsResponse, m::Error> =
        ctx.call(OpCode::ListTransactions, &native).await;
    let error = error_of(&answer, |a| a.error.as_ref());
    let states = answer
        .map(|a| a.transactions)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(text(t.transactional_id.clone())))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(kafka_state(t))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_error_code(txn_code(error.as_ref()))
        .with_transaction_states(states)
}

pub(crate) async fn describe_producers(
    ctx: Arc<Ctx>,
    _version: i16,
    r: DescribeProducersRequest,
) -> DescribeProducersResponse {
    use kafka_protocol::messages::describe_producers_response::{
        PartitionResponse, ProducerState, TopicResponse,
    };
    let native = m::DescribeProducersRequest {
        topics: r
            .topics
            .iter()
            .map(|t| txn_topic(t.name.0.as_str(), &t.partition_indexes))
            .collect(),
    };
    let answer: Result<m::DescribeProducersResponse, m::Error> =
        ctx.call(OpCode::DescribeProducers, &native).await;
    let whole = error_of(&answer, |a| a.error.as_ref());
    let found = answer.map(|a| a.partitions).unwrap_or_default();
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    let f = found.iter().find(|x| {
                        x.topic == t.name.0.as_str() && i64::from(x.partition) == i64::from(p)
                    });
                    let error = whole.clone().or_else(|| f.and_then(|f| f.error.clone()));
                    let code = unknown_partition(p)
                        .unwrap_or_else(|| kafka_code_for(error.as_ref(), Resource::Topic));
                    let producers = f
                        .filter(|_| error.is_none())
                        .map(|f| {
                            f.producers
                                .iter()
                                .map(|x| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(x.producer_id))
                                        .with_producer_epoch(x.producer_epoch)
                                        .with_last_sequence(x.last_sequence)
                                        .with_last_timestamp(x.last_timestamp_ms)
                                        .with_coordinator_epoch(x.coordinator_epoch)
                                        .with_current_txn_start_offset(x.current_txn_start_offset)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    PartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                        .with_error_message(
                            error.as_ref().and_then(|e| message_of(Some(e))).map(text),
                        )
                        .with_active_producers(producers)
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
