//! DescribeClientQuotas (v0..=1) and AlterClientQuotas (v0..=1) as the native quota
//! operations (ListQuotas, SetQuota), so the MetaServer's checks and the ACLs (DESCRIBE, ALTER
//! on the cluster) are the native port's. What `kafka-configs --entity-type users` sends.
//!
//! tinymq's quotas are per user: an entity is one `user` component, named (`User:NAME`) or
//! the default (`<default>`, every user without a quota of its own). Client-id and IP
//! entities are refused. Two Kafka keys map onto native rates: `producer_byte_rate` (the
//! native `produce_bytes_per_sec`) and `consumer_byte_rate` (`fetch_bytes_per_sec`); the
//! native `requests_per_sec` has no Kafka key (Kafka's `request_percentage` is a share of
//! broker threads, which tinymq does not meter) and is kept as it is by an alteration. An
//! alteration is the MetaServer's `AlterQuota`, applied to its own image (a broker's may be
//! behind), after the ALTER check here.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::alter_client_quotas_request::EntryData as AlterEntry;
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_auth::{AclOperation, QUOTA_DEFAULT_PRINCIPAL};
use tinymq_meta::authorize::Permission;
use tinymq_meta::security_ops::SETTLE_WAIT;
use tinymq_meta::{Command, MetadataImage};
use tinymq_protocol::{messages as m, OpCode};

use super::{text, too_many_entries};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

const ENTITY_USER: &str = "user";
const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;
/// The largest rate a Kafka value may set: integers above 2^53 do not survive an f64.
const RATE_MAX: f64 = 9_007_199_254_740_992.0;

type Refused = (i16, String);

fn invalid(why: impl Into<String>) -> Refused {
    (K::InvalidRequest.code(), why.into())
}

/// The native principal key of a Kafka user entity (`None`: the default user).
fn principal_of(user: Option<&str>) -> String {
    match user {
        None => QUOTA_DEFAULT_PRINCIPAL.to_string(),
        Some(name) => format!("User:{name}"),
    }
}

/// The Kafka user entity of a native principal key.
fn user_of(principal: &str) -> Option<Option<String>> {
    if principal == QUOTA_DEFAULT_PRINCIPAL {
        return Some(None);
    }
    principal.strip_prefix("User:").map(|n| Some(n.to_string()))
}

pub(crate) async fn describe_client_quotas(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let listed = ctx
        .call::<_, m::ListQuotasResponse>(OpCode::ListQuotas, &m::ListQuotasRequest {})
        .await;
    let quotas = match listed {
        Ok(m::ListQuotasResponse {
            error: None,
            quotas,
        }) => quotas,
        Ok(m::ListQuotasResponse { error: Some(e), .. }) | Err(e) => {
            return DescribeClientQuotasResponse::default()
                .with_error_code(kafka_code_for(Some(&e), Resource::Cluster))
                .with_error_message(Some(text(e.message)));
        }
    };
    let checked = too_many_entries(request.components.len())
        .map_or_else(|| check_filter(&request.components), Err);
    if let Err((code, why)) = checked {
        return DescribeClientQuotasResponse::default()
            .with_error_code(code)
            .with_error_message(Some(text(why)));
    }
    let entries = quotas
        .iter()
        .filter_map(|q| Some((user_of(&q.principal)?, q)))
        .filter(|(user, _)| matches(&request.components, request.strict, user.as_deref()))
        .map(|(user, q)| {
            let entity = EntityData::default()
                .with_entity_type(StrBytes::from_static_str(ENTITY_USER))
                .with_entity_name(user.map(text));
            let value = |key: &'static str, rate: u64| {
                (rate > 0).then(|| {
                    ValueData::default()
                        .with_key(StrBytes::from_static_str(key))
                        .with_value(rate as f64)
                })
            };
            let values = [
                value(PRODUCER_BYTE_RATE, q.produce_bytes_per_sec),
                value(CONSUMER_BYTE_RATE, q.fetch_bytes_per_sec),
            ];
            EntryData::default()
                .with_entity(vec![entity])
                .with_values(values.into_iter().flatten().collect())
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// Refuses a filter component of an unknown match type, or an exact match without a name.
fn check_filter(components: &[ComponentData]) -> Result<(), Refused> {
    for c in components {
        match (c.match_type, &c._match) {
            (MATCH_EXACT, None) => return Err(invalid("an exact match needs a name")),
            (MATCH_EXACT | MATCH_DEFAULT | MATCH_SPECIFIED, _) => {}
            (other, _) => return Err(invalid(format!("unknown match type {other}"))),
        }
    }
    Ok(())
}

/// Whether the user entity `user` (`None`: the default) passes the filter: every component
/// must match one of the entity's (it has only `user`); `strict` also wants no entity
/// component left unfiltered.
fn matches(components: &[ComponentData], strict: bool, user: Option<&str>) -> bool {
    let all_match = components.iter().all(|c| {
        c.entity_type.as_str() == ENTITY_USER
            && match c.match_type {
                MATCH_EXACT => user.is_some() && c._match.as_deref() == user,
                MATCH_DEFAULT => user.is_none(),
                _ => user.is_some(),
            }
    });
    let user_filtered = components
        .iter()
        .any(|c| c.entity_type.as_str() == ENTITY_USER);
    all_match && (!strict || user_filtered)
}

pub(crate) async fn alter_client_quotas(
    ctx: Arc<Ctx>,
    _version: i16,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let up_front = too_many_entries(request.entries.len()).or_else(|| {
        let cluster = Permission::cluster(AclOperation::Alter);
        let refused = ctx.state().check_permission(&ctx.peer.principal, cluster);
        let refused = refused.err()?;
        let code = kafka_code_for(Some(&refused), Resource::Cluster);
        Some((code, refused.message))
    });
    let mut entries = Vec::with_capacity(request.entries.len());
    for entry in &request.entries {
        let outcome = match &up_front {
            Some(refused) => Err(refused.clone()),
            None => alter_entry(&ctx, entry, request.validate_only).await,
        };
        let entity = entry
            .entity
            .iter()
            .map(|e| {
                AlteredEntity::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let answer = AlteredEntry::default().with_entity(entity);
        entries.push(match outcome {
            Ok(()) => answer,
            Err((code, why)) => answer
                .with_error_code(code)
                .with_error_message(Some(text(why))),
        });
    }
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// Checks one entry and, unless `validate_only`, applies its operations on the MetaServer
/// (`AlterQuota`, against its own image, so that concurrent changes of other rates through
/// other brokers are kept), then waits until this broker's image shows them.
async fn alter_entry(ctx: &Ctx, entry: &AlterEntry, validate_only: bool) -> Result<(), Refused> {
    let principal = entity_principal(entry)?;
    tinymq_auth::quota::check_quota_principal(&principal).map_err(|e| invalid(e.to_string()))?;
    let rates = rates_of(entry)?;
    if validate_only || rates == Rates::default() {
        return Ok(());
    }
    let command = Command::AlterQuota {
        principal: principal.clone(),
        produce_bytes_per_sec: rates.produce,
        fetch_bytes_per_sec: rates.fetch,
    };
    let cluster = &ctx.state().cluster;
    if let Err(e) = cluster.write(command).await {
        return Err((kafka_code_for(Some(&e), Resource::Cluster), e.message));
    }
    let applied = |image: &MetadataImage| {
        let now = image.quotas.get(&principal).copied().unwrap_or_default();
        rates.produce.is_none_or(|r| now.produce_bytes_per_sec == r)
            && rates.fetch.is_none_or(|r| now.fetch_bytes_per_sec == r)
    };
    cluster.wait_until(SETTLE_WAIT, applied).await;
    Ok(())
}

/// The native principal key of an entry's entity: one `user` component.
fn entity_principal(entry: &AlterEntry) -> Result<String, Refused> {
    match entry.entity.as_slice() {
        [only] if only.entity_type.as_str() == ENTITY_USER => {
            Ok(principal_of(only.entity_name.as_deref()))
        }
        _ => {
            let types: Vec<&str> = entry
                .entity
                .iter()
                .map(|e| e.entity_type.as_str())
                .collect();
            Err(invalid(format!(
                "tinymq's quotas are per user: an entity is one 'user' component, not {types:?} \
                 (client-id and ip quotas are not supported)"
            )))
        }
    }
}

/// The rates an entry changes: `Some(0)` removes a rate (no limit), `None` keeps it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Rates {
    produce: Option<u64>,
    fetch: Option<u64>,
}

/// An entry's operations as the rates they set.
fn rates_of(entry: &AlterEntry) -> Result<Rates, Refused> {
    let mut rates = Rates::default();
    for op in &entry.ops {
        let rate = if op.remove {
            0
        } else {
            rate_of(op.key.as_str(), op.value)?
        };
        match op.key.as_str() {
            PRODUCER_BYTE_RATE => rates.produce = Some(rate),
            CONSUMER_BYTE_RATE => rates.fetch = Some(rate),
            other => {
                return Err(invalid(format!(
                    "unknown quota key '{other}': tinymq takes {PRODUCER_BYTE_RATE} and \
                     {CONSUMER_BYTE_RATE} (bytes per second on each broker)"
                )))
            }
        }
    }
    Ok(rates)
}

/// A rate in bytes per second: a whole number from 1 to 2^53.
fn rate_of(key: &str, value: f64) -> Result<u64, Refused> {
    if !(1.0..=RATE_MAX).contains(&value) || value.fract() != 0.0 {
        return Err((
            K::InvalidRequest.code(),
            format!("{key} = {value}: a rate is a whole number of bytes per second, 1 to 2^53"),
        ));
    }
    Ok(value as u64)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, OpData};

    use super::*;

    fn op(key: &'static str, value: f64, remove: bool) -> OpData {
        OpData::default()
            .with_key(StrBytes::from_static_str(key))
            .with_value(value)
            .with_remove(remove)
    }

    fn user_entry(name: Option<&'static str>, ops: Vec<OpData>) -> AlterEntry {
        let entity = EntityData::default()
            .with_entity_type(StrBytes::from_static_str(ENTITY_USER))
            .with_entity_name(name.map(StrBytes::from_static_str));
        AlterEntry::default()
            .with_entity(vec![entity])
            .with_ops(ops)
    }

    #[test]
    fn operations_set_or_remove_only_their_own_rate() {
        let entry = user_entry(
            Some("alice"),
            vec![
                op(PRODUCER_BYTE_RATE, 1024.0, false),
                op(CONSUMER_BYTE_RATE, 0.0, true),
            ],
        );
        let rates = rates_of(&entry).expect("valid operations");
        assert_eq!(
            rates,
            Rates {
                produce: Some(1024),
                fetch: Some(0)
            }
        );
        let one = user_entry(None, vec![op(CONSUMER_BYTE_RATE, 7.0, false)]);
        assert_eq!(
            rates_of(&one).unwrap(),
            Rates {
                produce: None,
                fetch: Some(7)
            }
        );
        assert_eq!(entity_principal(&entry).unwrap(), "User:alice");
        assert_eq!(
            entity_principal(&user_entry(None, vec![])).unwrap(),
            "<default>"
        );
    }

    #[test]
    fn unknown_keys_bad_rates_and_other_entities_are_refused() {
        let refused = |entry: AlterEntry| rates_of(&entry).is_err();
        assert!(refused(user_entry(
            None,
            vec![op("request_percentage", 50.0, false)]
        )));
        assert!(refused(user_entry(
            None,
            vec![op(PRODUCER_BYTE_RATE, 0.5, false)]
        )));
        assert!(refused(user_entry(
            None,
            vec![op(PRODUCER_BYTE_RATE, -1.0, false)]
        )));
        assert!(refused(user_entry(
            None,
            vec![op(PRODUCER_BYTE_RATE, f64::NAN, false)]
        )));
        assert!(refused(user_entry(
            None,
            vec![op(PRODUCER_BYTE_RATE, 1e300, false)]
        )));
        let client = AlterEntry::default().with_entity(vec![EntityData::default()
            .with_entity_type(StrBytes::from_static_str("client-id"))
            .with_entity_name(Some(StrBytes::from_static_str("app")))]);
        assert!(entity_principal(&client).is_err());
    }

    #[test]
    fn filters_select_named_default_or_every_user() {
        let component = |match_type: i8, name: Option<&'static str>| {
            ComponentData::default()
                .with_entity_type(StrBytes::from_static_str(ENTITY_USER))
                .with_match_type(match_type)
                .with_match(name.map(StrBytes::from_static_str))
        };
        let exact = [component(MATCH_EXACT, Some("alice"))];
        assert!(matches(&exact, false, Some("alice")));
        assert!(!matches(&exact, false, Some("bob")));
        assert!(!matches(&exact, false, None));
        let default = [component(MATCH_DEFAULT, None)];
        assert!(matches(&default, true, None));
        assert!(!matches(&default, true, Some("alice")));
        let specified = [component(MATCH_SPECIFIED, None)];
        assert!(matches(&specified, false, Some("bob")));
        assert!(!matches(&specified, false, None));
        assert!(matches(&[], false, None), "no component: every entity");
        assert!(
            !matches(&[], true, None),
            "strict with no component: none of ours"
        );
        let client = [ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("client-id"))
            .with_match_type(MATCH_SPECIFIED)];
        assert!(!matches(&client, false, Some("alice")));
        assert!(check_filter(&[component(MATCH_EXACT, None)]).is_err());
        assert!(check_filter(&[component(7, None)]).is_err());
    }
}
