//! `describe_share_group`: the share-partition state of a group, merged from every broker
//! (each answers `DescribeShareGroup` for the partitions it leads). A broker that cannot be
//! asked is named in the result rather than failing the whole description, so a tool still
//! shows what the others know.

use std::collections::BTreeSet;

use tinymq_protocol::messages as m;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::ClientError;

/// A share group as the brokers see it.
#[derive(Debug, Clone, Default)]
pub struct ShareGroupDescription {
    pub group_id: String,
    /// One entry per partition with state, sorted by topic and partition.
    pub partitions: Vec<m::SharePartitionState>,
    /// Members holding acquired records now, on any broker, sorted.
    pub member_ids: Vec<String>,
    /// Brokers that could not be asked (address, error); their partitions are missing.
    pub unreachable: Vec<(String, String)>,
}

impl ShareGroupDescription {
    /// Whether any broker has state for the group.
    pub fn exists(&self) -> bool {
        !self.partitions.is_empty()
    }
}

/// Asks every live broker (from Metadata) for its share-partition state of `group`.
/// Authorization failures end the description; other per-broker failures are listed in
/// `unreachable`.
pub async fn describe_share_group(
    config: ClientConfig,
    group: &str,
) -> Result<ShareGroupDescription, ClientError> {
    let cluster = Cluster::new(config)?;
    let brokers = cluster.broker_addresses().await?;
    let request = m::DescribeShareGroupRequest {
        group_id: group.to_string(),
    };
    let mut out = ShareGroupDescription {
        group_id: group.to_string(),
        ..Default::default()
    };
    let mut members = BTreeSet::new();
    let mut addrs: Vec<&String> = brokers.values().collect();
    addrs.sort();
    for addr in addrs {
        let answer = match cluster.connection(addr).await {
            Ok(connection) => {
                connection
                    .request(&request, cluster.config.request_timeout)
                    .await
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok(response) => {
                out.partitions.extend(response.partitions);
                members.extend(response.member_ids);
            }
            Err(e) if is_refusal(&e) => return Err(e),
            Err(e) => out.unreachable.push((addr.clone(), e.to_string())),
        }
    }
    out.partitions
        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    // During a leader move two brokers may both answer for a partition: keep the first.
    out.partitions
        .dedup_by(|b, a| a.topic == b.topic && a.partition == b.partition);
    out.member_ids = members.into_iter().collect();
    Ok(out)
}

/// Errors that are an answer about the group or the caller, not about one broker.
fn is_refusal(e: &ClientError) -> bool {
    use tinymq_protocol::ErrorCode as E;
    matches!(
        e.code(),
        Some(E::AUTHORIZATION_FAILED | E::CLUSTER_AUTHORIZATION_FAILED | E::AUTHENTICATION_FAILED)
    ) || matches!(
        e,
        ClientError::Authentication { .. } | ClientError::Tls { .. }
    )
}
