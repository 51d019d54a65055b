//! Kafka's topic and broker configuration names, as tinymq's settings. A Kafka name with a
//! tinymq counterpart (`retention.ms` → `retention_ms`, `max.message.bytes` →
//! `message_bytes_max`, `cleanup.policy` → `cleanup_policy`, …) maps onto it; a few Kafka names
//! describe what tinymq always does (`compression.type=producer`,
//! `message.timestamp.type=CreateTime`) and are accepted with that value only; tinymq settings
//! without a Kafka name go under `tinymq.*`. Any other name is refused with `INVALID_CONFIG`
//! naming it.

use tinymq_broker::topic::{COMPACTION_LAG_NO_BOUND_MS, DELETE_RETENTION_MS_DEFAULT};
use tinymq_log::{CleanupPolicy, DIRTY_RATIO_MIN_DEFAULT};
use tinymq_protocol::messages as m;

/// Kafka's config types (DescribeConfigs v3+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// One configuration entry as DescribeConfigs and CreateTopics (v5+) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: &'static str,
    pub value: String,
    pub config_type: ConfigType,
    /// Fixed by tinymq (the only value it has), not settable.
    pub read_only: bool,
}

/// Kafka names that state what tinymq always does: (name, the only value accepted).
const FIXED: &[(&str, &str)] = &[
    ("compression.type", "producer"),
    ("message.timestamp.type", "CreateTime"),
];

/// Topic settings in Kafka's names, from `(name, value)` pairs of a CreateTopics request
/// (a null value leaves the default). `Err` names every key refused, and why.
pub(crate) fn topic_config_from_kafka<'a>(
    configs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<m::TopicConfig, String> {
    let mut out = m::TopicConfig::default();
    let mut refused = Vec::new();
    for (name, value) in configs {
        let Some(value) = value else { continue };
        if let Err(why) = set(&mut out, name, value) {
            refused.push(why);
        }
    }
    if refused.is_empty() {
        Ok(out)
    } else {
        Err(refused.join("; "))
    }
}

fn set(out: &mut m::TopicConfig, name: &str, value: &str) -> Result<(), String> {
    fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
        value
            .trim()
            .parse()
            .map_err(|_| format!("{name}={value:?} is not a valid number here"))
    }
    // tinymq stores 0 as "the default": a value that would read as 0 is refused, not lost.
    fn nonzero<T: PartialEq + Default>(name: &str, value: &str, v: T) -> Result<T, String> {
        if v == T::default() {
            return Err(format!("{name}={value} is not accepted (must not be 0)"));
        }
        Ok(v)
    }
    match name {
        "retention.ms" => out.retention_ms = nonzero(name, value, parse(name, value)?)?,
        "retention.bytes" => out.retention_bytes = nonzero(name, value, parse(name, value)?)?,
        "segment.bytes" => out.segment_bytes = nonzero(name, value, parse(name, value)?)?,
        // Kafka's "never" (what a topic without age rolls is described as) is tinymq's 0.
        "segment.ms" => match parse::<i64>(name, value)? {
            SEGMENT_MS_NEVER => out.segment_ms = 0,
            ms => out.segment_ms = nonzero(name, value, ms)?,
        },
        "max.message.bytes" => {
            out.message_bytes_max = nonzero(name, value, parse(name, value)?)?;
        }
        "message.timestamp.after.max.ms" => {
            out.message_timestamp_after_max_ms = nonzero(name, value, parse(name, value)?)?;
        }
        "message.timestamp.before.max.ms" => {
            out.message_timestamp_before_max_ms = nonzero(name, value, parse(name, value)?)?;
        }
        "min.insync.replicas" => {
            out.min_insync_replicas = nonzero(name, value, parse(name, value)?)?;
        }
        "unclean.leader.election.enable" => {
            out.unclean_leader_election = parse(name, value)?;
        }
        // A list in Kafka (`delete,compact`, `compact, delete`, …): kept in its one spelling.
        "cleanup.policy" => {
            let policy = value.parse::<CleanupPolicy>().map_err(|_| {
                format!("{name}={value} is not supported (delete, compact or both)")
            })?;
            out.cleanup_policy = policy.to_string();
        }
        // Optional on the wire: 0 is a value of its own.
        "delete.retention.ms" => out.delete_retention_ms = Some(parse(name, value)?),
        // 0 is the default too: nothing is lost.
        "min.compaction.lag.ms" => out.min_compaction_lag_ms = parse(name, value)?,
        // Kafka's "no bound" (its default) is tinymq's -1.
        "max.compaction.lag.ms" => match parse::<i64>(name, value)? {
            COMPACTION_LAG_NO_BOUND_MS => out.max_compaction_lag_ms = -1,
            ms => out.max_compaction_lag_ms = nonzero(name, value, ms)?,
        },
        "min.cleanable.dirty.ratio" => out.min_cleanable_dirty_ratio = Some(parse(name, value)?),
        "tinymq.flush" => out.flush = value.to_string(),
        _ => {
            return match FIXED.iter().find(|(fixed, _)| *fixed == name) {
                Some((_, only)) if value.eq_ignore_ascii_case(only) => Ok(()),
                Some((_, only)) => Err(format!("{name}={value} is not supported (only {only})")),
                None => Err(format!("unknown config {name}")),
            };
        }
    }
    Ok(())
}

/// Kafka's topic config names with a tinymq setting, and that setting's key in
/// `AlterTopicConfig` (the MetaServer's topic record).
const NATIVE_KEYS: &[(&str, &str)] = &[
    ("retention.ms", "retention_ms"),
    ("retention.bytes", "retention_bytes"),
    ("segment.bytes", "segment_bytes"),
    ("segment.ms", "segment_ms"),
    ("max.message.bytes", "message_bytes_max"),
    (
        "message.timestamp.after.max.ms",
        "message_timestamp_after_max_ms",
    ),
    (
        "message.timestamp.before.max.ms",
        "message_timestamp_before_max_ms",
    ),
    ("min.insync.replicas", tinymq_meta::MIN_INSYNC_REPLICAS),
    (
        "unclean.leader.election.enable",
        tinymq_meta::UNCLEAN_LEADER_ELECTION,
    ),
    ("cleanup.policy", tinymq_meta::CLEANUP_POLICY),
    ("delete.retention.ms", tinymq_meta::DELETE_RETENTION_MS),
    ("min.compaction.lag.ms", tinymq_meta::MIN_COMPACTION_LAG_MS),
    ("max.compaction.lag.ms", tinymq_meta::MAX_COMPACTION_LAG_MS),
    (
        "min.cleanable.dirty.ratio",
        tinymq_meta::MIN_CLEANABLE_DIRTY_RATIO,
    ),
    ("tinymq.flush", tinymq_meta::image::FLUSH),
];

/// What setting one Kafka topic config to a value does to the native settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NativeChange {
    /// Set this key to this value.
    Set(&'static str, String),
    /// A name that states what tinymq always does, given that value: nothing to change.
    Nothing,
}

/// The native change for setting the Kafka topic config `name` to `value`, checked by the
/// same rules as a create's configs (so a value refused at create is refused here too).
pub(crate) fn native_change(name: &str, value: &str) -> Result<NativeChange, String> {
    let mut parsed = m::TopicConfig::default();
    set(&mut parsed, name, value)?;
    let Some((_, key)) = NATIVE_KEYS.iter().find(|(kafka, _)| *kafka == name) else {
        return Ok(NativeChange::Nothing);
    };
    let value = match name {
        // Kafka's "never" is stored as tinymq's 0.
        "segment.ms" => parsed.segment_ms.to_string(),
        "unclean.leader.election.enable" => parsed.unclean_leader_election.to_string(),
        // In its one spelling, so `delete,compact` over `compact,delete` changes nothing.
        "cleanup.policy" => parsed.cleanup_policy,
        // Kafka's "no bound" is stored as tinymq's -1.
        "max.compaction.lag.ms" => parsed.max_compaction_lag_ms.to_string(),
        _ => value.trim().to_string(),
    };
    Ok(NativeChange::Set(key, value))
}

/// The native key a Kafka topic config removes (back to the default): `None` for the names
/// tinymq has one value of, which stay. Unknown names are refused.
pub(crate) fn native_key(name: &str) -> Result<Option<&'static str>, String> {
    if let Some((_, key)) = NATIVE_KEYS.iter().find(|(kafka, _)| *kafka == name) {
        return Ok(Some(key));
    }
    if FIXED.iter().any(|(fixed, _)| *fixed == name) {
        return Ok(None);
    }
    Err(format!("unknown config {name}"))
}

/// Every native key a Kafka name maps onto: what a whole-config replacement (AlterConfigs)
/// resets when its request leaves the name out.
pub(crate) fn native_keys() -> impl Iterator<Item = (&'static str, &'static str)> {
    NATIVE_KEYS.iter().copied()
}

/// A topic's settings under Kafka's names (and `tinymq.*` for the rest).
pub(crate) fn topic_entries(config: &m::TopicConfig) -> Vec<Entry> {
    use ConfigType as T;
    let entry = |name, value: std::string::String, config_type| Entry {
        name,
        value,
        config_type,
        read_only: false,
    };
    let mut out = vec![
        entry("retention.ms", config.retention_ms.to_string(), T::Long),
        entry(
            "retention.bytes",
            config.retention_bytes.to_string(),
            T::Long,
        ),
        entry("segment.bytes", config.segment_bytes.to_string(), T::Long),
        entry(
            "segment.ms",
            segment_ms_described(config.segment_ms),
            T::Long,
        ),
        entry(
            "max.message.bytes",
            config.message_bytes_max.to_string(),
            T::Int,
        ),
        entry(
            "message.timestamp.after.max.ms",
            config.message_timestamp_after_max_ms.to_string(),
            T::Long,
        ),
        entry(
            "message.timestamp.before.max.ms",
            config.message_timestamp_before_max_ms.to_string(),
            T::Long,
        ),
        entry(
            "min.insync.replicas",
            config.min_insync_replicas.to_string(),
            T::Int,
        ),
        entry(
            "unclean.leader.election.enable",
            config.unclean_leader_election.to_string(),
            T::Boolean,
        ),
        entry(
            "cleanup.policy",
            cleanup_policy_described(&config.cleanup_policy),
            T::List,
        ),
        entry(
            "delete.retention.ms",
            config
                .delete_retention_ms
                .unwrap_or(DELETE_RETENTION_MS_DEFAULT)
                .to_string(),
            T::Long,
        ),
        entry(
            "min.compaction.lag.ms",
            config.min_compaction_lag_ms.to_string(),
            T::Long,
        ),
        entry(
            "max.compaction.lag.ms",
            compaction_lag_max_described(config.max_compaction_lag_ms),
            T::Long,
        ),
        entry(
            "min.cleanable.dirty.ratio",
            config
                .min_cleanable_dirty_ratio
                .unwrap_or(DIRTY_RATIO_MIN_DEFAULT)
                .to_string(),
            T::Double,
        ),
        entry("tinymq.flush", config.flush.clone(), T::String),
    ];
    out.extend(FIXED.iter().map(|(name, value)| Entry {
        name,
        value: (*value).to_string(),
        config_type: T::String,
        read_only: true,
    }));
    out
}

/// Kafka's `segment.ms` for "never roll by age" (its largest value); tinymq stores 0.
const SEGMENT_MS_NEVER: i64 = i64::MAX;

/// `segment.ms` as Kafka clients read it: tinymq's 0 ("no age roll") is Kafka's "never", so a
/// tool that writes a topic's described configs back is not refused (0 is not a valid value).
fn segment_ms_described(segment_ms: i64) -> String {
    if segment_ms == 0 {
        SEGMENT_MS_NEVER
    } else {
        segment_ms
    }
    .to_string()
}

/// `cleanup.policy` as described: empty on the wire (a setting not reported) is the default.
fn cleanup_policy_described(policy: &str) -> String {
    if policy.is_empty() {
        CleanupPolicy::default().to_string()
    } else {
        policy.to_string()
    }
}

/// `max.compaction.lag.ms` as Kafka clients read it: tinymq's "no bound" (-1, or 0 for the
/// default) is Kafka's, its largest value, which is also Kafka's default.
fn compaction_lag_max_described(ms: i64) -> String {
    if ms <= 0 {
        COMPACTION_LAG_NO_BOUND_MS
    } else {
        ms
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_map_onto_tinymq_settings() {
        let config = topic_config_from_kafka([
            ("retention.ms", Some("60000")),
            ("max.message.bytes", Some("2048")),
            ("cleanup.policy", Some("delete,compact")),
            ("segment.bytes", None),
            ("unclean.leader.election.enable", Some("true")),
            ("delete.retention.ms", Some("0")),
            ("min.compaction.lag.ms", Some("1000")),
            ("max.compaction.lag.ms", Some("9223372036854775807")),
            ("min.cleanable.dirty.ratio", Some("0.1")),
        ])
        .expect("accepted");
        assert_eq!(config.retention_ms, 60_000);
        assert_eq!(config.message_bytes_max, 2048);
        assert_eq!(config.segment_bytes, 0, "a null value keeps the default");
        assert!(config.unclean_leader_election);
        assert_eq!(config.cleanup_policy, "compact,delete", "one spelling");
        assert_eq!(config.delete_retention_ms, Some(0), "0 is not the default");
        assert_eq!(config.min_compaction_lag_ms, 1000);
        assert_eq!(config.max_compaction_lag_ms, -1, "Kafka's no bound");
        assert_eq!(config.min_cleanable_dirty_ratio, Some(0.1));
        let compact = topic_config_from_kafka([("cleanup.policy", Some("compact"))]);
        assert_eq!(compact.map(|c| c.cleanup_policy), Ok("compact".to_string()));
        let absent = topic_config_from_kafka([]).expect("accepted");
        assert_eq!(
            (absent.delete_retention_ms, absent.min_cleanable_dirty_ratio),
            (None, None),
            "left to the defaults"
        );
    }

    #[test]
    fn unknown_and_unsupported_configs_are_named() {
        let err = topic_config_from_kafka([
            ("cleanup.policy", Some("shred")),
            ("flux.capacitor", Some("1")),
            ("retention.ms", Some("soon")),
            ("retention.bytes", Some("0")),
            ("compression.type", Some("gzip")),
            ("max.compaction.lag.ms", Some("0")),
            ("min.cleanable.dirty.ratio", Some("half")),
        ])
        .expect_err("refused");
        for named in [
            "cleanup.policy=shred",
            "flux.capacitor",
            "retention.ms",
            "retention.bytes",
            "compression.type=gzip",
            "max.compaction.lag.ms",
            "min.cleanable.dirty.ratio",
        ] {
            assert!(err.contains(named), "{named} in {err}");
        }
    }

    #[test]
    fn alters_map_onto_native_keys_with_the_create_rules() {
        assert_eq!(
            native_change("retention.ms", " 60000 "),
            Ok(NativeChange::Set("retention_ms", "60000".into()))
        );
        assert_eq!(
            native_change("segment.ms", "9223372036854775807"),
            Ok(NativeChange::Set("segment_ms", "0".into()))
        );
        assert_eq!(
            native_change("cleanup.policy", "compact"),
            Ok(NativeChange::Set("cleanup_policy", "compact".into()))
        );
        assert_eq!(
            native_change("cleanup.policy", "delete, compact"),
            Ok(NativeChange::Set("cleanup_policy", "compact,delete".into()))
        );
        assert!(native_change("cleanup.policy", "shred").is_err());
        assert_eq!(
            native_change("max.compaction.lag.ms", "9223372036854775807"),
            Ok(NativeChange::Set("max_compaction_lag_ms", "-1".into()))
        );
        assert_eq!(
            native_change("delete.retention.ms", "0"),
            Ok(NativeChange::Set("delete_retention_ms", "0".into()))
        );
        assert_eq!(
            native_change("min.cleanable.dirty.ratio", "0.75"),
            Ok(NativeChange::Set(
                "min_cleanable_dirty_ratio",
                "0.75".into()
            ))
        );
        assert_eq!(
            native_change("compression.type", "producer"),
            Ok(NativeChange::Nothing)
        );
        assert!(native_change("retention.bytes", "0").is_err());
        assert!(native_change("max.message.bytes", "big").is_err());
        assert!(native_change("flux.capacitor", "1").is_err());
        assert_eq!(
            native_key("min.insync.replicas"),
            Ok(Some("min_insync_replicas"))
        );
        assert_eq!(native_key("compression.type"), Ok(None));
        assert!(native_key("flux.capacitor").is_err());
        // Every described entry of a name with a native key maps back onto that key.
        for entry in topic_entries(&m::TopicConfig::default()) {
            let mapped = native_keys().any(|(kafka, _)| kafka == entry.name);
            assert_eq!(mapped, !entry.read_only, "{}", entry.name);
        }
    }

    #[test]
    fn every_entry_described_can_be_set_back() {
        let config = m::TopicConfig {
            retention_ms: 5,
            retention_bytes: -1,
            segment_bytes: 1 << 20,
            segment_ms: 7,
            flush: "always".into(),
            message_bytes_max: 1 << 20,
            message_timestamp_after_max_ms: -1,
            message_timestamp_before_max_ms: 9,
            min_insync_replicas: 1,
            unclean_leader_election: true,
            cleanup_policy: "compact,delete".into(),
            delete_retention_ms: Some(0),
            min_compaction_lag_ms: 100,
            max_compaction_lag_ms: 60_000,
            min_cleanable_dirty_ratio: Some(0.25),
            ..Default::default()
        };
        let entries = topic_entries(&config);
        let back =
            topic_config_from_kafka(entries.iter().map(|e| (e.name, Some(e.value.as_str()))))
                .expect("every described value is accepted");
        assert_eq!(back, config);
        // A topic that never rolls by age (tinymq's 0) reads as Kafka's "never" and back.
        let never = m::TopicConfig {
            segment_ms: 0,
            ..config
        };
        let entries = topic_entries(&never);
        let segment_ms = entries.iter().find(|e| e.name == "segment.ms");
        assert_eq!(
            segment_ms.map(|e| e.value.as_str()),
            Some("9223372036854775807")
        );
        let back =
            topic_config_from_kafka(entries.iter().map(|e| (e.name, Some(e.value.as_str()))))
                .expect("never is accepted");
        assert_eq!(back, never);
        // No compaction lag bound (tinymq's -1) reads as Kafka's and back.
        let unbounded = m::TopicConfig {
            max_compaction_lag_ms: -1,
            ..never
        };
        let entries = topic_entries(&unbounded);
        let lag = entries.iter().find(|e| e.name == "max.compaction.lag.ms");
        assert_eq!(lag.map(|e| e.value.as_str()), Some("9223372036854775807"));
        let back =
            topic_config_from_kafka(entries.iter().map(|e| (e.name, Some(e.value.as_str()))))
                .expect("no bound is accepted");
        assert_eq!(back, unbounded);
    }
}
