//! Topic names and settings: validation and conversion between the wire `TopicConfig`, the
//! stored settings and the log's configuration. Pure logic.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinymq_log::{FlushPolicy, LogConfig, SEGMENT_BYTES_MAX};
use tinymq_meta::TopicRecord;
use tinymq_protocol::{messages, names, ErrorCode};

// The names and ranges are `tinymq_protocol::names`' (one source for every listener).
pub use tinymq_protocol::names::{
    REPLICATION_FACTOR_MAX, REPLICATION_FACTOR_MIN, TOPIC_MESSAGE_BYTES_MAX,
    TOPIC_MESSAGE_BYTES_MIN, TOPIC_NAME_BYTES_MAX, TOPIC_PARTITIONS_MAX, TOPIC_PARTITIONS_MIN,
    TOPIC_SEGMENT_BYTES_MAX, TOPIC_SEGMENT_BYTES_MIN,
};

// The protocol's largest segment is one the log can write.
const _: () = assert!(TOPIC_SEGMENT_BYTES_MAX <= SEGMENT_BYTES_MAX);

/// Settings of one topic, as stored by the metadata store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSettings {
    pub partitions: u32,
    pub replication_factor: u32,
    /// -1 = keep forever.
    pub retention_ms: i64,
    /// -1 = no limit; per partition.
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    /// 0 = never roll by age.
    pub segment_ms: i64,
    /// `always`, `interval:<ms>` or `os`.
    pub flush: String,
    pub message_bytes_max: u32,
    /// Records timestamped more than this far ahead of the broker's clock are refused
    /// (`INVALID_TIMESTAMP`); -1 = no bound.
    #[serde(default = "timestamp_after_max_ms_default")]
    pub message_timestamp_after_max_ms: i64,
    /// Records timestamped more than this far behind the broker's clock are refused; -1 = no
    /// bound.
    #[serde(default = "no_bound")]
    pub message_timestamp_before_max_ms: i64,
    /// In-sync replicas an `acks=all` write needs; 0 = by the replication factor (see
    /// [`tinymq_meta::default_min_insync_replicas`]). The MetaServer checks and stores it.
    #[serde(default)]
    pub min_insync_replicas: u32,
    /// Whether a replica outside the ISR may lead when no in-sync one can.
    #[serde(default)]
    pub unclean_leader_election: bool,
}

/// Default of `message_timestamp_after_max_ms`: one hour, as Kafka's. A timestamp far in the
/// future would keep its segment from ever expiring by time.
pub const MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT: i64 = 3600 * 1000;

fn timestamp_after_max_ms_default() -> i64 {
    MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT
}

fn no_bound() -> i64 {
    -1
}

impl Default for TopicSettings {
    fn default() -> TopicSettings {
        TopicSettings {
            partitions: 1,
            replication_factor: 1,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            segment_bytes: tinymq_log::SEGMENT_BYTES_DEFAULT,
            segment_ms: 0,
            flush: FlushPolicy::Always.to_string(),
            message_bytes_max: 1 << 20,
            message_timestamp_after_max_ms: MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT,
            message_timestamp_before_max_ms: -1,
            min_insync_replicas: 0,
            unclean_leader_election: false,
        }
    }
}

/// A rejected topic request: the wire code and a message for the user.
pub type TopicError = (ErrorCode, String);

/// A topic name a client may create ([`tinymq_protocol::names::validate_user_topic_name`]),
/// refused with its wire code (`INVALID_TOPIC`).
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    names::validate_user_topic_name(name).map_err(|e| (e.error_code(), e.to_string()))
}

impl TopicSettings {
    /// Settings from a create request: zero or empty fields take the server's defaults.
    pub fn from_wire(
        wire: Option<&messages::TopicConfig>,
        defaults: &TopicSettings,
    ) -> Result<TopicSettings, TopicError> {
        let mut s = defaults.clone();
        if let Some(w) = wire {
            if w.partitions != 0 {
                s.partitions = w.partitions;
            }
            if w.replication_factor != 0 {
                s.replication_factor = w.replication_factor;
            }
            if w.retention_ms != 0 {
                s.retention_ms = w.retention_ms;
            }
            if w.retention_bytes != 0 {
                s.retention_bytes = w.retention_bytes;
            }
            if w.segment_bytes != 0 {
                s.segment_bytes = w.segment_bytes;
            }
            if w.segment_ms != 0 {
                s.segment_ms = w.segment_ms;
            }
            if !w.flush.is_empty() {
                s.flush = w.flush.clone();
            }
            if w.message_bytes_max != 0 {
                s.message_bytes_max = w.message_bytes_max;
            }
            if w.message_timestamp_after_max_ms != 0 {
                s.message_timestamp_after_max_ms = w.message_timestamp_after_max_ms;
            }
            if w.message_timestamp_before_max_ms != 0 {
                s.message_timestamp_before_max_ms = w.message_timestamp_before_max_ms;
            }
            if w.min_insync_replicas != 0 {
                s.min_insync_replicas = w.min_insync_replicas;
            }
            s.unclean_leader_election |= w.unclean_leader_election;
        }
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), TopicError> {
        let invalid = |msg: String| Err((ErrorCode::INVALID_CONFIG, msg));
        if !(TOPIC_PARTITIONS_MIN..=TOPIC_PARTITIONS_MAX).contains(&self.partitions) {
            return Err((
                ErrorCode::INVALID_PARTITIONS,
                format!(
                    "partitions must be {TOPIC_PARTITIONS_MIN} to {TOPIC_PARTITIONS_MAX}, got {}",
                    self.partitions
                ),
            ));
        }
        if !(REPLICATION_FACTOR_MIN..=REPLICATION_FACTOR_MAX).contains(&self.replication_factor) {
            return invalid(format!(
                "replication_factor must be {REPLICATION_FACTOR_MIN} to {REPLICATION_FACTOR_MAX}, got {}",
                self.replication_factor
            ));
        }
        if self.min_insync_replicas > REPLICATION_FACTOR_MAX {
            return invalid(format!(
                "min_insync_replicas must be 1 to the replication factor, got {}",
                self.min_insync_replicas
            ));
        }
        if self.message_timestamp_after_max_ms < -1 || self.message_timestamp_before_max_ms < -1 {
            return invalid(
                "message_timestamp_after_max_ms and message_timestamp_before_max_ms must be -1 \
                 (no bound) or ≥ 0"
                    .into(),
            );
        }
        if self.retention_ms < -1 || self.retention_bytes < -1 || self.segment_ms < 0 {
            return invalid(
                "retention_ms and retention_bytes must be -1 or positive; segment_ms ≥ 0".into(),
            );
        }
        if !(TOPIC_SEGMENT_BYTES_MIN..=TOPIC_SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return invalid(format!(
                "segment_bytes must be {TOPIC_SEGMENT_BYTES_MIN} to {TOPIC_SEGMENT_BYTES_MAX}, got {}",
                self.segment_bytes
            ));
        }
        if let Err(e) = self.flush.parse::<FlushPolicy>() {
            return invalid(e);
        }
        if !(TOPIC_MESSAGE_BYTES_MIN..=TOPIC_MESSAGE_BYTES_MAX).contains(&self.message_bytes_max)
            || u64::from(self.message_bytes_max) > self.segment_bytes
        {
            return invalid(format!(
                "message_bytes_max must be {TOPIC_MESSAGE_BYTES_MIN} to {TOPIC_MESSAGE_BYTES_MAX} and at most segment_bytes, got {}",
                self.message_bytes_max
            ));
        }
        Ok(())
    }

    pub fn flush_policy(&self) -> FlushPolicy {
        self.flush.parse().unwrap_or_default()
    }

    pub fn log_config(&self) -> LogConfig {
        let positive_ms = |ms: i64| (ms > 0).then(|| Duration::from_millis(ms as u64));
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_age_max: positive_ms(self.segment_ms),
            flush: self.flush_policy(),
            retention_age: positive_ms(self.retention_ms),
            retention_bytes: (self.retention_bytes > 0).then_some(self.retention_bytes as u64),
            batch_bytes_max: self.message_bytes_max,
            ..LogConfig::default()
        }
    }

    /// The settings stored in the cluster metadata: everything but the partition count and
    /// replication factor, which the placement records carry (an unset `min_insync_replicas`
    /// is left to the MetaServer, which stores the default for the replication factor).
    pub fn to_config_map(&self) -> BTreeMap<String, String> {
        let min_insync = (self.min_insync_replicas != 0).then(|| {
            (
                tinymq_meta::MIN_INSYNC_REPLICAS,
                self.min_insync_replicas.to_string(),
            )
        });
        [
            ("retention_ms", self.retention_ms.to_string()),
            ("retention_bytes", self.retention_bytes.to_string()),
            ("segment_bytes", self.segment_bytes.to_string()),
            ("segment_ms", self.segment_ms.to_string()),
            ("flush", self.flush.clone()),
            ("message_bytes_max", self.message_bytes_max.to_string()),
            (
                "message_timestamp_after_max_ms",
                self.message_timestamp_after_max_ms.to_string(),
            ),
            (
                "message_timestamp_before_max_ms",
                self.message_timestamp_before_max_ms.to_string(),
            ),
            (
                tinymq_meta::UNCLEAN_LEADER_ELECTION,
                self.unclean_leader_election.to_string(),
            ),
        ]
        .into_iter()
        .chain(min_insync)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Settings of a topic in the metadata image: its stored config over `defaults` (a topic
    /// created through a MetaServer node stores only what was given).
    pub fn from_record(
        topic: &TopicRecord,
        defaults: &TopicSettings,
    ) -> Result<TopicSettings, TopicError> {
        let mut s = defaults.clone();
        s.partitions = topic.partitions.len() as u32;
        s.replication_factor = topic.replication_factor();
        s.min_insync_replicas = topic.min_insync_replicas();
        s.unclean_leader_election = topic.unclean_leader_election();
        for (key, value) in &topic.config {
            let bad = |e: &dyn std::fmt::Display| {
                (
                    ErrorCode::INVALID_CONFIG,
                    format!("topic setting {key}={value:?}: {e}"),
                )
            };
            match key.as_str() {
                "retention_ms" => s.retention_ms = value.parse().map_err(|e| bad(&e))?,
                "retention_bytes" => s.retention_bytes = value.parse().map_err(|e| bad(&e))?,
                "segment_bytes" => s.segment_bytes = value.parse().map_err(|e| bad(&e))?,
                "segment_ms" => s.segment_ms = value.parse().map_err(|e| bad(&e))?,
                "flush" => s.flush = value.clone(),
                "message_bytes_max" => s.message_bytes_max = value.parse().map_err(|e| bad(&e))?,
                "message_timestamp_after_max_ms" => {
                    s.message_timestamp_after_max_ms = value.parse().map_err(|e| bad(&e))?
                }
                "message_timestamp_before_max_ms" => {
                    s.message_timestamp_before_max_ms = value.parse().map_err(|e| bad(&e))?
                }
                // Share-group settings: read by [`ShareSettings::of`].
                names::MAX_DELIVERY_ATTEMPTS_KEY | names::DEAD_LETTER_TOPIC_KEY => {}
                // Read by the MetaServer's rules; taken from the record above.
                tinymq_meta::MIN_INSYNC_REPLICAS | tinymq_meta::UNCLEAN_LEADER_ELECTION => {}
                // A setting from a newer version: ignored rather than refusing the topic.
                _ => tracing::debug!(key, "unknown topic setting ignored"),
            }
        }
        s.validate()?;
        Ok(s)
    }

    pub fn to_wire(&self) -> messages::TopicConfig {
        messages::TopicConfig {
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            segment_bytes: self.segment_bytes,
            flush: self.flush.clone(),
            message_bytes_max: self.message_bytes_max,
            segment_ms: self.segment_ms,
            message_timestamp_after_max_ms: self.message_timestamp_after_max_ms,
            message_timestamp_before_max_ms: self.message_timestamp_before_max_ms,
            min_insync_replicas: self.min_insync_replicas,
            unclean_leader_election: self.unclean_leader_election,
        }
    }
}

/// A topic's share-group settings (docs/queues.md, "Dead-letter topics"), from its stored
/// config: the MetaServer checked them when they were set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSettings {
    /// Deliveries of a record before it goes to the dead-letter topic
    /// (`names::MAX_DELIVERY_ATTEMPTS_MIN..=MAX_DELIVERY_ATTEMPTS_MAX`, default
    /// `MAX_DELIVERY_ATTEMPTS_DEFAULT`).
    pub max_delivery_attempts: u32,
    /// Where rejected and exhausted records go (default `<topic>.dlq`).
    pub dead_letter_topic: String,
}

impl ShareSettings {
    pub fn of(name: &str, topic: &TopicRecord) -> ShareSettings {
        let max_delivery_attempts = names::max_delivery_attempts(
            topic
                .config
                .get(names::MAX_DELIVERY_ATTEMPTS_KEY)
                .map(String::as_str),
        );
        let dead_letter_topic = names::dead_letter_topic(
            name,
            topic
                .config
                .get(names::DEAD_LETTER_TOPIC_KEY)
                .map(String::as_str),
        );
        ShareSettings {
            max_delivery_attempts,
            dead_letter_topic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        for good in ["orders", "a.b-c_d", "X1", &"x".repeat(249)] {
            assert!(validate_topic_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "a b",
            ".",
            "..",
            "__internal",
            &"x".repeat(250),
            "ä",
        ] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().0,
                ErrorCode::INVALID_TOPIC,
                "{bad}"
            );
        }
    }

    #[test]
    fn wire_settings_take_defaults_and_are_checked() {
        let defaults = TopicSettings::default();
        let s = TopicSettings::from_wire(
            Some(&messages::TopicConfig {
                partitions: 6,
                flush: "interval:100".into(),
                ..Default::default()
            }),
            &defaults,
        )
        .unwrap();
        assert_eq!(s.partitions, 6);
        assert_eq!(s.retention_ms, defaults.retention_ms);
        assert_eq!(
            s.log_config().flush,
            FlushPolicy::Interval(Duration::from_millis(100))
        );

        let bad = |config: messages::TopicConfig| {
            TopicSettings::from_wire(Some(&config), &defaults)
                .unwrap_err()
                .0
        };
        assert_eq!(
            bad(messages::TopicConfig {
                partitions: 5000,
                ..Default::default()
            }),
            ErrorCode::INVALID_PARTITIONS
        );
        assert_eq!(
            bad(messages::TopicConfig {
                flush: "never".into(),
                ..Default::default()
            }),
            ErrorCode::INVALID_CONFIG
        );
        assert_eq!(
            bad(messages::TopicConfig {
                segment_bytes: 10,
                ..Default::default()
            }),
            ErrorCode::INVALID_CONFIG
        );
    }

    #[test]
    fn settings_round_trip_through_the_metadata_record() {
        let defaults = TopicSettings::default();
        let settings = TopicSettings {
            partitions: 2,
            retention_ms: 5000,
            flush: "os".into(),
            min_insync_replicas: 1,
            ..defaults.clone()
        };
        let partition = tinymq_meta::PartitionRecord {
            replicas: vec![1],
            leader: Some(1),
            leader_epoch: 0,
            isr: vec![1],
            ..tinymq_meta::PartitionRecord::default()
        };
        let mut record = TopicRecord {
            id: 1,
            partitions: vec![partition.clone(), partition],
            config: settings.to_config_map(),
        };
        assert_eq!(
            TopicSettings::from_record(&record, &defaults).unwrap(),
            settings
        );
        // Only what was given is stored by a MetaServer node; the rest is the broker's.
        record.config = [("retention_ms".to_string(), "5000".to_string())].into();
        let filled = TopicSettings::from_record(&record, &defaults).unwrap();
        assert_eq!(filled.flush, defaults.flush);
        assert_eq!(filled.retention_ms, 5000);
        record.config = [("segment_bytes".to_string(), "lots".to_string())].into();
        assert!(TopicSettings::from_record(&record, &defaults).is_err());
    }

    #[test]
    fn share_settings_default_and_refuse_a_topic_as_its_own_dead_letter_topic() {
        let mut record = TopicRecord {
            id: 1,
            partitions: vec![],
            config: BTreeMap::new(),
        };
        let defaults = ShareSettings::of("orders", &record);
        assert_eq!(defaults.max_delivery_attempts, 5);
        assert_eq!(defaults.dead_letter_topic, "orders.dlq");
        record.config = [
            ("max_delivery_attempts".to_string(), "9".to_string()),
            ("dead_letter_topic".to_string(), "failed".to_string()),
        ]
        .into();
        let set = ShareSettings::of("orders", &record);
        assert_eq!(
            (set.max_delivery_attempts, set.dead_letter_topic.as_str()),
            (9, "failed")
        );
        record.config = [
            ("max_delivery_attempts".to_string(), "0".to_string()),
            ("dead_letter_topic".to_string(), "orders".to_string()),
        ]
        .into();
        assert_eq!(ShareSettings::of("orders", &record), defaults);
    }
}
