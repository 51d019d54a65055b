//! Transactions for operators (`tinymq transaction list|describe|abort`, Kafka's
//! `kafka-transactions.sh`): every transactional id of the cluster (each broker lists those it
//! coordinates), one id's state from its coordinator, the producers of a partition, and the
//! abort of a transaction left open on a partition (KIP-664: an ABORT marker written by the
//! partition's leader for the producer, in its current epoch).

use tinymq_protocol::{messages as m, ErrorCode};

use super::Admin;
use crate::error::{check, ClientError};

impl Admin {
    /// Every transactional id of the cluster, from each broker's ListTransactions.
    pub async fn list_transactions(&self) -> Result<Vec<m::TransactionState>, ClientError> {
        self.retry("list transactions", || async {
            let mut all = Vec::new();
            for addr in self.cluster.broker_addresses().await?.values() {
                let connection = self.cluster.connection(addr).await?;
                let response = connection
                    .request(
                        &m::ListTransactionsRequest::default(),
                        self.cluster.config.request_timeout,
                    )
                    .await?;
                check(response.error.as_ref())?;
                all.extend(response.transactions);
            }
            all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
            Ok(all)
        })
        .await
    }

    /// The state of `transactional_id`, from its coordinator.
    pub async fn describe_transaction(
        &self,
        transactional_id: &str,
    ) -> Result<m::TransactionState, ClientError> {
        self.retry(
            &format!("describe transaction {transactional_id}"),
            || async {
                let found = self
                    .cluster
                    .request(&m::FindCoordinatorRequest {
                        group_id: transactional_id.into(),
                        key_type: 1,
                    })
                    .await?;
                check(found.error.as_ref())?;
                let connection = self
                    .cluster
                    .connection(&format!("{}:{}", found.host, found.port))
                    .await?;
                let request = m::DescribeTransactionsRequest {
                    transactional_ids: vec![transactional_id.to_string()],
                };
                let response = connection
                    .request(&request, self.cluster.config.request_timeout)
                    .await?;
                let state = response.transactions.into_iter().next().ok_or_else(|| {
                    ClientError::Protocol("DescribeTransactions answered no id".into())
                })?;
                check(state.error.as_ref())?;
                Ok(state)
            },
        )
        .await
    }

    /// The producers of `topic`/`partition`, from its leader.
    pub async fn describe_producers(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Vec<m::ProducerDescription>, ClientError> {
        self.retry(
            &format!("describe producers of {topic}/{partition}"),
            || async {
                let leader = self.cluster.leader(topic, partition).await?;
                let request = m::DescribeProducersRequest {
                    topics: vec![m::TxnTopic {
                        topic: topic.to_string(),
                        partitions: vec![partition],
                    }],
                };
                let response = leader
                    .request(&request, self.cluster.config.request_timeout)
                    .await?;
                let result = response.partitions.into_iter().next().ok_or_else(|| {
                    ClientError::Protocol("DescribeProducers answered no partition".into())
                })?;
                check(result.error.as_ref())?;
                Ok(result.producers)
            },
        )
        .await
    }

    /// Aborts `producer_id`'s transaction left open on `topic`/`partition` (its coordinator
    /// lost track of it): the partition's leader writes an ABORT marker in the producer's
    /// current epoch, so the partition's last stable offset moves past it. Refused when the
    /// producer has no open transaction there.
    pub async fn abort_transaction(
        &self,
        topic: &str,
        partition: u32,
        producer_id: i64,
    ) -> Result<(), ClientError> {
        let producers = self.describe_producers(topic, partition).await?;
        let producer = producers
            .iter()
            .find(|p| p.producer_id == producer_id && p.current_txn_start_offset >= 0)
            .ok_or_else(|| ClientError::Server {
                code: ErrorCode::INVALID_TXN_STATE,
                message: format!(
                    "producer {producer_id} has no open transaction on {topic}/{partition}"
                ),
            })?;
        let request = m::WriteTxnMarkersRequest {
            markers: vec![m::TxnMarker {
                producer_id,
                producer_epoch: producer.producer_epoch,
                commit: false,
                coordinator_epoch: producer.coordinator_epoch,
                topics: vec![m::TxnTopic {
                    topic: topic.to_string(),
                    partitions: vec![partition],
                }],
            }],
        };
        self.retry(
            &format!("abort {producer_id}'s transaction on {topic}/{partition}"),
            || async {
                let leader = self.cluster.leader(topic, partition).await?;
                let response = leader
                    .request(&request, self.cluster.config.request_timeout)
                    .await?;
                check(response.error.as_ref())?;
                for marker in &response.markers {
                    for p in &marker.partitions {
                        check(p.error.as_ref())?;
                    }
                }
                Ok(())
            },
        )
        .await
    }
}
