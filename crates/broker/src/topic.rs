//! Topic names and settings: validation and conversion between the wire `TopicConfig`, the
//! stored settings and the log's configuration. Pure logic.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinymq_log::{
    CleanupPolicy, CompactionConfig, FlushPolicy, LogConfig, DELETE_RETENTION_DEFAULT,
    DIRTY_RATIO_MIN_DEFAULT, SEGMENT_BYTES_MAX,
};
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// `delete`, `compact` or `compact,delete` (a [`CleanupPolicy`] in its one spelling). A
    /// compact-only topic has no retention limits, whatever `retention_ms` and
    /// `retention_bytes` say (as in Kafka).
    #[serde(default = "cleanup_policy_default")]
    pub cleanup_policy: String,
    /// Compacted topics: a tombstone is kept at least this long after the cleaner first finds
    /// it; ≥ 0.
    #[serde(default = "delete_retention_ms_default")]
    pub delete_retention_ms: i64,
    /// Compacted topics: a record is not compacted before it is this old; ≥ 0.
    #[serde(default)]
    pub min_compaction_lag_ms: i64,
    /// Compacted topics: a log whose oldest uncleaned record is older than this is cleaned
    /// whatever its dirty ratio; -1 (or Kafka's `i64::MAX`) = no bound, else ≥ 1.
    #[serde(default = "no_bound")]
    pub max_compaction_lag_ms: i64,
    /// Compacted topics: a log is cleaned once at least this share of it is uncleaned; 0 to 1.
    #[serde(default = "dirty_ratio_min_default")]
    pub min_cleanable_dirty_ratio: f64,
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

/// Default of `delete_retention_ms`: the log's (one day, as Kafka's).
pub const DELETE_RETENTION_MS_DEFAULT: i64 = DELETE_RETENTION_DEFAULT.as_millis() as i64;

fn delete_retention_ms_default() -> i64 {
    DELETE_RETENTION_MS_DEFAULT
}

fn cleanup_policy_default() -> String {
    CleanupPolicy::default().to_string()
}

fn dirty_ratio_min_default() -> f64 {
    DIRTY_RATIO_MIN_DEFAULT
}

/// Kafka's way to say "no bound" for `max.compaction.lag.ms` (its default, `Long.MAX_VALUE`),
/// which tinymq also reads as no bound.
pub const COMPACTION_LAG_NO_BOUND_MS: i64 = i64::MAX;

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
            cleanup_policy: cleanup_policy_default(),
            delete_retention_ms: DELETE_RETENTION_MS_DEFAULT,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: -1,
            min_cleanable_dirty_ratio: DIRTY_RATIO_MIN_DEFAULT,
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
            if !w.cleanup_policy.is_empty() {
                // In its one spelling; a value that does not parse is refused below.
                s.cleanup_policy = w
                    .cleanup_policy
                    .parse::<CleanupPolicy>()
                    .map_or_else(|_| w.cleanup_policy.clone(), |p| p.to_string());
            }
            // Optional on the wire: 0 is a value of its own.
            if let Some(ms) = w.delete_retention_ms {
                s.delete_retention_ms = ms;
            }
            if w.min_compaction_lag_ms != 0 {
                s.min_compaction_lag_ms = w.min_compaction_lag_ms;
            }
            if w.max_compaction_lag_ms != 0 {
                s.max_compaction_lag_ms = w.max_compaction_lag_ms;
            }
            if let Some(ratio) = w.min_cleanable_dirty_ratio {
                s.min_cleanable_dirty_ratio = ratio;
            }
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
        if let Err(e) = self.cleanup_policy.parse::<CleanupPolicy>() {
            return invalid(format!("cleanup_policy: {e}"));
        }
        if self.delete_retention_ms < 0 || self.min_compaction_lag_ms < 0 {
            return invalid(format!(
                "delete_retention_ms and min_compaction_lag_ms must be ≥ 0, got {} and {}",
                self.delete_retention_ms, self.min_compaction_lag_ms
            ));
        }
        if self.max_compaction_lag_ms != -1 && self.max_compaction_lag_ms < 1 {
            return invalid(format!(
                "max_compaction_lag_ms must be -1 (no bound) or ≥ 1, got {}",
                self.max_compaction_lag_ms
            ));
        }
        if let Some(max) = self.compaction_lag_max_ms() {
            if self.min_compaction_lag_ms > max {
                return invalid(format!(
                    "min_compaction_lag_ms {} exceeds max_compaction_lag_ms {max}",
                    self.min_compaction_lag_ms
                ));
            }
        }
        // Written so that NaN is refused too.
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return invalid(format!(
                "min_cleanable_dirty_ratio must be 0 to 1, got {}",
                self.min_cleanable_dirty_ratio
            ));
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

    pub fn cleanup_policy(&self) -> CleanupPolicy {
        self.cleanup_policy.parse().unwrap_or_default()
    }

    /// `max_compaction_lag_ms` when it bounds anything: not -1, nor Kafka's `i64::MAX`.
    fn compaction_lag_max_ms(&self) -> Option<i64> {
        let ms = self.max_compaction_lag_ms;
        (ms > 0 && ms != COMPACTION_LAG_NO_BOUND_MS).then_some(ms)
    }

    pub fn log_config(&self) -> LogConfig {
        let positive_ms = |ms: i64| (ms > 0).then(|| Duration::from_millis(ms as u64));
        let cleanup = self.cleanup_policy();
        // A compact-only topic keeps the latest record of every key however old or large the
        // log is: Kafka ignores its retention limits, and so does tinymq.
        let deletes = cleanup.deletes();
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_age_max: positive_ms(self.segment_ms),
            flush: self.flush_policy(),
            cleanup,
            compaction: CompactionConfig {
                delete_retention: positive_ms(self.delete_retention_ms).unwrap_or_default(),
                compaction_lag_min: positive_ms(self.min_compaction_lag_ms).unwrap_or_default(),
                compaction_lag_max: self.compaction_lag_max_ms().and_then(positive_ms),
                dirty_ratio_min: self.min_cleanable_dirty_ratio,
            },
            retention_age: positive_ms(self.retention_ms).filter(|_| deletes),
            retention_bytes: (self.retention_bytes > 0 && deletes)
                .then_some(self.retention_bytes as u64),
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
            (tinymq_meta::CLEANUP_POLICY, self.cleanup_policy.clone()),
            (
                tinymq_meta::DELETE_RETENTION_MS,
                self.delete_retention_ms.to_string(),
            ),
            (
                tinymq_meta::MIN_COMPACTION_LAG_MS,
                self.min_compaction_lag_ms.to_string(),
            ),
            (
                tinymq_meta::MAX_COMPACTION_LAG_MS,
                self.max_compaction_lag_ms.to_string(),
            ),
            (
                tinymq_meta::MIN_CLEANABLE_DIRTY_RATIO,
                self.min_cleanable_dirty_ratio.to_string(),
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
                tinymq_meta::CLEANUP_POLICY => {
                    let policy = value.parse::<CleanupPolicy>().map_err(|e| bad(&e))?;
                    s.cleanup_policy = policy.to_string();
                }
                tinymq_meta::DELETE_RETENTION_MS => {
                    s.delete_retention_ms = value.parse().map_err(|e| bad(&e))?
                }
                tinymq_meta::MIN_COMPACTION_LAG_MS => {
                    s.min_compaction_lag_ms = value.parse().map_err(|e| bad(&e))?
                }
                tinymq_meta::MAX_COMPACTION_LAG_MS => {
                    s.max_compaction_lag_ms = value.parse().map_err(|e| bad(&e))?
                }
                tinymq_meta::MIN_CLEANABLE_DIRTY_RATIO => {
                    s.min_cleanable_dirty_ratio = value.parse().map_err(|e| bad(&e))?
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
            cleanup_policy: self.cleanup_policy.clone(),
            delete_retention_ms: Some(self.delete_retention_ms),
            min_compaction_lag_ms: self.min_compaction_lag_ms,
            max_compaction_lag_ms: self.max_compaction_lag_ms,
            min_cleanable_dirty_ratio: Some(self.min_cleanable_dirty_ratio),
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
            cleanup_policy: "compact,delete".into(),
            delete_retention_ms: 0,
            min_compaction_lag_ms: 1000,
            max_compaction_lag_ms: 60_000,
            min_cleanable_dirty_ratio: 0.125,
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
        // A policy stored in Kafka's other spelling reads in the one spelling.
        record.config = [("cleanup_policy".to_string(), "delete,compact".to_string())].into();
        let read = TopicSettings::from_record(&record, &defaults).unwrap();
        assert_eq!(read.cleanup_policy, "compact,delete");
        for (key, bad) in [
            ("cleanup_policy", "shred"),
            ("min_cleanable_dirty_ratio", "2"),
            ("max_compaction_lag_ms", "0"),
        ] {
            record.config = [(key.to_string(), bad.to_string())].into();
            assert!(
                TopicSettings::from_record(&record, &defaults).is_err(),
                "{key}={bad}"
            );
        }
    }

    #[test]
    fn settings_stored_before_compaction_load_with_its_defaults() {
        let mut stored = serde_json::to_value(TopicSettings::default()).unwrap();
        let object = stored.as_object_mut().unwrap();
        for key in [
            "cleanup_policy",
            "delete_retention_ms",
            "min_compaction_lag_ms",
            "max_compaction_lag_ms",
            "min_cleanable_dirty_ratio",
        ] {
            assert!(object.remove(key).is_some(), "{key}");
        }
        let loaded: TopicSettings = serde_json::from_value(stored).unwrap();
        assert_eq!(loaded, TopicSettings::default());
    }

    #[test]
    fn compaction_settings_come_from_the_wire_and_reach_the_log() {
        let defaults = TopicSettings::default();
        let log = defaults.log_config();
        assert_eq!(log.cleanup, CleanupPolicy::Delete);
        assert_eq!(log.compaction, CompactionConfig::default());
        assert_eq!(log.retention_age, Some(Duration::from_secs(7 * 24 * 3600)));

        let from =
            |config: messages::TopicConfig| TopicSettings::from_wire(Some(&config), &defaults);
        // Absent and zero fields take the defaults.
        assert_eq!(from(messages::TopicConfig::default()).unwrap(), defaults);
        let compacted = from(messages::TopicConfig {
            cleanup_policy: "compact".into(),
            retention_ms: 60_000,
            retention_bytes: 1 << 20,
            delete_retention_ms: Some(0),
            min_compaction_lag_ms: 1000,
            max_compaction_lag_ms: 3_600_000,
            min_cleanable_dirty_ratio: Some(0.0),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(compacted.retention_ms, 60_000, "kept, and shown");
        let log = compacted.log_config();
        assert_eq!(log.cleanup, CleanupPolicy::Compact);
        assert_eq!(
            (log.retention_age, log.retention_bytes),
            (None, None),
            "a compact-only topic has no retention limits"
        );
        assert_eq!(
            log.compaction,
            CompactionConfig {
                delete_retention: Duration::ZERO,
                compaction_lag_min: Duration::from_secs(1),
                compaction_lag_max: Some(Duration::from_secs(3600)),
                dirty_ratio_min: 0.0,
            }
        );
        assert_eq!(compacted.to_wire().cleanup_policy, "compact");
        assert_eq!(compacted.to_wire().delete_retention_ms, Some(0));

        let both = from(messages::TopicConfig {
            cleanup_policy: "delete, compact".into(),
            retention_bytes: 1 << 20,
            max_compaction_lag_ms: COMPACTION_LAG_NO_BOUND_MS,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(both.cleanup_policy, "compact,delete");
        let log = both.log_config();
        assert_eq!(log.cleanup, CleanupPolicy::CompactDelete);
        assert_eq!(
            log.retention_bytes,
            Some(1 << 20),
            "compact,delete deletes too"
        );
        assert_eq!(log.compaction.compaction_lag_max, None, "Kafka's no bound");
        let unbounded = TopicSettings {
            max_compaction_lag_ms: -1,
            ..both
        };
        assert_eq!(unbounded.log_config().compaction.compaction_lag_max, None);

        for bad in [
            messages::TopicConfig {
                cleanup_policy: "shred".into(),
                ..Default::default()
            },
            messages::TopicConfig {
                delete_retention_ms: Some(-1),
                ..Default::default()
            },
            messages::TopicConfig {
                min_compaction_lag_ms: -1,
                ..Default::default()
            },
            messages::TopicConfig {
                max_compaction_lag_ms: -2,
                ..Default::default()
            },
            messages::TopicConfig {
                min_compaction_lag_ms: 5000,
                max_compaction_lag_ms: 4000,
                ..Default::default()
            },
            messages::TopicConfig {
                min_cleanable_dirty_ratio: Some(1.5),
                ..Default::default()
            },
            messages::TopicConfig {
                min_cleanable_dirty_ratio: Some(f64::NAN),
                ..Default::default()
            },
        ] {
            assert_eq!(
                from(bad.clone()).unwrap_err().0,
                ErrorCode::INVALID_CONFIG,
                "{bad:?}"
            );
        }
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
