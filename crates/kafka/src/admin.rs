//! Topic administration and cluster description: CreateTopics, DeleteTopics,
//! CreatePartitions, DescribeConfigs, DescribeCluster.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::context::Ctx;

pub(crate) async fn create_topics(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: CreateTopicsRequest,
) -> CreateTopicsResponse {
    CreateTopicsResponse::default()
}

pub(crate) async fn delete_topics(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    DeleteTopicsResponse::default()
}

pub(crate) async fn create_partitions(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    CreatePartitionsResponse::default()
}

pub(crate) async fn describe_configs(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    DescribeConfigsResponse::default()
}

pub(crate) async fn describe_cluster(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: DescribeClusterRequest,
) -> DescribeClusterResponse {
    DescribeClusterResponse::default()
}
