//! Stable numeric error codes carried in every response's `Error` field.
//!
//! A code's number and meaning never change, and a retired code is never reused: clients in
//! other languages switch on these numbers. The message beside a code is for people.

use crate::messages;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $retriable:literal, $text:literal; )*) => {
        /// Every error code of protocol version 1. Variants are spelled as on the wire and in
        /// docs/protocol.md, so that a name reads the same in every language.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $code, )*
        }

        impl ErrorCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code for a number, or `None` for a number this version does not know
            /// (a newer peer's code: treat it as a non-retriable failure).
            pub fn from_code(code: u32) -> Option<ErrorCode> {
                match code {
                    $( $code => Some(ErrorCode::$name), )*
                    _ => None,
                }
            }

            pub fn code(self) -> u16 {
                self as u16
            }

            /// The name used in docs and logs, e.g. `NOT_LEADER`.
            pub fn name(self) -> &'static str {
                match self {
                    $( ErrorCode::$name => stringify!($name), )*
                }
            }

            /// Whether a client may retry the same request and expect it to succeed later.
            pub fn is_retriable(self) -> bool {
                match self {
                    $( ErrorCode::$name => $retriable, )*
                }
            }

            /// A default description, used when no more specific message is at hand.
            pub fn description(self) -> &'static str {
                match self {
                    $( ErrorCode::$name => $text, )*
                }
            }
        }
    };
}

error_codes! {
    NONE = 0, false, "success";
    /// An unexpected server-side failure; the message says more.
    UNKNOWN_SERVER_ERROR = 1, false, "unexpected server error";
    /// A record batch failed its CRC, length or count check.
    CORRUPT_MESSAGE = 2, false, "record batch is corrupt";
    UNKNOWN_TOPIC_OR_PARTITION = 3, true, "unknown topic or partition";
    /// The receiving broker does not lead the partition; refresh routes and retry.
    NOT_LEADER = 4, true, "this broker is not the partition's leader";
    /// A batch or request over a configured size limit.
    MESSAGE_TOO_LARGE = 5, false, "message or batch too large";
    /// A request that is well-formed protobuf but makes no sense (bad field values).
    INVALID_REQUEST = 6, false, "invalid request";
    UNSUPPORTED_VERSION = 7, false, "unsupported protocol version";
    /// The frame's operation code is unknown to this server.
    UNKNOWN_OPERATION = 8, false, "unknown operation";
    TOPIC_ALREADY_EXISTS = 9, false, "topic already exists";
    /// Topic name empty, too long, or with characters outside [A-Za-z0-9._-].
    INVALID_TOPIC = 10, false, "invalid topic name";
    INVALID_PARTITIONS = 11, false, "invalid number of partitions";
    INVALID_CONFIG = 12, false, "invalid topic configuration";
    /// The requested offset is below the log start or above the log end.
    OFFSET_OUT_OF_RANGE = 13, false, "offset out of range";
    /// The batch's sequence is not the next one expected for its producer.
    OUT_OF_ORDER_SEQUENCE = 14, false, "out of order sequence number";
    /// The producer epoch is older than the one the broker knows: a newer instance exists.
    INVALID_PRODUCER_EPOCH = 15, false, "producer epoch is stale (fenced)";
    UNKNOWN_PRODUCER_ID = 16, false, "unknown producer id";
    NOT_ENOUGH_REPLICAS = 17, true, "not enough in-sync replicas";
    REQUEST_TIMED_OUT = 18, true, "request timed out";
    CLUSTER_ID_MISMATCH = 19, false, "cluster id does not match";
    /// A request other than Handshake arrived before the handshake succeeded.
    HANDSHAKE_REQUIRED = 20, false, "handshake required first";
    /// The broker failed to read or write its disk for this partition.
    STORAGE_ERROR = 21, true, "storage error";
    /// The body could not be decoded as the operation's message type.
    MALFORMED_BODY = 22, false, "malformed request body";
    INVALID_REQUIRED_ACKS = 23, false, "acks must be -1, 0 or 1";
    UNSUPPORTED_COMPRESSION = 24, false, "unsupported compression codec";
    /// A per-connection or per-server limit was reached; retry later.
    LIMIT_EXCEEDED = 25, true, "limit exceeded";
    /// The server is shutting down; retry against another node or later.
    SHUTTING_DOWN = 26, true, "server is shutting down";
    /// The frame was invalid (bad magic, version or size); the connection will close.
    INVALID_FRAME = 27, false, "invalid frame";
    /// A group request from a member of an older generation (fenced).
    ILLEGAL_GENERATION = 28, false, "stale group generation";
    /// The member id is not (or no longer) in the group: join again.
    UNKNOWN_MEMBER_ID = 29, false, "unknown group member";
    /// Group id empty, too long, or with characters outside [A-Za-z0-9._-].
    INVALID_GROUP_ID = 30, false, "invalid group id";
    /// The operation needs a group without members (delete, administrative offset reset).
    GROUP_NOT_EMPTY = 31, false, "group has active members";
    /// This broker does not coordinate the group; find the coordinator again.
    NOT_COORDINATOR = 32, true, "not the group's coordinator";
    GROUP_ID_NOT_FOUND = 33, false, "unknown group";
    /// The partition has no live leader right now (its only in-sync replica is fenced);
    /// retry after a metadata refresh.
    LEADER_NOT_AVAILABLE = 34, true, "partition leader not available";
    /// Another live broker is registered with this broker id.
    BROKER_ID_IN_USE = 35, false, "broker id in use";
    /// A record batch whose CRC is right but whose fields do not describe its contents
    /// (record count, offset deltas, attribute bits, producer fields); nothing was written.
    INVALID_RECORD = 36, false, "record batch fields do not match its records";
    /// A record timestamp outside what the topic accepts: too far ahead of (or behind) the
    /// broker's clock.
    INVALID_TIMESTAMP = 37, false, "record timestamp out of range";
    /// An operation reserved for cluster nodes (Raft RPCs, metadata writes, broker
    /// heartbeats) from a connection that did not identify as one.
    CLUSTER_AUTHORIZATION_FAILED = 38, false, "operation allowed only between cluster nodes";
    /// A broker request (e.g. `AlterPartition`) carrying a broker epoch that is not the
    /// broker's current, unfenced registration: a previous incarnation; register again.
    STALE_BROKER_EPOCH = 39, false, "stale broker epoch";
    /// A request naming a leader epoch that is not the partition's current one (a deposed
    /// leader, or a stale view); refresh metadata and retry with the current epoch.
    FENCED_LEADER_EPOCH = 40, true, "leader epoch is not the current one";
    /// An `AlterPartition` made from an outdated partition state (its partition epoch is not
    /// the current one); nothing changed: refresh and propose again.
    INVALID_UPDATE_VERSION = 41, false, "stale partition epoch";
    /// An ISR change adding a broker that cannot be in sync: not a replica, not live, fenced.
    INELIGIBLE_REPLICA = 42, false, "replica not eligible for the ISR";
    /// This broker has just become the group's coordinator and is still reading its
    /// committed offsets from the offsets partition; retry the same broker shortly.
    COORDINATOR_LOAD_IN_PROGRESS = 43, true, "the coordinator is loading the group's offsets";
    /// Authentication failed: unknown user, wrong password, a replayed or altered SCRAM
    /// message. The message does not say which.
    AUTHENTICATION_FAILED = 44, false, "authentication failed";
    /// The principal lacks a permission the request needs; the message names it.
    AUTHORIZATION_FAILED = 45, false, "not authorized";
    /// A request other than Authenticate on a connection that must authenticate first.
    AUTHENTICATION_REQUIRED = 46, false, "authenticate first";
    /// An Authenticate mechanism this listener does not accept.
    UNSUPPORTED_SASL_MECHANISM = 47, false, "unsupported SASL mechanism";
    USER_NOT_FOUND = 48, false, "unknown user";
    USER_ALREADY_EXISTS = 49, false, "user already exists";
    /// A filter expression that does not parse; the message names the column.
    INVALID_FILTER = 50, false, "invalid filter expression";
    /// An acknowledged record is not acquired by this share-group member (its lock expired).
    INVALID_RECORD_STATE = 51, false, "record is not acquired by this member";
    /// A deliver-at time beyond the broker's `delay_ms_max`.
    INVALID_DELIVERY_TIME = 52, false, "deliver-at time out of range";
    ROUTE_ALREADY_EXISTS = 53, false, "route already exists";
    ROUTE_NOT_FOUND = 54, false, "unknown route";
    /// The transactional id is between states (its markers are being written, or another
    /// request for it is being made durable); retry after a short backoff.
    CONCURRENT_TRANSACTIONS = 55, true, "another transaction operation is in progress";
    /// The request does not fit the transaction's state (EndTxn with no transaction, a
    /// commit after an abort was decided, ...).
    INVALID_TXN_STATE = 56, false, "invalid transaction state";
    /// A newer instance of this transactional id has initialized (its epoch is higher): this
    /// producer is a zombie and must stop.
    PRODUCER_FENCED = 57, false, "producer fenced by a newer instance";
    /// The producer id is not the one the transactional id holds.
    INVALID_PRODUCER_ID_MAPPING = 58, false, "producer id does not belong to this transactional id";
    /// A transaction timeout of 0 or above `transaction_timeout_ms_max`.
    INVALID_TRANSACTION_TIMEOUT = 59, false, "invalid transaction timeout";
    TRANSACTIONAL_ID_NOT_FOUND = 60, false, "unknown transactional id";
    /// Offsets of a transaction still open touch this partition (OffsetFetch with
    /// `require_stable`); retry.
    UNSTABLE_OFFSET_COMMIT = 61, true, "a transaction holding offsets for this partition is open";
    /// No unresolved half message with this id in the group (or it was resolved long ago).
    HALF_MESSAGE_NOT_FOUND = 62, false, "unknown half message";
    /// The half message was already resolved the other way (the message says how and why).
    HALF_MESSAGE_RESOLVED = 63, false, "half message already resolved";
    /// Offsets of a topic a live member of the group consumes cannot be deleted
    /// (`DeleteGroup` with `offsets`: Kafka's OffsetDelete).
    GROUP_SUBSCRIBED_TO_TOPIC = 64, false, "the group consumes this topic";
}

impl ErrorCode {
    /// Builds the wire `Error` for this code with a specific message.
    pub fn with_message(self, message: impl Into<String>) -> messages::Error {
        messages::Error {
            code: u32::from(self.code()),
            message: message.into(),
        }
    }

    /// Builds the wire `Error` for this code with its default description.
    pub fn to_wire(self) -> messages::Error {
        self.with_message(self.description())
    }
}

impl messages::Error {
    /// The known code of this error; unknown numbers (from a newer peer) map to
    /// `UNKNOWN_SERVER_ERROR`.
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::from_code(self.code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
    }

    pub fn is_ok(&self) -> bool {
        self.code == 0
    }
}

impl std::fmt::Display for messages::Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match ErrorCode::from_code(self.code) {
            Some(code) => write!(f, "{} ({}): {}", code.name(), self.code, self.message),
            None => write!(f, "error {}: {}", self.code, self.message),
        }
    }
}

impl std::error::Error for messages::Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_unique_and_round_trip() {
        for (i, &code) in ErrorCode::ALL.iter().enumerate() {
            // Dense and in order: a gap would mean a code was removed, which is not allowed.
            assert_eq!(code.code() as usize, i);
            assert_eq!(ErrorCode::from_code(u32::from(code.code())), Some(code));
        }
        assert_eq!(ErrorCode::from_code(9999), None);
    }

    #[test]
    fn wire_error_displays_name_and_message() {
        let e = ErrorCode::NOT_LEADER.with_message("leader is 3");
        assert_eq!(e.to_string(), "NOT_LEADER (4): leader is 3");
        assert_eq!(e.error_code(), ErrorCode::NOT_LEADER);
        assert!(!e.is_ok());
    }
}
