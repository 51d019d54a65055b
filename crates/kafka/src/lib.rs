//! The Kafka-protocol listener (`--kafka-listen`): Kafka clients (librdkafka, the Java client,
//! kafka-python, franz-go, …) talk to the same broker, the same partitions and the same
//! batches on disk as native clients. Kafka's RecordBatch v2 is tinymq's own batch format, so
//! this crate translates requests, not data.
//!
//! Layering: `server` (accept loop, `connections_max`, one task per connection) → `frame`
//! (Kafka's 4-byte size prefix, request header, response header; limits checked before
//! allocating) → `dispatch` (API key and version → handler; answers, in request order, what it
//! cannot serve) → one module per API family, each translating into native requests through
//! [`context::Ctx`], which calls the broker's own [`tinymq_broker::BrokerFront`] in process:
//! admission order, authorization, quotas and handlers are the native port's.
//!
//! Kafka's classic consumer-group protocol (client-side assignors) is the group coordinator's
//! classic mode, which `groups` calls; transactions (`txn`) are the broker's transaction
//! coordinator's, reached through the native transaction requests.

mod admin;
mod answers;
pub mod api_versions;
pub mod config;
mod context;
mod dispatch;
pub mod errors;
mod fetch;
pub mod frame;
mod groups;
mod leader;
mod list_offsets;
mod metadata;
mod produce;
mod producer_id;
mod sasl;
mod server;
mod tls;
mod topic_id;
mod txn;
mod unsupported;

pub use config::{KafkaConfig, KAFKA_PRE_AUTH_FRAME_BYTES_MAX};
pub use fetch::{
    FETCH_SESSIONS_MAX, FETCH_SESSION_EVICTABLE_AFTER, FETCH_SESSION_PARTITIONS_MAX,
    FETCH_SESSION_PARTITIONS_TOTAL_MAX,
};
pub use server::KafkaListener;
