//! DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0), as the native user
//! operations (ListUsers, PutUser, DeleteUser), so the MetaServer's checks and the ACLs
//! (DESCRIBE, ALTER on the cluster) are the native port's. What `kafka-configs --entity-type
//! users` sends.
//!
//! Kafka changes one mechanism of a user at a time; tinymq stores a user's verifiers together.
//! An alteration is the MetaServer's `AlterUserCredentials`, applied to the MetaServer's own
//! image (a broker's may be behind), after the ALTER check here: the user is created by its
//! first verifier and deleted with its last. A client sends the salted password (RFC 5802
//! `SaltedPassword`), never the password; the StoredKey and ServerKey are derived from it here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use tinymq_auth::{AclOperation, ScramMechanism, StoredCredential};
use tinymq_meta::authorize::Permission;
use tinymq_meta::security_ops::SETTLE_WAIT;
use tinymq_meta::{Command, MetadataImage};
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
    let names = match request.users {
        // Kafka describes every user for an empty list as for none (librdkafka sends `[]`).
        Some(names) if !names.is_empty() => names,
        _ => return response.with_results(users.iter().map(described).collect()),
    };
    if let Some((code, why)) = too_many_entries(names.len()) {
        return response
            .with_error_code(code)
            .with_error_message(Some(text(why)));
    }
    let by_name: HashMap<&str, &m::UserInfo> = users.iter().map(|u| (u.name.as_str(), u)).collect();
    let mut asked: HashMap<&str, usize> = HashMap::new();
    for name in &names {
        *asked.entry(name.name.as_str()).or_default() += 1;
    }
    let mut answered: HashSet<&str> = HashSet::new();
    let results = names
        .iter()
        .map(|n| n.name.as_str())
        .filter(|name| answered.insert(name))
        .map(|name| {
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
            match by_name.get(name) {
                Some(user) => described(user),
                None => refused(K::ResourceNotFound, "no SCRAM credential for this user"),
            }
        })
        .collect();
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
    // Checked before any verifier is derived (each costs HMACs): the count, then ALTER.
    let count = request.deletions.len() + request.upsertions.len();
    let up_front = too_many_entries(count).or_else(|| {
        let cluster = Permission::cluster(AclOperation::Alter);
        let refused = ctx.state().check_permission(&ctx.peer.principal, cluster);
        let refused = refused.err()?;
        Some((
            kafka_code_for(Some(&refused), Resource::Cluster),
            refused.message,
        ))
    });
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
        if up_front.is_some() {
            continue;
        }
        if let Ok(user) = slot {
            match mechanism_of(deletion.mechanism) {
                Some(mechanism) => user.deletions.push(mechanism),
                None => *slot = Err(unknown_mechanism(deletion.mechanism)),
            }
        }
    }
    for upsertion in &request.upsertions {
        let slot = entry(&mut changes, &mut order, upsertion.name.as_str());
        if up_front.is_some() {
            continue;
        }
        if let Ok(user) = slot {
            match credential_of(upsertion) {
                Ok(credential) => user.upsertions.push(credential),
                Err(refused) => *slot = Err(refused),
            }
        }
    }
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

/// Applies one user's changes on the MetaServer (`AlterUserCredentials`, against its own
/// image, so that concurrent changes through other brokers are not lost), then waits until
/// this broker's image shows them (an image without users is one sent without verifiers, to
/// a broker of a cluster whose nodes do not authenticate: nothing to wait for there).
async fn alter_user(ctx: &Ctx, name: &str, changes: Changes) -> Result<(), Refused> {
    check_mechanisms_once(&changes)?;
    let command = Command::AlterUserCredentials {
        name: name.to_string(),
        delete: changes.deletions.clone(),
        upsert: changes.upsertions.clone(),
    };
    let cluster = &ctx.state().cluster;
    if let Err(e) = cluster.write(command).await {
        return Err((native_code(&e), e.message));
    }
    let applied = |image: &MetadataImage| {
        if image.users.is_empty() {
            return true;
        }
        let current = image.users.get(name).map(Vec::as_slice).unwrap_or_default();
        changes.upsertions.iter().all(|c| current.contains(c))
            && changes
                .deletions
                .iter()
                .all(|m| !current.iter().any(|c| c.mechanism == *m))
    };
    cluster.wait_until(SETTLE_WAIT, applied).await;
    Ok(())
}

/// Refuses a user's changes that name one mechanism twice (Kafka's DUPLICATE_RESOURCE).
fn check_mechanisms_once(changes: &Changes) -> Result<(), Refused> {
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
    Ok(())
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
    fn a_mechanism_named_twice_is_refused() {
        let twice = Changes {
            deletions: vec![ScramMechanism::Sha256],
            upsertions: vec![credential(ScramMechanism::Sha256, "b")],
        };
        let refused = check_mechanisms_once(&twice).unwrap_err();
        assert_eq!(refused.0, K::DuplicateResource.code());
        let both = Changes {
            deletions: vec![ScramMechanism::Sha512],
            upsertions: vec![credential(ScramMechanism::Sha256, "b")],
        };
        assert!(check_mechanisms_once(&both).is_ok());
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
