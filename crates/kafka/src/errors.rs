//! tinymq's error codes as Kafka's, so that Kafka clients retry what they should: a native
//! `NOT_LEADER` is Kafka's retriable `NOT_LEADER_OR_FOLLOWER` (refresh metadata, retry), a
//! native `OUT_OF_ORDER_SEQUENCE` Kafka's `OUT_OF_ORDER_SEQUENCE_NUMBER`, and so on. Codes
//! with no Kafka counterpart become `UNKNOWN_SERVER_ERROR` (-1) or, for bad input,
//! `INVALID_REQUEST`; the native message goes in the response's error message where the
//! Kafka response has one. The broker's classic group refusals ([`ClassicError`]) are
//! Kafka's by [`classic_code`].

use kafka_protocol::error::ResponseError as K;
use tinymq_broker::group::classic::ClassicError;
use tinymq_protocol::{messages as m, ErrorCode as N};

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// The Kafka error code for a native one.
pub fn kafka_code(native: N) -> i16 {
    let kafka = match native {
        N::NONE => return NONE,
        N::UNKNOWN_SERVER_ERROR => K::UnknownServerError,
        N::CORRUPT_MESSAGE => K::CorruptMessage,
        N::UNKNOWN_TOPIC_OR_PARTITION => K::UnknownTopicOrPartition,
        N::NOT_LEADER => K::NotLeaderOrFollower,
        N::MESSAGE_TOO_LARGE => K::MessageTooLarge,
        N::INVALID_REQUEST | N::MALFORMED_BODY | N::INVALID_FRAME => K::InvalidRequest,
        N::UNSUPPORTED_VERSION | N::UNKNOWN_OPERATION => K::UnsupportedVersion,
        N::TOPIC_ALREADY_EXISTS => K::TopicAlreadyExists,
        N::INVALID_TOPIC => K::InvalidTopicException,
        N::INVALID_PARTITIONS => K::InvalidPartitions,
        N::INVALID_CONFIG => K::InvalidConfig,
        N::OFFSET_OUT_OF_RANGE => K::OffsetOutOfRange,
        N::OUT_OF_ORDER_SEQUENCE => K::OutOfOrderSequenceNumber,
        N::INVALID_PRODUCER_EPOCH => K::InvalidProducerEpoch,
        N::UNKNOWN_PRODUCER_ID => K::UnknownProducerId,
        N::NOT_ENOUGH_REPLICAS => K::NotEnoughReplicas,
        N::REQUEST_TIMED_OUT => K::RequestTimedOut,
        N::STORAGE_ERROR => K::KafkaStorageError,
        N::INVALID_REQUIRED_ACKS => K::InvalidRequiredAcks,
        N::UNSUPPORTED_COMPRESSION => K::UnsupportedCompressionType,
        N::LIMIT_EXCEEDED => K::PolicyViolation,
        N::SHUTTING_DOWN => K::NotLeaderOrFollower,
        N::ILLEGAL_GENERATION => K::IllegalGeneration,
        N::UNKNOWN_MEMBER_ID => K::UnknownMemberId,
        N::INVALID_GROUP_ID => K::InvalidGroupId,
        N::GROUP_NOT_EMPTY => K::NonEmptyGroup,
        N::GROUP_SUBSCRIBED_TO_TOPIC => K::GroupSubscribedToTopic,
        N::NOT_COORDINATOR => K::NotCoordinator,
        N::GROUP_ID_NOT_FOUND => K::GroupIdNotFound,
        N::LEADER_NOT_AVAILABLE => K::LeaderNotAvailable,
        N::INVALID_RECORD => K::InvalidRecord,
        N::INVALID_TIMESTAMP => K::InvalidTimestamp,
        N::CLUSTER_AUTHORIZATION_FAILED => K::ClusterAuthorizationFailed,
        N::FENCED_LEADER_EPOCH => K::FencedLeaderEpoch,
        N::COORDINATOR_LOAD_IN_PROGRESS => K::CoordinatorLoadInProgress,
        N::AUTHENTICATION_FAILED | N::AUTHENTICATION_REQUIRED => K::SaslAuthenticationFailed,
        // Which resource was refused is the caller's to say (topic, group, cluster); see
        // [`authorization_code`].
        N::AUTHORIZATION_FAILED => K::TopicAuthorizationFailed,
        N::UNSUPPORTED_SASL_MECHANISM => K::UnsupportedSaslMechanism,
        // Native-only conditions (node links, the MetaServer, user administration).
        N::CLUSTER_ID_MISMATCH
        | N::HANDSHAKE_REQUIRED
        | N::BROKER_ID_IN_USE
        | N::STALE_BROKER_EPOCH
        | N::INVALID_UPDATE_VERSION
        | N::INELIGIBLE_REPLICA
        | N::USER_NOT_FOUND
        | N::USER_ALREADY_EXISTS
        | N::ROUTE_ALREADY_EXISTS
        | N::ROUTE_NOT_FOUND
        | N::HALF_MESSAGE_NOT_FOUND
        | N::HALF_MESSAGE_RESOLVED => K::UnknownServerError,
        // Queue features (share groups, filters, delays) have no Kafka request here.
        N::INVALID_FILTER | N::INVALID_DELIVERY_TIME => K::InvalidRequest,
        N::INVALID_RECORD_STATE => K::InvalidRecordState,
        N::CONCURRENT_TRANSACTIONS => K::ConcurrentTransactions,
        N::INVALID_TXN_STATE => K::InvalidTxnState,
        N::PRODUCER_FENCED => K::ProducerFenced,
        N::INVALID_PRODUCER_ID_MAPPING => K::InvalidProducerIdMapping,
        N::INVALID_TRANSACTION_TIMEOUT => K::InvalidTransactionTimeout,
        N::TRANSACTIONAL_ID_NOT_FOUND => K::TransactionalIdNotFound,
        N::UNSTABLE_OFFSET_COMMIT => K::UnstableOffsetCommit,
    };
    kafka.code()
}

/// The Kafka code for a native error on the wire (`None` is success); an error code this
/// build does not know is `UNKNOWN_SERVER_ERROR`.
pub fn kafka_code_of(error: Option<&m::Error>) -> i16 {
    match error {
        None => NONE,
        Some(e) if e.code == 0 => NONE,
        Some(e) => N::from_code(e.code).map_or(K::UnknownServerError.code(), kafka_code),
    }
}

/// Where `AUTHORIZATION_FAILED` refused a kind of resource other than a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

/// [`kafka_code_of`], with `AUTHORIZATION_FAILED` as the named resource's Kafka code.
pub fn kafka_code_for(error: Option<&m::Error>, resource: Resource) -> i16 {
    let code = kafka_code_of(error);
    if code != K::TopicAuthorizationFailed.code() {
        return code;
    }
    match resource {
        Resource::Topic => K::TopicAuthorizationFailed.code(),
        Resource::Group => K::GroupAuthorizationFailed.code(),
        Resource::Cluster => K::ClusterAuthorizationFailed.code(),
        Resource::TransactionalId => K::TransactionalIdAuthorizationFailed.code(),
    }
}

/// The Kafka error code of a classic group answer (`None`: no error).
pub fn classic_code(error: Option<ClassicError>) -> i16 {
    let Some(error) = error else {
        return NONE;
    };
    let kafka = match error {
        ClassicError::InconsistentGroupProtocol => K::InconsistentGroupProtocol,
        ClassicError::InvalidRequest => K::InvalidRequest,
        ClassicError::InvalidSessionTimeout => K::InvalidSessionTimeout,
        ClassicError::GroupMaxSizeReached => K::GroupMaxSizeReached,
        ClassicError::MemberIdRequired => K::MemberIdRequired,
        ClassicError::UnknownMemberId => K::UnknownMemberId,
        ClassicError::RebalanceInProgress => K::RebalanceInProgress,
        ClassicError::IllegalGeneration => K::IllegalGeneration,
        ClassicError::FencedInstanceId => K::FencedInstanceId,
        ClassicError::InvalidGroupId => K::InvalidGroupId,
        ClassicError::NotCoordinator => K::NotCoordinator,
    };
    kafka.code()
}

/// The Kafka error code of a classic group operation's outcome.
pub fn classic_result_code(outcome: Result<(), ClassicError>) -> i16 {
    classic_code(outcome.err())
}

/// The native error's message, for Kafka responses that carry one.
pub fn message_of(error: Option<&m::Error>) -> Option<String> {
    error
        .filter(|e| e.code != 0)
        .map(|e| e.message.clone())
        .filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_native_code_has_a_kafka_code() {
        for code in N::ALL {
            let kafka = kafka_code(*code);
            assert_eq!(kafka == NONE, *code == N::NONE, "{code:?}");
            assert!(
                K::try_from_code(kafka).is_some() || kafka == NONE,
                "{code:?}"
            );
        }
    }

    #[test]
    fn the_retriable_ones_stay_retriable() {
        for code in [
            N::NOT_LEADER,
            N::LEADER_NOT_AVAILABLE,
            N::REQUEST_TIMED_OUT,
            N::NOT_COORDINATOR,
        ] {
            let kafka = K::try_from_code(kafka_code(code)).expect("known");
            assert!(kafka.is_retriable(), "{code:?} -> {kafka:?}");
        }
    }

    #[test]
    fn authorization_is_reported_for_the_resource_refused() {
        let e = N::AUTHORIZATION_FAILED.with_message("no READ");
        assert_eq!(
            kafka_code_for(Some(&e), Resource::Group),
            K::GroupAuthorizationFailed.code()
        );
        assert_eq!(
            kafka_code_for(Some(&e), Resource::Topic),
            K::TopicAuthorizationFailed.code()
        );
        assert_eq!(kafka_code_of(None), NONE);
    }

    #[test]
    fn every_classic_group_error_has_its_kafka_code() {
        use ClassicError as E;
        let expected = |e: E| match e {
            E::InconsistentGroupProtocol => 23,
            E::InvalidRequest => 42,
            E::InvalidSessionTimeout => 26,
            E::GroupMaxSizeReached => 81,
            E::MemberIdRequired => 79,
            E::UnknownMemberId => 25,
            E::RebalanceInProgress => 27,
            E::IllegalGeneration => 22,
            E::FencedInstanceId => 82,
            E::InvalidGroupId => 24,
            E::NotCoordinator => 16,
        };
        for e in ClassicError::ALL {
            assert_eq!(classic_code(Some(e)), expected(e), "{e:?}");
        }
        assert_eq!(classic_code(None), NONE);
        assert_eq!(classic_result_code(Ok(())), NONE);
        assert_eq!(
            classic_result_code(Err(E::UnknownMemberId)),
            K::UnknownMemberId.code()
        );
    }
}
