//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM credentials live
//! in the metadata image, salted — a client sends the salt and the salted password, never the
//! password, and the broker keeps the stored and server keys derived from them. Kafka's checks
//! and messages: an empty user, an unknown mechanism, iterations outside 4096–16384, a user
//! named twice in one request, deleting what does not exist.

use std::collections::HashMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::sasl as req;
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::scram::{ScramCredential, ScramMechanism};

use super::common::{decode_all, frame, propose_metadata, str_bytes, HandlerResult};
use crate::catalog::{Catalog, ScramRecord};
use crate::cluster::command::MetadataCommand;
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::AclOperation;
    let v = header.api_version;
    let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
    if spec.key == api_key::DESCRIBE_USER_SCRAM_CREDENTIALS {
        let users = decode_all(r, |r| req::decode_describe_scram(r, v))?;
        // DESCRIBE on the cluster, as in Kafka.
        if !shard.allowed_on_cluster(conn, AclOperation::Describe) {
            return frame(
                spec,
                header,
                &DescribeUserScramCredentialsResponse::default().with_error_code(denied.code()),
            );
        }
        return frame(spec, header, &describe(shard, users));
    }
    let request = decode_all(r, |r| req::decode_alter_scram(r, v))?;
    // ALTER on the cluster: every user refused without it.
    if !shard.allowed_on_cluster(conn, AclOperation::Alter) {
        let users: Vec<&String> = request
            .deletions
            .iter()
            .map(|(u, _)| u)
            .chain(request.upsertions.iter().map(|u| &u.name))
            .collect();
        return frame(
            spec,
            header,
            &AlterUserScramCredentialsResponse::default().with_results(
                users
                    .into_iter()
                    .map(|u| {
                        AlterUserScramCredentialsResult::default()
                            .with_user(str_bytes(u))
                            .with_error_code(denied.code())
                    })
                    .collect(),
            ),
        );
    }
    let resp = alter(shard, request).await;
    frame(spec, header, &resp)
}

fn describe(shard: &Shard, users: Option<Vec<String>>) -> DescribeUserScramCredentialsResponse {
    let image = shard.catalog();
    let result = |user: &str, code: ErrorCode, message: Option<String>| {
        let infos = image
            .scram
            .get(user)
            .map(|m| {
                m.iter()
                    .map(|(mech, r)| {
                        CredentialInfo::default()
                            .with_mechanism(*mech)
                            .with_iterations(r.iterations)
                    })
                    .collect()
            })
            .unwrap_or_default();
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_error_code(code.code())
            .with_error_message(message.map(|m| str_bytes(&m)))
            .with_credential_infos(if code.is_error() { Vec::new() } else { infos })
    };
    let results = match users {
        // Every user with a credential.
        None => image
            .scram
            .keys()
            .map(|u| result(u, ErrorCode::NONE, None))
            .collect(),
        Some(users) => {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for u in &users {
                *seen.entry(u.as_str()).or_default() += 1;
            }
            let mut out = Vec::new();
            let mut done = std::collections::HashSet::new();
            for u in &users {
                if !done.insert(u.as_str()) {
                    continue;
                }
                out.push(if seen[u.as_str()] > 1 {
                    result(
                        u,
                        ErrorCode::DUPLICATE_RESOURCE,
                        Some(format!("Cannot describe SCRAM credentials for the same user twice in a single request: {u}")),
                    )
                } else if !image.scram.contains_key(u) {
                    result(
                        u,
                        ErrorCode::RESOURCE_NOT_FOUND,
                        Some(format!("Attempt to describe a user credential that does not exist: {u}")),
                    )
                } else {
                    result(u, ErrorCode::NONE, None)
                });
            }
            out
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// Why one user's change is refused: an error code and Kafka's message.
type Refusal = (ErrorCode, String);

/// One user's outcome in AlterUserScramCredentials: the user, an error code and a message.
type UserOutcome = (String, ErrorCode, Option<String>);

/// AlterUserScramCredentials: each deletion and upsertion checked in the request's order (a
/// user refused once keeps that first refusal), the accepted ones proposed in one metadata
/// command whose outcome each changed user gets.
async fn alter(
    shard: &Rc<Shard>,
    request: req::AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let image = shard.catalog();
    // Kafka refuses every change of a user named more than once in the request.
    let mut count: HashMap<String, usize> = HashMap::new();
    for (u, _) in &request.deletions {
        *count.entry(u.clone()).or_default() += 1;
    }
    for u in &request.upsertions {
        *count.entry(u.name.clone()).or_default() += 1;
    }
    let mut outcome: Vec<UserOutcome> = Vec::new();
    let mut upsert = Vec::new();
    let mut delete = Vec::new();
    let mut refuse = |user: &str, (code, msg): Refusal| {
        if !outcome.iter().any(|(u, _, _)| u == user) {
            outcome.push((user.to_string(), code, Some(msg)));
        }
    };
    for (user, mech) in &request.deletions {
        match check_deletion(&image, &count, user, *mech) {
            Ok(()) => delete.push((user.clone(), *mech)),
            Err(e) => refuse(user, e),
        }
    }
    for u in &request.upsertions {
        match check_upsertion(&count, u) {
            Ok(record) => upsert.push((u.name.clone(), u.mechanism, record)),
            Err(e) => refuse(&u.name, e),
        }
    }
    let changed: Vec<String> = delete
        .iter()
        .map(|(u, _)| u.clone())
        .chain(upsert.iter().map(|(u, _, _)| u.clone()))
        .collect();
    if !changed.is_empty() {
        let cmd = MetadataCommand::AlterScramCredentials { upsert, delete };
        let (code, msg) = propose_metadata(shard, cmd).await;
        for u in changed {
            if !outcome.iter().any(|(x, _, _)| *x == u) {
                outcome.push((u, code, msg.clone()));
            }
        }
    }
    AlterUserScramCredentialsResponse::default().with_results(
        outcome
            .into_iter()
            .map(|(u, code, msg)| {
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(&u))
                    .with_error_code(code.code())
                    .with_error_message(msg.map(|m| str_bytes(&m)))
            })
            .collect(),
    )
}

/// Whether `user`'s credential for mechanism type `mech` may be deleted, in Kafka's order: a
/// user named, and once in the request (`count`), a known mechanism, a credential `image`
/// holds.
fn check_deletion(
    image: &Catalog,
    count: &HashMap<String, usize>,
    user: &str,
    mech: i8,
) -> Result<(), Refusal> {
    if user.is_empty() {
        Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty".into(),
        ))
    } else if count[user] > 1 {
        Err((
            ErrorCode::DUPLICATE_RESOURCE,
            format!("A user credential cannot be altered twice in the same request: {user}"),
        ))
    } else if ScramMechanism::from_type_id(mech).is_none() {
        Err((
            ErrorCode::UNSUPPORTED_SASL_MECHANISM,
            format!("Unknown SCRAM mechanism type {mech}"),
        ))
    } else if !image.scram.get(user).is_some_and(|m| m.contains_key(&mech)) {
        Err((
            ErrorCode::RESOURCE_NOT_FOUND,
            format!("Attempt to delete a user credential that does not exist: {user}"),
        ))
    } else {
        Ok(())
    }
}

/// The record upsertion `u` stores, or why it is refused, in Kafka's order: a known mechanism,
/// a user named, and once in the request (`count`), iterations within the mechanism's bounds,
/// a salt and a salted password, and keys derived from them.
fn check_upsertion(
    count: &HashMap<String, usize>,
    u: &req::ScramUpsertion,
) -> Result<ScramRecord, Refusal> {
    let user = &u.name;
    let Some(mech) = ScramMechanism::from_type_id(u.mechanism) else {
        return Err((
            ErrorCode::UNSUPPORTED_SASL_MECHANISM,
            format!("Unknown SCRAM mechanism type {}", u.mechanism),
        ));
    };
    if user.is_empty() {
        Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty".into(),
        ))
    } else if count[user] > 1 {
        Err((
            ErrorCode::DUPLICATE_RESOURCE,
            format!("A user credential cannot be altered twice in the same request: {user}"),
        ))
    } else if u.iterations < mech.min_iterations() as i32 {
        Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            format!(
                "Too few iterations: {} (at least {})",
                u.iterations,
                mech.min_iterations()
            ),
        ))
    } else if u.iterations > mech.max_iterations() as i32 {
        Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            format!(
                "Too many iterations: {} (at most {})",
                u.iterations,
                mech.max_iterations()
            ),
        ))
    } else if u.salt.is_empty() || u.salted_password.is_empty() {
        Err((
            ErrorCode::UNACCEPTABLE_CREDENTIAL,
            "The salt and the salted password must not be empty".into(),
        ))
    } else {
        let c = ScramCredential::from_salted_password(
            mech,
            &u.salted_password,
            u.salt.to_vec(),
            u.iterations as u32,
        )
        .map_err(|e| (ErrorCode::UNACCEPTABLE_CREDENTIAL, e.to_string()))?;
        Ok(ScramRecord {
            salt: c.salt,
            stored_key: c.stored_key,
            server_key: c.server_key,
            iterations: u.iterations,
        })
    }
}
