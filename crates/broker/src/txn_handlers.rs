//! The transaction requests on the native port (operations 60..67, InitProducerId with a
//! transactional id, FindCoordinator with key type 1): each decoded request to its answer
//! through the coordinator (`txn::ops`), the group offsets (`offsets_partitions`) or the
//! partitions led here (`txn::markers::write_here`, the producers' state).

use std::sync::Arc;

use tinymq_auth::{AclOperation, Principal};
use tinymq_meta::authorize::{Access, Permission};
use tinymq_protocol::names::validate_transactional_id;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::group::offsets::{partition_for_group, OFFSETS_TOPIC};
use crate::state::BrokerState;
use crate::txn::{self, ops};

fn check_id(id: &str) -> Result<(), m::Error> {
    validate_transactional_id(id).map_err(|why| ErrorCode::INVALID_REQUEST.with_message(why))
}

fn epoch16(epoch: i32) -> Result<i16, m::Error> {
    i16::try_from(epoch).map_err(|_| ops::bad_epoch())
}

/// FindCoordinator with key type 1.
pub async fn find_coordinator(state: &Arc<BrokerState>, id: &str) -> m::FindCoordinatorResponse {
    let found = match check_id(id) {
        Ok(()) => txn::coordinator_of(state, id).await,
        Err(e) => Err(e),
    };
    match found {
        Ok(broker) => m::FindCoordinatorResponse {
            error: None,
            node_id: broker.id,
            host: broker.host,
            port: u32::from(broker.port),
        },
        Err(e) => m::FindCoordinatorResponse {
            error: Some(e),
            ..Default::default()
        },
    }
}

/// InitProducerId with a transactional id.
pub async fn init_producer_id(
    state: &Arc<BrokerState>,
    request: &m::InitProducerIdRequest,
) -> m::InitProducerIdResponse {
    let outcome = match check_id(&request.transactional_id) {
        Ok(()) => ops::init_producer_id(state, request).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok((producer_id, epoch)) => m::InitProducerIdResponse {
            error: None,
            producer_id,
            producer_epoch: i32::from(epoch),
        },
        Err(e) => m::InitProducerIdResponse {
            error: Some(e),
            producer_id: -1,
            producer_epoch: -1,
        },
    }
}

fn partition_results(
    topics: &[m::TxnTopic],
    error: impl Fn(&str, u32) -> Option<m::Error>,
) -> Vec<m::TxnPartitionResult> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|&p| m::TxnPartitionResult {
                topic: t.topic.clone(),
                partition: p,
                error: error(&t.topic, p),
            })
        })
        .collect()
}

/// AddPartitionsToTxn: every partition must exist and be writable by the principal, else
/// none is added: the refused ones say why, the others INVALID_TXN_STATE ("not attempted";
/// the Kafka listener answers Kafka's OPERATION_NOT_ATTEMPTED for them).
pub async fn add_partitions(
    state: &Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    request: m::AddPartitionsToTxnRequest,
) -> m::AddPartitionsToTxnResponse {
    if request.verify_only {
        return verify_partitions(state, &request);
    }
    let image = state.cluster.image();
    let refusal = |topic: &str, partition: u32| -> Option<m::Error> {
        if let Err(e) = access.check(principal, Permission::topic(topic, AclOperation::Write)) {
            return Some(e);
        }
        let exists = image
            .topics
            .get(topic)
            .is_some_and(|t| (partition as usize) < t.partitions.len());
        (!exists || tinymq_meta::image::is_internal_topic(topic)).then(|| {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                .with_message(format!("{topic}/{partition} does not exist"))
        })
    };
    let refused = partition_results(&request.topics, refusal);
    if refused.iter().any(|r| r.error.is_some()) {
        let not_attempted = ErrorCode::INVALID_TXN_STATE
            .with_message("not added: another partition of the request was refused");
        let partitions = refused
            .into_iter()
            .map(|r| m::TxnPartitionResult {
                error: r.error.or_else(|| Some(not_attempted.clone())),
                ..r
            })
            .collect();
        return m::AddPartitionsToTxnResponse {
            error: None,
            partitions,
        };
    }
    let partitions: Vec<(String, u32)> = refused
        .iter()
        .map(|r| (r.topic.clone(), r.partition))
        .collect();
    let outcome = match (
        check_id(&request.transactional_id),
        epoch16(request.producer_epoch),
    ) {
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(()), Ok(epoch)) => {
            ops::add_partitions(
                state,
                &request.transactional_id,
                request.producer_id,
                epoch,
                &partitions,
            )
            .await
        }
    };
    let error = outcome.err();
    m::AddPartitionsToTxnResponse {
        partitions: partition_results(&request.topics, |_, _| error.clone()),
        error,
    }
}

/// AddPartitionsToTxn with `verify_only` (a partition leader asking, KIP-890): each partition
/// NONE if it is in the producer's open transaction of that epoch, else INVALID_TXN_STATE.
fn verify_partitions(
    state: &Arc<BrokerState>,
    request: &m::AddPartitionsToTxnRequest,
) -> m::AddPartitionsToTxnResponse {
    let id = &request.transactional_id;
    let known = check_id(id)
        .and_then(|()| txn::coordinator_epoch(state, id))
        .and_then(|epoch| state.txns.get(id, epoch));
    let (known, epoch) = match (known, epoch16(request.producer_epoch)) {
        (Ok(known), Ok(epoch)) => (known, epoch),
        (Err(error), _) | (_, Err(error)) => {
            return m::AddPartitionsToTxnResponse {
                error: Some(error),
                partitions: vec![],
            }
        }
    };
    let partitions = partition_results(&request.topics, |topic, partition| {
        let held = known
            .as_ref()
            .is_some_and(|m| txn::verify::holds(m, request.producer_id, epoch, topic, partition));
        (!held).then(|| {
            ErrorCode::INVALID_TXN_STATE.with_message(format!(
                "{topic}/{partition} is not in the open transaction of {id:?} for producer {} \
                 epoch {epoch}",
                request.producer_id
            ))
        })
    });
    m::AddPartitionsToTxnResponse {
        error: None,
        partitions,
    }
}

/// AddOffsetsToTxn: the group's offsets partition joins the transaction.
pub async fn add_offsets(
    state: &Arc<BrokerState>,
    request: m::AddOffsetsToTxnRequest,
) -> m::AddOffsetsToTxnResponse {
    let outcome = async {
        check_id(&request.transactional_id)?;
        crate::group::validate_group_id(&request.group_id)
            .map_err(|(code, why)| code.with_message(why))?;
        let epoch = epoch16(request.producer_epoch)?;
        // The group's coordinator must exist to take TxnOffsetCommit, as for OffsetCommit.
        crate::offsets_partitions::ensure_offsets_topic(state).await?;
        let partition = (
            OFFSETS_TOPIC.to_string(),
            partition_for_group(&request.group_id),
        );
        ops::add_partitions(
            state,
            &request.transactional_id,
            request.producer_id,
            epoch,
            &[partition],
        )
        .await
    }
    .await;
    m::AddOffsetsToTxnResponse {
        error: outcome.err(),
    }
}

pub async fn end_txn(state: &Arc<BrokerState>, request: m::EndTxnRequest) -> m::EndTxnResponse {
    let outcome = match check_id(&request.transactional_id) {
        Ok(()) => ops::end_txn(state, &request).await,
        Err(e) => Err(e),
    };
    m::EndTxnResponse {
        error: outcome.err(),
    }
}

/// WriteTxnMarkers: each marker to each partition, all at once; each answered when every
/// in-sync replica holds it.
pub async fn write_markers(
    state: &Arc<BrokerState>,
    request: m::WriteTxnMarkersRequest,
) -> m::WriteTxnMarkersResponse {
    let mut markers = Vec::with_capacity(request.markers.len());
    for marker in request.markers {
        let epoch = epoch16(marker.producer_epoch);
        let writes = marker.topics.iter().flat_map(|t| {
            let epoch = epoch.clone();
            t.partitions.iter().map(move |&p| {
                let topic = t.topic.clone();
                let epoch = epoch.clone();
                async move {
                    let written = match epoch {
                        Ok(epoch) => {
                            txn::markers::write_here(
                                state,
                                &topic,
                                p,
                                marker.producer_id,
                                epoch,
                                marker.commit,
                                marker.coordinator_epoch,
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    };
                    m::TxnPartitionResult {
                        topic,
                        partition: p,
                        error: written.err(),
                    }
                }
            })
        });
        let partitions = futures::future::join_all(writes).await;
        markers.push(m::TxnMarkerResult {
            producer_id: marker.producer_id,
            partitions,
        });
    }
    m::WriteTxnMarkersResponse {
        error: None,
        markers,
    }
}

/// DescribeTransactions: the ids the principal may DESCRIBE (others refused).
pub fn describe(
    state: &Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    request: m::DescribeTransactionsRequest,
) -> m::DescribeTransactionsResponse {
    let mut transactions = ops::describe(state, &request.transactional_ids);
    for t in &mut transactions {
        let perm = Permission::transactional_id(&t.transactional_id, AclOperation::Describe);
        if let Err(e) = access.check(principal, perm) {
            *t = m::TransactionState {
                transactional_id: t.transactional_id.clone(),
                error: Some(e),
                producer_id: -1,
                producer_epoch: -1,
                start_ms: -1,
                ..Default::default()
            };
        }
    }
    m::DescribeTransactionsResponse {
        error: None,
        transactions,
    }
}

/// ListTransactions: only the ids the principal may DESCRIBE.
pub fn list(
    state: &Arc<BrokerState>,
    access: &Access,
    principal: &Principal,
    request: m::ListTransactionsRequest,
) -> m::ListTransactionsResponse {
    let transactions = ops::list(state, &request)
        .into_iter()
        .filter(|t| {
            access.allows(
                principal,
                Permission::transactional_id(&t.transactional_id, AclOperation::Describe),
            )
        })
        .collect();
    m::ListTransactionsResponse {
        error: None,
        transactions,
    }
}

/// TxnOffsetCommit, to the group's coordinator: checked as an OffsetCommit (the member and
/// generation when given, existing partitions, bounded metadata), then written to the
/// group's offsets partition pending the transaction's marker.
pub async fn txn_offset_commit(
    state: &Arc<BrokerState>,
    request: m::TxnOffsetCommitRequest,
) -> m::TxnOffsetCommitResponse {
    let outcome = async {
        check_id(&request.transactional_id)?;
        let epoch = epoch16(request.producer_epoch)?;
        state.check_coordinator(&request.group_id)?;
        let commit = m::OffsetCommitRequest {
            group_id: request.group_id.clone(),
            member_id: request.member_id.clone(),
            generation: u32::try_from(request.generation).unwrap_or(0),
            offsets: request.offsets.clone(),
        };
        let changes = state
            .groups
            .prepare_commit(&commit, &|t| state.partition_count(t))
            .map_err(|(code, message)| code.with_message(message))?;
        let producer = Some((request.producer_id, epoch));
        crate::offsets_partitions::append_commit(state, &request.group_id, changes, producer).await
    }
    .await;
    match outcome {
        Ok(()) => m::TxnOffsetCommitResponse {
            error: None,
            offsets: request.offsets,
        },
        Err(e) => m::TxnOffsetCommitResponse {
            error: Some(e),
            offsets: vec![],
        },
    }
}

/// DescribeProducers: the producer state of each named partition led here.
pub fn describe_producers(
    state: &Arc<BrokerState>,
    request: m::DescribeProducersRequest,
) -> m::DescribeProducersResponse {
    let mut partitions = Vec::new();
    for t in &request.topics {
        for &index in &t.partitions {
            let mut result = m::PartitionProducers {
                topic: t.topic.clone(),
                partition: index,
                ..Default::default()
            };
            match state.led_partition_any(&t.topic, index) {
                Ok((partition, _)) => {
                    let producers = partition.producers.lock().describe();
                    result.producers = producers
                        .into_iter()
                        .map(|(producer_id, epoch, last_sequence, last_ms, open)| {
                            m::ProducerDescription {
                                producer_id,
                                producer_epoch: i32::from(epoch),
                                last_sequence,
                                last_timestamp_ms: last_ms,
                                // Markers are not checked against coordinator epochs here.
                                coordinator_epoch: -1,
                                current_txn_start_offset: open.unwrap_or(-1),
                            }
                        })
                        .collect();
                }
                Err(e) => result.error = Some(e),
            }
            partitions.push(result);
        }
    }
    m::DescribeProducersResponse {
        error: None,
        partitions,
    }
}
