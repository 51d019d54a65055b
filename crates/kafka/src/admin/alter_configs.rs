//! IncrementalAlterConfigs and AlterConfigs for topics, as the native `AlterTopicConfig`: each
//! Kafka name maps onto its tinymq setting ([`configs::native_change`]), so a change goes
//! through the same checks as `tinymq topic alter` (the MetaServer's rules, this broker's
//! storage limits) and the same `ALTER` permission on the topic.
//!
//! - IncrementalAlterConfigs sets (`SET`) or removes (`DELETE`, back to the default) the names
//!   given and leaves the others. `APPEND` and `SUBTRACT` are for list-valued configs, of
//!   which tinymq's topics have one, `cleanup.policy`, short enough to `SET` whole
//!   (`compact,delete`): they are refused with `INVALID_CONFIG`.
//! - AlterConfigs (the older API) replaces a topic's whole config: the names given are set,
//!   every other Kafka-named setting goes back to its default. tinymq's settings with no Kafka
//!   name (`max_delivery_attempts`, `dead_letter_topic`) and the flush policy, which cannot
//!   change on an open topic, are kept when left out.
//!
//! Broker resources are refused: tinymq's broker settings are its server flags, fixed while it
//! runs. (An IncrementalAlterConfigs that only deletes names tinymq does not have, such as
//! Kafka's replication throttles, changes nothing and succeeds, as on a topic.)

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::{messages as m, OpCode};

use tinymq_auth::AclOperation;
use tinymq_meta::authorize::Permission;

use super::configs::{self, NativeChange};
use super::{refusal, text, too_many_entries, topic_error, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

/// IncrementalAlterConfigs' operations (Kafka's `AlterConfigOp.OpType`).
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// A refusal: a Kafka error code and its message.
type Refused = (i16, String);

/// One resource's change in native terms.
#[derive(Debug, Default, PartialEq, Eq)]
struct NativeAlter {
    set: BTreeMap<&'static str, String>,
    unset: Vec<&'static str>,
}

impl NativeAlter {
    fn set(&mut self, name: &str, value: Option<&str>) -> Result<(), Refused> {
        let Some(value) = value else {
            return Err(invalid(format!("{name}: a value is required to set it")));
        };
        match configs::native_change(name, value).map_err(invalid)? {
            NativeChange::Set(key, value) => {
                self.set.insert(key, value);
            }
            NativeChange::Nothing => {}
        }
        Ok(())
    }

    /// Back to the default. A name tinymq does not have is at its default already: nothing to
    /// remove, as in Kafka, whose DELETE only drops the name from the topic's overrides.
    /// MirrorMaker 2 relies on it: its topic-config sync sends DELETE for every config of the
    /// source topic at its default, Kafka-only ones (`remote.storage.enable`, …) included, and
    /// one refusal would refuse the whole topic's change (its `retention.ms` with it).
    fn unset(&mut self, name: &str) -> Result<(), Refused> {
        if let Ok(Some(key)) = configs::native_key(name) {
            self.unset.push(key);
        }
        Ok(())
    }
}

fn invalid(why: String) -> Refused {
    (K::InvalidConfig.code(), why)
}

/// An incremental change's native form; a name given twice is refused, as Kafka does.
fn incremental(
    configs: &[incremental_alter_configs_request::AlterableConfig],
) -> Result<NativeAlter, Refused> {
    let mut alter = NativeAlter::default();
    let mut seen = std::collections::HashSet::new();
    for config in configs {
        let name = config.name.as_str();
        if !seen.insert(name) {
            return Err((K::InvalidRequest.code(), format!("{name} is given twice")));
        }
        match config.config_operation {
            OP_SET => alter.set(name, config.value.as_deref())?,
            OP_DELETE => alter.unset(name)?,
            OP_APPEND | OP_SUBTRACT => {
                // The name must exist all the same, so a typo is named as one.
                configs::native_key(name).map_err(invalid)?;
                if name == "cleanup.policy" {
                    return Err(invalid(format!(
                        "{name}: APPEND and SUBTRACT are not supported; SET the whole list (delete, compact or compact,delete)"
                    )));
                }
                return Err(invalid(format!(
                    "{name} is not a list: APPEND and SUBTRACT apply only to cleanup.policy, which is SET whole"
                )));
            }
            other => {
                return Err((
                    K::InvalidRequest.code(),
                    format!("{name}: unknown config operation {other} (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)"),
                ))
            }
        }
    }
    Ok(alter)
}

/// A whole-config replacement's native form: the names given are set, every other Kafka-named
/// setting (but the flush policy) is removed.
fn replacement(configs: &[alter_configs_request::AlterableConfig]) -> Result<NativeAlter, Refused> {
    let mut alter = NativeAlter::default();
    let mut seen = std::collections::HashSet::new();
    for config in configs {
        let name = config.name.as_str();
        if !seen.insert(name) {
            return Err((K::InvalidRequest.code(), format!("{name} is given twice")));
        }
        alter.set(name, config.value.as_deref())?;
    }
    for (kafka, key) in configs::native_keys() {
        if !seen.contains(kafka) && key != tinymq_meta::image::FLUSH {
            alter.unset.push(key);
        }
    }
    Ok(alter)
}

/// Applies (or with `validate_only`, checks) one topic's change.
async fn alter_topic(
    ctx: &Ctx,
    name: &str,
    alter: NativeAlter,
    validate_only: bool,
) -> Result<(), Refused> {
    let request = m::AlterTopicConfigRequest {
        name: name.to_string(),
        set: alter
            .set
            .into_iter()
            .map(|(key, value)| m::TopicSetting {
                key: key.to_string(),
                value,
            })
            .collect(),
        unset: alter.unset.into_iter().map(str::to_string).collect(),
        validate_only,
    };
    let answered = ctx
        .call::<_, m::AlterTopicConfigResponse>(OpCode::AlterTopicConfig, &request)
        .await;
    match refusal(answered, |r| r.error.clone()) {
        None => Ok(()),
        Some(error) => {
            let (code, message) = topic_error(Some(&error));
            Err((code, message.map(|m| m.to_string()).unwrap_or_default()))
        }
    }
}

/// One resource's answer.
async fn alter_resource(
    ctx: &Ctx,
    resource_type: i8,
    name: &str,
    change: Result<NativeAlter, Refused>,
    validate_only: bool,
) -> Result<(), Refused> {
    match resource_type {
        RESOURCE_TOPIC => alter_topic(ctx, name, change?, validate_only).await,
        // Deleting only names tinymq does not have changes nothing, as on a topic: what
        // `kafka-reassign-partitions --verify` and `--cancel` send to clear Kafka's
        // replication throttles.
        RESOURCE_BROKER => match change {
            Ok(c) if c.set.is_empty() && c.unset.is_empty() => {
                let cluster = Permission::cluster(AclOperation::Alter);
                let refused = ctx.state().check_permission(&ctx.peer.principal, cluster);
                refused.map_err(|e| (kafka_code_for(Some(&e), Resource::Cluster), e.message))
            }
            _ => Err((
                K::InvalidRequest.code(),
                "tinymq's broker settings are its server flags, fixed while it runs (restart with the flag changed)".into(),
            )),
        },
        other => Err((
            K::InvalidRequest.code(),
            format!("config resource type {other} is not served (topics 2 are)"),
        )),
    }
}

/// A resource's outcome as a response's error code and message.
fn code_and_message(outcome: Result<(), Refused>) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code, Some(text(message))),
    }
}

/// (resource type, name, its change or refusal), in request order.
type Changes = Vec<(i8, StrBytes, Result<NativeAlter, Refused>)>;

/// Each resource's change applied (or with `validate_only`, checked), in request order, with
/// its outcome; past [`super::ADMIN_ENTRIES_MAX`] resources, none is.
async fn alter_each(
    ctx: &Ctx,
    changes: Changes,
    validate_only: bool,
) -> Vec<(i8, StrBytes, Result<(), Refused>)> {
    let too_many = too_many_entries(changes.len());
    let mut outcomes = Vec::with_capacity(changes.len());
    for (resource_type, name, change) in changes {
        let change = match &too_many {
            Some(refused) => Err(refused.clone()),
            None => change,
        };
        let outcome =
            alter_resource(ctx, resource_type, name.as_str(), change, validate_only).await;
        outcomes.push((resource_type, name, outcome));
    }
    outcomes
}

pub(crate) async fn incremental_alter_configs(
    ctx: Arc<Ctx>,
    _version: i16,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let changes = request
        .resources
        .into_iter()
        .map(|r| (r.resource_type, r.resource_name, incremental(&r.configs)))
        .collect();
    let responses = alter_each(&ctx, changes, request.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, name, outcome)| {
            let (code, message) = code_and_message(outcome);
            AlterConfigsResourceResponse::default()
                .with_resource_type(resource_type)
                .with_resource_name(name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

pub(crate) async fn alter_configs(
    ctx: Arc<Ctx>,
    _version: i16,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let changes = request
        .resources
        .into_iter()
        .map(|r| (r.resource_type, r.resource_name, replacement(&r.configs)))
        .collect();
    let responses = alter_each(&ctx, changes, request.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, name, outcome)| {
            let (code, message) = code_and_message(outcome);
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource_type)
                .with_resource_name(name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use incremental_alter_configs_request::AlterableConfig as Incremental;

    fn op(name: &str, operation: i8, value: Option<&str>) -> Incremental {
        Incremental::default()
            .with_name(text(name))
            .with_config_operation(operation)
            .with_value(value.map(text))
    }

    #[test]
    fn incremental_sets_and_removes_only_what_it_names() {
        let alter = incremental(&[
            op("retention.ms", OP_SET, Some("1000")),
            op("max.message.bytes", OP_DELETE, None),
            op("cleanup.policy", OP_SET, Some("delete,compact")),
            op("compression.type", OP_DELETE, None),
            op("min.cleanable.dirty.ratio", OP_DELETE, None),
        ])
        .expect("accepted");
        assert_eq!(
            alter,
            NativeAlter {
                set: [
                    ("retention_ms", "1000".to_string()),
                    ("cleanup_policy", "compact,delete".to_string()),
                ]
                .into(),
                unset: vec!["message_bytes_max", "min_cleanable_dirty_ratio"],
            }
        );
        let compact = incremental(&[op("cleanup.policy", OP_SET, Some("compact"))]);
        assert_eq!(
            compact.map(|a| a.set),
            Ok([("cleanup_policy", "compact".to_string())].into())
        );
    }

    /// MirrorMaker 2's topic-config sync: DELETE for each of the source's defaults, names
    /// tinymq does not have among them, beside the SET of what the source overrides.
    #[test]
    fn deleting_a_config_tinymq_does_not_have_changes_nothing() {
        let alter = incremental(&[
            op("retention.ms", OP_SET, Some("600000")),
            op("remote.storage.enable", OP_DELETE, None),
            op("local.retention.ms", OP_DELETE, None),
            op("compression.type", OP_DELETE, None),
            op("segment.bytes", OP_DELETE, None),
        ])
        .expect("accepted");
        assert_eq!(
            alter,
            NativeAlter {
                set: [("retention_ms", "600000".to_string())].into(),
                unset: vec!["segment_bytes"],
            }
        );
    }

    #[test]
    fn incremental_refusals_name_the_config() {
        let refused = |configs: &[Incremental]| incremental(configs).expect_err("refused");
        let (code, why) = refused(&[op("cleanup.policy", OP_SET, Some("shred"))]);
        assert_eq!(code, K::InvalidConfig.code());
        assert!(why.contains("cleanup.policy"), "{why}");
        let (code, why) = refused(&[op("cleanup.policy", OP_APPEND, Some("compact"))]);
        assert_eq!(code, K::InvalidConfig.code());
        assert!(why.contains("SET the whole list"), "{why}");
        let (code, why) = refused(&[op("retention.ms", OP_APPEND, Some("1"))]);
        assert_eq!(code, K::InvalidConfig.code());
        assert!(why.contains("not a list"), "{why}");
        let (_, why) = refused(&[op("flux", OP_SUBTRACT, Some("1"))]);
        assert!(why.contains("unknown config flux"), "{why}");
        let (_, why) = refused(&[op("flux", OP_SET, Some("1"))]);
        assert!(why.contains("unknown config flux"), "{why}");
        let (code, _) = refused(&[op("retention.ms", 9, Some("1"))]);
        assert_eq!(code, K::InvalidRequest.code());
        let (code, _) = refused(&[
            op("retention.ms", OP_SET, Some("1")),
            op("retention.ms", OP_DELETE, None),
        ]);
        assert_eq!(code, K::InvalidRequest.code());
        let (_, why) = refused(&[op("retention.ms", OP_SET, None)]);
        assert!(why.contains("value is required"), "{why}");
    }

    #[test]
    fn a_replacement_resets_what_it_leaves_out_but_the_flush_policy() {
        let config = alter_configs_request::AlterableConfig::default()
            .with_name(text("retention.bytes"))
            .with_value(Some(text("4096")));
        let alter = replacement(&[config]).expect("accepted");
        assert_eq!(alter.set, [("retention_bytes", "4096".to_string())].into());
        assert!(alter.unset.contains(&"retention_ms"));
        assert!(alter.unset.contains(&tinymq_meta::MIN_INSYNC_REPLICAS));
        assert!(alter.unset.contains(&tinymq_meta::CLEANUP_POLICY));
        assert!(!alter.unset.contains(&"retention_bytes"));
        assert!(!alter.unset.contains(&tinymq_meta::image::FLUSH));
    }
}
