//! Valid requests of every API served, and random mutations of their bytes: what reaches
//! the handlers with values no client would send.

use kafka_protocol::messages::{ApiKey, RequestKind};
use kafka_protocol::protocol::StrBytes;

use super::wire::XorShift;

/// A plausible request of every API served (naming topic `good`, a group, a record batch),
/// so that mutations of it reach the handlers instead of stopping at the decoder.
pub fn seed(api_key: ApiKey, version: i16) -> Option<RequestKind> {
    use kafka_protocol::messages::*;
    let s = StrBytes::from_static_str;
    let topic = || TopicName(s("good"));
    let group = || GroupId(s("hostile-group"));
    let request = match api_key {
        ApiKey::Produce => RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![produce_request::TopicProduceData::default()
                    .with_name(topic())
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(record_batch())),
                    ])]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(100)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        ),
        ApiKey::ListOffsets => RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ])]),
        ),
        ApiKey::Metadata => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
            ])))
        }
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(group())
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(0),
                        ]),
                ]),
        ),
        ApiKey::OffsetFetch if version >= 8 => {
            RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group()),
            ]))
        }
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(
            OffsetFetchRequest::default()
                .with_group_id(group())
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(topic())
                        .with_partition_indexes(vec![0]),
                ])),
        ),
        ApiKey::FindCoordinator if version >= 4 => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("hostile-group")]),
        ),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_key(s("hostile-group")),
        ),
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group())
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(bytes::Bytes::from_static(
                    b"\0\0\0\0\0\x01\0\x04good\xff\xff\xff\xff",
                ))]),
        ),
        ApiKey::Heartbeat => RequestKind::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(s("member")),
        ),
        ApiKey::LeaveGroup if version >= 3 => RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group())
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s("member"))
                ]),
        ),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group())
                .with_member_id(s("member")),
        ),
        ApiKey::SyncGroup => RequestKind::SyncGroup(
            SyncGroupRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(s("member"))
                .with_assignments(vec![
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s("member"))
                        .with_assignment(bytes::Bytes::from_static(
                            b"\0\0\0\0\0\x01\0\x04good\0\0\0\x01\0\0\0\0\xff\xff\xff\xff",
                        )),
                ]),
        ),
        ApiKey::DescribeGroups => {
            RequestKind::DescribeGroups(DescribeGroupsRequest::default().with_groups(vec![group()]))
        }
        ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256")),
        ),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"n,,n=hostile,r=abcdefgh")),
        ),
        ApiKey::CreateTopics => RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(5000)
                .with_topics(vec![create_topics_request::CreatableTopic::default()
                    .with_name(TopicName(s("mutant")))
                    .with_num_partitions(1)
                    .with_replication_factor(1)]),
        ),
        ApiKey::DeleteTopics if version >= 6 => {
            RequestKind::DeleteTopics(DeleteTopicsRequest::default().with_topics(vec![
                delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(TopicName(s("no-such-topic")))),
            ]))
        }
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![TopicName(s("no-such-topic"))]),
        ),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("no-such-group"))]),
        ),
        ApiKey::InitProducerId => RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        ApiKey::DescribeConfigs => {
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("good")),
            ]))
        }
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(
            CreatePartitionsRequest::default()
                .with_timeout_ms(5000)
                .with_validate_only(true)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(topic())
                        .with_count(2),
                ]),
        ),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        ApiKey::DescribeUserScramCredentials => RequestKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                describe_user_scram_credentials_request::UserName::default().with_name(s("bob")),
            ])),
        ),
        ApiKey::AlterUserScramCredentials => RequestKind::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(s("bob"))
                    .with_mechanism(1)
                    .with_iterations(4096)
                    .with_salt(bytes::Bytes::from_static(&[7; 16]))
                    .with_salted_password(bytes::Bytes::from_static(&[9; 32])),
            ]),
        ),
        ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(
            DescribeClientQuotasRequest::default().with_components(vec![
                describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(s("user"))
                    .with_match_type(2),
            ]),
        ),
        ApiKey::AlterClientQuotas => {
            RequestKind::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("user"))
                        .with_entity_name(Some(s("bob")))])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_value(1_048_576.0)]),
            ]))
        }
        ApiKey::DescribeLogDirs => {
            RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default().with_topics(Some(vec![
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![0]),
            ])))
        }
        ApiKey::ElectLeaders => RequestKind::ElectLeaders(
            ElectLeadersRequest::default()
                .with_timeout_ms(1000)
                .with_topic_partitions(Some(vec![
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(topic())
                        .with_partitions(vec![0]),
                ])),
        ),
        ApiKey::AlterPartitionReassignments => RequestKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_partition_index(0)
                                .with_replicas(Some(vec![BrokerId(1)])),
                        ]),
                ]),
        ),
        ApiKey::ListPartitionReassignments => RequestKind::ListPartitionReassignments(
            ListPartitionReassignmentsRequest::default().with_timeout_ms(1000),
        ),
        _ => return None,
    };
    Some(request)
}

/// One record batch (RecordBatch v2, tinymq's format and Kafka's).
pub fn record_batch() -> bytes::Bytes {
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: 1,
        key: Some(b"k"),
        value: Some(b"mutant"),
        headers: &[],
    });
    builder.build().expect("a batch")
}

/// Values that break assumptions when they land on a length, a count or a number.
pub const INTERESTING_I32: [i32; 8] = [0, 1, -1, 0x7fff, 0x8000, i32::MAX, i32::MIN, 0x00ff_ffff];

/// `body` with a few random changes: bytes overwritten, an interesting number written over
/// four bytes, cut short, or grown.
pub fn mutate(rng: &mut XorShift, body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    for _ in 0..1 + rng.next() % 3 {
        let at = |rng: &mut XorShift, len: usize| (rng.next() as usize) % len.max(1);
        match rng.next() % 4 {
            0 if !out.is_empty() => {
                let i = at(rng, out.len());
                out[i] = rng.next() as u8;
            }
            1 if out.len() >= 4 => {
                let i = at(rng, out.len() - 3);
                let value = INTERESTING_I32[(rng.next() % 8) as usize];
                out[i..i + 4].copy_from_slice(&value.to_be_bytes());
            }
            2 if !out.is_empty() => {
                let keep = at(rng, out.len());
                out.truncate(keep);
            }
            _ => {
                let len = (rng.next() % 16) as usize;
                let more = rng.bytes(len);
                out.extend_from_slice(&more);
            }
        }
    }
    out
}
