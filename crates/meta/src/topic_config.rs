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

use tinymq_protocol::names::{
    self, MAX_DELIVERY_ATTEMPTS_MAX, MAX_DELIVERY_ATTEMPTS_MIN, TOPIC_MESSAGE_BYTES_MAX,
    TOPIC_MESSAGE_BYTES_MIN, TOPIC_SEGMENT_BYTES_MAX, TOPIC_SEGMENT_BYTES_MIN,
};

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
}

/// Every topic setting an alter may name.
fn kind_of(key: &str) -> Option<Kind> {
    Some(match key {
        "retention_ms"
        | "retention_bytes"
        | "message_timestamp_after_max_ms"
        | "message_timestamp_before_max_ms" => Kind::Bound,
        "segment_ms" => Kind::Count,
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
        _ => Ok(()),
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
        config.insert(key.clone(), value.clone());
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
