//! The transactional producer (KIP-98 on the native port): with
//! `ProducerConfig::transactional_id` set, records are sent inside transactions that commit or
//! abort as a whole, with the consumed offsets of a consume-transform-produce loop inside them.
//!
//! ```text
//! init_transactions()          once: the id's coordinator aborts what an older instance left
//!                              open and fences it (the epoch is bumped)
//! begin_transaction()          then send() / send_batch() / send_offsets_to_transaction()
//! commit_transaction()         flushes, then the coordinator commits; or
//! abort_transaction()          flushes, then the coordinator aborts (records are never shown
//!                              to read-committed consumers)
//! ```
//!
//! Each partition is registered with the coordinator (AddPartitionsToTxn) before its first
//! record in a transaction, by `send` itself. A record that fails makes the transaction
//! abortable only: `commit_transaction` then refuses, and `abort_transaction` restarts the
//! producer's sequences under a bumped epoch. `PRODUCER_FENCED` is final: a newer instance
//! took the id; make a new producer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};

use super::worker::ProducerIdentity;
use super::Producer;
use crate::cluster::Cluster;
use crate::coordinator::CoordinatorLink;
use crate::error::{check, ClientError};

/// How long one coordinator operation retries retriable refusals (a coordinator moving or
/// loading, markers of the last transaction still being written).
const TXN_OPERATION_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Open {
    /// Between begin and commit/abort.
    active: bool,
    partitions: HashSet<(String, u32)>,
    groups: HashSet<String>,
}

/// The transaction side of a producer.
#[derive(Debug)]
pub(crate) struct Transactions {
    pub(super) id: String,
    timeout: Duration,
    coordinator: CoordinatorLink,
    open: Mutex<Open>,
    fenced: AtomicBool,
    /// `init_transactions` succeeded.
    initialized: AtomicBool,
}

impl Transactions {
    pub(crate) fn new(id: String, timeout: Duration) -> Transactions {
        Transactions {
            coordinator: CoordinatorLink::new(id.clone(), 1),
            id,
            timeout,
            open: Mutex::new(Open::default()),
            initialized: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
        }
    }

    /// Whether `send` may add `(topic, partition)` now, and whether it must register it first.
    pub(super) fn needs_registering(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<bool, ClientError> {
        if self.fenced.load(Ordering::Relaxed) {
            return Err(fenced(&self.id));
        }
        let open = self.open.lock();
        if !open.active {
            return Err(ClientError::Config(
                "a transactional producer sends inside a transaction: call begin_transaction"
                    .into(),
            ));
        }
        Ok(!open.partitions.contains(&(topic.to_string(), partition)))
    }

    /// Sends `request` to the coordinator, retrying what is retriable until
    /// [`TXN_OPERATION_DEADLINE`]; `top` reads the answer's error.
    async fn call<R: tinymq_protocol::Request>(
        &self,
        cluster: &Cluster,
        request: &R,
        top: impl Fn(&R::Response) -> Option<&m::Error>,
    ) -> Result<R::Response, ClientError> {
        let times = (
            cluster.config.request_timeout,
            Instant::now() + TXN_OPERATION_DEADLINE,
        );
        let seen = |error: &ClientError| {
            if error.code() == Some(ErrorCode::PRODUCER_FENCED) {
                self.fenced.store(true, Ordering::Relaxed);
            }
        };
        self.coordinator
            .call(cluster, request, times, top, seen)
            .await
    }

    /// InitProducerId for this id: its producer id and (bumped) epoch, given the identity
    /// this instance holds (KIP-360) if any.
    async fn init(
        &self,
        cluster: &Cluster,
        held: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ClientError> {
        let (producer_id, producer_epoch) = held.map_or((-1, -1), |(id, e)| (id, i32::from(e)));
        let request = m::InitProducerIdRequest {
            transactional_id: self.id.clone(),
            producer_id,
            producer_epoch,
            transaction_timeout_ms: u32::try_from(self.timeout.as_millis()).unwrap_or(u32::MAX),
        };
        let response = self.call(cluster, &request, |r| r.error.as_ref()).await?;
        let epoch = i16::try_from(response.producer_epoch)
            .map_err(|_| ClientError::Protocol("producer epoch out of range".into()))?;
        Ok((response.producer_id, epoch))
    }
}

fn fenced(id: &str) -> ClientError {
    ClientError::Server {
        code: ErrorCode::PRODUCER_FENCED,
        message: format!(
            "transactional id {id} was taken by a newer producer instance: this one is fenced"
        ),
    }
}

impl Producer {
    fn transactions(&self) -> Result<&Arc<Transactions>, ClientError> {
        self.inner.transactions.as_ref().ok_or_else(|| {
            ClientError::Config("set ProducerConfig::transactional_id to use transactions".into())
        })
    }

    /// Registers the producer's transactional id with its coordinator: aborts what an earlier
    /// instance left open, fences that instance, and takes the id's producer id and epoch.
    /// Call once, before the first transaction.
    pub async fn init_transactions(&self) -> Result<(), ClientError> {
        let txns = self.transactions()?;
        let (id, epoch) = txns.init(&self.inner.cluster, None).await?;
        self.inner.identity.set(id, epoch).await;
        txns.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Starts a transaction: what is sent until commit or abort belongs to it.
    pub fn begin_transaction(&self) -> Result<(), ClientError> {
        let txns = self.transactions()?;
        if txns.fenced.load(Ordering::Relaxed) {
            return Err(fenced(&txns.id));
        }
        if !txns.initialized.load(Ordering::Acquire) {
            return Err(ClientError::Config("call init_transactions first".into()));
        }
        let mut open = txns.open.lock();
        if open.active {
            return Err(ClientError::Config("a transaction is already open".into()));
        }
        *open = Open {
            active: true,
            ..Open::default()
        };
        self.inner.identity.failed.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Registers `(topic, partition)` in the open transaction (`send` calls it before the
    /// partition's first record of the transaction).
    pub(super) async fn register_partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<(), ClientError> {
        let txns = self.transactions()?;
        let (producer_id, producer_epoch) = self.inner.identity.held().await?;
        let request = m::AddPartitionsToTxnRequest {
            transactional_id: txns.id.clone(),
            producer_id,
            producer_epoch: i32::from(producer_epoch),
            topics: vec![m::TxnTopic {
                topic: topic.to_string(),
                partitions: vec![partition],
            }],
            verify_only: false,
        };
        let response = txns
            .call(&self.inner.cluster, &request, |r| {
                r.error
                    .as_ref()
                    .or_else(|| r.partitions.iter().find_map(|p| p.error.as_ref()))
            })
            .await?;
        drop(response);
        txns.open
            .lock()
            .partitions
            .insert((topic.to_string(), partition));
        Ok(())
    }

    /// Commits, in the open transaction, `offsets` (topic, partition, next offset to read)
    /// as `group`'s committed offsets: they count only if the transaction commits.
    pub async fn send_offsets_to_transaction(
        &self,
        group: &str,
        offsets: &[(String, u32, i64)],
    ) -> Result<(), ClientError> {
        let txns = self.transactions()?;
        let (producer_id, producer_epoch) = self.inner.identity.held().await?;
        if !txns.open.lock().active {
            return Err(ClientError::Config("no transaction is open".into()));
        }
        let fresh = !txns.open.lock().groups.contains(group);
        if fresh {
            let request = m::AddOffsetsToTxnRequest {
                transactional_id: txns.id.clone(),
                producer_id,
                producer_epoch: i32::from(producer_epoch),
                group_id: group.to_string(),
            };
            txns.call(&self.inner.cluster, &request, |r| r.error.as_ref())
                .await?;
            txns.open.lock().groups.insert(group.to_string());
        }
        let request = m::TxnOffsetCommitRequest {
            transactional_id: txns.id.clone(),
            group_id: group.to_string(),
            producer_id,
            producer_epoch: i32::from(producer_epoch),
            member_id: String::new(),
            generation: -1,
            offsets: offsets
                .iter()
                .map(|(topic, partition, offset)| m::CommittedOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                    metadata: String::new(),
                    error: None,
                })
                .collect(),
        };
        let coordinator = crate::group::coordinator_for(&self.inner.cluster, group).await?;
        let response = coordinator
            .request(&request, self.inner.cluster.config.request_timeout)
            .await?;
        check(response.error.as_ref())?;
        for o in &response.offsets {
            check(o.error.as_ref())?;
        }
        Ok(())
    }

    /// Flushes the transaction's records and commits it: all of them (and its offsets)
    /// become visible together. Refused when one of its records failed (abort instead).
    pub async fn commit_transaction(&self) -> Result<(), ClientError> {
        self.end_transaction(true).await
    }

    /// Flushes the transaction's records and aborts it: none is shown to read-committed
    /// consumers, and its offsets are not committed.
    pub async fn abort_transaction(&self) -> Result<(), ClientError> {
        self.end_transaction(false).await
    }

    async fn end_transaction(&self, commit: bool) -> Result<(), ClientError> {
        let txns = self.transactions()?.clone();
        if !txns.open.lock().active {
            return Err(ClientError::Config("no transaction is open".into()));
        }
        self.flush().await;
        let failed = self.inner.identity.failed.load(Ordering::Relaxed);
        if commit && failed {
            return Err(ClientError::Config(
                "a record of this transaction failed: it can only be aborted".into(),
            ));
        }
        let touched = {
            let open = txns.open.lock();
            !open.partitions.is_empty() || !open.groups.is_empty()
        };
        let held = self.inner.identity.held().await?;
        if touched {
            let request = m::EndTxnRequest {
                transactional_id: txns.id.clone(),
                producer_id: held.0,
                producer_epoch: i32::from(held.1),
                commit,
            };
            txns.call(&self.inner.cluster, &request, |r| r.error.as_ref())
                .await?;
        }
        *txns.open.lock() = Open::default();
        if failed {
            // A failed record left a gap in some partition's sequence: every partition starts
            // again at 0 under a bumped epoch (KIP-360).
            let (id, epoch) = txns.init(&self.inner.cluster, Some(held)).await?;
            self.inner.identity.set(id, epoch).await;
            self.inner.identity.failed.store(false, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl ProducerIdentity {
    /// The id and epoch of a transactional producer, once `init_transactions` set them.
    pub(super) async fn held(&self) -> Result<(i64, i16), ClientError> {
        self.current_identity()
            .await
            .map(|i| (i.producer_id, i.producer_epoch))
            .ok_or_else(|| ClientError::Config("call init_transactions first".into()))
    }
}
