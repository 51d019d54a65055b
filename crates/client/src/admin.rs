//! Cluster administration: topics (create, grow, delete, list, describe), groups, and
//! brokers (decommission, rebalance, drain).

use std::sync::Arc;

use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{check, ClientError};
use crate::retry::{admin_retriable, retrying};

mod group_list;
mod halves;
mod transactions;
pub use group_list::{GroupType, ListedGroup};

pub use tinymq_protocol::messages::{
    CommittedOffset, DescribeGroupResponse, DescribeTopicResponse, PartitionMove, PartitionState,
    TopicConfig,
};

/// Administrative operations against any node of the cluster. Each rides out a leader change
/// or an unreachable node: retriable errors are retried for up to
/// [`ClientConfig::api_timeout`] (60 s by default).
///
/// ```no_run
/// # async fn demo() -> Result<(), tinymq_client::ClientError> {
/// use tinymq_client::{Admin, ClientConfig, TopicConfig};
/// let admin = Admin::new(ClientConfig::new("127.0.0.1:21581"))?;
/// admin.create_topic("orders", TopicConfig { partitions: 6, ..Default::default() }).await?;
/// println!("{:?}", admin.list_topics().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Admin {
    pub(crate) cluster: Arc<Cluster>,
}

impl Admin {
    pub fn new(config: ClientConfig) -> Result<Admin, ClientError> {
        Ok(Admin {
            cluster: Cluster::new(config)?,
        })
    }

    /// Creates a topic; zero or empty fields of `config` take the server's defaults. Returns
    /// the settings the topic got. If an attempt's answer was lost and a retry finds the topic,
    /// the topic counts as created by it (its settings are described).
    pub async fn create_topic(
        &self,
        name: &str,
        config: TopicConfig,
    ) -> Result<TopicConfig, ClientError> {
        let request = &m::CreateTopicRequest {
            name: name.into(),
            config: Some(config),
            validate_only: false,
        };
        let created = self
            .retry_change(
                &format!("create topic {name}"),
                ErrorCode::TOPIC_ALREADY_EXISTS,
                || async move {
                    let response = self.cluster.request(request).await?;
                    check(response.error.as_ref())?;
                    Ok(response.config.unwrap_or_default())
                },
            )
            .await?;
        match created {
            Some(config) => Ok(config),
            None => Ok(self.describe_topic(name).await?.config.unwrap_or_default()),
        }
    }

    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let request = &m::DeleteTopicRequest { name: name.into() };
        self.retry_change(
            &format!("delete topic {name}"),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            || async move { check(self.cluster.request(request).await?.error.as_ref()) },
        )
        .await
        .map(drop)
    }

    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        self.retry("list topics", || async move {
            let response = self.cluster.request(&m::ListTopicsRequest {}).await?;
            check(response.error.as_ref())?;
            Ok(response.names)
        })
        .await
    }

    /// Changes a topic's settings without a restart: `set` gives keys of the topic config
    /// (`retention_ms`, `message_bytes_max`, …) new values, `unset` removes keys (the brokers'
    /// defaults apply again). Returns the settings the topic has now. Setting the same values
    /// again changes nothing, so a retry after a lost answer is safe.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        set: &[(String, String)],
        unset: &[String],
    ) -> Result<TopicConfig, ClientError> {
        let request = &m::AlterTopicConfigRequest {
            name: name.into(),
            set: set
                .iter()
                .map(|(key, value)| m::TopicSetting {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            unset: unset.to_vec(),
            validate_only: false,
        };
        self.retry(&format!("alter topic {name}"), || async move {
            let response = self.cluster.request(request).await?;
            check(response.error.as_ref())?;
            Ok(response.config.unwrap_or_default())
        })
        .await
    }

    /// Grows a topic to `partitions` (never shrinks it).
    pub async fn alter_partitions(&self, name: &str, partitions: u32) -> Result<(), ClientError> {
        let request = &m::AlterPartitionsRequest {
            name: name.into(),
            partitions,
        };
        let grown = self
            .retry_change(
                &format!("grow topic {name}"),
                ErrorCode::INVALID_PARTITIONS,
                || async move { check(self.cluster.request(request).await?.error.as_ref()) },
            )
            .await?;
        // "Not more than it has" after a lost answer: done if it has exactly that many now.
        if grown.is_none() {
            let now = self.describe_topic(name).await?.partitions.len() as u32;
            if now != partitions {
                return Err(ClientError::Server {
                    code: ErrorCode::INVALID_PARTITIONS,
                    message: format!("topic {name} has {now} partitions, not {partitions}"),
                });
            }
        }
        Ok(())
    }

    /// Removes a stopped broker from the cluster for good: its id is never registered again.
    /// Refused while the broker is live, and while it holds partition replicas unless
    /// `move_partitions` (they are then placed on live brokers, empty where the broker held
    /// the only in-sync copy). Asking again after it is done succeeds.
    pub async fn decommission_broker(
        &self,
        broker_id: u32,
        move_partitions: bool,
    ) -> Result<(), ClientError> {
        let request = &m::DecommissionBrokerRequest {
            broker_id,
            move_partitions,
        };
        self.retry(&format!("decommission broker {broker_id}"), || async move {
            check(self.cluster.request(request).await?.error.as_ref())
        })
        .await
    }

    /// Spreads replicas and preferred leaders evenly over the live brokers (after a broker
    /// joins) by starting partition reassignments; with `dry_run` only computes them. Returns
    /// the moves (empty: already balanced). A reassignment adds the new replicas, waits until
    /// they are in sync, then drops the old ones; [`PartitionState::adding_replicas`] shows it
    /// under way. A retry after a lost answer finds the moves started and returns fewer.
    pub async fn rebalance(&self, dry_run: bool) -> Result<Vec<PartitionMove>, ClientError> {
        let request = &m::RebalanceRequest { dry_run };
        self.retry("rebalance", || async move {
            let response = self.cluster.request(request).await?;
            check(response.error.as_ref())?;
            Ok(response.moves)
        })
        .await
    }

    /// Moves every replica off broker `broker_id` (before removing it) by starting partition
    /// reassignments; with `dry_run` only computes them. Returns the moves, as
    /// [`Admin::rebalance`].
    pub async fn drain_broker(
        &self,
        broker_id: u32,
        dry_run: bool,
    ) -> Result<Vec<PartitionMove>, ClientError> {
        let request = &m::DrainBrokerRequest { broker_id, dry_run };
        self.retry(&format!("drain broker {broker_id}"), || async move {
            let response = self.cluster.request(request).await?;
            check(response.error.as_ref())?;
            Ok(response.moves)
        })
        .await
    }

    /// Runs `attempt` again after retriable errors, for up to the api timeout.
    pub(crate) async fn retry<T, F, Fut>(
        &self,
        operation: &str,
        mut attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        retrying(
            operation,
            self.cluster.config.api_timeout,
            admin_retriable,
            |_| attempt(),
        )
        .await
    }

    /// [`Admin::retry`] for a change: when an earlier attempt may have been applied (its
    /// answer was lost) and a later one fails with `done_code` (the change is already there),
    /// that is success, `Ok(None)`.
    pub(crate) async fn retry_change<T, F, Fut>(
        &self,
        operation: &str,
        done_code: ErrorCode,
        mut attempt: F,
    ) -> Result<Option<T>, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        retrying(
            operation,
            self.cluster.config.api_timeout,
            admin_retriable,
            |after_ambiguous| {
                let attempt = attempt();
                async move {
                    match attempt.await {
                        Ok(value) => Ok(Some(value)),
                        Err(e) if after_ambiguous && e.code() == Some(done_code) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            },
        )
        .await
    }

    /// Settings, placement and offsets of a topic. Placement comes from any broker; each
    /// partition's offsets from its leader (-1 when the leader cannot be reached).
    pub async fn describe_topic(&self, name: &str) -> Result<DescribeTopicResponse, ClientError> {
        let request = m::DescribeTopicRequest { name: name.into() };
        let (mut response, brokers) = self
            .retry(&format!("describe topic {name}"), || async {
                let response = self.cluster.request(&request).await?;
                check(response.error.as_ref())?;
                Ok((response, self.cluster.broker_addresses().await?))
            })
            .await?;
        let mut leaders: Vec<u32> = response
            .partitions
            .iter()
            .filter(|p| p.log_end_offset < 0 && p.leader != 0)
            .map(|p| p.leader)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for leader in leaders {
            let Some(addr) = brokers.get(&leader) else {
                continue;
            };
            // A leader that cannot be reached keeps its partitions' offsets unknown (-1).
            let asked = match self.cluster.connection(addr).await {
                Ok(c) => {
                    c.request(&request, self.cluster.config.request_timeout)
                        .await
                }
                Err(e) => Err(e),
            };
            let Ok(theirs) = asked else {
                continue;
            };
            for p in theirs
                .partitions
                .into_iter()
                .filter(|p| p.log_end_offset >= 0)
            {
                if let Some(mine) = response.partitions.get_mut(p.partition as usize) {
                    *mine = p;
                }
            }
        }
        Ok(response)
    }

    /// Every group of the cluster (each broker lists the groups it coordinates).
    pub async fn list_groups(&self) -> Result<Vec<String>, ClientError> {
        self.retry("list groups", || self.list_groups_once()).await
    }

    async fn list_groups_once(&self) -> Result<Vec<String>, ClientError> {
        let answers = self.list_groups_answers().await?;
        let groups: std::collections::BTreeSet<String> =
            answers.into_iter().flat_map(|a| a.group_ids).collect();
        Ok(groups.into_iter().collect())
    }

    /// Members, their partitions, state and committed offsets of a group.
    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse, ClientError> {
        let request = &m::DescribeGroupRequest {
            group_id: group.into(),
        };
        self.retry(&format!("describe group {group}"), || async move {
            let response = self.to_coordinator(group, request).await?;
            check(response.error.as_ref())?;
            Ok(response)
        })
        .await
    }

    /// Deletes a group that has no members, with its committed offsets.
    pub async fn delete_group(&self, group: &str) -> Result<(), ClientError> {
        let request = &m::DeleteGroupRequest {
            group_id: group.into(),
            offsets: Vec::new(),
        };
        self.retry_change(
            &format!("delete group {group}"),
            ErrorCode::GROUP_ID_NOT_FOUND,
            || async move {
                let response = self.to_coordinator(group, request).await?;
                check(response.error.as_ref())
            },
        )
        .await
        .map(drop)
    }

    /// Sets a group's committed offsets; only while the group has no members.
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, u32, i64)>,
    ) -> Result<(), ClientError> {
        let request = m::OffsetCommitRequest {
            group_id: group.into(),
            member_id: String::new(),
            generation: 0,
            offsets: offsets
                .into_iter()
                .map(|(topic, partition, offset)| CommittedOffset {
                    topic,
                    partition,
                    offset,
                    metadata: "reset".into(),
                    error: None,
                })
                .collect(),
        };
        let request = &request;
        self.retry(&format!("commit offsets of group {group}"), || async move {
            let response = self.to_coordinator(group, request).await?;
            check(response.error.as_ref())
        })
        .await
    }

    /// A partition's offset: `-1` latest, `-2` earliest, or the first at or after a timestamp.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        self.retry(&format!("list offsets of {topic}/{partition}"), || async {
            let mut offset = self.cluster.list_offset(topic, partition, timestamp).await;
            // A partition the cached routes lack may have been added since they were
            // fetched (a topic grown by another client): asked again with fresh routes
            // before it is called unknown, since that code is not retried.
            if offset
                .as_ref()
                .is_err_and(|e| e.code() == Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))
            {
                self.cluster.invalidate(topic);
                offset = self.cluster.list_offset(topic, partition, timestamp).await;
            }
            if offset
                .as_ref()
                .is_err_and(ClientError::needs_metadata_refresh)
            {
                self.cluster.invalidate(topic);
            }
            offset
        })
        .await
    }

    /// Deletes the records of `topic`/`partition` below `before` (`-1`: every record up to
    /// the high watermark), on its leader: the partition's log start after the call, once
    /// every in-sync replica has deleted them. Retried like a change (a retry asks for the
    /// same log start, which changes nothing the second time).
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: u32,
        before: i64,
    ) -> Result<i64, ClientError> {
        // The broker's wait for its followers ends before this client's request times out.
        let wait = self.cluster.config.request_timeout * 4 / 5;
        let request = &m::DeleteRecordsRequest {
            partitions: vec![m::DeleteRecordsPartition {
                topic: topic.into(),
                partition,
                offset: before,
            }],
            timeout_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1),
        };
        self.retry(
            &format!("delete records of {topic}/{partition}"),
            || async move {
                let connection = self.cluster.leader(topic, partition).await?;
                let response = connection
                    .request(request, self.cluster.config.request_timeout)
                    .await?;
                check(response.error.as_ref())?;
                let result =
                    response.partitions.into_iter().next().ok_or_else(|| {
                        ClientError::Protocol("empty delete-records response".into())
                    })?;
                let checked = check(result.error.as_ref());
                if checked
                    .as_ref()
                    .is_err_and(ClientError::needs_metadata_refresh)
                {
                    self.cluster.invalidate(topic);
                }
                checked.map(|()| result.low_watermark)
            },
        )
        .await
    }

    /// Sends `request` to the coordinator of `group` (found again for each call).
    pub(crate) async fn to_coordinator<R: tinymq_protocol::Request>(
        &self,
        group: &str,
        request: &R,
    ) -> Result<R::Response, ClientError> {
        let c = self.coordinator(group).await?;
        c.request(request, self.cluster.config.request_timeout)
            .await
    }

    async fn coordinator(
        &self,
        group: &str,
    ) -> Result<std::sync::Arc<crate::Connection>, ClientError> {
        let found = self
            .cluster
            .request(&m::FindCoordinatorRequest {
                group_id: group.into(),
                key_type: 0,
            })
            .await?;
        check(found.error.as_ref())?;
        self.cluster
            .connection(&format!("{}:{}", found.host, found.port))
            .await
    }
}
