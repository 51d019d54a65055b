//! DescribeLogDirs (v1..=4): this broker's one log directory (`--data`) and the size of each
//! partition replica it holds there, as `kafka-log-dirs --describe` asks every broker. Needs
//! DESCRIBE on the cluster, checked against the same ACLs as the native port. A broker has one
//! directory, so there are no future (moving) replicas; the directory's total and usable bytes
//! are answered as -1 (unknown), which Kafka's clients accept.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::*;
use tinymq_auth::AclOperation;
use tinymq_meta::authorize::Permission;

use super::text;
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

pub(crate) async fn describe_log_dirs(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let state = ctx.state();
    let permission = Permission::cluster(AclOperation::Describe);
    if let Err(e) = state.check_permission(&ctx.peer.principal, permission) {
        return DescribeLogDirsResponse::default()
            .with_error_code(kafka_code_for(Some(&e), Resource::Cluster));
    }
    // Not capped: the set is built in one pass over the request (bounded by the frame size),
    // and the answer is at most every replica here, as for a request naming none.
    let wanted: Option<HashSet<(&str, u32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                let topic = t.topic.as_str();
                t.partitions
                    .iter()
                    .filter_map(move |p| Some((topic, u32::try_from(*p).ok()?)))
            })
            .collect()
    });
    let wanted =
        |topic: &str, index: u32| wanted.as_ref().is_none_or(|w| w.contains(&(topic, index)));
    let mut partitions: Vec<_> = state
        .all_partitions()
        .into_iter()
        .filter(|p| wanted(&p.topic, p.index))
        .collect();
    partitions.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for p in partitions {
        // How far this replica's log is behind the high watermark it knows (0 on a leader).
        let lag = (p.high_watermark() - p.log.log_end_offset()).max(0);
        let entry = DescribeLogDirsPartition::default()
            .with_partition_index(i32::try_from(p.index).unwrap_or(i32::MAX))
            .with_partition_size(i64::try_from(p.log.size_bytes()).unwrap_or(i64::MAX))
            .with_offset_lag(lag);
        match topics.last_mut() {
            Some(last) if last.name.as_str() == p.topic => last.partitions.push(entry),
            _ => topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(text(p.topic.clone())))
                    .with_partitions(vec![entry]),
            ),
        }
    }
    let dir = &state.config.data_dir;
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
    let result = DescribeLogDirsResult::default()
        .with_log_dir(text(dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    DescribeLogDirsResponse::default().with_results(vec![result])
}
