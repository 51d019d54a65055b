//! The APIs and versions this listener serves, as ApiVersions advertises them. A client picks,
//! per API, the highest version both sides support; a request for an API or version outside
//! this table is answered with `UNSUPPORTED_VERSION` (see `dispatch`).
//!
//! Upper bounds stop before versions whose semantics tinymq lacks: Fetch 18 carries a
//! follower's high watermark, Produce 12+ adds partitions to transactions implicitly (and 13
//! names topics by id), ListOffsets 8+ asks for tiered-storage offsets, OffsetCommit 9+ and
//! OffsetFetch 9+ carry KIP-848 member epochs.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// (API, lowest version, highest version) served.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Transactions. AddPartitionsToTxn 4+ is the brokers' batched form (KIP-890).
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
];

/// The versions of `api_key` served, if any.
pub fn supported(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|(_, min, max)| (*min, *max))
}

/// Whether `version` of `api_key` is served.
pub fn is_supported(api_key: ApiKey, version: i16) -> bool {
    supported(api_key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// The ApiVersions answer. A request of a version above ours gets `UNSUPPORTED_VERSION` with
/// the table all the same, encoded as version 0 (as Kafka does), so the client can retry
/// with a version we serve.
pub fn response(request_version: i16) -> (ApiVersionsResponse, i16) {
    let (_, max) = supported(ApiKey::ApiVersions).expect("ApiVersions is in the table");
    let api_keys = SUPPORTED
        .iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let mut response = ApiVersionsResponse::default().with_api_keys(api_keys);
    if request_version > max || request_version < 0 {
        response = response.with_error_code(ResponseError::UnsupportedVersion.code());
        return (response, 0);
    }
    (response, request_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_version_can_be_encoded_and_decoded() {
        for (key, min, max) in SUPPORTED {
            let valid = key.valid_versions();
            assert!(
                valid.min <= *min && *max <= valid.max,
                "{key:?} {min}..={max} vs {valid:?}"
            );
            assert!(min <= max);
        }
    }

    #[test]
    fn a_too_new_api_versions_request_gets_version_0_and_the_table() {
        let (response, version) = response(99);
        assert_eq!(version, 0);
        assert_eq!(
            response.error_code,
            ResponseError::UnsupportedVersion.code()
        );
        assert_eq!(response.api_keys.len(), SUPPORTED.len());
        let (ok, v) = super::response(3);
        assert_eq!((ok.error_code, v), (0, 3));
    }
}
