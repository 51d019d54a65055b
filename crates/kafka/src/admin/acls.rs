//! CreateAcls, DescribeAcls and DeleteAcls (v1..=3) as tinymq's own ACLs (the native
//! `CreateAcls`, `ListAcls`, `DeleteAcls`, each needing the cluster permission the native call
//! needs), so `kafka-acls.sh` manages the same ACLs `tinymq acl` does.
//!
//! What maps and what does not:
//! - resources: topics, groups, transactional ids and the cluster (Kafka's `kafka-cluster` is
//!   tinymq's `cluster`); delegation tokens and users are refused.
//! - patterns: literal and prefixed. A filter may also say ANY or MATCH (the ACLs that would
//!   apply to the name given: literal equal or `*`, or a prefix of it), as Kafka's do.
//! - operations: READ, WRITE, CREATE, DELETE, ALTER and DESCRIBE; DESCRIBE_CONFIGS is tinymq's
//!   DESCRIBE and ALTER_CONFIGS its ALTER (the permissions its config requests need); ALL is
//!   stored as the six, and described as them. A filter's ALL matches any of them. On the
//!   cluster, DESCRIBE_CONFIGS and ALTER_CONFIGS are refused: tinymq's DESCRIBE and ALTER on
//!   the cluster are what ACL and user administration need.
//!   IDEMPOTENT_WRITE, CLUSTER_ACTION and the token operations are refused: tinymq's
//!   idempotent produce needs WRITE on the topic only.
//! - hosts: tinymq's ACLs have none; only `*` is accepted, and every ACL is described with it.
//!
//! Filters are applied here with Kafka's rules over the whole list (read once per request), and
//! a delete removes each matching ACL with a filter that names it exactly.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use tinymq_protocol::{messages as m, OpCode};

use super::{text, too_many_entries};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

// Kafka's `ResourceType`, `PatternType`, `AclOperation` and `AclPermissionType` codes.
const RESOURCE_ANY: i8 = 1;
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_GROUP: i8 = 3;
const RESOURCE_CLUSTER: i8 = 4;
const RESOURCE_TRANSACTIONAL_ID: i8 = 5;
const PATTERN_ANY: i8 = 1;
const PATTERN_MATCH: i8 = 2;
const PATTERN_LITERAL: i8 = 3;
const PATTERN_PREFIXED: i8 = 4;
const OP_ANY: i8 = 1;
const OP_ALL: i8 = 2;
const OP_READ: i8 = 3;
const OP_WRITE: i8 = 4;
const OP_CREATE: i8 = 5;
const OP_DELETE: i8 = 6;
const OP_ALTER: i8 = 7;
const OP_DESCRIBE: i8 = 8;
const OP_DESCRIBE_CONFIGS: i8 = 10;
const OP_ALTER_CONFIGS: i8 = 11;
const PERMISSION_ANY: i8 = 1;
const PERMISSION_DENY: i8 = 2;
const PERMISSION_ALLOW: i8 = 3;

/// Kafka's name of the cluster resource, and tinymq's.
const KAFKA_CLUSTER: &str = "kafka-cluster";
const NATIVE_CLUSTER: &str = "cluster";
/// The only host tinymq's ACLs have: any.
const ANY_HOST: &str = "*";

/// (Kafka, native) resource types.
const RESOURCES: &[(i8, m::ResourceType)] = &[
    (RESOURCE_TOPIC, m::ResourceType::Topic),
    (RESOURCE_GROUP, m::ResourceType::Group),
    (RESOURCE_CLUSTER, m::ResourceType::Cluster),
    (RESOURCE_TRANSACTIONAL_ID, m::ResourceType::TransactionalId),
];
/// (Kafka, native) operations, the native ones first in Kafka's name.
const OPERATIONS: &[(i8, m::AclOperation)] = &[
    (OP_READ, m::AclOperation::Read),
    (OP_WRITE, m::AclOperation::Write),
    (OP_CREATE, m::AclOperation::Create),
    (OP_DELETE, m::AclOperation::Delete),
    (OP_ALTER, m::AclOperation::Alter),
    (OP_DESCRIBE, m::AclOperation::Describe),
    (OP_DESCRIBE_CONFIGS, m::AclOperation::Describe),
    (OP_ALTER_CONFIGS, m::AclOperation::Alter),
];
/// What Kafka's ALL stands for.
const ALL_NATIVE: &[m::AclOperation] = &[
    m::AclOperation::Read,
    m::AclOperation::Write,
    m::AclOperation::Create,
    m::AclOperation::Delete,
    m::AclOperation::Alter,
    m::AclOperation::Describe,
];

type Refused = (i16, String);

fn invalid(why: String) -> Refused {
    (K::InvalidRequest.code(), why)
}

fn native_resource(kafka: i8) -> Result<m::ResourceType, Refused> {
    RESOURCES
        .iter()
        .find(|(k, _)| *k == kafka)
        .map(|(_, n)| *n)
        .ok_or_else(|| {
            invalid(format!(
                "resource type {kafka}: tinymq's ACLs are on topics (2), groups (3), the cluster (4) and transactional ids (5)"
            ))
        })
}

fn kafka_resource(native: i32) -> i8 {
    RESOURCES
        .iter()
        .find(|(_, n)| *n as i32 == native)
        .map_or(0, |(k, _)| *k)
}

fn native_name(resource: m::ResourceType, name: &str) -> String {
    if resource == m::ResourceType::Cluster && name == KAFKA_CLUSTER {
        NATIVE_CLUSTER.into()
    } else {
        name.into()
    }
}

fn kafka_name(resource: i32, name: &str) -> String {
    if resource == m::ResourceType::Cluster as i32 && name == NATIVE_CLUSTER {
        KAFKA_CLUSTER.into()
    } else {
        name.into()
    }
}

/// The native operations one Kafka operation of an ACL stands for.
fn native_operations(kafka: i8) -> Result<Vec<m::AclOperation>, Refused> {
    if kafka == OP_ALL {
        return Ok(ALL_NATIVE.to_vec());
    }
    OPERATIONS
        .iter()
        .find(|(k, _)| *k == kafka)
        .map(|(_, n)| vec![*n])
        .ok_or_else(|| {
            invalid(format!(
                "operation {kafka}: tinymq's ACLs grant ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS (idempotent produce needs WRITE on the topic)"
            ))
        })
}

fn kafka_operation(native: i32) -> i8 {
    OPERATIONS
        .iter()
        .find(|(_, n)| *n as i32 == native)
        .map_or(0, |(k, _)| *k)
}

fn native_permission(kafka: i8) -> Result<m::AclPermission, Refused> {
    match kafka {
        PERMISSION_ALLOW => Ok(m::AclPermission::Allow),
        PERMISSION_DENY => Ok(m::AclPermission::Deny),
        other => Err(invalid(format!(
            "permission type {other}: ALLOW (3) or DENY (2)"
        ))),
    }
}

fn kafka_permission(native: i32) -> i8 {
    if native == m::AclPermission::Deny as i32 {
        PERMISSION_DENY
    } else {
        PERMISSION_ALLOW
    }
}

fn native_pattern(kafka: i8) -> Result<m::PatternType, Refused> {
    match kafka {
        PATTERN_LITERAL => Ok(m::PatternType::Literal),
        PATTERN_PREFIXED => Ok(m::PatternType::Prefixed),
        other => Err(invalid(format!(
            "pattern type {other}: an ACL is LITERAL (3) or PREFIXED (4)"
        ))),
    }
}

fn kafka_pattern(native: i32) -> i8 {
    if native == m::PatternType::Prefixed as i32 {
        PATTERN_PREFIXED
    } else {
        PATTERN_LITERAL
    }
}

fn check_host(host: &str) -> Result<(), Refused> {
    if host == ANY_HOST {
        Ok(())
    } else {
        Err(invalid(format!(
            "host {host:?}: tinymq's ACLs apply from any host; only \"*\" is accepted"
        )))
    }
}

/// The native ACLs one Kafka creation stands for.
fn native_acls(c: &create_acls_request::AclCreation) -> Result<Vec<m::Acl>, Refused> {
    check_host(c.host.as_str())?;
    let resource = native_resource(c.resource_type)?;
    let pattern = native_pattern(c.resource_pattern_type)?;
    let permission = native_permission(c.permission_type)?;
    let name = native_name(resource, c.resource_name.as_str());
    // On the cluster, tinymq's ALTER and DESCRIBE are what ACL and user administration need:
    // Kafka's config operations there would grant far more than configs.
    if resource == m::ResourceType::Cluster
        && [OP_ALTER_CONFIGS, OP_DESCRIBE_CONFIGS].contains(&c.operation)
    {
        return Err(invalid(format!(
            "operation {} on the cluster: tinymq's broker configs are not changed through ACLs (grant ALTER or DESCRIBE on the cluster for administration)",
            c.operation
        )));
    }
    Ok(native_operations(c.operation)?
        .into_iter()
        .map(|operation| m::Acl {
            principal: c.principal.to_string(),
            resource_type: resource as i32,
            resource_name: name.clone(),
            pattern_type: pattern as i32,
            operation: operation as i32,
            permission: permission as i32,
        })
        .collect())
}

/// A Kafka ACL filter (DescribeAcls' fields, or one of DeleteAcls' filters).
#[derive(Debug, Clone)]
struct Filter {
    resource_type: i8,
    name: Option<String>,
    pattern_type: i8,
    principal: Option<String>,
    host: Option<String>,
    operation: i8,
    permission: i8,
}

impl Filter {
    /// Refuses a filter no ACL could match for a reason the caller should hear of.
    fn check(&self) -> Result<(), Refused> {
        if self.resource_type != RESOURCE_ANY {
            native_resource(self.resource_type)?;
        }
        if ![
            PATTERN_ANY,
            PATTERN_MATCH,
            PATTERN_LITERAL,
            PATTERN_PREFIXED,
        ]
        .contains(&self.pattern_type)
        {
            return Err(invalid(format!(
                "pattern type filter {}: ANY, MATCH, LITERAL or PREFIXED",
                self.pattern_type
            )));
        }
        if ![OP_ANY, OP_ALL].contains(&self.operation) {
            native_operations(self.operation)?;
        }
        if self.permission != PERMISSION_ANY {
            native_permission(self.permission)?;
        }
        Ok(())
    }

    fn matches(&self, acl: &m::Acl) -> bool {
        let resource_ok = self.resource_type == RESOURCE_ANY
            || kafka_resource(acl.resource_type) == self.resource_type;
        let principal_ok = self.principal.as_ref().is_none_or(|p| *p == acl.principal);
        // Every tinymq ACL applies from any host.
        let host_ok = self.host.as_ref().is_none_or(|h| h == ANY_HOST);
        let operation_ok = match self.operation {
            OP_ANY | OP_ALL => true,
            op => native_operations(op)
                .is_ok_and(|ops| ops.iter().any(|o| *o as i32 == acl.operation)),
        };
        let permission_ok = self.permission == PERMISSION_ANY
            || kafka_permission(acl.permission) == self.permission;
        resource_ok
            && principal_ok
            && host_ok
            && operation_ok
            && permission_ok
            && self.pattern_matches(acl)
    }

    fn pattern_matches(&self, acl: &m::Acl) -> bool {
        let acl_name = kafka_name(acl.resource_type, &acl.resource_name);
        let acl_pattern = kafka_pattern(acl.pattern_type);
        match self.pattern_type {
            PATTERN_MATCH => {
                let Some(name) = &self.name else { return true };
                match acl_pattern {
                    PATTERN_PREFIXED => name.starts_with(&acl_name),
                    _ => acl_name == *name || acl_name == "*",
                }
            }
            PATTERN_ANY => self.name.as_ref().is_none_or(|n| *n == acl_name),
            wanted => acl_pattern == wanted && self.name.as_ref().is_none_or(|n| *n == acl_name),
        }
    }
}

fn describe_filter(r: &DescribeAclsRequest) -> Filter {
    Filter {
        resource_type: r.resource_type_filter,
        name: r.resource_name_filter.as_ref().map(|s| s.to_string()),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref().map(|s| s.to_string()),
        host: r.host_filter.as_ref().map(|s| s.to_string()),
        operation: r.operation,
        permission: r.permission_type,
    }
}

fn delete_filter(f: &DeleteAclsFilter) -> Filter {
    Filter {
        resource_type: f.resource_type_filter,
        name: f.resource_name_filter.as_ref().map(|s| s.to_string()),
        pattern_type: f.pattern_type_filter,
        principal: f.principal_filter.as_ref().map(|s| s.to_string()),
        host: f.host_filter.as_ref().map(|s| s.to_string()),
        operation: f.operation,
        permission: f.permission_type,
    }
}

fn cluster_refusal(error: &m::Error) -> Refused {
    (
        kafka_code_for(Some(error), Resource::Cluster),
        error.message.clone(),
    )
}

/// Every ACL, from the native list.
async fn all_acls(ctx: &Ctx) -> Result<Vec<m::Acl>, Refused> {
    let request = m::ListAclsRequest { filter: None };
    match ctx
        .call::<_, m::ListAclsResponse>(OpCode::ListAcls, &request)
        .await
    {
        Ok(r) => match r.error {
            None => Ok(r.acls),
            Some(e) => Err(cluster_refusal(&e)),
        },
        Err(e) => Err(cluster_refusal(&e)),
    }
}

pub(crate) async fn create_acls(
    ctx: Arc<Ctx>,
    _version: i16,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    let mut results = Vec::with_capacity(request.creations.len());
    let too_many = too_many_entries(request.creations.len());
    for creation in &request.creations {
        let outcome = match too_many.clone().map_or_else(|| native_acls(creation), Err) {
            Ok(acls) => {
                let request = m::CreateAclsRequest { acls };
                match ctx
                    .call::<_, m::CreateAclsResponse>(OpCode::CreateAcls, &request)
                    .await
                {
                    Ok(r) => r.error.map_or(Ok(()), |e| Err(cluster_refusal(&e))),
                    Err(e) => Err(cluster_refusal(&e)),
                }
            }
            Err(refused) => Err(refused),
        };
        let (code, message) = match outcome {
            Ok(()) => (0, None),
            Err((code, why)) => (code, Some(text(why))),
        };
        results.push(
            AclCreationResult::default()
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    CreateAclsResponse::default().with_results(results)
}

pub(crate) async fn describe_acls(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let filter = describe_filter(&request);
    let found = match filter.check() {
        Ok(()) => all_acls(&ctx).await,
        Err(refused) => Err(refused),
    };
    let acls = match found {
        Ok(acls) => acls,
        Err((code, why)) => {
            return DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(text(why)))
        }
    };
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for acl in acls.iter().filter(|a| filter.matches(a)) {
        let resource_type = kafka_resource(acl.resource_type);
        let name = kafka_name(acl.resource_type, &acl.resource_name);
        let pattern = kafka_pattern(acl.pattern_type);
        let description = AclDescription::default()
            .with_principal(text(acl.principal.clone()))
            .with_host(text(ANY_HOST))
            .with_operation(kafka_operation(acl.operation))
            .with_permission_type(kafka_permission(acl.permission));
        match resources.iter_mut().find(|r| {
            r.resource_type == resource_type
                && r.resource_name.as_str() == name
                && r.pattern_type == pattern
        }) {
            Some(resource) => resource.acls.push(description),
            None => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(text(name))
                    .with_pattern_type(pattern)
                    .with_acls(vec![description]),
            ),
        }
    }
    DescribeAclsResponse::default().with_resources(resources)
}

/// A native filter that matches exactly this ACL.
fn exact(acl: &m::Acl) -> m::AclFilter {
    m::AclFilter {
        principal: acl.principal.clone(),
        resource_type: acl.resource_type,
        resource_name: acl.resource_name.clone(),
        pattern_type: Some(acl.pattern_type),
        operation: acl.operation,
        permission: Some(acl.permission),
    }
}

fn matching(acl: &m::Acl, error: Option<Refused>) -> DeleteAclsMatchingAcl {
    let (code, message) = match error {
        None => (0, None),
        Some((code, why)) => (code, Some(text(why))),
    };
    DeleteAclsMatchingAcl::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_resource_type(kafka_resource(acl.resource_type))
        .with_resource_name(text(kafka_name(acl.resource_type, &acl.resource_name)))
        .with_pattern_type(kafka_pattern(acl.pattern_type))
        .with_principal(text(acl.principal.clone()))
        .with_host(text(ANY_HOST))
        .with_operation(kafka_operation(acl.operation))
        .with_permission_type(kafka_permission(acl.permission))
}

async fn delete_one(ctx: &Ctx, acl: &m::Acl) -> Option<Refused> {
    let request = m::DeleteAclsRequest {
        filter: Some(exact(acl)),
    };
    match ctx
        .call::<_, m::DeleteAclsResponse>(OpCode::DeleteAcls, &request)
        .await
    {
        Ok(r) => r.error.map(|e| cluster_refusal(&e)),
        Err(e) => Some(cluster_refusal(&e)),
    }
}

pub(crate) async fn delete_acls(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let filters: Vec<Filter> = request.filters.iter().map(delete_filter).collect();
    let refused = |(code, why): Refused| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(text(why)))
    };
    // Each filter checked, then the list read once for all of them: an ACL one filter
    // deleted is not matched again by the next.
    let checks: Vec<Result<(), Refused>> = match too_many_entries(filters.len()) {
        Some(too_many) => filters.iter().map(|_| Err(too_many.clone())).collect(),
        None => filters.iter().map(Filter::check).collect(),
    };
    let mut list = if checks.iter().any(Result::is_ok) {
        all_acls(&ctx).await
    } else {
        Ok(Vec::new())
    };
    let mut results = Vec::with_capacity(filters.len());
    for (filter, check) in filters.iter().zip(checks) {
        let acls = match (check, &mut list) {
            (Err(e), _) => {
                results.push(refused(e));
                continue;
            }
            (Ok(()), Err(e)) => {
                results.push(refused(e.clone()));
                continue;
            }
            (Ok(()), Ok(acls)) => acls,
        };
        let (hits, kept): (Vec<m::Acl>, Vec<m::Acl>) = std::mem::take(acls)
            .into_iter()
            .partition(|a| filter.matches(a));
        *acls = kept;
        let mut matched = Vec::with_capacity(hits.len());
        for acl in &hits {
            let failed = delete_one(&ctx, acl).await;
            matched.push(matching(acl, failed));
        }
        results.push(DeleteAclsFilterResult::default().with_matching_acls(matched));
    }
    DeleteAclsResponse::default().with_filter_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creation(
        resource: i8,
        name: &str,
        pattern: i8,
        operation: i8,
    ) -> create_acls_request::AclCreation {
        create_acls_request::AclCreation::default()
            .with_resource_type(resource)
            .with_resource_name(text(name))
            .with_resource_pattern_type(pattern)
            .with_principal(text("User:alice"))
            .with_host(text("*"))
            .with_operation(operation)
            .with_permission_type(PERMISSION_ALLOW)
    }

    fn filter(resource: i8, name: Option<&str>, pattern: i8, operation: i8) -> Filter {
        Filter {
            resource_type: resource,
            name: name.map(str::to_string),
            pattern_type: pattern,
            principal: None,
            host: None,
            operation,
            permission: PERMISSION_ANY,
        }
    }

    #[test]
    fn creations_map_onto_native_acls() {
        let acls = native_acls(&creation(
            RESOURCE_TOPIC,
            "orders",
            PATTERN_LITERAL,
            OP_READ,
        ))
        .unwrap();
        assert_eq!(
            acls,
            vec![m::Acl {
                principal: "User:alice".into(),
                resource_type: m::ResourceType::Topic as i32,
                resource_name: "orders".into(),
                pattern_type: m::PatternType::Literal as i32,
                operation: m::AclOperation::Read as i32,
                permission: m::AclPermission::Allow as i32,
            }]
        );
        let all = native_acls(&creation(
            RESOURCE_CLUSTER,
            KAFKA_CLUSTER,
            PATTERN_LITERAL,
            OP_ALL,
        ))
        .unwrap();
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|a| a.resource_name == NATIVE_CLUSTER));
        let configs = native_acls(&creation(
            RESOURCE_TOPIC,
            "t",
            PATTERN_PREFIXED,
            OP_ALTER_CONFIGS,
        ))
        .unwrap();
        assert_eq!(configs[0].operation, m::AclOperation::Alter as i32);
    }

    #[test]
    fn what_tinymq_cannot_store_is_refused_with_the_reason() {
        let refused = |c: create_acls_request::AclCreation| native_acls(&c).unwrap_err().1;
        assert!(refused(creation(7, "bob", PATTERN_LITERAL, OP_READ)).contains("resource type 7"));
        assert!(refused(creation(RESOURCE_TOPIC, "t", PATTERN_MATCH, OP_READ)).contains("LITERAL"));
        assert!(refused(creation(
            RESOURCE_CLUSTER,
            KAFKA_CLUSTER,
            PATTERN_LITERAL,
            12
        ))
        .contains("idempotent"));
        let configs_on_cluster = creation(
            RESOURCE_CLUSTER,
            KAFKA_CLUSTER,
            PATTERN_LITERAL,
            OP_ALTER_CONFIGS,
        );
        assert!(refused(configs_on_cluster).contains("on the cluster"));
        let from_host =
            creation(RESOURCE_TOPIC, "t", PATTERN_LITERAL, OP_READ).with_host(text("10.0.0.1"));
        assert!(refused(from_host).contains("any host"));
        assert!(filter(RESOURCE_TOPIC, None, 9, OP_ANY).check().is_err());
        assert!(filter(RESOURCE_ANY, None, PATTERN_ANY, OP_ANY)
            .check()
            .is_ok());
    }

    #[test]
    fn filters_follow_kafkas_rules() {
        let acl = |name: &str, pattern: m::PatternType, op: m::AclOperation| m::Acl {
            principal: "User:alice".into(),
            resource_type: m::ResourceType::Topic as i32,
            resource_name: name.into(),
            pattern_type: pattern as i32,
            operation: op as i32,
            permission: m::AclPermission::Allow as i32,
        };
        let literal = acl("orders", m::PatternType::Literal, m::AclOperation::Read);
        let wildcard = acl("*", m::PatternType::Literal, m::AclOperation::Write);
        let prefixed = acl("ord", m::PatternType::Prefixed, m::AclOperation::Describe);
        let all = [&literal, &wildcard, &prefixed];
        let hits = |f: Filter| all.iter().filter(|a| f.matches(a)).count();
        assert_eq!(hits(filter(RESOURCE_ANY, None, PATTERN_ANY, OP_ANY)), 3);
        assert_eq!(
            hits(filter(
                RESOURCE_TOPIC,
                Some("orders"),
                PATTERN_MATCH,
                OP_ANY
            )),
            3
        );
        assert_eq!(
            hits(filter(
                RESOURCE_TOPIC,
                Some("orders"),
                PATTERN_LITERAL,
                OP_ANY
            )),
            1
        );
        assert_eq!(
            hits(filter(
                RESOURCE_TOPIC,
                Some("ord"),
                PATTERN_PREFIXED,
                OP_ANY
            )),
            1
        );
        assert_eq!(
            hits(filter(RESOURCE_TOPIC, Some("orders"), PATTERN_ANY, OP_ANY)),
            1
        );
        assert_eq!(hits(filter(RESOURCE_GROUP, None, PATTERN_ANY, OP_ANY)), 0);
        assert_eq!(
            hits(filter(RESOURCE_ANY, None, PATTERN_ANY, OP_DESCRIBE_CONFIGS)),
            1
        );
        let mut from_elsewhere = filter(RESOURCE_ANY, None, PATTERN_ANY, OP_ANY);
        from_elsewhere.host = Some("10.0.0.1".into());
        assert_eq!(hits(from_elsewhere), 0);
    }
}
