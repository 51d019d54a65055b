//! The Kafka listener's settings and named limits.

use tinymq_net::ListenerLimits;

/// Largest request accepted from a connection that has not finished SASL authentication
/// (when authentication is on): enough for ApiVersions, SaslHandshake and SCRAM messages.
pub const KAFKA_PRE_AUTH_FRAME_BYTES_MAX: u32 = 64 * 1024;

/// How the Kafka listener serves.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// Host and port Kafka clients are told to use for this broker (Metadata,
    /// FindCoordinator, DescribeCluster).
    pub advertised: (String, u16),
    /// The native port's limits, applied the same way: `connections_max`, `frame_bytes_max`
    /// (a Kafka request's size, header included), `requests_in_flight_max` per connection,
    /// `handshake_timeout` (for SASL), `idle_timeout`, `shutdown_grace`.
    pub limits: ListenerLimits,
    /// Whether a Metadata request naming an unknown topic creates it (with the broker's topic
    /// defaults), as Kafka's `auto.create.topics.enable`; off by default.
    pub auto_create_topics: bool,
    /// Fetch sessions kept at once ([`crate::FETCH_SESSIONS_MAX`] by default; 0: none, every
    /// fetch is a full fetch).
    pub fetch_sessions_max: usize,
}
