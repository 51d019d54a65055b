//! Names and limits a client can see, defined once.
//!
//! This module owns every rule about a name that crosses the wire (topic names, group ids,
//! share-group member ids, route names, the length of user and ACL resource names) and the
//! ranges of the topic settings and request fields a client may set (partitions, replication
//! factor, segment and message bytes, `max_delivery_attempts`, share-group `lock_ms` and
//! `max_records`). The broker, the MetaServer, the HTTP API, the Kafka listener, the client and
//! the CLI all check against these items and define no copy of their own
//! (`crates/protocol/tests/one_source.rs` fails when one appears). docs/protocol.md, "Limits",
//! lists them for client writers.
//!
//! Constants are named with the unit last and the bound after it: `TOPIC_NAME_BYTES_MAX` is the
//! most bytes of a topic name; `MAX_DELIVERY_ATTEMPTS_MAX` the largest value of the
//! `max_delivery_attempts` setting.
//!
//! The rules agree with Kafka's where Kafka has one, so that a name valid here is valid on the
//! Kafka listener and back: Kafka's topic names are 1 to 249 characters of `[a-zA-Z0-9._-]` and
//! neither `.` nor `..` (a topic's partitions are directories named `<topic>-<partition>`).
//! tinymq is stricter in two places, both documented in docs/kafka.md: names starting with `__`
//! are reserved for internal topics (Kafka only reserves its own internal topics), and group
//! ids use the topic-name characters (Kafka allows any string).

use std::fmt;

/// What a checked name is; it words the error and picks its wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Topic,
    Group,
    Member,
    Route,
}

impl NameKind {
    /// Most bytes a name of this kind may have.
    pub const fn bytes_max(self) -> usize {
        match self {
            NameKind::Topic => TOPIC_NAME_BYTES_MAX,
            NameKind::Group => GROUP_ID_BYTES_MAX,
            NameKind::Member => MEMBER_ID_BYTES_MAX,
            NameKind::Route => ROUTE_NAME_BYTES_MAX,
        }
    }

    /// The wire error code of a refused name of this kind (unchanged since these checks had
    /// copies: topics `INVALID_TOPIC`, groups `INVALID_GROUP_ID`, the rest `INVALID_REQUEST`).
    pub const fn error_code(self) -> crate::ErrorCode {
        match self {
            NameKind::Topic => crate::ErrorCode::INVALID_TOPIC,
            NameKind::Group => crate::ErrorCode::INVALID_GROUP_ID,
            NameKind::Member | NameKind::Route => crate::ErrorCode::INVALID_REQUEST,
        }
    }
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Topic => "topic name",
            NameKind::Group => "group id",
            NameKind::Member => "member id",
            NameKind::Route => "route name",
        })
    }
}

/// A refused name. The messages are stable: clients and tests may show or match them. The
/// name is shown cut to [`NAME_SHOWN_CHARS_MAX`] characters (it may be megabytes long).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{kind} {name:?} must be 1 to {max} characters of [A-Za-z0-9._-]", max = kind.bytes_max())]
    Malformed { kind: NameKind, name: String },
    #[error(
        "{kind} {name:?} must not be . or .. (a topic's partitions are directories named after it)"
    )]
    DotName { kind: NameKind, name: String },
    #[error("{kind} {name:?}: names starting with {INTERNAL_TOPIC_PREFIX} are reserved for internal topics")]
    Reserved { kind: NameKind, name: String },
}

impl NameError {
    pub fn kind(&self) -> NameKind {
        match self {
            NameError::Malformed { kind, .. }
            | NameError::DotName { kind, .. }
            | NameError::Reserved { kind, .. } => *kind,
        }
    }

    /// The wire error code for this refusal ([`NameKind::error_code`]).
    pub fn error_code(&self) -> crate::ErrorCode {
        self.kind().error_code()
    }
}

/// Characters of a refused name its error shows.
pub const NAME_SHOWN_CHARS_MAX: usize = 64;

fn shown(name: &str) -> String {
    if name.chars().count() <= NAME_SHOWN_CHARS_MAX {
        name.to_string()
    } else {
        let mut cut: String = name.chars().take(NAME_SHOWN_CHARS_MAX).collect();
        cut.push('…');
        cut
    }
}

// ---------------------------------------------------------------------------------------------
// Names.

/// Most bytes of a topic name, as in Kafka (a partition's directory is `<topic>-<partition>`,
/// which must fit a file name).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Topic names starting with this are internal (`__consumer_offsets`): clients cannot create,
/// delete, grow, produce to or fetch from them.
pub const INTERNAL_TOPIC_PREFIX: &str = "__";
/// Most bytes of a consumer or share group id (a share group's state log is `<id>.state`).
pub const GROUP_ID_BYTES_MAX: usize = 249;
/// Most bytes of a share-group member id (members choose their own, e.g. a UUID).
pub const MEMBER_ID_BYTES_MAX: usize = 255;
/// Most bytes of a route name (like a topic name).
pub const ROUTE_NAME_BYTES_MAX: usize = 249;
/// Most bytes of a transactional id (Kafka allows any string; Kafka Streams builds its ids from
/// the application id and a UUID).
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = 1024;
/// Most bytes of a user name (the characters are `tinymq_auth::validate_user_name`'s rule).
pub const USER_NAME_BYTES_MAX: usize = 255;
/// Most bytes of an ACL resource name.
pub const ACL_RESOURCE_NAME_BYTES_MAX: usize = 255;

/// Whether `b` may appear in a topic name, group id, member id or route name:
/// `[A-Za-z0-9._-]`.
pub const fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn check_chars(kind: NameKind, name: &str) -> Result<(), NameError> {
    if name.is_empty() || name.len() > kind.bytes_max() || !name.bytes().all(is_name_byte) {
        return Err(NameError::Malformed {
            kind,
            name: shown(name),
        });
    }
    Ok(())
}

/// Whether `name` is an internal topic's (starts with [`INTERNAL_TOPIC_PREFIX`]).
pub fn is_internal_topic(name: &str) -> bool {
    name.starts_with(INTERNAL_TOPIC_PREFIX)
}

/// A topic name any topic may have, internal ones included: 1 to [`TOPIC_NAME_BYTES_MAX`]
/// bytes of `[A-Za-z0-9._-]`, neither `.` nor `..`. Names that reach the disk (a partition's
/// directory, `<topic>-<partition>`) pass this.
pub fn validate_topic_name(name: &str) -> Result<(), NameError> {
    check_chars(NameKind::Topic, name)?;
    if name == "." || name == ".." {
        return Err(NameError::DotName {
            kind: NameKind::Topic,
            name: name.to_string(),
        });
    }
    Ok(())
}

/// A topic name a client may create, alter or name as a dead-letter topic:
/// [`validate_topic_name`] and not internal.
pub fn validate_user_topic_name(name: &str) -> Result<(), NameError> {
    validate_topic_name(name)?;
    if is_internal_topic(name) {
        return Err(NameError::Reserved {
            kind: NameKind::Topic,
            name: shown(name),
        });
    }
    Ok(())
}

/// A consumer or share group id: 1 to [`GROUP_ID_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`. `.` and
/// `..` are valid (a group's files carry a suffix, `<id>.state`).
pub fn validate_group_id(id: &str) -> Result<(), NameError> {
    check_chars(NameKind::Group, id)
}

/// A transactional id: 1 to [`TRANSACTIONAL_ID_BYTES_MAX`] bytes of any characters but control
/// characters (Kafka allows any string; ids from Kafka clients pass unchanged). Refused with
/// `INVALID_REQUEST`; the message says why.
pub fn validate_transactional_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the transactional id is empty".into());
    }
    if id.len() > TRANSACTIONAL_ID_BYTES_MAX {
        return Err(format!(
            "transactional id of {} bytes exceeds TRANSACTIONAL_ID_BYTES_MAX {TRANSACTIONAL_ID_BYTES_MAX}",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(format!(
            "transactional id {:?} contains a control character",
            shown(id)
        ));
    }
    Ok(())
}

/// A share-group member id: 1 to [`MEMBER_ID_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`.
pub fn validate_member_id(id: &str) -> Result<(), NameError> {
    check_chars(NameKind::Member, id)
}

/// A route name: 1 to [`ROUTE_NAME_BYTES_MAX`] bytes of `[A-Za-z0-9._-]`.
pub fn validate_route_name(name: &str) -> Result<(), NameError> {
    check_chars(NameKind::Route, name)
}

// ---------------------------------------------------------------------------------------------
// Topic settings. Each range is inclusive: `(MIN..=MAX).contains(&value)`.

/// Setting key: partitions of a topic.
pub const PARTITIONS: &str = "partitions";
/// Fewest partitions of a topic.
pub const TOPIC_PARTITIONS_MIN: u32 = 1;
/// Most partitions of a topic.
pub const TOPIC_PARTITIONS_MAX: u32 = 1024;

/// Fewest copies of a partition.
pub const REPLICATION_FACTOR_MIN: u32 = 1;
/// Most copies of a partition.
pub const REPLICATION_FACTOR_MAX: u32 = 7;

/// Smallest `segment_bytes` a topic may set. Every segment holds open files, so tiny segments
/// would let one partition use up a broker's file descriptors (the log itself accepts 1 KiB,
/// for tests).
pub const TOPIC_SEGMENT_BYTES_MIN: u64 = 1 << 20;
/// Largest `segment_bytes`: positions within a segment are 32-bit.
pub const TOPIC_SEGMENT_BYTES_MAX: u64 = u32::MAX as u64;

/// Smallest `message_bytes_max` a topic may set.
pub const TOPIC_MESSAGE_BYTES_MIN: u32 = 1;
/// Largest `message_bytes_max` a topic may set: one batch must fit a frame.
pub const TOPIC_MESSAGE_BYTES_MAX: u32 = 16 << 20;

/// Setting key: deliveries of a record before a share group dead-letters it.
pub const MAX_DELIVERY_ATTEMPTS_KEY: &str = "max_delivery_attempts";
/// Smallest `max_delivery_attempts`.
pub const MAX_DELIVERY_ATTEMPTS_MIN: u32 = 1;
/// Largest `max_delivery_attempts`.
pub const MAX_DELIVERY_ATTEMPTS_MAX: u32 = 100;
/// `max_delivery_attempts` of a topic that does not set it (or holds a value out of range).
pub const MAX_DELIVERY_ATTEMPTS_DEFAULT: u32 = 5;

/// Setting key: the topic a share group's dead letters go to (a user topic name, not the topic
/// itself; default `<topic>` + [`DEAD_LETTER_TOPIC_SUFFIX`]).
pub const DEAD_LETTER_TOPIC_KEY: &str = "dead_letter_topic";
/// Suffix of a topic's default dead-letter topic.
pub const DEAD_LETTER_TOPIC_SUFFIX: &str = ".dlq";

/// A topic's `max_delivery_attempts` from its stored value: the default when it is missing or
/// out of range (the MetaServer checks a value when it is set; this reads old ones safely).
pub fn max_delivery_attempts(stored: Option<&str>) -> u32 {
    stored
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (MAX_DELIVERY_ATTEMPTS_MIN..=MAX_DELIVERY_ATTEMPTS_MAX).contains(n))
        .unwrap_or(MAX_DELIVERY_ATTEMPTS_DEFAULT)
}

/// Topic `topic`'s dead-letter topic from its stored `dead_letter_topic`: the default
/// `<topic>.dlq` when it is missing, not a user topic name, or the topic itself (which would
/// deliver its dead letters again).
pub fn dead_letter_topic(topic: &str, stored: Option<&str>) -> String {
    stored
        .filter(|t| validate_user_topic_name(t).is_ok() && *t != topic)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{topic}{DEAD_LETTER_TOPIC_SUFFIX}"))
}

// ---------------------------------------------------------------------------------------------
// Share-group requests.

/// Lock a share fetch gets when its `lock_ms` is 0, ms.
pub const SHARE_LOCK_MS_DEFAULT: u32 = 30_000;
/// Largest `lock_ms` of a share fetch, ms.
pub const SHARE_LOCK_MS_MAX: u32 = 600_000;
/// Largest `max_records` of a share fetch (per partition): a share partition's in-flight
/// bound.
pub const SHARE_FETCH_RECORDS_MAX: u32 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn topic_names() {
        let longest = "x".repeat(TOPIC_NAME_BYTES_MAX);
        for good in [
            "orders",
            "a.b-c_d",
            "X1",
            "...",
            "a..",
            "__consumer_offsets",
            &longest,
        ] {
            assert_eq!(validate_topic_name(good), Ok(()), "{good}");
        }
        let too_long = "x".repeat(TOPIC_NAME_BYTES_MAX + 1);
        for bad in ["", "a/b", "a b", "ä", "a\0", &too_long, ".", ".."] {
            let e = validate_topic_name(bad).unwrap_err();
            assert_eq!(e.error_code(), crate::ErrorCode::INVALID_TOPIC, "{bad}");
        }
        assert!(matches!(
            validate_topic_name(".."),
            Err(NameError::DotName { .. })
        ));
    }

    #[test]
    fn user_topic_names_refuse_internal_ones() {
        assert_eq!(validate_user_topic_name("orders"), Ok(()));
        assert_eq!(validate_user_topic_name("_one"), Ok(()));
        for bad in ["__consumer_offsets", "__", "..", ""] {
            assert!(validate_user_topic_name(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            validate_user_topic_name("__x"),
            Err(NameError::Reserved { .. })
        ));
    }

    #[test]
    fn group_member_and_route_names() {
        for (check, kind) in [
            (
                validate_group_id as fn(&str) -> Result<(), NameError>,
                NameKind::Group,
            ),
            (validate_member_id, NameKind::Member),
            (validate_route_name, NameKind::Route),
        ] {
            let max = kind.bytes_max();
            assert_eq!(check("worker-1.a_b"), Ok(()));
            assert_eq!(check(&"x".repeat(max)), Ok(()));
            assert_eq!(check("."), Ok(()), "{kind}: dot names are not paths");
            for bad in ["", "a b", "a/b", "é", &"x".repeat(max + 1)] {
                let e = check(bad).unwrap_err();
                assert_eq!(e.kind(), kind);
                assert_eq!(e.error_code(), kind.error_code());
            }
        }
        assert_eq!(GROUP_ID_BYTES_MAX, 249);
        assert_eq!(MEMBER_ID_BYTES_MAX, 255);
    }

    #[test]
    fn messages_are_stable_and_bounded() {
        assert_eq!(
            validate_topic_name("a b").unwrap_err().to_string(),
            "topic name \"a b\" must be 1 to 249 characters of [A-Za-z0-9._-]"
        );
        assert_eq!(
            validate_group_id("").unwrap_err().to_string(),
            "group id \"\" must be 1 to 249 characters of [A-Za-z0-9._-]"
        );
        assert_eq!(
            validate_member_id("a/b").unwrap_err().to_string(),
            "member id \"a/b\" must be 1 to 255 characters of [A-Za-z0-9._-]"
        );
        assert_eq!(
            validate_user_topic_name("__x").unwrap_err().to_string(),
            "topic name \"__x\": names starting with __ are reserved for internal topics"
        );
        assert!(validate_topic_name(".")
            .unwrap_err()
            .to_string()
            .starts_with("topic name \".\" must not be . or .."));
        let huge = "y".repeat(1 << 20);
        assert!(validate_topic_name(&huge).unwrap_err().to_string().len() < 200);
    }

    #[test]
    fn share_settings_fall_back_to_their_defaults() {
        assert_eq!(max_delivery_attempts(None), MAX_DELIVERY_ATTEMPTS_DEFAULT);
        assert_eq!(max_delivery_attempts(Some("9")), 9);
        assert_eq!(max_delivery_attempts(Some("100")), 100);
        for bad in ["0", "101", "-1", "x", ""] {
            assert_eq!(
                max_delivery_attempts(Some(bad)),
                MAX_DELIVERY_ATTEMPTS_DEFAULT
            );
        }
        assert_eq!(dead_letter_topic("jobs", None), "jobs.dlq");
        assert_eq!(dead_letter_topic("jobs", Some("failed")), "failed");
        for bad in ["jobs", "a b", "..", "__x", ""] {
            assert_eq!(dead_letter_topic("jobs", Some(bad)), "jobs.dlq", "{bad}");
        }
    }

    #[test]
    fn limits_hold_together() {
        const _: () =
            assert!(TOPIC_PARTITIONS_MIN >= 1 && TOPIC_PARTITIONS_MIN <= TOPIC_PARTITIONS_MAX);
        const _: () = assert!(
            REPLICATION_FACTOR_MIN >= 1 && REPLICATION_FACTOR_MIN <= REPLICATION_FACTOR_MAX
        );
        const _: () = assert!(TOPIC_SEGMENT_BYTES_MIN <= TOPIC_SEGMENT_BYTES_MAX);
        const _: () = assert!(
            TOPIC_MESSAGE_BYTES_MIN >= 1 && TOPIC_MESSAGE_BYTES_MIN <= TOPIC_MESSAGE_BYTES_MAX
        );
        // The largest batch a topic may allow is no larger than a default frame body.
        const _: () =
            assert!(TOPIC_MESSAGE_BYTES_MAX <= crate::frame::FRAME_BODY_BYTES_MAX_DEFAULT);
        const _: () = assert!(
            MAX_DELIVERY_ATTEMPTS_MIN <= MAX_DELIVERY_ATTEMPTS_DEFAULT
                && MAX_DELIVERY_ATTEMPTS_DEFAULT <= MAX_DELIVERY_ATTEMPTS_MAX
        );
        const _: () = assert!(SHARE_LOCK_MS_DEFAULT <= SHARE_LOCK_MS_MAX);
        // Kafka's topic-name length, so a name is the same on both listeners.
        assert_eq!(TOPIC_NAME_BYTES_MAX, 249);
    }

    /// Kafka's own rule (`org.apache.kafka.common.internals.Topic.validate`), written out
    /// independently: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
    fn kafka_accepts(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= 249
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    }

    proptest! {
        /// tinymq's topic rule is Kafka's, over any string (mostly names near the alphabet).
        #[test]
        fn the_topic_rule_is_kafkas(name in "[A-Za-z0-9._\\-/ é\\\\]{0,260}|\\.{1,3}|.{0,10}") {
            prop_assert_eq!(validate_topic_name(&name).is_ok(), kafka_accepts(&name));
        }

        /// A name the validator accepts survives the wire (a protobuf string) and makes one
        /// plain path component for a partition's directory: not `.`/`..`, no separator, and it
        /// fits a file name with the partition suffix.
        #[test]
        fn accepted_names_round_trip_and_are_safe_paths(
            name in "[A-Za-z0-9._\\-]{1,249}",
            partition in 0u32..TOPIC_PARTITIONS_MAX,
        ) {
            prop_assume!(validate_topic_name(&name).is_ok());
            let wire = crate::messages::CreateTopicRequest { name: name.clone(), ..Default::default() };
            let bytes = prost::Message::encode_to_vec(&wire);
            let back: crate::messages::CreateTopicRequest =
                prost::Message::decode(bytes.as_slice()).expect("decodes");
            prop_assert_eq!(&back.name, &name);

            let dir = format!("{name}-{partition}");
            prop_assert!(dir.len() <= 255, "NAME_MAX");
            let path = std::path::Path::new("/data").join(&dir);
            let mut components = path.strip_prefix("/data").expect("under the root").components();
            prop_assert_eq!(
                components.next(),
                Some(std::path::Component::Normal(std::ffi::OsStr::new(&dir)))
            );
            prop_assert_eq!(components.next(), None);
            // The name alone (e.g. the topic's directory in a listing) is one plain component too.
            let alone: Vec<_> = std::path::Path::new(&name).components().collect();
            prop_assert_eq!(alone, vec![std::path::Component::Normal(std::ffi::OsStr::new(&name))]);
        }

        /// Group and member ids that pass make a share state-log file name.
        #[test]
        fn accepted_group_ids_make_a_state_file_name(id in "[A-Za-z0-9._\\-]{1,249}") {
            prop_assert!(validate_group_id(&id).is_ok());
            let file = format!("{id}.state");
            prop_assert!(file.len() <= 255);
            let parts: Vec<_> = std::path::Path::new(&file).components().collect();
            prop_assert_eq!(parts, vec![std::path::Component::Normal(std::ffi::OsStr::new(&file))]);
        }

        /// Validators never panic and refuse everything outside the alphabet.
        #[test]
        fn validators_never_panic(name in any::<String>()) {
            let outside = name.bytes().any(|b| !is_name_byte(b));
            for check in [validate_topic_name, validate_user_topic_name, validate_group_id,
                          validate_member_id, validate_route_name] {
                let result = check(&name);
                if outside || name.is_empty() {
                    prop_assert!(result.is_err());
                }
            }
        }
    }
}

/// What happens to old records: Kafka's `cleanup.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// Whole segments are deleted past the retention limits.
    #[default]
    Delete,
    /// The cleaner keeps the latest record of each key; retention limits do not apply.
    Compact,
    /// Both: compacted, and whole segments still deleted past the retention limits.
    CompactDelete,
}

impl CleanupPolicy {
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }
}

impl std::fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        })
    }
}

impl std::str::FromStr for CleanupPolicy {
    type Err = String;

    /// Parses `delete`, `compact`, or both separated by a comma in either order (Kafka's
    /// list form, spaces around the names allowed).
    fn from_str(s: &str) -> Result<CleanupPolicy, String> {
        let mut names: Vec<&str> = s.split(',').map(str::trim).collect();
        names.sort_unstable();
        names.dedup();
        match names.as_slice() {
            ["delete"] => Ok(CleanupPolicy::Delete),
            ["compact"] => Ok(CleanupPolicy::Compact),
            ["compact", "delete"] => Ok(CleanupPolicy::CompactDelete),
            _ => Err(format!(
                "cleanup policy {s:?}: expected delete, compact or compact,delete"
            )),
        }
    }
}

#[cfg(test)]
mod cleanup_policy_tests {
    use super::CleanupPolicy;

    #[test]
    fn cleanup_policy_parses_and_prints() {
        for text in ["delete", "compact", "compact,delete"] {
            assert_eq!(text.parse::<CleanupPolicy>().unwrap().to_string(), text);
        }
        assert_eq!(
            "delete, compact".parse::<CleanupPolicy>(),
            Ok(CleanupPolicy::CompactDelete)
        );
        for bad in ["", "Compact", "compact,", "delete,nothing"] {
            assert!(bad.parse::<CleanupPolicy>().is_err(), "{bad}");
        }
    }
}
