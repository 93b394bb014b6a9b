//! CreateAcls, DescribeAcls and DeleteAcls: the ACLs live in the metadata image, so a change
//! is one metadata command and every broker's authorizer follows it. As in Kafka: without an
//! authorizer these answer SECURITY_DISABLED; changing ACLs needs ALTER on the cluster and
//! describing them DESCRIBE (CLUSTER_AUTHORIZATION_FAILED otherwise); a binding Kafka would
//! refuse is INVALID_REQUEST with Kafka's message, the valid ones of the request still created.

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::{api_key, ApiSpec};
use tributary_protocol::requests::acls::{self as req, AclCreation, AclFilter};
use tributary_protocol::{ErrorCode, Reader};
use tributary_security::acl::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType,
};

use super::common::{decode_all, frame, propose_metadata, str_bytes, HandlerResult};
use crate::catalog::AclRecord;
use crate::cluster::command::MetadataCommand;
use crate::conn::Conn;
use crate::shard::Shard;

/// Most bindings one request may create or delete (Kafka's cap on the records of one
/// metadata operation).
pub const ACLS_PER_REQUEST_MAX: usize = 10_000;

/// An item's outcome: its error code and message (`NONE` and `None` when it succeeded).
type Outcome = (ErrorCode, Option<String>);

/// One DeleteAcls filter's outcome: its error code, message and the bindings it matched (none
/// when it failed).
type FilterOutcome = (ErrorCode, Option<String>, Vec<AclBinding>);

/// CreateAcls, DescribeAcls or DeleteAcls, as `spec.key` says.
pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: Conn<'_>,
) -> HandlerResult {
    let v = header.api_version;
    match spec.key {
        api_key::CREATE_ACLS => {
            let creations = decode_all(r, |r| req::decode_create(r, v))?;
            frame(spec, header, &create(shard, conn, &creations).await)
        }
        api_key::DESCRIBE_ACLS => {
            let f = decode_all(r, |r| req::decode_describe(r, v))?;
            frame(spec, header, &describe(shard, conn, &f))
        }
        _ => {
            let filters = decode_all(r, |r| req::decode_delete(r, v))?;
            frame(spec, header, &delete(shard, conn, &filters).await)
        }
    }
}

/// CreateAcls: every binding refused when the request is (see [`refusal`]); else each invalid
/// binding INVALID_REQUEST and the valid ones created in one metadata command, whose error, if
/// it fails, becomes the outcome of each of them.
async fn create(
    shard: &Rc<Shard>,
    conn: Conn<'_>,
    creations: &[AclCreation],
) -> CreateAclsResponse {
    let refuse = refusal(
        shard,
        conn,
        AclOperation::Alter,
        "create ACLs",
        creations.len(),
    );
    let mut results: Vec<Outcome> = Vec::new();
    let mut valid = Vec::new();
    for c in creations {
        if let Some(r) = &refuse {
            results.push(r.clone());
            continue;
        }
        let b = binding(c);
        match b.validate() {
            Ok(()) => {
                valid.push(crate::authz::record(&b));
                results.push((ErrorCode::NONE, None));
            }
            Err(e) => results.push((ErrorCode::INVALID_REQUEST, Some(e.to_string()))),
        }
    }
    if !valid.is_empty() {
        let failed = proposal_error(shard, MetadataCommand::CreateAcls { acls: valid }).await;
        if let Some(failed) = failed {
            for r in results.iter_mut().filter(|r| !r.0.is_error()) {
                *r = failed.clone();
            }
        }
    }
    CreateAclsResponse::default().with_results(
        results
            .into_iter()
            .map(|(code, msg)| {
                AclCreationResult::default()
                    .with_error_code(code.code())
                    .with_error_message(msg.map(|m| str_bytes(&m)))
            })
            .collect(),
    )
}

/// DescribeAcls: the request refused (see [`refusal`]) or its filter invalid (INVALID_REQUEST)
/// is the response's error; else the bindings the filter matches.
fn describe(shard: &Shard, conn: Conn<'_>, f: &AclFilter) -> DescribeAclsResponse {
    let resp = DescribeAclsResponse::default();
    let refuse = refusal(shard, conn, AclOperation::Describe, "describe ACLs", 1);
    let filter = binding_filter(f);
    let refuse = refuse.or_else(|| {
        filter
            .validate()
            .err()
            .map(|e| (ErrorCode::INVALID_REQUEST, Some(e.to_string())))
    });
    if let Some((code, msg)) = refuse {
        return resp
            .with_error_code(code.code())
            .with_error_message(msg.map(|m| str_bytes(&m)));
    }
    let matched: Vec<AclBinding> = match shard.authorizer() {
        Some(a) => a.describe(&filter),
        None => Vec::new(),
    };
    resp.with_resources(by_resource(matched))
}

/// The bindings `matched`, grouped by resource pattern, as Kafka answers: one resource per
/// (type, name, pattern type), in the order each first appears.
fn by_resource(matched: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for b in matched {
        let same = resources.iter_mut().find(|x| {
            x.resource_type == b.resource_type.code()
                && x.resource_name.as_str() == b.name
                && x.pattern_type == b.pattern_type.code()
        });
        let d = AclDescription::default()
            .with_principal(str_bytes(&b.principal))
            .with_host(str_bytes(&b.host))
            .with_operation(b.operation.code())
            .with_permission_type(b.permission.code());
        match same {
            Some(x) => x.acls.push(d),
            None => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(b.resource_type.code())
                    .with_resource_name(str_bytes(&b.name))
                    .with_pattern_type(b.pattern_type.code())
                    .with_acls(vec![d]),
            ),
        }
    }
    resources
}

/// DeleteAcls: every filter refused when the request is (see [`refusal`]); else each invalid
/// filter INVALID_REQUEST, and the bindings the valid ones match deleted in one metadata
/// command, whose error, if it fails, becomes the outcome of each valid filter (with no
/// bindings).
async fn delete(shard: &Rc<Shard>, conn: Conn<'_>, filters: &[AclFilter]) -> DeleteAclsResponse {
    let refuse = refusal(
        shard,
        conn,
        AclOperation::Alter,
        "delete ACLs",
        filters.len(),
    );
    let authorizer = shard.authorizer();
    let mut results: Vec<FilterOutcome> = Vec::new();
    let mut gone: Vec<AclRecord> = Vec::new();
    for f in filters {
        if let Some((code, msg)) = &refuse {
            results.push((*code, msg.clone(), Vec::new()));
            continue;
        }
        let filter = binding_filter(f);
        if let Err(e) = filter.validate() {
            results.push((ErrorCode::INVALID_REQUEST, Some(e.to_string()), Vec::new()));
            continue;
        }
        let matched = authorizer
            .as_ref()
            .map(|a| a.describe(&filter))
            .unwrap_or_default();
        gone.extend(matched.iter().map(crate::authz::record));
        results.push((ErrorCode::NONE, None, matched));
    }
    if !gone.is_empty() {
        gone.sort();
        gone.dedup();
        let failed = proposal_error(shard, MetadataCommand::DeleteAcls { acls: gone }).await;
        if let Some((code, msg)) = failed {
            for r in results.iter_mut().filter(|r| !r.0.is_error()) {
                *r = (code, msg.clone(), Vec::new());
            }
        }
    }
    DeleteAclsResponse::default().with_filter_results(
        results
            .into_iter()
            .map(|(code, msg, matched)| {
                DeleteAclsFilterResult::default()
                    .with_error_code(code.code())
                    .with_error_message(msg.map(|m| str_bytes(&m)))
                    .with_matching_acls(matched.iter().map(matching_acl).collect())
            })
            .collect(),
    )
}

/// A binding a DeleteAcls filter matched, as its response lists it.
fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(b.resource_type.code())
        .with_resource_name(str_bytes(&b.name))
        .with_pattern_type(b.pattern_type.code())
        .with_principal(str_bytes(&b.principal))
        .with_host(str_bytes(&b.host))
        .with_operation(b.operation.code())
        .with_permission_type(b.permission.code())
}

/// Proposes `cmd` through the controller: its error code and message when it fails, `None`
/// when it was applied.
async fn proposal_error(shard: &Rc<Shard>, cmd: MetadataCommand) -> Option<Outcome> {
    let (code, msg) = propose_metadata(shard, cmd).await;
    code.is_error().then_some((code, msg))
}

/// The binding a CreateAcls creation asks for, its codes decoded.
fn binding(c: &AclCreation) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::from_code(c.resource_type),
        name: c.resource_name.clone(),
        pattern_type: PatternType::from_code(c.pattern_type),
        principal: c.principal.clone(),
        host: c.host.clone(),
        operation: AclOperation::from_code(c.operation),
        permission: AclPermissionType::from_code(c.permission_type),
    }
}

/// The filter a DescribeAcls or DeleteAcls filter asks for, its codes decoded.
fn binding_filter(f: &AclFilter) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: ResourceType::from_code(f.resource_type),
        name: f.resource_name.clone(),
        pattern_type: PatternType::from_code(f.pattern_type),
        principal: f.principal.clone(),
        host: f.host.clone(),
        operation: AclOperation::from_code(f.operation),
        permission: AclPermissionType::from_code(f.permission_type),
    }
}

/// Why a whole ACL request is refused, in Kafka's order: no authorizer (SECURITY_DISABLED), no
/// `op` on the cluster (CLUSTER_AUTHORIZATION_FAILED), more than [`ACLS_PER_REQUEST_MAX`]
/// bindings or filters (INVALID_REQUEST).
fn refusal(
    shard: &Shard,
    conn: Conn<'_>,
    op: AclOperation,
    what: &str,
    items: usize,
) -> Option<(ErrorCode, Option<String>)> {
    if shard.authorizer().is_none() {
        Some((
            ErrorCode::SECURITY_DISABLED,
            Some("No Authorizer is configured.".into()),
        ))
    } else if !shard.allowed_on_cluster(conn, op) {
        Some((
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
            Some(format!(
                "Cluster authorization failed: {} on the cluster is needed to {what}.",
                op.name()
            )),
        ))
    } else if items > ACLS_PER_REQUEST_MAX {
        Some((
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "{items} items in one request; send at most {ACLS_PER_REQUEST_MAX}."
            )),
        ))
    } else {
        None
    }
}
