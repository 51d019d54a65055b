//! The client's error type: transport failures, timeouts, and errors the server returned, each
//! saying whether a retry may succeed.

use tinymq_protocol::batch::BatchError;
use tinymq_protocol::{messages, ErrorCode};

#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// TLS with the server failed in a way retrying does not cure: its certificate was
    /// refused, it refused ours, or it does not speak TLS on that port.
    #[error("TLS with {addr} failed: {reason}")]
    Tls { addr: String, reason: String },
    #[error("connection to {0} closed")]
    ConnectionClosed(String),
    #[error("request timed out after {0} ms")]
    Timeout(u64),
    /// The login after the handshake failed (wrong password, unknown user, a mechanism the
    /// server does not take, a server that could not prove it knows the password). Not
    /// retriable.
    #[error("authentication failed for user {user}: {reason}")]
    Authentication { user: String, reason: String },
    #[error("server error {}: {}", .code.name(), .message)]
    Server { code: ErrorCode, message: String },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("invalid record batch from server: {0}")]
    Batch(#[from] BatchError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("record not delivered within the delivery timeout ({timeout_ms} ms); last error: {last_error}")]
    DeliveryTimeout { timeout_ms: u64, last_error: String },
    #[error("the producer is closed")]
    Closed,
    /// Refused by the producer before batching: alone in a batch, the record would exceed
    /// the topic's `message_bytes_max`, so no broker would take it. Not retriable.
    #[error("MESSAGE_TOO_LARGE: a record of {bytes} bytes (as a batch of its own) exceeds message_bytes_max {limit} of topic {topic}; not sent")]
    RecordTooLarge {
        topic: String,
        bytes: usize,
        limit: usize,
    },
    /// A request to a partition's leader went unanswered while the metadata (asked of other
    /// nodes) came to name another leader, or none: the attempt was given up so that it can
    /// be made again to the new leader. Retriable; the routes are already fresh.
    #[error("{topic}/{partition}: leader moved from {from} to {to} while a request to it was unanswered")]
    LeaderMoved {
        topic: String,
        partition: u32,
        from: String,
        to: String,
    },
    /// A retriable error lasted past the operation's deadline.
    #[error(
        "{operation} did not succeed within {waited_ms} ms of retrying; last error: {last_error}"
    )]
    GaveUp {
        operation: String,
        waited_ms: u64,
        last_error: Box<ClientError>,
    },
}

impl ClientError {
    /// Whether the same request may succeed if sent again (possibly to another broker after a
    /// metadata refresh).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Connect { .. }
            | ClientError::ConnectionClosed(_)
            | ClientError::Timeout(_)
            | ClientError::LeaderMoved { .. } => true,
            ClientError::Server { code, .. } => code.is_retriable(),
            _ => false,
        }
    }

    /// Whether routes should be refreshed before retrying.
    pub fn needs_metadata_refresh(&self) -> bool {
        matches!(
            self,
            ClientError::Server {
                code: ErrorCode::NOT_LEADER
                    | ErrorCode::LEADER_NOT_AVAILABLE
                    | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                ..
            } | ClientError::Connect { .. }
                | ClientError::ConnectionClosed(_)
        )
    }

    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            ClientError::GaveUp { last_error, .. } => last_error.code(),
            ClientError::RecordTooLarge { .. } => Some(ErrorCode::MESSAGE_TOO_LARGE),
            ClientError::Authentication { .. } => Some(ErrorCode::AUTHENTICATION_FAILED),
            _ => None,
        }
    }
}

/// Turns a wire error field into a result: absent or code 0 is success.
pub fn check(error: Option<&messages::Error>) -> Result<(), ClientError> {
    match error {
        Some(e) if e.code != 0 => Err(ClientError::Server {
            code: e.error_code(),
            message: e.message.clone(),
        }),
        _ => Ok(()),
    }
}
