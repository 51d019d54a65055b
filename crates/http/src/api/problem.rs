//! Errors of the REST API as RFC 9457 problem documents, with the native protocol's error
//! code name in `code`, and the extractors that turn bad input (path, query, JSON body) into
//! them rather than axum's plain-text rejections.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tinymq_client::{ClientError, ErrorCode};
use utoipa::ToSchema;

/// The media type of a problem document.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// What went wrong (RFC 9457).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: `code` says which problem it is.
    #[serde(rename = "type")]
    #[schema(example = "about:blank")]
    pub kind: String,
    /// The HTTP status's reason phrase.
    #[schema(example = "Not Found")]
    pub title: String,
    /// The HTTP status code.
    #[schema(example = 404)]
    pub status: u16,
    /// A sentence saying what went wrong.
    pub detail: String,
    /// The native protocol's error code name (docs/protocol.md), or `CLUSTER_UNAVAILABLE`
    /// when no node of the cluster answered.
    #[schema(example = "UNKNOWN_TOPIC_OR_PARTITION")]
    pub code: String,
}

impl Problem {
    pub fn new(status: StatusCode, code: &str, detail: String) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail,
            code: code.into(),
        }
    }

    /// Bad input: 400 `INVALID_REQUEST`.
    pub fn invalid(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", detail.into())
    }

    pub fn unavailable(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "CLUSTER_UNAVAILABLE",
            detail.into(),
        )
    }

    pub fn from_code(code: ErrorCode, detail: impl Into<String>) -> Problem {
        Problem::new(status_of(code), code.name(), detail.into())
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response =
            (status, [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)], body).into_response();
        crate::auth::challenge(&mut response);
        response
    }
}

/// The HTTP status of a native error code: the client's fault 4xx, the cluster's state 503.
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as E;
    match code {
        E::UNKNOWN_TOPIC_OR_PARTITION | E::GROUP_ID_NOT_FOUND | E::UNKNOWN_MEMBER_ID => {
            StatusCode::NOT_FOUND
        }
        E::TOPIC_ALREADY_EXISTS
        | E::GROUP_NOT_EMPTY
        | E::GROUP_SUBSCRIBED_TO_TOPIC
        | E::BROKER_ID_IN_USE
        | E::ILLEGAL_GENERATION
        | E::INVALID_UPDATE_VERSION
        | E::STALE_BROKER_EPOCH => StatusCode::CONFLICT,
        E::INVALID_REQUEST
        | E::INVALID_TOPIC
        | E::INVALID_PARTITIONS
        | E::INVALID_CONFIG
        | E::OFFSET_OUT_OF_RANGE
        | E::MALFORMED_BODY
        | E::CORRUPT_MESSAGE
        | E::INVALID_RECORD
        | E::INVALID_TIMESTAMP
        | E::INVALID_GROUP_ID
        | E::INVALID_REQUIRED_ACKS
        | E::UNSUPPORTED_COMPRESSION
        | E::OUT_OF_ORDER_SEQUENCE
        | E::INVALID_PRODUCER_EPOCH
        | E::UNKNOWN_PRODUCER_ID
        | E::INELIGIBLE_REPLICA => StatusCode::BAD_REQUEST,
        E::MESSAGE_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
        E::LIMIT_EXCEEDED => StatusCode::TOO_MANY_REQUESTS,
        E::AUTHENTICATION_FAILED | E::AUTHENTICATION_REQUIRED => StatusCode::UNAUTHORIZED,
        E::AUTHORIZATION_FAILED | E::CLUSTER_AUTHORIZATION_FAILED => StatusCode::FORBIDDEN,
        E::USER_NOT_FOUND => StatusCode::NOT_FOUND,
        E::USER_ALREADY_EXISTS | E::ROUTE_ALREADY_EXISTS => StatusCode::CONFLICT,
        E::ROUTE_NOT_FOUND | E::HALF_MESSAGE_NOT_FOUND => StatusCode::NOT_FOUND,
        E::HALF_MESSAGE_RESOLVED => StatusCode::CONFLICT,
        E::INVALID_FILTER | E::INVALID_DELIVERY_TIME => StatusCode::BAD_REQUEST,
        E::INVALID_RECORD_STATE => StatusCode::CONFLICT,
        E::INVALID_TXN_STATE | E::PRODUCER_FENCED | E::INVALID_PRODUCER_ID_MAPPING => {
            StatusCode::CONFLICT
        }
        E::INVALID_TRANSACTION_TIMEOUT => StatusCode::BAD_REQUEST,
        E::TRANSACTIONAL_ID_NOT_FOUND => StatusCode::NOT_FOUND,
        E::UNSUPPORTED_SASL_MECHANISM => StatusCode::BAD_REQUEST,
        E::NOT_LEADER
        | E::LEADER_NOT_AVAILABLE
        | E::NOT_ENOUGH_REPLICAS
        | E::REQUEST_TIMED_OUT
        | E::SHUTTING_DOWN
        | E::NOT_COORDINATOR
        | E::COORDINATOR_LOAD_IN_PROGRESS
        | E::CONCURRENT_TRANSACTIONS
        | E::UNSTABLE_OFFSET_COMMIT
        | E::STORAGE_ERROR
        | E::FENCED_LEADER_EPOCH => StatusCode::SERVICE_UNAVAILABLE,
        // The node answered something this API cannot explain to the caller.
        _ => StatusCode::BAD_GATEWAY,
    }
}

impl From<ClientError> for Problem {
    fn from(error: ClientError) -> Problem {
        let detail = error.to_string();
        match &error {
            ClientError::Server { code, .. } => Problem::from_code(*code, detail),
            ClientError::GaveUp { last_error, .. } => match last_error.code() {
                Some(code) => Problem::from_code(code, detail),
                None => Problem::unavailable(detail),
            },
            ClientError::RecordTooLarge { .. } => {
                Problem::from_code(ErrorCode::MESSAGE_TOO_LARGE, detail)
            }
            ClientError::Timeout(_) | ClientError::DeliveryTimeout { .. } => {
                Problem::from_code(ErrorCode::REQUEST_TIMED_OUT, detail)
            }
            ClientError::Connect { .. }
            | ClientError::ConnectionClosed(_)
            | ClientError::LeaderMoved { .. }
            | ClientError::Closed => Problem::unavailable(detail),
            // The API's own node login failing is the server's problem, not the caller's.
            ClientError::Protocol(_)
            | ClientError::Batch(_)
            | ClientError::Config(_)
            | ClientError::Tls { .. }
            | ClientError::Authentication { .. } => {
                Problem::new(StatusCode::BAD_GATEWAY, "UNKNOWN_SERVER_ERROR", detail)
            }
        }
    }
}

/// A JSON object body; a body that is not JSON, not an object, or not the expected shape is
/// a 400 problem. (Going through a `Value` first: serde would take a struct from an array.)
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Problem> {
        let value = match axum::Json::<serde_json::Value>::from_request(request, state).await {
            Ok(axum::Json(value)) => value,
            Err(rejection) => return Err(json_problem(rejection)),
        };
        if !value.is_object() {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "MALFORMED_BODY",
                "the request body must be a JSON object".into(),
            ));
        }
        serde_json::from_value(value).map(ApiJson).map_err(|e| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "MALFORMED_BODY",
                format!("the request body does not have the expected fields: {e}"),
            )
        })
    }
}

fn json_problem(rejection: JsonRejection) -> Problem {
    let detail = rejection.body_text();
    match rejection {
        JsonRejection::MissingJsonContentType(_) => Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_REQUEST",
            detail,
        ),
        // Only a body past the limit is 413; a body that breaks off or whose chunked framing
        // does not parse is bad input like any other.
        JsonRejection::BytesRejection(ref r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "LIMIT_EXCEEDED",
                format!("the request body could not be read whole: {detail}"),
            )
        }
        JsonRejection::BytesRejection(_) => Problem::new(
            StatusCode::BAD_REQUEST,
            "MALFORMED_BODY",
            format!("the request body could not be read: {detail}"),
        ),
        _ => Problem::new(StatusCode::BAD_REQUEST, "MALFORMED_BODY", detail),
    }
}

/// Query parameters; any that do not parse is a 400 problem.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|r: QueryRejection| Problem::invalid(r.body_text()))
    }
}

/// Path parameters; any that does not parse is a 400 problem.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|r: PathRejection| Problem::invalid(r.body_text()))
    }
}

/// Refuses a topic name the native protocol would refuse, before asking it
/// ([`tinymq_protocol::names::validate_topic_name`]: `INVALID_TOPIC`, `.` and `..` included).
/// Internal (`__…`) names pass: the node answers for them.
pub fn check_topic_name(name: &str) -> Result<(), Problem> {
    tinymq_protocol::names::validate_topic_name(name).map_err(name_problem)
}

/// Refuses a group id the native protocol would refuse, before asking it
/// ([`tinymq_protocol::names::validate_group_id`]: `INVALID_GROUP_ID`).
pub fn check_group_id(id: &str) -> Result<(), Problem> {
    tinymq_protocol::names::validate_group_id(id).map_err(name_problem)
}

fn name_problem(e: tinymq_protocol::names::NameError) -> Problem {
    Problem::from_code(e.error_code(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_the_native_protocol_checks_them() {
        let code = |r: Result<(), Problem>| match r {
            Ok(()) => Ok(()),
            Err(p) => {
                assert_eq!(p.status, 400);
                Err(p.code)
            }
        };
        for good in ["orders", "a.b-c_d", "...", "__consumer_offsets"] {
            assert_eq!(code(check_topic_name(good)), Ok(()), "{good}");
        }
        // `.` and `..` were accepted here before the rule had one source.
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert_eq!(
                code(check_topic_name(bad)),
                Err("INVALID_TOPIC".to_string()),
                "{bad}"
            );
        }
        // Group ids are not paths: dots are fine.
        for good in ["readers", ".", ".."] {
            assert_eq!(code(check_group_id(good)), Ok(()), "{good}");
        }
        for bad in ["", "a b", &"g".repeat(250)] {
            assert_eq!(
                code(check_group_id(bad)),
                Err("INVALID_GROUP_ID".to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_native_code_has_a_status_and_bad_input_is_never_5xx() {
        // 502 only for what the API and its node disagree on (the protocol itself); a code
        // that reaches the catch-all by being forgotten fails here.
        let protocol_level = [
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_SERVER_ERROR,
            ErrorCode::UNSUPPORTED_VERSION,
            ErrorCode::UNKNOWN_OPERATION,
            ErrorCode::CLUSTER_ID_MISMATCH,
            ErrorCode::HANDSHAKE_REQUIRED,
            ErrorCode::INVALID_FRAME,
        ];
        for code in ErrorCode::ALL {
            let status = status_of(*code);
            assert_eq!(
                status == StatusCode::BAD_GATEWAY,
                protocol_level.contains(code),
                "{code:?} -> {status}"
            );
        }
        for code in [
            ErrorCode::INVALID_REQUEST,
            ErrorCode::MALFORMED_BODY,
            ErrorCode::INVALID_TOPIC,
            ErrorCode::INVALID_GROUP_ID,
            ErrorCode::INVALID_PARTITIONS,
            ErrorCode::INVALID_CONFIG,
            ErrorCode::INVALID_TIMESTAMP,
            ErrorCode::OFFSET_OUT_OF_RANGE,
        ] {
            assert_eq!(status_of(code), StatusCode::BAD_REQUEST, "{code:?}");
        }
        assert_eq!(
            status_of(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(ErrorCode::TOPIC_ALREADY_EXISTS),
            StatusCode::CONFLICT
        );
        assert_eq!(status_of(ErrorCode::GROUP_NOT_EMPTY), StatusCode::CONFLICT);
        assert_eq!(
            status_of(ErrorCode::MESSAGE_TOO_LARGE),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            status_of(ErrorCode::LIMIT_EXCEEDED),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status_of(ErrorCode::NOT_LEADER),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status_of(ErrorCode::AUTHENTICATION_FAILED),
            StatusCode::UNAUTHORIZED
        );
        for code in [
            ErrorCode::AUTHORIZATION_FAILED,
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        ] {
            assert_eq!(status_of(code), StatusCode::FORBIDDEN, "{code:?}");
        }
    }

    #[test]
    fn client_errors_become_problems_with_their_native_code() {
        let gave_up = ClientError::GaveUp {
            operation: "list topics".into(),
            waited_ms: 6000,
            last_error: Box::new(ClientError::Connect {
                addr: "127.0.0.1:1".into(),
                reason: "refused".into(),
            }),
        };
        let p = Problem::from(gave_up);
        assert_eq!((p.status, p.code.as_str()), (503, "CLUSTER_UNAVAILABLE"));
        let p = Problem::from(ClientError::Server {
            code: ErrorCode::GROUP_ID_NOT_FOUND,
            message: "unknown group g".into(),
        });
        assert_eq!((p.status, p.code.as_str()), (404, "GROUP_ID_NOT_FOUND"));
        assert_eq!(p.title, "Not Found");
        assert_eq!(p.kind, "about:blank");
        assert!(p.detail.contains("unknown group g"), "{}", p.detail);
    }
}
