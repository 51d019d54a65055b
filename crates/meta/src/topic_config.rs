//! Altering an existing topic's settings (`AlterTopicConfig`): which keys exist, which values
//! each takes, and which may change while the topic's partitions are open. Brokers check the
//! whole result against their storage limits and defaults before they forward the command;
//! these rules hold wherever the command comes from (a MetaServer node answers it too).

use std::collections::BTreeMap;

use crate::command::{MetaError, Outcome, Reply};
use crate::image::{
    default_min_insync_replicas, MetadataImage, MetadataRecord, FLUSH, MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION,
};

use tinymq_protocol::names::CleanupPolicy;
use tinymq_protocol::names::{
    self, MAX_DELIVERY_ATTEMPTS_MAX, MAX_DELIVERY_ATTEMPTS_MIN, TOPIC_MESSAGE_BYTES_MAX,
    TOPIC_MESSAGE_BYTES_MIN, TOPIC_SEGMENT_BYTES_MAX, TOPIC_SEGMENT_BYTES_MIN,
};

/// The topic's cleanup policy (`CleanupPolicy`: delete, compact or both).
pub const CLEANUP_POLICY: &str = "cleanup_policy";
/// How long a compacted topic keeps its tombstones, ms.
pub const DELETE_RETENTION_MS: &str = "delete_retention_ms";
/// How old a record must be before it is compacted, ms.
pub const MIN_COMPACTION_LAG_MS: &str = "min_compaction_lag_ms";
/// How long a record may stay uncompacted at most, ms (-1: no bound).
pub const MAX_COMPACTION_LAG_MS: &str = "max_compaction_lag_ms";
/// The share of a log that must be uncleaned before the cleaner cleans it.
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min_cleanable_dirty_ratio";

/// The values one setting takes.
#[derive(Clone, Copy)]
enum Kind {
    /// -1 (no bound / forever) or a count ≥ 0.
    Bound,
    /// A count ≥ 0.
    Count,
    /// In `[min, max]`.
    Range(u64, u64),
    Bool,
    /// Only at create: changing it would need the partitions reopened.
    Fixed(&'static str),
    /// Checked against the replication factor.
    MinInsync,
    /// A topic name (not an internal one): `dead_letter_topic`.
    TopicName,
    /// -1 (no bound) or a count ≥ 1; Kafka's "no bound", `i64::MAX`, is a count like any
    /// other here (the broker reads it as no bound).
    PositiveBound,
    /// A cleanup policy (`delete`, `compact`, `compact,delete`), stored in its one spelling
    /// so that `delete,compact` and `compact,delete` are the same setting.
    Policy,
    /// A decimal in [0, 1].
    Ratio,
}

/// Every topic setting an alter may name.
fn kind_of(key: &str) -> Option<Kind> {
    Some(match key {
        "retention_ms"
        | "retention_bytes"
        | "message_timestamp_after_max_ms"
        | "message_timestamp_before_max_ms" => Kind::Bound,
        "segment_ms" | DELETE_RETENTION_MS | MIN_COMPACTION_LAG_MS => Kind::Count,
        MAX_COMPACTION_LAG_MS => Kind::PositiveBound,
        CLEANUP_POLICY => Kind::Policy,
        MIN_CLEANABLE_DIRTY_RATIO => Kind::Ratio,
        "segment_bytes" => Kind::Range(TOPIC_SEGMENT_BYTES_MIN, TOPIC_SEGMENT_BYTES_MAX),
        "message_bytes_max" => Kind::Range(
            TOPIC_MESSAGE_BYTES_MIN.into(),
            TOPIC_MESSAGE_BYTES_MAX.into(),
        ),
        UNCLEAN_LEADER_ELECTION => Kind::Bool,
        FLUSH => Kind::Fixed(
            "the flush policy decides what a partition has acknowledged and cannot change while \
             it is open; create a new topic with the policy wanted",
        ),
        MIN_INSYNC_REPLICAS => Kind::MinInsync,
        names::MAX_DELIVERY_ATTEMPTS_KEY => Kind::Range(
            MAX_DELIVERY_ATTEMPTS_MIN.into(),
            MAX_DELIVERY_ATTEMPTS_MAX.into(),
        ),
        names::DEAD_LETTER_TOPIC_KEY => Kind::TopicName,
        _ => return None,
    })
}

fn invalid(key: &str, why: impl std::fmt::Display) -> MetaError {
    MetaError::InvalidConfig(format!("{key}: {why}"))
}

fn check_value(
    key: &str,
    kind: Kind,
    value: &str,
    replication_factor: u32,
) -> Result<(), MetaError> {
    let number = || {
        value
            .parse::<i64>()
            .map_err(|_| invalid(key, format!("expected an integer, got {value:?}")))
    };
    match kind {
        Kind::Bound if number()? < -1 => {
            Err(invalid(key, format!("must be -1 or ≥ 0, got {value}")))
        }
        Kind::Count if number()? < 0 => Err(invalid(key, format!("must be ≥ 0, got {value}"))),
        Kind::Range(min, max) => match u64::try_from(number()?) {
            Ok(n) if (min..=max).contains(&n) => Ok(()),
            _ => Err(invalid(key, format!("must be {min} to {max}, got {value}"))),
        },
        Kind::Bool if value != "true" && value != "false" => Err(invalid(
            key,
            format!("must be true or false, got {value:?}"),
        )),
        Kind::MinInsync => match value.parse::<u32>() {
            Ok(n) if (1..=replication_factor).contains(&n) => Ok(()),
            _ => Err(invalid(
                key,
                format!("must be 1 to the replication factor {replication_factor}, got {value:?}"),
            )),
        },
        Kind::TopicName => names::validate_user_topic_name(value).map_err(|e| invalid(key, e)),
        Kind::PositiveBound => match number()? {
            -1 => Ok(()),
            n if n >= 1 => Ok(()),
            _ => Err(invalid(key, format!("must be -1 or ≥ 1, got {value}"))),
        },
        Kind::Policy => value
            .parse::<CleanupPolicy>()
            .map(drop)
            .map_err(|e| invalid(key, e)),
        Kind::Ratio => match value.parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(()),
            _ => Err(invalid(
                key,
                format!("must be a decimal 0 to 1, got {value:?}"),
            )),
        },
        _ => Ok(()),
    }
}

/// A checked value as it is stored: a cleanup policy in its one spelling (so `delete,compact`
/// and `compact,delete` compare equal, and an alter to the same policy changes nothing).
fn stored(kind: Kind, value: &str) -> String {
    match kind {
        Kind::Policy => value
            .parse::<CleanupPolicy>()
            .map_or_else(|_| value.to_string(), |policy| policy.to_string()),
        _ => value.to_string(),
    }
}

/// The settings a topic has after setting `set` and removing `unset`, checked; an unchanged
/// result writes no record. Removing `min_insync_replicas` or `unclean_leader_election` stores
/// their defaults (the MetaServer's own rules read them).
pub fn alter_topic_config(
    image: &MetadataImage,
    name: &str,
    set: &BTreeMap<String, String>,
    unset: &[String],
) -> Outcome {
    if crate::is_internal_topic(name) {
        return Err(MetaError::InvalidTopic(name.into()));
    }
    let topic = image
        .topics
        .get(name)
        .ok_or_else(|| MetaError::UnknownTopic(name.into()))?;
    let replication_factor = topic.replication_factor();
    let mut config = topic.config.clone();
    for key in unset {
        if set.contains_key(key) {
            return Err(invalid(key, "both set and removed"));
        }
        match kind_of(key) {
            None => return Err(invalid(key, "unknown topic setting")),
            Some(Kind::Fixed(why)) if config.contains_key(key) => return Err(invalid(key, why)),
            Some(Kind::MinInsync) => {
                let default = default_min_insync_replicas(replication_factor);
                config.insert(key.clone(), default.to_string());
            }
            Some(Kind::Bool) => {
                config.insert(key.clone(), "false".into());
            }
            Some(_) => {
                config.remove(key);
            }
        }
    }
    for (key, value) in set {
        let kind = kind_of(key).ok_or_else(|| invalid(key, "unknown topic setting"))?;
        if let Kind::Fixed(why) = kind {
            if config.get(key) != Some(value) {
                return Err(invalid(key, why));
            }
        }
        check_value(key, kind, value, replication_factor)?;
        config.insert(key.clone(), stored(kind, value));
    }
    let number = |key: &str| config.get(key).and_then(|v| v.parse::<u64>().ok());
    if let (Some(message), Some(segment)) = (number("message_bytes_max"), number("segment_bytes")) {
        if message > segment {
            return Err(invalid(
                "message_bytes_max",
                format!("{message} exceeds segment_bytes {segment}"),
            ));
        }
    }
    // -1 (no bound) is not a u64, so it bounds nothing here.
    let lags = (number(MIN_COMPACTION_LAG_MS), number(MAX_COMPACTION_LAG_MS));
    if let (Some(min), Some(max)) = lags {
        if min > max {
            return Err(invalid(
                MIN_COMPACTION_LAG_MS,
                format!("{min} exceeds max_compaction_lag_ms {max}"),
            ));
        }
    }
    if config == topic.config {
        return Ok((vec![], Reply::Done));
    }
    Ok((
        vec![MetadataRecord::SetTopicConfig {
            name: name.into(),
            config,
        }],
        Reply::Done,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{execute_and_apply, Command, MetaError};

    fn image_with_topic(brokers: u32, rf: u32) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in 1..=brokers {
            let register = Command::RegisterBroker {
                id,
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                clean_shutdown: true,
                kafka: None,
            };
            execute_and_apply(&mut image, &register).unwrap();
        }
        let create = Command::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replication_factor: rf,
            config: [("flush".to_string(), "always".to_string())].into(),
        };
        execute_and_apply(&mut image, &create).unwrap();
        image
    }

    fn alter(
        image: &mut MetadataImage,
        set: &[(&str, &str)],
        unset: &[&str],
    ) -> Result<(), MetaError> {
        let command = Command::AlterTopicConfig {
            name: "t".into(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            unset: unset.iter().map(|k| k.to_string()).collect(),
        };
        execute_and_apply(image, &command).map(drop)
    }

    fn refusal(image: &mut MetadataImage, set: &[(&str, &str)], unset: &[&str]) -> String {
        let before = image.clone();
        match alter(image, set, unset) {
            Err(e @ MetaError::InvalidConfig(_)) => {
                assert_eq!(*image, before, "a refused alter changes nothing");
                e.to_string()
            }
            other => panic!("expected INVALID_CONFIG, got {other:?}"),
        }
    }

    #[test]
    fn valid_changes_are_stored_and_removals_restore_defaults() {
        let mut image = image_with_topic(3, 3);
        alter(
            &mut image,
            &[
                ("retention_ms", "1000"),
                ("message_bytes_max", "2048"),
                ("min_insync_replicas", "3"),
            ],
            &[],
        )
        .unwrap();
        let config = &image.topics["t"].config;
        assert_eq!(config["retention_ms"], "1000");
        assert_eq!(config["message_bytes_max"], "2048");
        assert_eq!(image.topics["t"].min_insync_replicas(), 3);
        alter(&mut image, &[], &["retention_ms", "min_insync_replicas"]).unwrap();
        let topic = &image.topics["t"];
        assert!(!topic.config.contains_key("retention_ms"));
        assert_eq!(
            topic.min_insync_replicas(),
            2,
            "the default for three replicas"
        );
        // Setting flush to what it is already is no change, so it is allowed.
        alter(&mut image, &[("flush", "always")], &[]).unwrap();
        let unclean = &[(UNCLEAN_LEADER_ELECTION, "true")];
        alter(&mut image, unclean, &[]).unwrap();
        assert!(image.topics["t"].unclean_leader_election());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_naming_the_key() {
        let mut image = image_with_topic(1, 1);
        assert!(refusal(&mut image, &[("retention.ms", "5")], &[]).contains("retention.ms"));
        assert!(refusal(&mut image, &[], &["colour"]).contains("colour"));
        assert!(refusal(&mut image, &[("retention_ms", "soon")], &[]).contains("retention_ms"));
        assert!(refusal(&mut image, &[("retention_bytes", "-2")], &[]).contains("retention_bytes"));
        assert!(refusal(&mut image, &[("segment_bytes", "10")], &[]).contains("segment_bytes"));
        let big = &[("message_bytes_max", "99999999")];
        assert!(refusal(&mut image, big, &[]).contains("message_bytes_max"));
        let over = &[
            ("segment_bytes", "1048576"),
            ("message_bytes_max", "2000000"),
        ];
        assert!(refusal(&mut image, over, &[]).contains("exceeds segment_bytes"));
        let unclean = &[(UNCLEAN_LEADER_ELECTION, "maybe")];
        assert!(refusal(&mut image, unclean, &[]).contains(UNCLEAN_LEADER_ELECTION));
        assert!(refusal(&mut image, &[("flush", "os")], &[]).contains("flush"));
        assert!(refusal(&mut image, &[], &["flush"]).contains("flush"));
        let both = refusal(&mut image, &[("retention_ms", "5")], &["retention_ms"]);
        assert!(both.contains("both set and removed"), "{both}");
    }

    #[test]
    fn min_insync_is_checked_against_the_replication_factor() {
        let mut image = image_with_topic(3, 2);
        let why = refusal(&mut image, &[(MIN_INSYNC_REPLICAS, "3")], &[]);
        assert!(why.contains("replication factor 2"), "{why}");
        refusal(&mut image, &[(MIN_INSYNC_REPLICAS, "0")], &[]);
        alter(&mut image, &[(MIN_INSYNC_REPLICAS, "2")], &[]).unwrap();
        assert_eq!(image.topics["t"].min_insync_replicas(), 2);
    }

    #[test]
    fn unknown_and_internal_topics_are_refused() {
        let mut image = image_with_topic(1, 1);
        let command = Command::AlterTopicConfig {
            name: "nope".into(),
            set: [("retention_ms".to_string(), "5".to_string())].into(),
            unset: vec![],
        };
        assert!(matches!(
            execute_and_apply(&mut image, &command),
            Err(MetaError::UnknownTopic(_))
        ));
        let command = Command::AlterTopicConfig {
            name: crate::command::OFFSETS_TOPIC.into(),
            set: BTreeMap::new(),
            unset: vec![],
        };
        assert!(matches!(
            execute_and_apply(&mut image, &command),
            Err(MetaError::InvalidTopic(_))
        ));
    }

    #[test]
    fn compaction_settings_are_checked_and_the_policy_has_one_spelling() {
        let mut image = image_with_topic(1, 1);
        let set = &[
            (CLEANUP_POLICY, "delete, compact"),
            (DELETE_RETENTION_MS, "0"),
            (MIN_COMPACTION_LAG_MS, "60000"),
            (MAX_COMPACTION_LAG_MS, "9223372036854775807"),
            (MIN_CLEANABLE_DIRTY_RATIO, "0.25"),
        ];
        alter(&mut image, set, &[]).unwrap();
        let config = &image.topics["t"].config;
        assert_eq!(config[CLEANUP_POLICY], "compact,delete");
        assert_eq!(config[DELETE_RETENTION_MS], "0");
        assert_eq!(config[MIN_COMPACTION_LAG_MS], "60000");
        assert_eq!(config[MAX_COMPACTION_LAG_MS], "9223372036854775807");
        assert_eq!(config[MIN_CLEANABLE_DIRTY_RATIO], "0.25");
        // The same policy spelled the other way is no change.
        let before = image.clone();
        alter(&mut image, &[(CLEANUP_POLICY, "compact,delete")], &[]).unwrap();
        assert_eq!(image, before);
        let edges = &[
            (CLEANUP_POLICY, "compact"),
            (MAX_COMPACTION_LAG_MS, "-1"),
            (MIN_CLEANABLE_DIRTY_RATIO, "1"),
        ];
        alter(&mut image, edges, &[]).unwrap();
        assert_eq!(image.topics["t"].config[CLEANUP_POLICY], "compact");
        for (key, bad) in [
            (CLEANUP_POLICY, "shred"),
            (CLEANUP_POLICY, ""),
            (CLEANUP_POLICY, "Compact"),
            (CLEANUP_POLICY, "compact,"),
            (DELETE_RETENTION_MS, "-1"),
            (DELETE_RETENTION_MS, "a day"),
            (MIN_COMPACTION_LAG_MS, "-5"),
            (MAX_COMPACTION_LAG_MS, "0"),
            (MAX_COMPACTION_LAG_MS, "-2"),
            (MIN_CLEANABLE_DIRTY_RATIO, "1.5"),
            (MIN_CLEANABLE_DIRTY_RATIO, "-0.1"),
            (MIN_CLEANABLE_DIRTY_RATIO, "NaN"),
            (MIN_CLEANABLE_DIRTY_RATIO, "half"),
        ] {
            let why = refusal(&mut image, &[(key, bad)], &[]);
            assert!(why.contains(key), "{key}={bad:?}: {why}");
        }
        let crossed = &[
            (MIN_COMPACTION_LAG_MS, "5000"),
            (MAX_COMPACTION_LAG_MS, "4000"),
        ];
        let why = refusal(&mut image, crossed, &[]);
        assert!(why.contains("exceeds max_compaction_lag_ms"), "{why}");
        let all = [
            CLEANUP_POLICY,
            DELETE_RETENTION_MS,
            MIN_COMPACTION_LAG_MS,
            MAX_COMPACTION_LAG_MS,
            MIN_CLEANABLE_DIRTY_RATIO,
        ];
        alter(&mut image, &[], &all).unwrap();
        let config = &image.topics["t"].config;
        assert!(
            all.iter().all(|key| !config.contains_key(*key)),
            "{config:?}"
        );
    }

    #[test]
    fn share_group_settings_are_checked() {
        let mut image = image_with_topic(1, 1);
        let set = &[
            ("max_delivery_attempts", "7"),
            ("dead_letter_topic", "t.failed"),
        ];
        alter(&mut image, set, &[]).unwrap();
        assert_eq!(image.topics["t"].config["max_delivery_attempts"], "7");
        for bad in ["0", "101", "many"] {
            let why = refusal(&mut image, &[("max_delivery_attempts", bad)], &[]);
            assert!(why.contains("max_delivery_attempts"), "{why}");
        }
        for bad in ["", "a b", "__offsets", ".."] {
            let why = refusal(&mut image, &[("dead_letter_topic", bad)], &[]);
            assert!(why.contains("dead_letter_topic"), "{why}");
        }
        alter(&mut image, &[], &["dead_letter_topic"]).unwrap();
        assert!(!image.topics["t"].config.contains_key("dead_letter_topic"));
    }
}
