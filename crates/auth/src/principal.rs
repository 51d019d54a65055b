//! [`Principal`]: the identity a connection acts as once authenticated — a user
//! (`User:alice`, `User:ANONYMOUS` when authentication is off) or a cluster node
//! (`Node:broker-3`, `Node:meta-1`) — and its one textual form used in ACLs, quotas, logs and
//! answers.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::credential::USER_NAME_BYTES_MAX;
use crate::error::AuthError;

/// Whether a principal is a person or program (`User`) or a cluster node (`Node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PrincipalKind {
    User,
    Node,
}

impl PrincipalKind {
    pub fn name(self) -> &'static str {
        match self {
            PrincipalKind::User => "User",
            PrincipalKind::Node => "Node",
        }
    }
}

/// The role of a cluster node, as in its node principal and its SCRAM user name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    Broker,
    Meta,
}

impl NodeKind {
    /// `"broker"` or `"meta"`.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Broker => "broker",
            NodeKind::Meta => "meta",
        }
    }

    pub fn from_name(name: &str) -> Option<NodeKind> {
        match name {
            "broker" => Some(NodeKind::Broker),
            "meta" => Some(NodeKind::Meta),
            _ => None,
        }
    }
}

/// An authenticated identity. Displays and parses as `KIND:NAME`, e.g. `User:alice`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Principal {
    pub kind: PrincipalKind,
    pub name: String,
}

/// The user every connection acts as when authentication is off.
pub const ANONYMOUS_USER: &str = "ANONYMOUS";

impl Principal {
    pub fn user(name: &str) -> Principal {
        Principal {
            kind: PrincipalKind::User,
            name: name.to_string(),
        }
    }

    /// `Node:broker-3`, `Node:meta-1`.
    pub fn node(role: NodeKind, id: u64) -> Principal {
        Principal {
            kind: PrincipalKind::Node,
            name: format!("{}-{id}", role.name()),
        }
    }

    /// `User:ANONYMOUS`.
    pub fn anonymous() -> Principal {
        Principal::user(ANONYMOUS_USER)
    }

    pub fn is_node(&self) -> bool {
        self.kind == PrincipalKind::Node
    }

    pub fn is_anonymous(&self) -> bool {
        self.kind == PrincipalKind::User && self.name == ANONYMOUS_USER
    }

    /// The role and id of a node principal; `None` for users.
    pub fn node_id(&self) -> Option<(NodeKind, u64)> {
        if !self.is_node() {
            return None;
        }
        let (role, id) = self.name.split_once('-')?;
        Some((NodeKind::from_name(role)?, parse_id(id)?))
    }

    /// Parses `User:NAME` or `Node:broker-N` / `Node:meta-N`. User names here are not held to
    /// [`crate::validate_user_name`]: a principal may come from a certificate subject, and ACLs
    /// use `User:*`. They must be 1..=255 bytes without control characters.
    pub fn parse(s: &str) -> Result<Principal, AuthError> {
        let invalid = |reason| AuthError::InvalidPrincipal {
            principal: s.chars().take(USER_NAME_BYTES_MAX).collect(),
            reason,
        };
        let (kind, name) = s
            .split_once(':')
            .ok_or_else(|| invalid("expected User:NAME or Node:ROLE-ID"))?;
        let kind = match kind {
            "User" => PrincipalKind::User,
            "Node" => PrincipalKind::Node,
            _ => return Err(invalid("the kind must be 'User' or 'Node'")),
        };
        if name.is_empty() || name.len() > USER_NAME_BYTES_MAX {
            return Err(invalid("the name must be 1..=255 bytes"));
        }
        if name.chars().any(char::is_control) {
            return Err(invalid("the name contains a control character"));
        }
        let principal = Principal {
            kind,
            name: name.to_string(),
        };
        if principal.is_node() && principal.node_id().is_none() {
            return Err(invalid("a node is named broker-ID or meta-ID"));
        }
        Ok(principal)
    }

    /// Parses a super-user principal (`--super-users`): [`Principal::parse`], but `User:*` is
    /// refused — a super user is one principal, never "every user" (and an ACL-style wildcard
    /// here would also match a certificate whose subject is `*`).
    pub fn parse_super_user(s: &str) -> Result<Principal, AuthError> {
        let p = Principal::parse(s)?;
        if p.kind == PrincipalKind::User && p.name == "*" {
            return Err(AuthError::InvalidPrincipal {
                principal: s.to_string(),
                reason: "a super user is one principal; User:* is for ACLs only",
            });
        }
        Ok(p)
    }
}

/// A decimal id without sign, leading '+' or leading zeros, so each id has one spelling.
pub(crate) fn parse_id(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.name)
    }
}

impl std::str::FromStr for Principal {
    type Err = AuthError;
    fn from_str(s: &str) -> Result<Principal, AuthError> {
        Principal::parse(s)
    }
}

impl From<Principal> for String {
    fn from(p: Principal) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for Principal {
    type Error = AuthError;
    fn try_from(s: String) -> Result<Principal, AuthError> {
        Principal::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        for p in [
            Principal::user("alice"),
            Principal::anonymous(),
            Principal::node(NodeKind::Broker, 3),
            Principal::node(NodeKind::Meta, 1),
            Principal::user("*"),
            Principal::user("CN with spaces"),
        ] {
            assert_eq!(Principal::parse(&p.to_string()).unwrap(), p);
        }
        assert_eq!(
            Principal::node(NodeKind::Broker, 3).to_string(),
            "Node:broker-3"
        );
        assert_eq!(Principal::anonymous().to_string(), "User:ANONYMOUS");
        assert_eq!(
            Principal::node(NodeKind::Meta, 7).node_id(),
            Some((NodeKind::Meta, 7))
        );
        assert!(Principal::node(NodeKind::Meta, 7).is_node());
        assert!(!Principal::user("bob").is_node());
    }

    #[test]
    fn parse_refuses_bad_forms() {
        for bad in [
            "",
            "alice",
            "Group:x",
            "user:alice",
            "User:",
            "Node:alice",
            "Node:broker-",
            "Node:broker-01",
            "Node:broker--1",
            "Node:broker-99999999999999999999999",
            "User:a\nb",
        ] {
            let err = Principal::parse(bad).unwrap_err();
            assert!(
                matches!(err, AuthError::InvalidPrincipal { .. }),
                "{bad}: {err}"
            );
        }
        assert!(Principal::parse(&format!("User:{}", "a".repeat(256))).is_err());
        assert!(Principal::parse(&format!("User:{}", "a".repeat(255))).is_ok());
    }

    #[test]
    fn super_users_are_single_principals() {
        assert_eq!(
            Principal::parse_super_user("User:admin").unwrap(),
            Principal::user("admin")
        );
        assert_eq!(
            Principal::parse_super_user("Node:meta-1").unwrap(),
            Principal::node(NodeKind::Meta, 1)
        );
        let err = Principal::parse_super_user("User:*").unwrap_err();
        assert!(matches!(err, AuthError::InvalidPrincipal { .. }), "{err}");
        assert!(err.to_string().contains("User:*"), "{err}");
        assert!(Principal::parse_super_user("admin").is_err());
        // ACLs still take the wildcard.
        assert_eq!(Principal::parse("User:*").unwrap(), Principal::user("*"));
    }

    #[test]
    fn serde_uses_the_text_form() {
        let p = Principal::node(NodeKind::Broker, 2);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, "\"Node:broker-2\"");
        assert_eq!(serde_json::from_str::<Principal>(&json).unwrap(), p);
        assert!(serde_json::from_str::<Principal>("\"Node:x\"").is_err());
    }
}
