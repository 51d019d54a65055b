//! Users, ACLs and quotas as cluster metadata: their records' effect on the image, the
//! commands that change them (checked against the named limits before anything is written),
//! and the views other parts read from an image — the [`Authorizer`] of its ACLs, its SCRAM
//! verifiers ([`CredentialLookup`]), and a copy without them for non-node readers.
//!
//! Only verifiers are stored (salt, iterations, StoredKey, ServerKey), never a password: the
//! client derives them, so the password never reaches a node.

use serde::{Deserialize, Serialize};
use tinymq_auth::{
    validate_user_name, AclEntry, AclFilter, Authorizer, CredentialLookup, Principal, QuotaConfig,
    ScramMechanism, StoredCredential, QUOTA_DEFAULT_PRINCIPAL,
};
use tinymq_protocol::messages as m;

use crate::command::{MetaError, Outcome, Reply};
use crate::image::{MetadataImage, MetadataRecord};

/// Most users a cluster holds (`users_max`): each costs a few hundred bytes in every copy of
/// the image, and brokers load the image whole.
pub const USERS_MAX: usize = 10_000;
/// Most ACLs a cluster holds (`acls_max`), also the most one `CreateAcls` may carry.
pub const ACLS_MAX: usize = 10_000;
/// Most quotas a cluster holds (`quotas_max`), the default quota included.
pub const QUOTAS_MAX: usize = 10_000;
/// Most SCRAM verifiers one user holds: one per mechanism.
pub const USER_CREDENTIALS_MAX: usize = 2;
/// The user created at a cluster's first start from `TINYMQ_ADMIN_PASSWORD`.
pub const ADMIN_USER: &str = "admin";

/// What `PutUser` expects of the user's existence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutUserMode {
    /// Fails with `USER_ALREADY_EXISTS` when the user exists.
    Create,
    /// Fails with `USER_NOT_FOUND` when it does not (a password change).
    Update,
}

impl PutUserMode {
    pub fn from_wire(mode: i32) -> Result<PutUserMode, MetaError> {
        match m::PutUserMode::try_from(mode) {
            Ok(m::PutUserMode::Create) => Ok(PutUserMode::Create),
            Ok(m::PutUserMode::Update) => Ok(PutUserMode::Update),
            Err(_) => Err(MetaError::Invalid(format!("unknown PutUser mode {mode}"))),
        }
    }
}

/// The ACLs of `image` that `filter` selects, in order.
pub fn matching_acls(image: &MetadataImage, filter: &AclFilter) -> Vec<AclEntry> {
    image
        .acls
        .iter()
        .filter(|a| filter.matches(a))
        .cloned()
        .collect()
}

/// Applies one of the records below to the image (the others are not this module's).
pub(crate) fn apply(image: &mut MetadataImage, record: &MetadataRecord) {
    match record {
        MetadataRecord::PutUser { name, credentials } => {
            image.users.insert(name.clone(), credentials.clone());
        }
        MetadataRecord::DeleteUser { name } => {
            image.users.remove(name);
        }
        MetadataRecord::CreateAcls { acls } => image.acls.extend(acls.iter().cloned()),
        MetadataRecord::DeleteAcls { acls } => {
            for acl in acls {
                image.acls.remove(acl);
            }
        }
        MetadataRecord::SetQuota { principal, quota } => {
            image.quotas.insert(principal.clone(), *quota);
        }
        MetadataRecord::RemoveQuota { principal } => {
            image.quotas.remove(principal);
        }
        _ => {}
    }
}

/// Checks a user's credentials as every node would read them from the wire: at least one,
/// at most one per mechanism, each field in range.
fn check_credentials(credentials: &[StoredCredential]) -> Result<(), MetaError> {
    if credentials.is_empty() {
        return Err(MetaError::Invalid(
            "a user needs at least one credential".into(),
        ));
    }
    for (i, c) in credentials.iter().enumerate() {
        StoredCredential::from_wire(&c.to_wire())
            .map_err(|e| MetaError::Invalid(format!("credential {}: {e}", c.mechanism.name())))?;
        if credentials[..i].iter().any(|o| o.mechanism == c.mechanism) {
            return Err(MetaError::Invalid(format!(
                "two credentials for {}",
                c.mechanism.name()
            )));
        }
    }
    Ok(())
}

fn check_user_name(name: &str) -> Result<(), MetaError> {
    validate_user_name(name).map_err(|e| MetaError::Invalid(format!("user name {name:?}: {e}")))
}

pub(crate) fn put_user(
    image: &MetadataImage,
    name: &str,
    credentials: &[StoredCredential],
    mode: PutUserMode,
) -> Outcome {
    check_user_name(name)?;
    check_credentials(credentials)?;
    let exists = image.users.contains_key(name);
    match mode {
        PutUserMode::Create if exists => return Err(MetaError::UserExists(name.into())),
        PutUserMode::Update if !exists => return Err(MetaError::UserNotFound(name.into())),
        _ => {}
    }
    if !exists && image.users.len() >= USERS_MAX {
        return Err(MetaError::LimitReached {
            what: "users_max".into(),
            max: USERS_MAX,
        });
    }
    let record = MetadataRecord::PutUser {
        name: name.into(),
        credentials: credentials.to_vec(),
    };
    Ok((vec![record], Reply::Done))
}

pub(crate) fn delete_user(image: &MetadataImage, name: &str) -> Outcome {
    if !image.users.contains_key(name) {
        return Err(MetaError::UserNotFound(name.into()));
    }
    let record = MetadataRecord::DeleteUser { name: name.into() };
    Ok((vec![record], Reply::Done))
}

/// `AlterUserCredentials`: the user's verifiers with `delete`'s mechanisms removed and
/// `upsert`'s put in their mechanism's place, written whole ([`put_user`]), or the user
/// deleted when none is left. A mechanism named twice is refused.
pub(crate) fn alter_user_credentials(
    image: &MetadataImage,
    name: &str,
    delete: &[ScramMechanism],
    upsert: &[StoredCredential],
) -> Outcome {
    let mut named: Vec<ScramMechanism> = delete.to_vec();
    named.extend(upsert.iter().map(|c| c.mechanism));
    for (i, mechanism) in named.iter().enumerate() {
        if named[..i].contains(mechanism) {
            return Err(MetaError::Invalid(format!(
                "{mechanism} named twice for user {name:?}"
            )));
        }
    }
    let current = image.users.get(name).map(Vec::as_slice).unwrap_or_default();
    if let Some(missing) = delete
        .iter()
        .find(|m| !current.iter().any(|c| c.mechanism == **m))
    {
        return Err(MetaError::UserNotFound(format!("{name} ({missing})")));
    }
    let mut next: Vec<StoredCredential> = current
        .iter()
        .filter(|c| !named.contains(&c.mechanism))
        .cloned()
        .collect();
    next.extend(upsert.iter().cloned());
    next.sort_by_key(|c| c.mechanism);
    match (current.is_empty(), next.is_empty()) {
        (true, true) => Err(MetaError::UserNotFound(name.into())),
        (false, true) => delete_user(image, name),
        (true, false) => put_user(image, name, &next, PutUserMode::Create),
        (false, false) => put_user(image, name, &next, PutUserMode::Update),
    }
}

/// Creates user [`ADMIN_USER`] when the image has no user at all (a cluster's first start);
/// otherwise changes nothing, so a restart with another password never replaces anyone's.
/// Replies whether it created the user.
pub(crate) fn bootstrap_admin(image: &MetadataImage, credentials: &[StoredCredential]) -> Outcome {
    if !image.users.is_empty() {
        return Ok((vec![], Reply::UserCreated(false)));
    }
    let (records, _) = put_user(image, ADMIN_USER, credentials, PutUserMode::Create)?;
    Ok((records, Reply::UserCreated(true)))
}

/// Adds ACLs; ones already present are no-ops. Each is checked as the wire would check it.
pub(crate) fn create_acls(image: &MetadataImage, acls: &[AclEntry]) -> Outcome {
    if acls.len() > ACLS_MAX {
        return Err(MetaError::LimitReached {
            what: "acls_max".into(),
            max: ACLS_MAX,
        });
    }
    for acl in acls {
        AclEntry::from_wire(&acl.to_wire())
            .map_err(|e| MetaError::Invalid(format!("ACL {}: {e}", acl.principal)))?;
    }
    let mut new: Vec<AclEntry> = acls
        .iter()
        .filter(|a| !image.acls.contains(a))
        .cloned()
        .collect();
    new.sort();
    new.dedup();
    if image.acls.len().saturating_add(new.len()) > ACLS_MAX {
        return Err(MetaError::LimitReached {
            what: "acls_max".into(),
            max: ACLS_MAX,
        });
    }
    if new.is_empty() {
        return Ok((vec![], Reply::Done));
    }
    Ok((vec![MetadataRecord::CreateAcls { acls: new }], Reply::Done))
}

/// Removes every ACL `filter` matches; replies with them ([`Reply::AclsRemoved`]).
pub(crate) fn delete_acls(image: &MetadataImage, filter: &AclFilter) -> Outcome {
    let removed = matching_acls(image, filter);
    if removed.is_empty() {
        return Ok((vec![], Reply::AclsRemoved(vec![])));
    }
    let record = MetadataRecord::DeleteAcls {
        acls: removed.clone(),
    };
    Ok((vec![record], Reply::AclsRemoved(removed)))
}

/// A quota's principal: `User:NAME` (one user) or [`QUOTA_DEFAULT_PRINCIPAL`].
fn quota_principal(principal: &str) -> Result<String, MetaError> {
    tinymq_auth::quota::check_quota_principal(principal)
        .map(|()| principal.to_string())
        .map_err(|e| MetaError::Invalid(format!("quota principal {principal:?}: {e}")))
}

pub(crate) fn set_quota(image: &MetadataImage, principal: &str, quota: &QuotaConfig) -> Outcome {
    let principal = quota_principal(principal)?;
    if !image.quotas.contains_key(&principal) && image.quotas.len() >= QUOTAS_MAX {
        return Err(MetaError::LimitReached {
            what: "quotas_max".into(),
            max: QUOTAS_MAX,
        });
    }
    let record = MetadataRecord::SetQuota {
        principal,
        quota: *quota,
    };
    Ok((vec![record], Reply::Done))
}

/// Removes a principal's quota; removing one that is not there changes nothing.
/// `AlterQuota`: the principal's quota with the rates given replaced, set ([`set_quota`]), or
/// removed when no limit is left.
pub(crate) fn alter_quota(
    image: &MetadataImage,
    principal: &str,
    produce_bytes_per_sec: Option<u64>,
    fetch_bytes_per_sec: Option<u64>,
) -> Outcome {
    let key = quota_principal(principal)?;
    let mut quota = image.quotas.get(&key).copied().unwrap_or_default();
    if let Some(rate) = produce_bytes_per_sec {
        quota.produce_bytes_per_sec = rate;
    }
    if let Some(rate) = fetch_bytes_per_sec {
        quota.fetch_bytes_per_sec = rate;
    }
    if quota.is_unlimited() {
        remove_quota(image, &key)
    } else {
        set_quota(image, &key, &quota)
    }
}

pub(crate) fn remove_quota(image: &MetadataImage, principal: &str) -> Outcome {
    let principal = quota_principal(principal)?;
    if !image.quotas.contains_key(&principal) {
        return Ok((vec![], Reply::Done));
    }
    Ok((vec![MetadataRecord::RemoveQuota { principal }], Reply::Done))
}

impl MetadataImage {
    /// The authorizer of this image's ACLs: default deny, `super_users` always allowed.
    pub fn authorizer(&self, super_users: Vec<Principal>) -> Authorizer {
        Authorizer::new(self.acls.iter().cloned(), super_users)
    }

    /// A copy without the users (their SCRAM verifiers): what a reader that is not a node
    /// may see. ACLs and quotas stay.
    pub fn without_credentials(&self) -> MetadataImage {
        MetadataImage {
            users: Default::default(),
            ..self.clone()
        }
    }

    /// The quota that applies to `principal`: its own, else the default, else none.
    pub fn quota_for(&self, principal: &str) -> Option<&QuotaConfig> {
        self.quotas
            .get(principal)
            .or_else(|| self.quotas.get(QUOTA_DEFAULT_PRINCIPAL))
    }
}

impl CredentialLookup for MetadataImage {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential> {
        self.users
            .get(user)?
            .iter()
            .find(|c| c.mechanism == mechanism)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{execute, execute_and_apply, Command};
    use tinymq_auth::{
        AclOperation, AclPermission, PatternType, ResourceType, SCRAM_ITERATIONS_MIN,
    };

    fn credential(mechanism: ScramMechanism, password: &str) -> StoredCredential {
        StoredCredential::derive(mechanism, password, SCRAM_ITERATIONS_MIN)
    }

    fn put(name: &str, password: &str, mode: PutUserMode) -> Command {
        Command::PutUser {
            name: name.into(),
            credentials: vec![credential(ScramMechanism::Sha256, password)],
            mode,
        }
    }

    fn acl(principal: &str, topic: &str, operation: AclOperation) -> AclEntry {
        AclEntry {
            principal: principal.into(),
            resource_type: ResourceType::Topic,
            resource_name: topic.into(),
            pattern_type: PatternType::Literal,
            operation,
            permission: AclPermission::Allow,
        }
    }

    fn code(e: MetaError) -> tinymq_protocol::ErrorCode {
        e.error_code()
    }

    #[test]
    fn users_are_created_updated_and_deleted_with_the_wire_errors() {
        let mut image = MetadataImage::default();
        execute_and_apply(&mut image, &put("alice", "one", PutUserMode::Create)).unwrap();
        let again = execute_and_apply(&mut image, &put("alice", "two", PutUserMode::Create));
        assert_eq!(
            code(again.unwrap_err()),
            tinymq_protocol::ErrorCode::USER_ALREADY_EXISTS
        );
        let missing = execute_and_apply(&mut image, &put("bob", "x", PutUserMode::Update));
        assert_eq!(
            code(missing.unwrap_err()),
            tinymq_protocol::ErrorCode::USER_NOT_FOUND
        );

        execute_and_apply(&mut image, &put("alice", "two", PutUserMode::Update)).unwrap();
        let stored = image.credential("alice", ScramMechanism::Sha256).unwrap();
        assert!(stored.verify_password("two") && !stored.verify_password("one"));
        assert!(image.credential("alice", ScramMechanism::Sha512).is_none());

        let delete = Command::DeleteUser {
            name: "alice".into(),
        };
        execute_and_apply(&mut image, &delete).unwrap();
        assert!(image.users.is_empty());
        let twice = execute_and_apply(&mut image, &delete);
        assert_eq!(
            code(twice.unwrap_err()),
            tinymq_protocol::ErrorCode::USER_NOT_FOUND
        );
    }

    #[test]
    fn bad_user_names_and_credentials_are_refused_before_anything_is_written() {
        let image = MetadataImage::default();
        for name in ["", "a b", "node:broker:1", &"x".repeat(256)] {
            assert!(
                execute(&image, &put(name, "pw", PutUserMode::Create)).is_err(),
                "{name:?}"
            );
        }
        let none = Command::PutUser {
            name: "carol".into(),
            credentials: vec![],
            mode: PutUserMode::Create,
        };
        assert!(execute(&image, &none).is_err());
        let twice = Command::PutUser {
            name: "carol".into(),
            credentials: vec![
                credential(ScramMechanism::Sha256, "a"),
                credential(ScramMechanism::Sha256, "b"),
            ],
            mode: PutUserMode::Create,
        };
        assert!(execute(&image, &twice).is_err());
        let mut weak = credential(ScramMechanism::Sha256, "a");
        weak.iterations = 1;
        let weak = Command::PutUser {
            name: "carol".into(),
            credentials: vec![weak],
            mode: PutUserMode::Create,
        };
        assert!(execute(&image, &weak).is_err());
    }

    #[test]
    fn the_users_limit_is_checked_before_applying_but_updates_still_pass() {
        let mut image = MetadataImage::default();
        let c = vec![credential(ScramMechanism::Sha256, "pw")];
        for i in 0..USERS_MAX {
            image.users.insert(format!("u{i}"), c.clone());
        }
        let over = execute(&image, &put("one-more", "pw", PutUserMode::Create)).unwrap_err();
        assert!(over.to_string().contains("users_max"), "{over}");
        execute(&image, &put("u1", "new", PutUserMode::Update)).unwrap();
    }

    #[test]
    fn admin_is_bootstrapped_only_into_a_cluster_without_users() {
        let mut image = MetadataImage::default();
        let first = vec![credential(ScramMechanism::Sha256, "first")];
        let boot = |c: &Vec<StoredCredential>| Command::BootstrapAdmin {
            credentials: c.clone(),
        };
        assert_eq!(
            execute_and_apply(&mut image, &boot(&first)),
            Ok(Reply::UserCreated(true))
        );
        let second = vec![credential(ScramMechanism::Sha256, "second")];
        assert_eq!(
            execute_and_apply(&mut image, &boot(&second)),
            Ok(Reply::UserCreated(false))
        );
        let stored = image
            .credential(ADMIN_USER, ScramMechanism::Sha256)
            .unwrap();
        assert!(stored.verify_password("first"));
    }

    #[test]
    fn a_users_mechanisms_change_one_at_a_time_against_the_current_image() {
        let mut image = MetadataImage::default();
        let cred =
            |m: ScramMechanism, pw: &str| StoredCredential::derive_with_salt(m, pw, &[5; 16], 4096);
        let alter = |delete: Vec<ScramMechanism>, upsert: Vec<StoredCredential>| {
            Command::AlterUserCredentials {
                name: "alice".into(),
                delete,
                upsert,
            }
        };
        let (s256, s512) = (ScramMechanism::Sha256, ScramMechanism::Sha512);
        execute_and_apply(
            &mut image,
            &alter(vec![], vec![cred(s256, "a"), cred(s512, "b")]),
        )
        .expect("the first verifiers create the user");
        // A new SHA-256 password keeps the SHA-512 one, whatever a broker's image said.
        execute_and_apply(&mut image, &alter(vec![], vec![cred(s256, "c")])).unwrap();
        assert_eq!(image.users["alice"], vec![cred(s256, "c"), cred(s512, "b")]);
        execute_and_apply(&mut image, &alter(vec![s512], vec![])).unwrap();
        assert_eq!(image.users["alice"], vec![cred(s256, "c")]);
        let missing = execute(&image, &alter(vec![s512], vec![])).unwrap_err();
        assert!(matches!(missing, MetaError::UserNotFound(_)), "{missing}");
        let twice = execute(&image, &alter(vec![s256], vec![cred(s256, "d")])).unwrap_err();
        assert!(matches!(twice, MetaError::Invalid(_)), "{twice}");
        execute_and_apply(&mut image, &alter(vec![s256], vec![])).unwrap();
        assert!(
            !image.users.contains_key("alice"),
            "deleted with its last verifier"
        );
        let nobody = execute(&image, &alter(vec![], vec![])).unwrap_err();
        assert!(matches!(nobody, MetaError::UserNotFound(_)), "{nobody}");
    }

    #[test]
    fn a_quota_alteration_keeps_the_rates_it_does_not_name() {
        let mut image = MetadataImage::default();
        let alter = |produce: Option<u64>, fetch: Option<u64>| Command::AlterQuota {
            principal: "User:bob".into(),
            produce_bytes_per_sec: produce,
            fetch_bytes_per_sec: fetch,
        };
        image.quotas.insert(
            "User:bob".into(),
            QuotaConfig {
                produce_bytes_per_sec: 0,
                fetch_bytes_per_sec: 0,
                requests_per_sec: 50,
            },
        );
        execute_and_apply(&mut image, &alter(Some(1024), None)).unwrap();
        execute_and_apply(&mut image, &alter(None, Some(2048))).unwrap();
        let q = image.quotas["User:bob"];
        assert_eq!(
            (
                q.produce_bytes_per_sec,
                q.fetch_bytes_per_sec,
                q.requests_per_sec
            ),
            (1024, 2048, 50)
        );
        image.quotas.get_mut("User:bob").unwrap().requests_per_sec = 0;
        execute_and_apply(&mut image, &alter(Some(0), Some(0))).unwrap();
        assert!(
            !image.quotas.contains_key("User:bob"),
            "no limit left: removed"
        );
        assert!(
            execute(&image, &alter(Some(0), None)).is_ok(),
            "nothing to remove"
        );
        let bad = Command::AlterQuota {
            principal: "User:*".into(),
            produce_bytes_per_sec: Some(1),
            fetch_bytes_per_sec: None,
        };
        assert!(execute(&image, &bad).is_err());
    }

    #[test]
    fn acls_are_added_once_and_removed_by_filter() {
        let mut image = MetadataImage::default();
        let a = acl("User:alice", "orders", AclOperation::Read);
        let b = acl("User:bob", "orders", AclOperation::Write);
        let create = Command::CreateAcls {
            acls: vec![a.clone(), b.clone(), a.clone()],
        };
        execute_and_apply(&mut image, &create).unwrap();
        assert_eq!(image.acls.len(), 2);
        let (records, _) = execute(&image, &create).unwrap();
        assert!(records.is_empty(), "duplicates change nothing");

        let by_bob = AclFilter {
            principal: Some("User:bob".into()),
            ..Default::default()
        };
        let reply = execute_and_apply(
            &mut image,
            &Command::DeleteAcls {
                filter: by_bob.clone(),
            },
        );
        assert_eq!(reply, Ok(Reply::AclsRemoved(vec![b])));
        assert_eq!(image.acls.iter().collect::<Vec<_>>(), vec![&a]);
        let again = execute_and_apply(&mut image, &Command::DeleteAcls { filter: by_bob });
        assert_eq!(again, Ok(Reply::AclsRemoved(vec![])));

        let bad = Command::CreateAcls {
            acls: vec![acl("nobody", "orders", AclOperation::Read)],
        };
        assert!(
            execute(&image, &bad).is_err(),
            "a principal must be KIND:NAME"
        );
    }

    #[test]
    fn the_acls_limit_is_checked_before_applying() {
        let mut image = MetadataImage::default();
        for i in 0..ACLS_MAX {
            image
                .acls
                .insert(acl("User:a", &format!("t{i}"), AclOperation::Read));
        }
        let more = Command::CreateAcls {
            acls: vec![acl("User:a", "another", AclOperation::Read)],
        };
        let e = execute(&image, &more).unwrap_err();
        assert!(e.to_string().contains("acls_max"), "{e}");
        let existing = Command::CreateAcls {
            acls: vec![acl("User:a", "t1", AclOperation::Read)],
        };
        assert!(
            execute(&image, &existing).is_ok(),
            "a duplicate adds nothing"
        );
    }

    #[test]
    fn quotas_are_set_replaced_and_removed_and_the_default_applies_to_the_rest() {
        let mut image = MetadataImage::default();
        let q = |p: u64| QuotaConfig {
            produce_bytes_per_sec: p,
            fetch_bytes_per_sec: 0,
            requests_per_sec: 0,
        };
        let set = |principal: &str, quota: QuotaConfig| Command::SetQuota {
            principal: principal.into(),
            quota,
        };
        execute_and_apply(&mut image, &set("User:alice", q(10))).unwrap();
        execute_and_apply(&mut image, &set("User:alice", q(20))).unwrap();
        execute_and_apply(&mut image, &set(QUOTA_DEFAULT_PRINCIPAL, q(5))).unwrap();
        assert_eq!(image.quota_for("User:alice"), Some(&q(20)));
        assert_eq!(image.quota_for("User:bob"), Some(&q(5)));
        assert!(execute(&image, &set("alice", q(1))).is_err());
        assert!(execute(&image, &set("Node:broker-1", q(1))).is_err());

        let remove = Command::RemoveQuota {
            principal: "User:alice".into(),
        };
        execute_and_apply(&mut image, &remove).unwrap();
        assert_eq!(image.quota_for("User:alice"), Some(&q(5)));
        let (records, _) = execute(&image, &remove).unwrap();
        assert!(records.is_empty());

        for i in image.quotas.len()..QUOTAS_MAX {
            image.quotas.insert(format!("User:u{i}"), q(1));
        }
        let e = execute(&image, &set("User:new", q(1))).unwrap_err();
        assert!(e.to_string().contains("quotas_max"), "{e}");
    }

    #[test]
    fn security_metadata_survives_a_snapshot_and_old_images_load_without_it() {
        let mut image = MetadataImage::default();
        execute_and_apply(&mut image, &put("alice", "pw", PutUserMode::Create)).unwrap();
        let acls = vec![acl("User:alice", "orders", AclOperation::Read)];
        execute_and_apply(&mut image, &Command::CreateAcls { acls }).unwrap();
        let quota = Command::SetQuota {
            principal: "User:alice".into(),
            quota: QuotaConfig {
                produce_bytes_per_sec: 1,
                fetch_bytes_per_sec: 2,
                requests_per_sec: 3,
            },
        };
        execute_and_apply(&mut image, &quota).unwrap();
        let back = MetadataImage::from_snapshot(&image.to_snapshot()).unwrap();
        assert_eq!(back, image);

        let old = br#"{"cluster_id":"c","brokers":{},"topics":{},"next_producer_id":1,"next_broker_epoch":0}"#;
        let old = MetadataImage::from_snapshot(old).unwrap();
        assert!(old.users.is_empty() && old.acls.is_empty() && old.quotas.is_empty());
    }

    #[test]
    fn the_views_for_other_parts_come_from_the_image() {
        let mut image = MetadataImage::default();
        execute_and_apply(&mut image, &put("alice", "pw", PutUserMode::Create)).unwrap();
        let acls = vec![acl("User:alice", "orders", AclOperation::Read)];
        execute_and_apply(&mut image, &Command::CreateAcls { acls }).unwrap();

        let authorizer = image.authorizer(vec![Principal::user("admin")]);
        let alice = Principal::user("alice");
        assert!(authorizer.allows(&alice, ResourceType::Topic, "orders", AclOperation::Read));
        assert!(!authorizer.allows(&alice, ResourceType::Topic, "orders", AclOperation::Write));
        let admin = Principal::user("admin");
        assert!(authorizer.allows(&admin, ResourceType::Topic, "orders", AclOperation::Write));

        let lookup: &dyn CredentialLookup = &image;
        assert!(lookup.credential("alice", ScramMechanism::Sha256).is_some());
        assert!(lookup
            .credential("nobody", ScramMechanism::Sha256)
            .is_none());

        let stripped = image.without_credentials();
        assert!(stripped.users.is_empty());
        assert_eq!(stripped.acls, image.acls);
        let json = String::from_utf8(stripped.to_snapshot()).unwrap();
        assert!(
            !json.contains("stored_key") && !json.contains("salt"),
            "{json}"
        );
    }
}
