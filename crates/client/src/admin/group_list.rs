//! `Admin::list_groups_detailed` and `Admin::group_lag` (issue 27): every group of the
//! cluster with its type (consumer, kafka, share), state and members, merged from every
//! broker's ListGroups; and a group's total lag.
//!
//! A consumer or Kafka group is listed by its coordinator; a share group by every broker
//! leading one of its partitions, so its members are the union of what they report. A
//! consumer group's lag is the sum over the partitions it has committed offsets in of the
//! high watermark minus the committed offset; a share group's is the sum over its partitions
//! of the records below the high watermark not yet done (accepted or dead-lettered). Either
//! is unknown (`None`) when one of those partitions' high watermark is.

use std::collections::{BTreeMap, BTreeSet};

use tinymq_protocol::messages as m;

use super::Admin;
use crate::error::{check, ClientError};

/// One group as `group list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    /// "consumer", "kafka" or "share" ([`GroupType`]'s names).
    pub group_type: GroupType,
    /// "empty", "stable" or "rebalancing"; "unknown" from a broker too old to say.
    pub state: String,
    pub members: u32,
}

/// A group's kind: which protocol its members speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupType {
    /// tinymq's native consumer groups (or a group that has only committed offsets).
    Consumer,
    /// Members speaking Kafka's classic group protocol on a broker's Kafka listener.
    Kafka,
    /// A share group (queue semantics).
    Share,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            GroupType::Consumer => "consumer",
            GroupType::Kafka => "kafka",
            GroupType::Share => "share",
        }
    }

    fn parse(text: &str) -> Option<GroupType> {
        match text {
            "consumer" => Some(GroupType::Consumer),
            "kafka" => Some(GroupType::Kafka),
            "share" => Some(GroupType::Share),
            _ => None,
        }
    }
}

impl std::fmt::Display for GroupType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Admin {
    /// Every group of the cluster with its type, state and members, sorted by id and type
    /// ([`Admin::list_groups`] lists only the consumer groups' ids).
    pub async fn list_groups_detailed(&self) -> Result<Vec<ListedGroup>, ClientError> {
        self.retry("list groups", || self.list_groups_detailed_once())
            .await
    }

    async fn list_groups_detailed_once(&self) -> Result<Vec<ListedGroup>, ClientError> {
        Ok(merge(self.list_groups_answers().await?))
    }

    /// Every broker's ListGroups answer (each lists the groups it coordinates or leads
    /// partitions of).
    pub(super) async fn list_groups_answers(
        &self,
    ) -> Result<Vec<m::ListGroupsResponse>, ClientError> {
        let mut answers = Vec::new();
        for addr in self.cluster.broker_addresses().await?.values() {
            let connection = self.cluster.connection(addr).await?;
            let response = connection
                .request(
                    &m::ListGroupsRequest {},
                    self.cluster.config.request_timeout,
                )
                .await?;
            check(response.error.as_ref())?;
            answers.push(response);
        }
        Ok(answers)
    }

    /// The total lag of a group (see the module's doc); `None` when a partition's high
    /// watermark is not known.
    pub async fn group_lag(
        &self,
        group_id: &str,
        group_type: GroupType,
    ) -> Result<Option<i64>, ClientError> {
        match group_type {
            GroupType::Share => {
                let d = crate::share::describe_share_group(self.cluster.config.clone(), group_id)
                    .await?;
                if !d.unreachable.is_empty() {
                    return Ok(None);
                }
                // Broker-reported figures: summed saturating, never overflowing.
                Ok(d.partitions
                    .iter()
                    .map(share_partition_lag)
                    .try_fold(0i64, |sum, lag| Some(sum.saturating_add(lag?))))
            }
            GroupType::Consumer | GroupType::Kafka => {
                let d = self.describe_group(group_id).await?;
                let topics: BTreeSet<&str> = d.offsets.iter().map(|o| o.topic.as_str()).collect();
                let mut lag = 0i64;
                for topic in topics {
                    let Ok(t) = self.describe_topic(topic).await else {
                        return Ok(None);
                    };
                    for o in d.offsets.iter().filter(|o| o.topic == topic) {
                        let hw = t
                            .partitions
                            .iter()
                            .find(|p| p.partition == o.partition)
                            .map(|p| p.high_watermark);
                        match hw {
                            Some(hw) if hw >= 0 && o.offset >= 0 => {
                                lag = lag.saturating_add(hw.saturating_sub(o.offset).max(0))
                            }
                            _ => return Ok(None),
                        }
                    }
                }
                Ok(Some(lag))
            }
        }
    }
}

/// The records of one share partition below its high watermark not yet done; `None` when
/// the high watermark is not known.
fn share_partition_lag(p: &m::SharePartitionState) -> Option<i64> {
    (p.high_watermark >= 0).then(|| {
        p.high_watermark
            .saturating_sub(p.start_offset)
            .saturating_sub(i64::try_from(p.accepted).unwrap_or(i64::MAX))
            .max(0)
    })
}

/// One listing from every broker's answer: a share group's members merged over brokers; a
/// consumer or Kafka group kept as its coordinator lists it (the first answer, should a
/// coordinator move while asked). A broker older than `groups` lists its ids as consumer
/// groups of state "unknown".
fn merge(answers: Vec<m::ListGroupsResponse>) -> Vec<ListedGroup> {
    let mut listed: BTreeMap<(String, GroupType), ListedGroup> = BTreeMap::new();
    let mut share_members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for answer in answers {
        if answer.groups.is_empty() {
            for group_id in answer.group_ids {
                listed
                    .entry((group_id.clone(), GroupType::Consumer))
                    .or_insert(ListedGroup {
                        group_id,
                        group_type: GroupType::Consumer,
                        state: "unknown".into(),
                        members: 0,
                    });
            }
            continue;
        }
        for g in answer.groups {
            // A type this client does not know yet is left out rather than mislabelled.
            let Some(group_type) = GroupType::parse(&g.group_type) else {
                continue;
            };
            if group_type == GroupType::Share {
                share_members
                    .entry(g.group_id.clone())
                    .or_default()
                    .extend(g.member_ids);
            }
            listed
                .entry((g.group_id.clone(), group_type))
                .or_insert(ListedGroup {
                    group_id: g.group_id,
                    group_type,
                    state: g.state,
                    members: g.members,
                });
        }
    }
    for (group_id, members) in share_members {
        if let Some(g) = listed.get_mut(&(group_id, GroupType::Share)) {
            g.members = members.len() as u32;
            g.state = if members.is_empty() {
                "empty"
            } else {
                "stable"
            }
            .into();
        }
    }
    listed.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(id: &str, group_type: &str, state: &str, members: &[&str]) -> m::GroupListing {
        m::GroupListing {
            group_id: id.into(),
            group_type: group_type.into(),
            state: state.into(),
            members: members.len() as u32,
            member_ids: members.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn share_members_are_merged_over_brokers_and_old_brokers_list_consumer_ids() {
        let a = m::ListGroupsResponse {
            group_ids: vec!["c".into()],
            groups: vec![
                listing("c", "consumer", "stable", &[]),
                listing("q", "share", "stable", &["m1", "m2"]),
                listing("z", "future-type", "stable", &[]),
            ],
            ..Default::default()
        };
        let b = m::ListGroupsResponse {
            groups: vec![listing("q", "share", "stable", &["m2", "m3"])],
            ..Default::default()
        };
        let old = m::ListGroupsResponse {
            group_ids: vec!["legacy".into()],
            ..Default::default()
        };
        let merged = merge(vec![a, b, old]);
        let shown: Vec<_> = merged
            .iter()
            .map(|g| {
                (
                    g.group_id.as_str(),
                    g.group_type,
                    g.state.as_str(),
                    g.members,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("c", GroupType::Consumer, "stable", 0),
                ("legacy", GroupType::Consumer, "unknown", 0),
                ("q", GroupType::Share, "stable", 3),
            ]
        );
    }

    #[test]
    fn share_lag_counts_what_is_not_done_below_the_high_watermark() {
        let p = m::SharePartitionState {
            start_offset: 10,
            high_watermark: 20,
            accepted: 3,
            ..Default::default()
        };
        assert_eq!(share_partition_lag(&p), Some(7));
        let unknown = m::SharePartitionState {
            high_watermark: -1,
            ..Default::default()
        };
        assert_eq!(share_partition_lag(&unknown), None);
    }
}
