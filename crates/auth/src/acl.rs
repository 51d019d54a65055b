//! Access control: the ACL model ([`AclEntry`] and its parts), its wire form, [`AclFilter`]
//! (selecting ACLs to list or delete) and the [`Authorizer`] every dispatcher asks.
//!
//! Rules: default deny; a matching DENY wins over every ALLOW; an ALLOW of READ, WRITE,
//! DELETE or ALTER also allows DESCRIBE of the same resource; `User:*` names every
//! authenticated user (not `User:ANONYMOUS`); a literal resource name `*` matches every name;
//! a prefixed name matches every name that starts with it; nodes and super users are always
//! allowed.

use std::fmt;

use serde::{Deserialize, Serialize};
use tinymq_protocol::messages as m;

use crate::credential::truncated;
use crate::error::AuthError;
use crate::principal::{Principal, PrincipalKind};

/// The name of the one cluster resource.
pub const CLUSTER_RESOURCE_NAME: &str = "cluster";
/// Longest resource name an ACL may hold (the protocol's limit).
pub use tinymq_protocol::names::ACL_RESOURCE_NAME_BYTES_MAX;
/// The principal of an ACL that applies to every authenticated user.
pub const ANY_USER: &str = "User:*";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    /// As in messages: `topic`, `group`, `cluster`, `transactional-id`.
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "topic",
            ResourceType::Group => "group",
            ResourceType::Cluster => "cluster",
            ResourceType::TransactionalId => "transactional-id",
        }
    }

    pub fn to_wire(self) -> m::ResourceType {
        match self {
            ResourceType::Topic => m::ResourceType::Topic,
            ResourceType::Group => m::ResourceType::Group,
            ResourceType::Cluster => m::ResourceType::Cluster,
            ResourceType::TransactionalId => m::ResourceType::TransactionalId,
        }
    }

    /// `None` for UNSPECIFIED (a filter's "any").
    fn from_wire(v: i32) -> Result<Option<ResourceType>, AuthError> {
        match m::ResourceType::try_from(v) {
            Ok(m::ResourceType::Unspecified) => Ok(None),
            Ok(m::ResourceType::Topic) => Ok(Some(ResourceType::Topic)),
            Ok(m::ResourceType::Group) => Ok(Some(ResourceType::Group)),
            Ok(m::ResourceType::Cluster) => Ok(Some(ResourceType::Cluster)),
            Ok(m::ResourceType::TransactionalId) => Ok(Some(ResourceType::TransactionalId)),
            Err(_) => Err(AuthError::InvalidAcl(format!("unknown resource type {v}"))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }

    pub fn to_wire(self) -> m::PatternType {
        match self {
            PatternType::Literal => m::PatternType::Literal,
            PatternType::Prefixed => m::PatternType::Prefixed,
        }
    }

    fn from_wire(v: i32) -> Result<PatternType, AuthError> {
        match m::PatternType::try_from(v) {
            Ok(m::PatternType::Literal) => Ok(PatternType::Literal),
            Ok(m::PatternType::Prefixed) => Ok(PatternType::Prefixed),
            Err(_) => Err(AuthError::InvalidAcl(format!("unknown pattern type {v}"))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AclOperation {
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
}

impl AclOperation {
    pub const ALL: [AclOperation; 6] = [
        AclOperation::Read,
        AclOperation::Write,
        AclOperation::Create,
        AclOperation::Delete,
        AclOperation::Alter,
        AclOperation::Describe,
    ];

    /// `READ`, `WRITE`, ...
    pub fn name(self) -> &'static str {
        match self {
            AclOperation::Read => "READ",
            AclOperation::Write => "WRITE",
            AclOperation::Create => "CREATE",
            AclOperation::Delete => "DELETE",
            AclOperation::Alter => "ALTER",
            AclOperation::Describe => "DESCRIBE",
        }
    }

    /// Case-insensitive, for command lines.
    pub fn from_name(name: &str) -> Option<AclOperation> {
        AclOperation::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(name))
    }

    /// Whether an ALLOW of `self` allows `wanted`: itself, and DESCRIBE from READ, WRITE,
    /// DELETE and ALTER (who may use a resource may see it).
    pub fn implies(self, wanted: AclOperation) -> bool {
        self == wanted
            || (wanted == AclOperation::Describe
                && matches!(
                    self,
                    AclOperation::Read
                        | AclOperation::Write
                        | AclOperation::Delete
                        | AclOperation::Alter
                ))
    }

    pub fn to_wire(self) -> m::AclOperation {
        match self {
            AclOperation::Read => m::AclOperation::Read,
            AclOperation::Write => m::AclOperation::Write,
            AclOperation::Create => m::AclOperation::Create,
            AclOperation::Delete => m::AclOperation::Delete,
            AclOperation::Alter => m::AclOperation::Alter,
            AclOperation::Describe => m::AclOperation::Describe,
        }
    }

    /// `None` for UNSPECIFIED.
    fn from_wire(v: i32) -> Result<Option<AclOperation>, AuthError> {
        Ok(Some(match m::AclOperation::try_from(v) {
            Ok(m::AclOperation::Unspecified) => return Ok(None),
            Ok(m::AclOperation::Read) => AclOperation::Read,
            Ok(m::AclOperation::Write) => AclOperation::Write,
            Ok(m::AclOperation::Create) => AclOperation::Create,
            Ok(m::AclOperation::Delete) => AclOperation::Delete,
            Ok(m::AclOperation::Alter) => AclOperation::Alter,
            Ok(m::AclOperation::Describe) => AclOperation::Describe,
            Err(_) => return Err(AuthError::InvalidAcl(format!("unknown operation {v}"))),
        }))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AclPermission {
    Allow,
    Deny,
}

impl AclPermission {
    pub fn name(self) -> &'static str {
        match self {
            AclPermission::Allow => "ALLOW",
            AclPermission::Deny => "DENY",
        }
    }

    pub fn to_wire(self) -> m::AclPermission {
        match self {
            AclPermission::Allow => m::AclPermission::Allow,
            AclPermission::Deny => m::AclPermission::Deny,
        }
    }

    fn from_wire(v: i32) -> Result<AclPermission, AuthError> {
        match m::AclPermission::try_from(v) {
            Ok(m::AclPermission::Allow) => Ok(AclPermission::Allow),
            Ok(m::AclPermission::Deny) => Ok(AclPermission::Deny),
            Err(_) => Err(AuthError::InvalidAcl(format!("unknown permission {v}"))),
        }
    }
}

/// One rule: `permission` `principal` to do `operation` on resources of `resource_type` whose
/// name matches `resource_name` under `pattern_type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclEntry {
    /// `User:NAME` or `User:*`.
    pub principal: String,
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl AclEntry {
    pub fn to_wire(&self) -> m::Acl {
        m::Acl {
            principal: self.principal.clone(),
            resource_type: self.resource_type.to_wire() as i32,
            resource_name: self.resource_name.clone(),
            pattern_type: self.pattern_type.to_wire() as i32,
            operation: self.operation.to_wire() as i32,
            permission: self.permission.to_wire() as i32,
        }
    }

    /// Checks every field; see [`AclEntry::validate`].
    pub fn from_wire(a: &m::Acl) -> Result<AclEntry, AuthError> {
        let entry = AclEntry {
            principal: a.principal.clone(),
            resource_type: ResourceType::from_wire(a.resource_type)?
                .ok_or_else(|| AuthError::InvalidAcl("no resource type".into()))?,
            resource_name: a.resource_name.clone(),
            pattern_type: PatternType::from_wire(a.pattern_type)?,
            operation: AclOperation::from_wire(a.operation)?
                .ok_or_else(|| AuthError::InvalidAcl("no operation".into()))?,
            permission: AclPermission::from_wire(a.permission)?,
        };
        entry.validate()?;
        Ok(entry)
    }

    /// A `User:` principal (`User:*` allowed; nodes need no ACLs), a resource name of
    /// 1..=255 bytes, and for the cluster the literal name `cluster`.
    pub fn validate(&self) -> Result<(), AuthError> {
        let principal = Principal::parse(&self.principal)?;
        if principal.kind != PrincipalKind::User {
            return Err(AuthError::InvalidAcl(format!(
                "ACLs name users, not '{}': nodes are always allowed",
                truncated(&self.principal)
            )));
        }
        let name = &self.resource_name;
        if name.is_empty() || name.len() > ACL_RESOURCE_NAME_BYTES_MAX {
            return Err(AuthError::InvalidAcl(format!(
                "a resource name is 1..={ACL_RESOURCE_NAME_BYTES_MAX} bytes"
            )));
        }
        if self.resource_type == ResourceType::Cluster
            && (self.pattern_type != PatternType::Literal || name != CLUSTER_RESOURCE_NAME)
        {
            return Err(AuthError::InvalidAcl(format!(
                "the cluster resource is the literal name '{CLUSTER_RESOURCE_NAME}'"
            )));
        }
        Ok(())
    }

    fn matches_principal(&self, p: &Principal) -> bool {
        let own = self
            .principal
            .strip_prefix("User:")
            .is_some_and(|name| name == p.name);
        p.kind == PrincipalKind::User && (own || (self.principal == ANY_USER && !p.is_anonymous()))
    }

    fn matches_resource(&self, t: ResourceType, name: &str) -> bool {
        self.resource_type == t
            && match self.pattern_type {
                PatternType::Literal => self.resource_name == name || self.resource_name == "*",
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }
}

impl fmt::Display for AclEntry {
    /// E.g. `DENY User:bob WRITE topic PREFIXED 'ord'`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} '{}'",
            self.permission.name(),
            self.principal,
            self.operation.name(),
            self.resource_type.name(),
            self.pattern_type.name(),
            self.resource_name
        )
    }
}

/// Selects stored ACLs by their fields: each `None` matches anything. Unlike the
/// [`Authorizer`], it compares the stored pattern itself, so a filter on name `orders` does not
/// select a prefixed ACL `ord`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub principal: Option<String>,
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern_type: Option<PatternType>,
    pub operation: Option<AclOperation>,
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> AclFilter {
        AclFilter::default()
    }

    pub fn from_wire(f: &m::AclFilter) -> Result<AclFilter, AuthError> {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        if let Some(p) = non_empty(&f.principal) {
            Principal::parse(&p)?;
        }
        if f.resource_name.len() > ACL_RESOURCE_NAME_BYTES_MAX {
            return Err(AuthError::InvalidAcl("resource name too long".into()));
        }
        Ok(AclFilter {
            principal: non_empty(&f.principal),
            resource_type: ResourceType::from_wire(f.resource_type)?,
            resource_name: non_empty(&f.resource_name),
            pattern_type: f.pattern_type.map(PatternType::from_wire).transpose()?,
            operation: AclOperation::from_wire(f.operation)?,
            permission: f.permission.map(AclPermission::from_wire).transpose()?,
        })
    }

    pub fn to_wire(&self) -> m::AclFilter {
        m::AclFilter {
            principal: self.principal.clone().unwrap_or_default(),
            resource_type: self
                .resource_type
                .map_or(m::ResourceType::Unspecified, ResourceType::to_wire)
                as i32,
            resource_name: self.resource_name.clone().unwrap_or_default(),
            pattern_type: self.pattern_type.map(|p| p.to_wire() as i32),
            operation: self
                .operation
                .map_or(m::AclOperation::Unspecified, AclOperation::to_wire)
                as i32,
            permission: self.permission.map(|p| p.to_wire() as i32),
        }
    }

    pub fn matches(&self, e: &AclEntry) -> bool {
        fn ok<T: PartialEq>(want: &Option<T>, have: &T) -> bool {
            want.as_ref().is_none_or(|w| w == have)
        }
        ok(&self.principal, &e.principal)
            && ok(&self.resource_type, &e.resource_type)
            && ok(&self.resource_name, &e.resource_name)
            && ok(&self.pattern_type, &e.pattern_type)
            && ok(&self.operation, &e.operation)
            && ok(&self.permission, &e.permission)
    }
}

/// A refusal: who may not do what to which resource, and the DENY ACL that decided it if one
/// did (otherwise no ALLOW matched: default deny).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub principal: Principal,
    pub operation: AclOperation,
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub deny_acl: Option<AclEntry>,
}

impl Denied {
    /// `AUTHORIZATION_FAILED`.
    pub fn code(&self) -> tinymq_protocol::ErrorCode {
        tinymq_protocol::ErrorCode::AUTHORIZATION_FAILED
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} may not {} {} '{}'",
            self.principal,
            self.operation.name(),
            self.resource_type.name(),
            self.resource_name
        )?;
        if let Some(acl) = &self.deny_acl {
            write!(f, " (denied by ACL {acl})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Denied {}

/// A refusal of a DESCRIBE that a client made on the way to an operation needing `needed`
/// (a producer's metadata lookup, before the WRITE; a group member's coordinator lookup,
/// before the READ), reworded to name `needed`: `User:bob may not WRITE topic 'orders'`.
///
/// `message` is the text of a [`Denied`] of DESCRIBE. When no DENY ACL decided it (default
/// deny), the principal holds nothing implying DESCRIBE, so it lacks `needed` too, and naming
/// DESCRIBE would send the operator to grant the wrong permission. A refusal by a DENY of
/// DESCRIBE is exact as it is, and anything else is not such a refusal: both give `None`.
pub fn describe_refusal_as(message: &str, needed: AclOperation) -> Option<String> {
    if !needed.implies(AclOperation::Describe) || message.contains(" (denied by ACL ") {
        return None;
    }
    let marker = " may not DESCRIBE ";
    let at = message.find(marker)?;
    let (principal, rest) = (&message[..at], &message[at + marker.len()..]);
    let named_resource = ResourceType::ALL
        .iter()
        .any(|t| rest.starts_with(&format!("{} '", t.name())) && rest.ends_with('\''));
    named_resource.then(|| format!("{principal} may not {} {rest}", needed.name()))
}

/// Answers "may this principal do this?" from a snapshot of the ACLs. Rebuild it when the ACLs
/// change; it is cheap to share behind an `Arc`.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    allow_all: bool,
    super_users: Vec<Principal>,
    /// Indexed by `ResourceType as usize`, so a check only scans its own type's ACLs.
    acls: [Vec<AclEntry>; 4],
}

impl Authorizer {
    /// Default deny: only what an ALLOW grants (and no DENY refuses) is allowed.
    ///
    /// ALLOW entries that fail [`AclEntry::validate`] are dropped without a word (this crate
    /// logs nothing; callers that want to report them validate first): an entry that slipped
    /// past validation, e.g. from an older image, must never grant more than a valid one
    /// could. DENY entries are kept as they are, since honouring one can only refuse more.
    /// A super user `User:*` is dropped too: super users are single principals (see
    /// [`Principal::parse_super_user`]), and a certificate named `*` must not become one.
    pub fn new(
        acls: impl IntoIterator<Item = AclEntry>,
        super_users: Vec<Principal>,
    ) -> Authorizer {
        let mut by_type: [Vec<AclEntry>; 4] = Default::default();
        for acl in acls {
            if acl.permission == AclPermission::Allow && acl.validate().is_err() {
                continue;
            }
            by_type[acl.resource_type as usize].push(acl);
        }
        let super_users = super_users
            .into_iter()
            .filter(|p| !(p.kind == PrincipalKind::User && p.name == "*"))
            .collect();
        Authorizer {
            allow_all: false,
            super_users,
            acls: by_type,
        }
    }

    /// Authorization off (`--auth none`): everything is allowed.
    pub fn allow_all() -> Authorizer {
        Authorizer {
            allow_all: true,
            ..Authorizer::default()
        }
    }

    pub fn is_allow_all(&self) -> bool {
        self.allow_all
    }

    pub fn is_super_user(&self, p: &Principal) -> bool {
        self.super_users.contains(p)
    }

    /// Whether `p` needs no ACL at all: authorization off, a node or a super user.
    pub fn is_unrestricted(&self, p: &Principal) -> bool {
        self.allow_all || p.is_node() || self.is_super_user(p)
    }

    pub fn check(
        &self,
        p: &Principal,
        t: ResourceType,
        name: &str,
        op: AclOperation,
    ) -> Result<(), Denied> {
        if self.is_unrestricted(p) {
            return Ok(());
        }
        let mut allowed = false;
        for acl in &self.acls[t as usize] {
            if !acl.matches_principal(p) || !acl.matches_resource(t, name) {
                continue;
            }
            match acl.permission {
                // A DENY of DESCRIBE is not implied by a DENY of READ: only the operation named.
                AclPermission::Deny if acl.operation == op => {
                    return Err(self.denied(p, t, name, op, Some(acl.clone())))
                }
                AclPermission::Deny => {}
                AclPermission::Allow => allowed |= acl.operation.implies(op),
            }
        }
        if allowed {
            Ok(())
        } else {
            Err(self.denied(p, t, name, op, None))
        }
    }

    pub fn allows(&self, p: &Principal, t: ResourceType, name: &str, op: AclOperation) -> bool {
        self.check(p, t, name, op).is_ok()
    }

    /// Whether some ALLOW could let `p` do `op` on some resource of type `t` (e.g. WRITE on
    /// some topic for InitProducerId). A DENY of `op` on every name (literal `*`) for `p`
    /// makes it false. Other DENYs are not weighed, so this is an approximation that can
    /// answer true when every name an ALLOW covers is also denied by narrower DENYs (e.g.
    /// ALLOW prefixed `ord` with DENY prefixed `or`); the per-resource [`Authorizer::check`]
    /// still refuses each such resource.
    pub fn allows_any(&self, p: &Principal, t: ResourceType, op: AclOperation) -> bool {
        if self.is_unrestricted(p) {
            return true;
        }
        let acls = &self.acls[t as usize];
        let denied_everywhere = acls.iter().any(|acl| {
            acl.permission == AclPermission::Deny
                && acl.operation == op
                && acl.pattern_type == PatternType::Literal
                && acl.resource_name == "*"
                && acl.matches_principal(p)
        });
        !denied_everywhere
            && acls.iter().any(|acl| {
                acl.permission == AclPermission::Allow
                    && acl.matches_principal(p)
                    && acl.operation.implies(op)
            })
    }

    fn denied(
        &self,
        p: &Principal,
        t: ResourceType,
        name: &str,
        op: AclOperation,
        deny_acl: Option<AclEntry>,
    ) -> Denied {
        Denied {
            principal: p.clone(),
            operation: op,
            resource_type: t,
            resource_name: name.to_string(),
            deny_acl,
        }
    }
}

#[cfg(test)]
mod tests;
