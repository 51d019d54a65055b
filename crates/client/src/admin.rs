//! Topic administration: create, delete, list, describe.

use std::sync::Arc;

use tinymq_protocol::messages as m;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{check, ClientError};

pub use tinymq_protocol::messages::{DescribeTopicResponse, PartitionState, TopicConfig};

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

    pub async fn describe_topic(&self, name: &str) -> Result<DescribeTopicResponse, ClientError> {
        let response = self
            .cluster
            .request(&m::DescribeTopicRequest { name: name.into() })
            .await?;
        check(response.error.as_ref())?;
        Ok(response)
    }
}
