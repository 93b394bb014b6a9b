//! `trib acls list|create|delete`: DescribeAcls, CreateAcls and DeleteAcls (v3, the version
//! Kafka 4 serves) sent as raw requests to the bootstrap broker, with `kafka-acls.sh`'s
//! arguments. Names of operations, resource types and pattern types are Kafka's, mapped to
//! their wire codes by the security crate's ACL model, and checked before anything is sent.

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tributary_security::acl::{
    AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType, CLUSTER_RESOURCE_NAME,
    WILDCARD,
};

use crate::reassign::{check, describe_error, entries_done, request};
use crate::Cli;

/// DescribeAcls, CreateAcls and DeleteAcls v3: flexible, with pattern types (KIP-290).
const ACLS_VERSION: i16 = 3;

/// The columns every ACL line has.
const HEADER: &str =
    "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE_TYPE\tRESOURCE_NAME\tPATTERN_TYPE";

#[derive(Subcommand)]
pub enum AclsCommand {
    /// ACLs, one binding per line: all of them, or those on one resource and/or of one
    /// principal (DescribeAcls).
    List {
        #[command(flatten)]
        resource: ResourceFilter,
        /// How `--topic`/`--group`/`--transactional-id` match: `any` (the default: the name
        /// exactly, any pattern type), `literal`, `prefixed`, or `match` (every ACL that
        /// applies to the named resource: literal, `*` and prefixes of it).
        #[arg(long, value_name = "TYPE", value_parser = parse_filter_pattern)]
        resource_pattern_type: Option<PatternType>,
        /// Only the ACLs of this principal (`User:alice`).
        #[arg(long, value_parser = parse_principal)]
        principal: Option<String>,
    },
    /// Create ACLs: each principal is allowed (or denied) each operation from each host on the
    /// resource (CreateAcls).
    Create {
        #[command(flatten)]
        who: Principals,
        /// An operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
        /// DescribeConfigs, AlterConfigs, IdempotentWrite, All); repeatable.
        #[arg(long = "operation", value_name = "OPERATION", required = true, value_parser = parse_operation)]
        operations: Vec<AclOperation>,
        /// A host the ACL applies to; repeatable. Default: every host (`*`).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        #[command(flatten)]
        resource: ResourceRequired,
        /// `literal` (the default: the name itself, `*` for every resource of the type) or
        /// `prefixed` (every resource whose name starts with it).
        #[arg(long, value_name = "TYPE", value_parser = parse_create_pattern, default_value = "literal")]
        resource_pattern_type: PatternType,
    },
    /// Delete the ACLs on a resource, narrowed by principal, operation and host; prints what
    /// was deleted (DeleteAcls).
    Delete {
        #[command(flatten)]
        who: OptionalPrincipals,
        /// Only ACLs of this operation; repeatable. Default: every operation.
        #[arg(long = "operation", value_name = "OPERATION", value_parser = parse_operation)]
        operations: Vec<AclOperation>,
        /// Only ACLs for this host; repeatable. Default: every host.
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        #[command(flatten)]
        resource: ResourceRequired,
        /// As for `list`: `any` (the default), `literal`, `prefixed` or `match`.
        #[arg(long, value_name = "TYPE", value_parser = parse_filter_pattern)]
        resource_pattern_type: Option<PatternType>,
    },
}

/// At most one resource, to narrow a listing.
#[derive(Args)]
#[group(multiple = false)]
pub struct ResourceFilter {
    /// A topic (or topic name prefix with `--resource-pattern-type prefixed`).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group.
    #[arg(long)]
    group: Option<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// A transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
}

/// Exactly one resource.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct ResourceRequired {
    /// A topic (or topic name prefix with `--resource-pattern-type prefixed`); `*`: every topic.
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group; `*`: every group.
    #[arg(long)]
    group: Option<String>,
    /// The cluster (`kafka-cluster`).
    #[arg(long)]
    cluster: bool,
    /// A transactional id; `*`: every one.
    #[arg(long)]
    transactional_id: Option<String>,
}

/// The principals to allow and to deny; at least one.
#[derive(Args)]
#[group(required = true, multiple = true)]
pub struct Principals {
    /// A principal to allow (`User:alice`, `User:*` for everyone); repeatable.
    #[arg(long = "allow-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    allow: Vec<String>,
    /// A principal to deny; repeatable.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    deny: Vec<String>,
}

/// As [`Principals`], optional: without any, ACLs of every principal and permission.
#[derive(Args)]
pub struct OptionalPrincipals {
    /// Only ALLOW ACLs of this principal; repeatable.
    #[arg(long = "allow-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    allow: Vec<String>,
    /// Only DENY ACLs of this principal; repeatable.
    #[arg(long = "deny-principal", value_name = "PRINCIPAL", value_parser = parse_principal)]
    deny: Vec<String>,
}

impl ResourceFilter {
    fn pattern(&self) -> Option<(ResourceType, String)> {
        resource(
            self.topic.as_deref(),
            self.group.as_deref(),
            self.cluster,
            self.transactional_id.as_deref(),
        )
    }
}

impl ResourceRequired {
    fn pattern(&self) -> Result<(ResourceType, String)> {
        resource(
            self.topic.as_deref(),
            self.group.as_deref(),
            self.cluster,
            self.transactional_id.as_deref(),
        )
        .ok_or_else(|| {
            anyhow!("name a resource: --topic, --group, --cluster or --transactional-id")
        })
    }
}

fn resource(
    topic: Option<&str>,
    group: Option<&str>,
    cluster: bool,
    transactional_id: Option<&str>,
) -> Option<(ResourceType, String)> {
    if cluster {
        return Some((ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()));
    }
    [
        (ResourceType::Topic, topic),
        (ResourceType::Group, group),
        (ResourceType::TransactionalId, transactional_id),
    ]
    .into_iter()
    .find_map(|(t, name)| name.map(|n| (t, n.to_string())))
}

/// Kafka's operation names, as `kafka-acls.sh --operation` takes them: `Read`, `READ`,
/// `AlterConfigs`, `alter_configs` and `alter-configs` are all ALTER_CONFIGS.
fn parse_operation(text: &str) -> Result<AclOperation, String> {
    let squeeze = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_uppercase()
    };
    let wanted = squeeze(text);
    AclOperation::VALUES
        .iter()
        .copied()
        .filter(|op| !op.is_unknown() && *op != AclOperation::Any)
        .find(|op| squeeze(op.name()) == wanted)
        .ok_or_else(|| {
            format!(
                "unknown ACL operation {text:?}; use one of {}",
                AclOperation::VALUES
                    .iter()
                    .filter(|op| !op.is_unknown() && **op != AclOperation::Any)
                    .map(|op| op.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// A pattern type to create: `literal` or `prefixed`.
fn parse_create_pattern(text: &str) -> Result<PatternType, String> {
    match PatternType::from_name(text) {
        p @ (PatternType::Literal | PatternType::Prefixed) => Ok(p),
        _ => Err(format!(
            "{text:?} is not a pattern type an ACL can have; use literal or prefixed"
        )),
    }
}

/// A pattern type to filter with: `any`, `match`, `literal` or `prefixed`.
fn parse_filter_pattern(text: &str) -> Result<PatternType, String> {
    match PatternType::from_name(text) {
        PatternType::Unknown => Err(format!(
            "unknown pattern type {text:?}; use any, match, literal or prefixed"
        )),
        p => Ok(p),
    }
}

/// `Type:name`, both parts present (Kafka refuses a principal without the colon).
fn parse_principal(text: &str) -> Result<String, String> {
    match text.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(text.to_string()),
        _ => Err(format!(
            "{text:?} is not a principal; write TYPE:NAME, e.g. User:alice (User:* for everyone)"
        )),
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One binding as a line under [`HEADER`].
fn line(b: &AclBinding) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
        b.principal, b.host, b.operation, b.permission, b.resource_type, b.name, b.pattern_type
    )
}

/// A filter's selectors for DescribeAcls and DeleteAcls.
struct Filter {
    resource: Option<(ResourceType, String)>,
    pattern_type: PatternType,
    principal: Option<String>,
    host: Option<String>,
    operation: AclOperation,
    permission: AclPermissionType,
}

impl Filter {
    /// Readable, for an error about this filter.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        match &self.resource {
            Some((t, n)) => parts.push(format!("{t} {n} ({})", self.pattern_type)),
            None => parts.push("every resource".to_string()),
        }
        if let Some(p) = &self.principal {
            parts.push(format!("{} {p}", self.permission));
        }
        if self.operation != AclOperation::Any {
            parts.push(self.operation.to_string());
        }
        if let Some(h) = &self.host {
            parts.push(format!("from {h}"));
        }
        parts.join(", ")
    }

    fn to_delete(&self) -> DeleteAclsFilter {
        let (t, name) = match &self.resource {
            Some((t, n)) => (*t, Some(s(n))),
            None => (ResourceType::Any, None),
        };
        DeleteAclsFilter::default()
            .with_resource_type_filter(t.code())
            .with_resource_name_filter(name)
            .with_pattern_type_filter(self.pattern_type.code())
            .with_principal_filter(self.principal.as_deref().map(s))
            .with_host_filter(self.host.as_deref().map(s))
            .with_operation(self.operation.code())
            .with_permission_type(self.permission.code())
    }
}

pub fn acls(cli: &Cli, cmd: &AclsCommand) -> Result<()> {
    match cmd {
        AclsCommand::List {
            resource,
            resource_pattern_type,
            principal,
        } => list(
            cli,
            &Filter {
                resource: resource.pattern(),
                pattern_type: resource_pattern_type.unwrap_or(PatternType::Any),
                principal: principal.clone(),
                host: None,
                operation: AclOperation::Any,
                permission: AclPermissionType::Any,
            },
        ),
        AclsCommand::Create {
            who,
            operations,
            hosts,
            resource,
            resource_pattern_type,
        } => create(
            cli,
            &bindings_to_create(who, operations, hosts, resource, *resource_pattern_type)?,
        ),
        AclsCommand::Delete {
            who,
            operations,
            hosts,
            resource,
            resource_pattern_type,
        } => delete(
            cli,
            &filters_to_delete(who, operations, hosts, resource, *resource_pattern_type)?,
        ),
    }
}

/// `acls create`'s bindings: one per principal (allowed, then denied), operation and host
/// (every host when none is given), all on the one resource.
fn bindings_to_create(
    who: &Principals,
    operations: &[AclOperation],
    hosts: &[String],
    resource: &ResourceRequired,
    pattern_type: PatternType,
) -> Result<Vec<AclBinding>> {
    let (resource_type, name) = resource.pattern()?;
    let hosts = if hosts.is_empty() {
        vec![WILDCARD.to_string()]
    } else {
        hosts.to_vec()
    };
    let mut bindings = Vec::new();
    for (principal, permission) in who
        .allow
        .iter()
        .map(|p| (p, AclPermissionType::Allow))
        .chain(who.deny.iter().map(|p| (p, AclPermissionType::Deny)))
    {
        for &operation in operations {
            for host in &hosts {
                bindings.push(AclBinding {
                    resource_type,
                    name: name.clone(),
                    pattern_type,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation,
                    permission,
                });
            }
        }
    }
    Ok(bindings)
}

/// `acls delete`'s filters: one per principal (allowed, then denied), operation and host given,
/// on the one resource; a selector not given matches anything.
fn filters_to_delete(
    who: &OptionalPrincipals,
    operations: &[AclOperation],
    hosts: &[String],
    resource: &ResourceRequired,
    pattern_type: Option<PatternType>,
) -> Result<Vec<Filter>> {
    let resource = Some(resource.pattern()?);
    let pattern_type = pattern_type.unwrap_or(PatternType::Any);
    let principals: Vec<(Option<String>, AclPermissionType)> =
        if who.allow.is_empty() && who.deny.is_empty() {
            vec![(None, AclPermissionType::Any)]
        } else {
            who.allow
                .iter()
                .map(|p| (Some(p.clone()), AclPermissionType::Allow))
                .chain(
                    who.deny
                        .iter()
                        .map(|p| (Some(p.clone()), AclPermissionType::Deny)),
                )
                .collect()
        };
    let operations = if operations.is_empty() {
        vec![AclOperation::Any]
    } else {
        operations.to_vec()
    };
    let hosts: Vec<Option<String>> = if hosts.is_empty() {
        vec![None]
    } else {
        hosts.iter().cloned().map(Some).collect()
    };
    let mut filters = Vec::new();
    for (principal, permission) in &principals {
        for &operation in &operations {
            for host in &hosts {
                filters.push(Filter {
                    resource: resource.clone(),
                    pattern_type,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation,
                    permission: *permission,
                });
            }
        }
    }
    Ok(filters)
}

fn list(cli: &Cli, f: &Filter) -> Result<()> {
    let (t, name) = match &f.resource {
        Some((t, n)) => (*t, Some(s(n))),
        None => (ResourceType::Any, None),
    };
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(t.code())
        .with_resource_name_filter(name)
        .with_pattern_type_filter(f.pattern_type.code())
        .with_principal_filter(f.principal.as_deref().map(s))
        .with_host_filter(None)
        .with_operation(AclOperation::Any.code())
        .with_permission_type(AclPermissionType::Any.code());
    let resp: DescribeAclsResponse = request(cli, ApiKey::DescribeAcls, ACLS_VERSION, &req)?;
    check(
        resp.error_code,
        resp.error_message.as_deref(),
        "listing ACLs",
    )?;
    let mut lines: Vec<String> = Vec::new();
    for r in &resp.resources {
        for a in &r.acls {
            lines.push(line(&AclBinding {
                resource_type: ResourceType::from_code(r.resource_type),
                name: r.resource_name.to_string(),
                pattern_type: PatternType::from_code(r.pattern_type),
                principal: a.principal.to_string(),
                host: a.host.to_string(),
                operation: AclOperation::from_code(a.operation),
                permission: AclPermissionType::from_code(a.permission_type),
            }));
        }
    }
    lines.sort();
    println!("{HEADER}");
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

fn create(cli: &Cli, bindings: &[AclBinding]) -> Result<()> {
    // Kafka's own checks first, so a binding the broker would refuse is not sent at all.
    for b in bindings {
        b.validate()
            .map_err(|e| anyhow!("the ACL {}: {e}", line(b).replace('\t', " ")))?;
    }
    let req = CreateAclsRequest::default().with_creations(
        bindings
            .iter()
            .map(|b| {
                AclCreation::default()
                    .with_resource_type(b.resource_type.code())
                    .with_resource_name(s(&b.name))
                    .with_resource_pattern_type(b.pattern_type.code())
                    .with_principal(s(&b.principal))
                    .with_host(s(&b.host))
                    .with_operation(b.operation.code())
                    .with_permission_type(b.permission.code())
            })
            .collect(),
    );
    let resp: CreateAclsResponse = request(cli, ApiKey::CreateAcls, ACLS_VERSION, &req)?;
    if resp.results.len() != bindings.len() {
        bail!(
            "the broker answered {} results for {} ACLs",
            resp.results.len(),
            bindings.len()
        );
    }
    let mut failures = Vec::new();
    let mut created = Vec::new();
    for (b, r) in bindings.iter().zip(&resp.results) {
        if r.error_code == 0 {
            created.push(line(b));
        } else {
            failures.push(format!(
                "creating the ACL {}: {}",
                line(b).replace('\t', " "),
                describe_error(r.error_code, r.error_message.as_deref())
            ));
        }
    }
    if !created.is_empty() {
        println!("Created:\n{HEADER}");
        for l in created {
            println!("{l}");
        }
    }
    entries_done(failures, bindings.len(), "ACLs")
}

fn delete(cli: &Cli, filters: &[Filter]) -> Result<()> {
    let req =
        DeleteAclsRequest::default().with_filters(filters.iter().map(Filter::to_delete).collect());
    let resp: DeleteAclsResponse = request(cli, ApiKey::DeleteAcls, ACLS_VERSION, &req)?;
    if resp.filter_results.len() != filters.len() {
        bail!(
            "the broker answered {} results for {} filters",
            resp.filter_results.len(),
            filters.len()
        );
    }
    let mut failures = Vec::new();
    let mut deleted = Vec::new();
    let mut entries = 0;
    for (f, r) in filters.iter().zip(&resp.filter_results) {
        entries += 1;
        if r.error_code != 0 {
            failures.push(format!(
                "deleting the ACLs matching {}: {}",
                f.describe(),
                describe_error(r.error_code, r.error_message.as_deref())
            ));
            continue;
        }
        for m in &r.matching_acls {
            entries += 1;
            let b = line(&AclBinding {
                resource_type: ResourceType::from_code(m.resource_type),
                name: m.resource_name.to_string(),
                pattern_type: PatternType::from_code(m.pattern_type),
                principal: m.principal.to_string(),
                host: m.host.to_string(),
                operation: AclOperation::from_code(m.operation),
                permission: AclPermissionType::from_code(m.permission_type),
            });
            if m.error_code == 0 {
                deleted.push(b);
            } else {
                failures.push(format!(
                    "deleting the ACL {}: {}",
                    b.replace('\t', " "),
                    describe_error(m.error_code, m.error_message.as_deref())
                ));
            }
        }
    }
    // Two filters may match the same binding; it is deleted once.
    deleted.sort();
    deleted.dedup();
    println!("Deleted:\n{HEADER}");
    for l in deleted {
        println!("{l}");
    }
    entries_done(failures, entries, "deletions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_take_kafkas_spellings() {
        for text in ["Read", "READ", "read"] {
            assert_eq!(parse_operation(text), Ok(AclOperation::Read));
        }
        for text in ["AlterConfigs", "ALTER_CONFIGS", "alter-configs"] {
            assert_eq!(parse_operation(text), Ok(AclOperation::AlterConfigs));
        }
        assert_eq!(parse_operation("All"), Ok(AclOperation::All));
        let e = parse_operation("Reed").unwrap_err();
        assert!(e.contains("\"Reed\"") && e.contains("READ, WRITE"), "{e}");
        // ANY selects in a filter; it is never an operation to grant.
        assert!(parse_operation("Any").is_err());
    }

    #[test]
    fn principals_and_pattern_types_are_checked() {
        assert_eq!(parse_principal("User:alice").as_deref(), Ok("User:alice"));
        for bad in ["alice", "User:", ":alice"] {
            let e = parse_principal(bad).unwrap_err();
            assert!(e.contains("TYPE:NAME"), "{e}");
        }
        assert_eq!(parse_create_pattern("prefixed"), Ok(PatternType::Prefixed));
        assert!(parse_create_pattern("match").is_err());
        assert_eq!(parse_filter_pattern("MATCH"), Ok(PatternType::Match));
        assert!(parse_filter_pattern("glob").is_err());
    }

    #[test]
    fn the_cluster_is_kafka_cluster() {
        assert_eq!(
            resource(None, None, true, None),
            Some((ResourceType::Cluster, "kafka-cluster".to_string()))
        );
        assert_eq!(
            resource(None, Some("g"), false, None),
            Some((ResourceType::Group, "g".to_string()))
        );
        assert_eq!(resource(None, None, false, None), None);
    }
}
