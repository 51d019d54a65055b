//! Topic administration: create, delete, list, describe.

use std::sync::Arc;

use tinymq_protocol::messages as m;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{check, ClientError};

pub use tinymq_protocol::messages::{
    CommittedOffset, DescribeGroupResponse, DescribeTopicResponse, PartitionState, TopicConfig,
};

/// Administrative operations against any node of the cluster.
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
    cluster: Arc<Cluster>,
}

impl Admin {
    pub fn new(config: ClientConfig) -> Result<Admin, ClientError> {
        Ok(Admin {
            cluster: Cluster::new(config)?,
        })
    }

    /// Creates a topic; zero or empty fields of `config` take the server's defaults. Returns
    /// the settings the topic got.
    pub async fn create_topic(
        &self,
        name: &str,
        config: TopicConfig,
    ) -> Result<TopicConfig, ClientError> {
        let response = self
            .cluster
            .request(&m::CreateTopicRequest {
                name: name.into(),
                config: Some(config),
                validate_only: false,
            })
            .await?;
        check(response.error.as_ref())?;
        Ok(response.config.unwrap_or_default())
    }

    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let response = self
            .cluster
            .request(&m::DeleteTopicRequest { name: name.into() })
            .await?;
        check(response.error.as_ref())
    }

    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.cluster.request(&m::ListTopicsRequest {}).await?.names)
    }

    /// Grows a topic to `partitions` (never shrinks it).
    pub async fn alter_partitions(&self, name: &str, partitions: u32) -> Result<(), ClientError> {
        let response = self
            .cluster
            .request(&m::AlterPartitionsRequest {
                name: name.into(),
                partitions,
            })
            .await?;
        check(response.error.as_ref())
    }

    /// Settings, placement and offsets of a topic. Placement comes from any broker; each
    /// partition's offsets from its leader (-1 when the leader cannot be reached).
    pub async fn describe_topic(&self, name: &str) -> Result<DescribeTopicResponse, ClientError> {
        let request = m::DescribeTopicRequest { name: name.into() };
        let mut response = self.cluster.request(&request).await?;
        check(response.error.as_ref())?;
        let brokers = self.cluster.broker_addresses().await?;
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
        let mut groups = std::collections::BTreeSet::new();
        for addr in self.cluster.broker_addresses().await?.values() {
            let connection = self.cluster.connection(addr).await?;
            let response = connection
                .request(
                    &m::ListGroupsRequest {},
                    self.cluster.config.request_timeout,
                )
                .await?;
            check(response.error.as_ref())?;
            groups.extend(response.group_ids);
        }
        Ok(groups.into_iter().collect())
    }

    /// Members, their partitions, state and committed offsets of a group.
    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse, ClientError> {
        let c = self.coordinator(group).await?;
        let response = c
            .request(
                &m::DescribeGroupRequest {
                    group_id: group.into(),
                },
                self.cluster.config.request_timeout,
            )
            .await?;
        check(response.error.as_ref())?;
        Ok(response)
    }

    /// Deletes a group that has no members, with its committed offsets.
    pub async fn delete_group(&self, group: &str) -> Result<(), ClientError> {
        let c = self.coordinator(group).await?;
        let response = c
            .request(
                &m::DeleteGroupRequest {
                    group_id: group.into(),
                },
                self.cluster.config.request_timeout,
            )
            .await?;
        check(response.error.as_ref())
    }

    /// Sets a group's committed offsets; only while the group has no members.
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, u32, i64)>,
    ) -> Result<(), ClientError> {
        let c = self.coordinator(group).await?;
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
        let response = c
            .request(&request, self.cluster.config.request_timeout)
            .await?;
        check(response.error.as_ref())
    }

    /// A partition's offset: `-1` latest, `-2` earliest, or the first at or after a timestamp.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        self.cluster.list_offset(topic, partition, timestamp).await
    }

    async fn coordinator(
        &self,
        group: &str,
    ) -> Result<std::sync::Arc<crate::Connection>, ClientError> {
        let found = self
            .cluster
            .request(&m::FindCoordinatorRequest {
                group_id: group.into(),
            })
            .await?;
        check(found.error.as_ref())?;
        self.cluster
            .connection(&format!("{}:{}", found.host, found.port))
            .await
    }
}
