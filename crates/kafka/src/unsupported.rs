//! Answers to requests for an API or version this listener does not serve: where Kafka's
//! response type for the request has an error field, the response carries
//! `UNSUPPORTED_VERSION` there; `None` otherwise (the connection is then closed, with the
//! reason logged).
//!
//! A response type's top-level `error_code` exists in some versions only (Metadata's from
//! v13, for one), and kafka-protocol silently leaves out a field the version lacks; so a
//! response counts as answerable only when the error code changes its encoded bytes.

use bytes::BytesMut;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;

/// `match api_key { ApiKey::X => answer(XResponse::default() with error_code, ...) }` for
/// each API named (the response type is the API's name + `Response`).
macro_rules! answer_with_error_code {
    ($api_key:expr, $version:expr, $code:expr, $($api:ident),* $(,)?) => {
        match $api_key {
            $(ApiKey::$api => {
                let mut errored = <response_type!($api)>::default();
                errored.error_code = $code;
                carries_error(&errored, $version).then(|| ResponseKind::$api(errored))
            })*
            _ => None,
        }
    };
}

macro_rules! response_type {
    (AddOffsetsToTxn) => {
        AddOffsetsToTxnResponse
    };
    (AddPartitionsToTxn) => {
        AddPartitionsToTxnResponse
    };
    (AllocateProducerIds) => {
        AllocateProducerIdsResponse
    };
    (AlterPartition) => {
        AlterPartitionResponse
    };
    (AlterShareGroupOffsets) => {
        AlterShareGroupOffsetsResponse
    };
    (AssignReplicasToDirs) => {
        AssignReplicasToDirsResponse
    };
    (BeginQuorumEpoch) => {
        BeginQuorumEpochResponse
    };
    (BrokerHeartbeat) => {
        BrokerHeartbeatResponse
    };
    (BrokerRegistration) => {
        BrokerRegistrationResponse
    };
    (ConsumerGroupHeartbeat) => {
        ConsumerGroupHeartbeatResponse
    };
    (ControllerRegistration) => {
        ControllerRegistrationResponse
    };
    (CreateDelegationToken) => {
        CreateDelegationTokenResponse
    };
    (DeleteShareGroupOffsets) => {
        DeleteShareGroupOffsetsResponse
    };
    (DescribeAcls) => {
        DescribeAclsResponse
    };
    (DescribeClientQuotas) => {
        DescribeClientQuotasResponse
    };
    (DescribeCluster) => {
        DescribeClusterResponse
    };
    (DescribeDelegationToken) => {
        DescribeDelegationTokenResponse
    };
    (DescribeLogDirs) => {
        DescribeLogDirsResponse
    };
    (DescribeQuorum) => {
        DescribeQuorumResponse
    };
    (DescribeUserScramCredentials) => {
        DescribeUserScramCredentialsResponse
    };
    (ElectLeaders) => {
        ElectLeadersResponse
    };
    (EndQuorumEpoch) => {
        EndQuorumEpochResponse
    };
    (EndTxn) => {
        EndTxnResponse
    };
    (Envelope) => {
        EnvelopeResponse
    };
    (ExpireDelegationToken) => {
        ExpireDelegationTokenResponse
    };
    (FetchSnapshot) => {
        FetchSnapshotResponse
    };
    (FindCoordinator) => {
        FindCoordinatorResponse
    };
    (GetTelemetrySubscriptions) => {
        GetTelemetrySubscriptionsResponse
    };
    (Heartbeat) => {
        HeartbeatResponse
    };
    (InitProducerId) => {
        InitProducerIdResponse
    };
    (JoinGroup) => {
        JoinGroupResponse
    };
    (ListConfigResources) => {
        ListConfigResourcesResponse
    };
    (ListGroups) => {
        ListGroupsResponse
    };
    (ListPartitionReassignments) => {
        ListPartitionReassignmentsResponse
    };
    (ListTransactions) => {
        ListTransactionsResponse
    };
    (Metadata) => {
        MetadataResponse
    };
    (OffsetDelete) => {
        OffsetDeleteResponse
    };
    (OffsetFetch) => {
        OffsetFetchResponse
    };
    (PushTelemetry) => {
        PushTelemetryResponse
    };
    (RenewDelegationToken) => {
        RenewDelegationTokenResponse
    };
    (SaslAuthenticate) => {
        SaslAuthenticateResponse
    };
    (SaslHandshake) => {
        SaslHandshakeResponse
    };
    (ShareGroupHeartbeat) => {
        ShareGroupHeartbeatResponse
    };
    (SyncGroup) => {
        SyncGroupResponse
    };
    (UnregisterBroker) => {
        UnregisterBrokerResponse
    };
    (UpdateFeatures) => {
        UpdateFeaturesResponse
    };
    (UpdateRaftVoter) => {
        UpdateRaftVoterResponse
    };
    (AddRaftVoter) => {
        AddRaftVoterResponse
    };
    (RemoveRaftVoter) => {
        RemoveRaftVoterResponse
    };
    (Vote) => {
        VoteResponse
    };
}

/// Whether `errored` (a default response with its error code set) says so in `version`:
/// its bytes differ from the default response's.
fn carries_error<T: Encodable + Default>(errored: &T, version: i16) -> bool {
    let encoded = |r: &T| {
        let mut out = BytesMut::new();
        r.encode(&mut out, version).ok().map(|()| out)
    };
    match (encoded(errored), encoded(&T::default())) {
        (Some(with), Some(without)) => with != without,
        _ => false,
    }
}

/// The `UNSUPPORTED_VERSION` answer to `version` of `api_key`, if one can be written.
pub(crate) fn response(api_key: ApiKey, version: i16) -> Option<ResponseKind> {
    // Only a version kafka-protocol can encode can be answered.
    let valid = api_key.valid_versions();
    if version < valid.min || version > valid.max {
        return None;
    }
    let code = ResponseError::UnsupportedVersion.code();
    answer_with_error_code!(
        api_key,
        version,
        code,
        AddOffsetsToTxn,
        AddPartitionsToTxn,
        AllocateProducerIds,
        AlterPartition,
        AlterShareGroupOffsets,
        AssignReplicasToDirs,
        BeginQuorumEpoch,
        BrokerHeartbeat,
        BrokerRegistration,
        ConsumerGroupHeartbeat,
        ControllerRegistration,
        CreateDelegationToken,
        DeleteShareGroupOffsets,
        DescribeAcls,
        DescribeClientQuotas,
        DescribeCluster,
        DescribeDelegationToken,
        DescribeLogDirs,
        DescribeQuorum,
        DescribeUserScramCredentials,
        ElectLeaders,
        EndQuorumEpoch,
        EndTxn,
        Envelope,
        ExpireDelegationToken,
        FetchSnapshot,
        FindCoordinator,
        GetTelemetrySubscriptions,
        Heartbeat,
        InitProducerId,
        JoinGroup,
        ListConfigResources,
        ListGroups,
        ListPartitionReassignments,
        ListTransactions,
        Metadata,
        OffsetDelete,
        OffsetFetch,
        PushTelemetry,
        RenewDelegationToken,
        SaslAuthenticate,
        SaslHandshake,
        ShareGroupHeartbeat,
        SyncGroup,
        UnregisterBroker,
        UpdateFeatures,
        UpdateRaftVoter,
        AddRaftVoter,
        RemoveRaftVoter,
        Vote,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_code_of(response: &ResponseKind) -> Option<i16> {
        match response {
            ResponseKind::Metadata(r) => Some(r.error_code),
            ResponseKind::ConsumerGroupHeartbeat(r) => Some(r.error_code),
            ResponseKind::EndTxn(r) => Some(r.error_code),
            _ => None,
        }
    }

    #[test]
    fn an_api_with_an_error_field_is_answered_with_unsupported_version() {
        let unsupported = ResponseError::UnsupportedVersion.code();
        for (api, version) in [
            (ApiKey::EndTxn, 4),
            (ApiKey::Metadata, 13),
            (ApiKey::ConsumerGroupHeartbeat, 0),
        ] {
            let response = response(api, version).unwrap_or_else(|| panic!("{api:?} v{version}"));
            assert_eq!(error_code_of(&response), Some(unsupported), "{api:?}");
        }
    }

    #[test]
    fn a_version_whose_response_has_no_error_field_is_not_answered() {
        // Metadata's top-level error code arrived in v13: v0 would read as an empty success.
        assert!(response(ApiKey::Metadata, 0).is_none());
        // FindCoordinator v4+ reports errors per coordinator key, not at the top.
        assert!(response(ApiKey::FindCoordinator, 5).is_none());
        // Produce has no top-level error code in any version.
        assert!(response(ApiKey::Produce, 2).is_none());
        // Versions kafka-protocol cannot encode.
        assert!(response(ApiKey::EndTxn, 99).is_none());
    }
}
