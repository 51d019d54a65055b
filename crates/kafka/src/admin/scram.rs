//! DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0), as the native user
//! operations (ListUsers, PutUser, DeleteUser), so the MetaServer's checks and the ACLs
//! (DESCRIBE, ALTER on the cluster) are the native port's. What `kafka-configs --entity-type
//! users` sends.
//!
//! Kafka changes one mechanism of a user at a time; tinymq stores a user's verifiers together.
//! An alteration therefore starts from the user's verifiers in this broker's image, applies the
//! request's deletions and upsertions for that user, and writes the result whole (PutUser, or
//! DeleteUser when no verifier is left). A client sends the salted password (RFC 5802
//! `SaltedPassword`), never the password; the StoredKey and ServerKey are derived from it here.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use tinymq_auth::{AclOperation, ScramMechanism, StoredCredential};
use tinymq_meta::authorize::Permission;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use super::{text, too_many_entries};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

/// Kafka's `ScramMechanism` codes.
const MECHANISM_SHA_256: i8 = 1;
const MECHANISM_SHA_512: i8 = 2;

fn mechanism_of(code: i8) -> Option<ScramMechanism> {
    match code {
        MECHANISM_SHA_256 => Some(ScramMechanism::Sha256),
        MECHANISM_SHA_512 => Some(ScramMechanism::Sha512),
        _ => None,
    }
}

fn code_of(mechanism: ScramMechanism) -> i8 {
    match mechanism {
        ScramMechanism::Sha256 => MECHANISM_SHA_256,
        ScramMechanism::Sha512 => MECHANISM_SHA_512,
    }
}

/// A refusal: a Kafka error code and why.
type Refused = (i16, String);

pub(crate) async fn describe_user_scram_credentials(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let response = DescribeUserScramCredentialsResponse::default();
    let listed = ctx
        .call::<_, m::ListUsersResponse>(OpCode::ListUsers, &m::ListUsersRequest {})
        .await;
    let users = match listed {
        Ok(m::ListUsersResponse { error: None, users }) => users,
        Ok(m::ListUsersResponse { error: Some(e), .. }) | Err(e) => {
            return response
                .with_error_code(kafka_code_for(Some(&e), Resource::Cluster))
                .with_error_message(Some(text(e.message)));
        }
    };
    let described = |user: &m::UserInfo| {
        let infos = user
            .mechanisms
            .iter()
            .zip(&user.iterations)
            .filter_map(|(name, iterations)| {
                Some(
                    CredentialInfo::default()
                        .with_mechanism(code_of(ScramMechanism::from_name(name)?))
                        .with_iterations(i32::try_from(*iterations).unwrap_or(i32::MAX)),
                )
            })
            .collect();
        DescribeUserScramCredentialsResult::default()
            .with_user(text(user.name.clone()))
            .with_credential_infos(infos)
    };
    let results = match request.users {
        None => users.iter().map(described).collect(),
        Some(names) => {
            let mut asked: BTreeMap<&str, usize> = BTreeMap::new();
            for name in &names {
                *asked.entry(name.name.as_str()).or_default() += 1;
            }
            names
                .iter()
                .map(|name| {
                    let name = name.name.as_str();
                    let refused = |code: K, why: &str| {
                        DescribeUserScramCredentialsResult::default()
                            .with_user(text(name))
                            .with_error_code(code.code())
                            .with_error_message(Some(text(why)))
                    };
                    if asked[name] > 1 {
                        return refused(
                            K::DuplicateResource,
                            "the same user named twice in one request",
                        );
                    }
                    match users.iter().find(|u| u.name == name) {
                        Some(user) => described(user),
                        None => refused(K::ResourceNotFound, "no SCRAM credential for this user"),
                    }
                })
                .collect()
        }
    };
    response.with_results(results)
}

/// One user's changes, in request order.
#[derive(Default)]
struct Changes {
    deletions: Vec<ScramMechanism>,
    upsertions: Vec<StoredCredential>,
}

pub(crate) async fn alter_user_scram_credentials(
    ctx: Arc<Ctx>,
    _version: i16,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut order: Vec<String> = Vec::new();
    let mut changes: BTreeMap<String, Result<Changes, Refused>> = BTreeMap::new();
    fn entry<'c>(
        changes: &'c mut BTreeMap<String, Result<Changes, Refused>>,
        order: &mut Vec<String>,
        name: &str,
    ) -> &'c mut Result<Changes, Refused> {
        if !changes.contains_key(name) {
            order.push(name.to_string());
        }
        changes
            .entry(name.to_string())
            .or_insert_with(|| Ok(Changes::default()))
    }
    for deletion in &request.deletions {
        let slot = entry(&mut changes, &mut order, deletion.name.as_str());
        if let Ok(user) = slot {
            match mechanism_of(deletion.mechanism) {
                Some(mechanism) => user.deletions.push(mechanism),
                None => *slot = Err(unknown_mechanism(deletion.mechanism)),
            }
        }
    }
    for upsertion in &request.upsertions {
        let slot = entry(&mut changes, &mut order, upsertion.name.as_str());
        if let Ok(user) = slot {
            match credential_of(upsertion) {
                Ok(credential) => user.upsertions.push(credential),
                Err(refused) => *slot = Err(refused),
            }
        }
    }
    let count = request.deletions.len() + request.upsertions.len();
    let up_front = too_many_entries(count).or_else(|| {
        let cluster = Permission::cluster(AclOperation::Alter);
        let refused = ctx.state().check_permission(&ctx.peer.principal, cluster);
        refused.err().map(|e| {
            (
                kafka_code_for(Some(&e), Resource::Cluster),
                e.message.clone(),
            )
        })
    });
    let mut results = Vec::with_capacity(order.len());
    for name in order {
        let outcome = match (&up_front, changes.remove(&name)) {
            (Some(refused), _) => Err(refused.clone()),
            (None, Some(Ok(user))) => alter_user(&ctx, &name, user).await,
            (None, Some(Err(refused))) => Err(refused),
            (None, None) => Err((
                K::UnknownServerError.code(),
                "lost the user's changes".into(),
            )),
        };
        let result = AlterUserScramCredentialsResult::default().with_user(text(name));
        results.push(match outcome {
            Ok(()) => result,
            Err((code, why)) => result
                .with_error_code(code)
                .with_error_message(Some(text(why))),
        });
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

fn unknown_mechanism(code: i8) -> Refused {
    (
        K::UnsupportedSaslMechanism.code(),
        format!("unknown SCRAM mechanism {code} (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512)"),
    )
}

/// The verifier an upsertion describes, checked.
fn credential_of(
    upsertion: &alter_user_scram_credentials_request::ScramCredentialUpsertion,
) -> Result<StoredCredential, Refused> {
    let mechanism =
        mechanism_of(upsertion.mechanism).ok_or_else(|| unknown_mechanism(upsertion.mechanism))?;
    let unacceptable = |why: String| (K::UnacceptableCredential.code(), why);
    let iterations = u32::try_from(upsertion.iterations)
        .map_err(|_| unacceptable(format!("{} iterations", upsertion.iterations)))?;
    StoredCredential::from_salted_password(
        mechanism,
        &upsertion.salted_password,
        &upsertion.salt,
        iterations,
    )
    .map_err(|e| unacceptable(e.to_string()))
}

/// Applies one user's changes to its verifiers in the image and writes the result.
async fn alter_user(ctx: &Ctx, name: &str, changes: Changes) -> Result<(), Refused> {
    let current = ctx
        .state()
        .cluster
        .image()
        .users
        .get(name)
        .cloned()
        .unwrap_or_default();
    let next = next_credentials(&current, &changes)?;
    let error = if next.is_empty() {
        let request = m::DeleteUserRequest { name: name.into() };
        let answer = ctx.call::<_, m::DeleteUserResponse>(OpCode::DeleteUser, &request);
        answer.await.map(|r| r.error)
    } else {
        let mode = if current.is_empty() {
            m::PutUserMode::Create
        } else {
            m::PutUserMode::Update
        };
        let request = m::PutUserRequest {
            name: name.into(),
            credentials: next.iter().map(StoredCredential::to_wire).collect(),
            mode: mode as i32,
        };
        let answer = ctx.call::<_, m::PutUserResponse>(OpCode::PutUser, &request);
        answer.await.map(|r| r.error)
    };
    match error.unwrap_or_else(Some) {
        None => Ok(()),
        Some(e) => Err((native_code(&e), e.message)),
    }
}

/// A user's verifiers after `changes`: each deletion must name a verifier the user has, and no
/// mechanism may be named twice.
fn next_credentials(
    current: &[StoredCredential],
    changes: &Changes,
) -> Result<Vec<StoredCredential>, Refused> {
    let mut named: Vec<ScramMechanism> = changes.deletions.clone();
    named.extend(changes.upsertions.iter().map(|c| c.mechanism));
    for (i, mechanism) in named.iter().enumerate() {
        if named[..i].contains(mechanism) {
            return Err((
                K::DuplicateResource.code(),
                format!("{mechanism} named twice for the same user"),
            ));
        }
    }
    if let Some(missing) = changes
        .deletions
        .iter()
        .find(|m| !current.iter().any(|c| c.mechanism == **m))
    {
        return Err((
            K::ResourceNotFound.code(),
            format!("the user has no {missing} credential to delete"),
        ));
    }
    let mut next: Vec<StoredCredential> = current
        .iter()
        .filter(|c| !named.contains(&c.mechanism))
        .cloned()
        .collect();
    next.extend(changes.upsertions.iter().cloned());
    next.sort_by_key(|c| c.mechanism);
    Ok(next)
}

/// The Kafka code of a native user operation's refusal.
fn native_code(error: &m::Error) -> i16 {
    match ErrorCode::from_code(error.code) {
        Some(ErrorCode::USER_NOT_FOUND) => K::ResourceNotFound.code(),
        // Another request created or deleted the user since this broker's image was read.
        Some(ErrorCode::USER_ALREADY_EXISTS) => K::DuplicateResource.code(),
        // The MetaServer's checks of the name and the verifier.
        Some(ErrorCode::INVALID_REQUEST) => K::UnacceptableCredential.code(),
        _ => kafka_code_for(Some(error), Resource::Cluster),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(mechanism: ScramMechanism, password: &str) -> StoredCredential {
        StoredCredential::derive_with_salt(mechanism, password, &[1; 16], 4096)
    }

    #[test]
    fn an_upsertion_replaces_only_its_mechanism_and_a_deletion_removes_only_its_own() {
        let current = vec![
            credential(ScramMechanism::Sha256, "a"),
            credential(ScramMechanism::Sha512, "a"),
        ];
        let upsert = Changes {
            deletions: vec![],
            upsertions: vec![credential(ScramMechanism::Sha256, "b")],
        };
        let next = next_credentials(&current, &upsert).expect("an upsertion");
        assert_eq!(
            next,
            vec![credential(ScramMechanism::Sha256, "b"), current[1].clone()]
        );
        let delete = Changes {
            deletions: vec![ScramMechanism::Sha512],
            upsertions: vec![],
        };
        let next = next_credentials(&current, &delete).expect("a deletion");
        assert_eq!(next, vec![current[0].clone()]);
    }

    #[test]
    fn a_missing_credential_or_a_mechanism_named_twice_is_refused() {
        let current = vec![credential(ScramMechanism::Sha256, "a")];
        let missing = Changes {
            deletions: vec![ScramMechanism::Sha512],
            upsertions: vec![],
        };
        let refused = next_credentials(&current, &missing).unwrap_err();
        assert_eq!(refused.0, K::ResourceNotFound.code());
        let twice = Changes {
            deletions: vec![ScramMechanism::Sha256],
            upsertions: vec![credential(ScramMechanism::Sha256, "b")],
        };
        let refused = next_credentials(&current, &twice).unwrap_err();
        assert_eq!(refused.0, K::DuplicateResource.code());
    }

    #[test]
    fn an_upsertion_is_checked_before_anything_is_written() {
        let upsertion = |mechanism: i8, iterations: i32, salted: usize| {
            alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                .with_mechanism(mechanism)
                .with_iterations(iterations)
                .with_salt(bytes::Bytes::from_static(&[3; 16]))
                .with_salted_password(bytes::Bytes::from(vec![9; salted]))
        };
        assert!(credential_of(&upsertion(1, 4096, 32)).is_ok());
        assert!(credential_of(&upsertion(2, 4096, 64)).is_ok());
        let code = |u| credential_of(&u).unwrap_err().0;
        assert_eq!(
            code(upsertion(0, 4096, 32)),
            K::UnsupportedSaslMechanism.code()
        );
        assert_eq!(
            code(upsertion(1, 100, 32)),
            K::UnacceptableCredential.code()
        );
        assert_eq!(code(upsertion(1, -1, 32)), K::UnacceptableCredential.code());
        assert_eq!(
            code(upsertion(2, 4096, 32)),
            K::UnacceptableCredential.code()
        );
    }
}
