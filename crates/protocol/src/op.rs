//! Operation codes: the low 7 bits of a frame's `kind` byte, naming the body's message type.
//!
//! Codes are stable: a code is never reused for another operation, even after the operation is
//! retired. A request with an unknown code is answered with `UNKNOWN_OPERATION` and the
//! connection stays usable.

use crate::messages;

macro_rules! operations {
    ($( $(#[$doc:meta])* $name:ident = $code:literal => $request:ident, $response:ident; )*) => {
        /// Every operation of protocol version 1.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum OpCode {
            $( $(#[$doc])* $name = $code, )*
        }

        impl OpCode {
            /// Every operation, in code order.
            pub const ALL: &'static [OpCode] = &[$(OpCode::$name,)*];

            pub fn from_code(code: u8) -> Option<OpCode> {
                match code {
                    $( $code => Some(OpCode::$name), )*
                    _ => None,
                }
            }

            pub fn code(self) -> u8 {
                self as u8
            }

            /// The name used in logs, metrics and docs.
            pub fn name(self) -> &'static str {
                match self {
                    $( OpCode::$name => stringify!($name), )*
                }
            }
        }

        $(
            impl Request for messages::$request {
                const OP: OpCode = OpCode::$name;
                type Response = messages::$response;
            }
        )*
    };
}

/// A request body type, tied to its operation code and its response body type.
pub trait Request: prost::Message + Default {
    const OP: OpCode;
    type Response: prost::Message + Default;
}

operations! {
    /// First request on every connection: versions, cluster id, limits.
    Handshake = 1 => HandshakeRequest, HandshakeResponse;
    /// Routes: which broker leads each partition.
    Metadata = 2 => MetadataRequest, MetadataResponse;
    CreateTopic = 3 => CreateTopicRequest, CreateTopicResponse;
    DeleteTopic = 4 => DeleteTopicRequest, DeleteTopicResponse;
    ListTopics = 5 => ListTopicsRequest, ListTopicsResponse;
    DescribeTopic = 6 => DescribeTopicRequest, DescribeTopicResponse;
    /// Append record batches to partitions.
    Produce = 7 => ProduceRequest, ProduceResponse;
    /// Read record batches from partitions, with long polling.
    Fetch = 8 => FetchRequest, FetchResponse;
    /// Earliest, latest, or first offset at a timestamp.
    ListOffsets = 9 => ListOffsetsRequest, ListOffsetsResponse;
    /// A producer id and epoch for idempotent produce.
    InitProducerId = 10 => InitProducerIdRequest, InitProducerIdResponse;
    /// Which broker coordinates a consumer group.
    FindCoordinator = 11 => FindCoordinatorRequest, FindCoordinatorResponse;
    JoinGroup = 12 => JoinGroupRequest, JoinGroupResponse;
    Heartbeat = 13 => HeartbeatRequest, HeartbeatResponse;
    LeaveGroup = 14 => LeaveGroupRequest, LeaveGroupResponse;
    OffsetCommit = 15 => OffsetCommitRequest, OffsetCommitResponse;
    OffsetFetch = 16 => OffsetFetchRequest, OffsetFetchResponse;
    ListGroups = 17 => ListGroupsRequest, ListGroupsResponse;
    DescribeGroup = 18 => DescribeGroupRequest, DescribeGroupResponse;
    DeleteGroup = 19 => DeleteGroupRequest, DeleteGroupResponse;
    /// Grow a topic to more partitions (never fewer).
    AlterPartitions = 20 => AlterPartitionsRequest, AlterPartitionsResponse;
    /// Remove a stopped broker from the cluster for good.
    DecommissionBroker = 21 => DecommissionBrokerRequest, DecommissionBrokerResponse;
    /// Spread replicas and preferred leaders over the live brokers (reassignments).
    Rebalance = 22 => RebalanceRequest, RebalanceResponse;
    /// Move every replica off one broker (reassignments).
    DrainBroker = 23 => DrainBrokerRequest, DrainBrokerResponse;
    /// Change a topic's settings (set keys, remove keys); they take effect without a restart.
    AlterTopicConfig = 24 => AlterTopicConfigRequest, AlterTopicConfigResponse;
    /// One step of a SASL (SCRAM) exchange, after the handshake.
    Authenticate = 25 => AuthenticateRequest, AuthenticateResponse;
    /// Create a user or replace its SCRAM credentials.
    PutUser = 26 => PutUserRequest, PutUserResponse;
    DeleteUser = 27 => DeleteUserRequest, DeleteUserResponse;
    ListUsers = 28 => ListUsersRequest, ListUsersResponse;
    CreateAcls = 29 => CreateAclsRequest, CreateAclsResponse;
    DeleteAcls = 30 => DeleteAclsRequest, DeleteAclsResponse;
    ListAcls = 31 => ListAclsRequest, ListAclsResponse;
    /// Set or remove a principal's produce, fetch and request rates.
    SetQuota = 32 => SetQuotaRequest, SetQuotaResponse;
    ListQuotas = 33 => ListQuotasRequest, ListQuotasResponse;
    /// Raft messages between MetaServer nodes.
    RaftRpc = 40 => RaftRpcRequest, RaftRpcResponse;
    /// A metadata command, applied through Raft (followers forward it to the leader).
    MetaWrite = 41 => MetaWriteRequest, MetaWriteResponse;
    /// The metadata image as applied on the answering MetaServer node.
    MetaRead = 42 => MetaReadRequest, MetaReadResponse;
    /// A broker's liveness signal to the MetaServer leader.
    BrokerHeartbeat = 43 => BrokerHeartbeatRequest, BrokerHeartbeatResponse;
    /// Share groups: acquire records under a lock (acknowledging earlier ones first).
    ShareFetch = 50 => ShareFetchRequest, ShareFetchResponse;
    /// Share groups: accept, release or reject acquired records.
    ShareAcknowledge = 51 => ShareAcknowledgeRequest, ShareAcknowledgeResponse;
    /// Share groups: the share-partition state of the partitions led by the answering broker.
    DescribeShareGroup = 52 => DescribeShareGroupRequest, DescribeShareGroupResponse;
    /// Append a batch that becomes visible at a deliver-at time.
    ProduceDelayed = 53 => ProduceDelayedRequest, ProduceDelayedResponse;
    /// Add a durable content-based route from one topic to another.
    CreateRoute = 54 => CreateRouteRequest, CreateRouteResponse;
    DeleteRoute = 55 => DeleteRouteRequest, DeleteRouteResponse;
    /// Every route with its progress and lag.
    ListRoutes = 56 => ListRoutesRequest, ListRoutesResponse;
    /// Transactions: register partitions in the open transaction (to the coordinator).
    AddPartitionsToTxn = 60 => AddPartitionsToTxnRequest, AddPartitionsToTxnResponse;
    /// Transactions: register a group's offsets in the open transaction.
    AddOffsetsToTxn = 61 => AddOffsetsToTxnRequest, AddOffsetsToTxnResponse;
    /// Transactions: commit or abort the open transaction.
    EndTxn = 62 => EndTxnRequest, EndTxnResponse;
    /// Transactions: offsets committed if the transaction commits (to the group coordinator).
    TxnOffsetCommit = 63 => TxnOffsetCommitRequest, TxnOffsetCommitResponse;
    /// Transactions: the coordinator's COMMIT/ABORT markers to a partition leader (nodes only).
    WriteTxnMarkers = 64 => WriteTxnMarkersRequest, WriteTxnMarkersResponse;
    /// Transactions: the state of named transactional ids (from their coordinator).
    DescribeTransactions = 65 => DescribeTransactionsRequest, DescribeTransactionsResponse;
    /// Transactions: the transactional ids the answering broker coordinates.
    ListTransactions = 66 => ListTransactionsRequest, ListTransactionsResponse;
    /// Transactions: the producers of partitions led by the answering broker.
    DescribeProducers = 67 => DescribeProducersRequest, DescribeProducersResponse;
    /// Half messages: store a batch no consumer sees until it is committed (to the group's
    /// half-message coordinator).
    HalfSend = 68 => HalfSendRequest, HalfSendResponse;
    /// Half messages: commit (append) or roll back a half.
    HalfEnd = 69 => HalfEndRequest, HalfEndResponse;
    /// Half messages: a live member of the group long-polls for the halves to check.
    HalfCheckPoll = 70 => HalfCheckPollRequest, HalfCheckPollResponse;
    /// Half messages: the unresolved halves the answering broker coordinates.
    HalfList = 71 => HalfListRequest, HalfListResponse;
    /// Deletes the records of partitions below an offset (to each partition's leader).
    DeleteRecords = 72 => DeleteRecordsRequest, DeleteRecordsResponse;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_fit_in_seven_bits() {
        for &op in OpCode::ALL {
            assert!(op.code() < 0x80);
            assert_eq!(OpCode::from_code(op.code()), Some(op));
        }
        assert_eq!(OpCode::from_code(0), None);
        assert_eq!(OpCode::from_code(0x7F), None);
    }

    /// The DrainBroker exchange shown byte for byte in docs/protocol.md.
    #[test]
    fn documented_drain_broker_example() {
        use crate::frame::FrameHeader;
        use prost::Message;
        let request = messages::DrainBrokerRequest {
            broker_id: 2,
            dry_run: true,
        }
        .encode_to_vec();
        assert_eq!(request, [0x08, 0x02, 0x10, 0x01]);
        let header = FrameHeader::request(OpCode::DrainBroker.code(), 7, request.len() as u32);
        assert_eq!(
            header.to_bytes(),
            [0x54, 0x4d, 0x01, 0x17, 0, 0, 0, 7, 0, 0, 0, 4]
        );
        let response = messages::DrainBrokerResponse {
            error: None,
            moves: vec![messages::PartitionMove {
                topic: "orders".into(),
                partition: 1,
                from_replicas: vec![1, 2, 3],
                to_replicas: vec![1, 3, 4],
            }],
        }
        .encode_to_vec();
        let mut expected = vec![0x12, 0x14, 0x0a, 0x06];
        expected.extend_from_slice(b"orders");
        expected.extend_from_slice(&[0x10, 0x01, 0x1a, 0x03, 1, 2, 3, 0x22, 0x03, 1, 3, 4]);
        assert_eq!(response, expected);
        let header = FrameHeader::response(OpCode::DrainBroker.code(), 7, response.len() as u32);
        assert_eq!(
            header.to_bytes(),
            [0x54, 0x4d, 0x01, 0x97, 0, 0, 0, 7, 0, 0, 0, 0x16]
        );
    }

    /// The ListTopics response shown byte for byte in docs/protocol.md.
    #[test]
    fn documented_list_topics_example() {
        use crate::frame::FrameHeader;
        use prost::Message;
        let body = messages::ListTopicsResponse {
            error: None,
            names: vec!["orders".into()],
        }
        .encode_to_vec();
        assert_eq!(body, [0x12, 0x06, b'o', b'r', b'd', b'e', b'r', b's']);
        let header = FrameHeader::response(OpCode::ListTopics.code(), 9, body.len() as u32);
        assert_eq!(
            header.to_bytes(),
            [0x54, 0x4d, 0x01, 0x85, 0, 0, 0, 9, 0, 0, 0, 8]
        );
        let request = FrameHeader::request(OpCode::ListTopics.code(), 9, 0);
        assert_eq!(
            request.to_bytes(),
            [0x54, 0x4d, 0x01, 0x05, 0, 0, 0, 9, 0, 0, 0, 0]
        );
    }
}
