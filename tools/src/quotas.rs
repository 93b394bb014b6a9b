//! `trib quotas describe|alter`: client quotas by user, client id or both (KIP-546) with
//! DescribeClientQuotas and AlterClientQuotas, as `kafka-configs.sh --entity-type users|clients
//! --describe|--alter` does: `--user-default`/`--client-default` name the `<default>` entity,
//! and a describe naming entities shows exactly those (a strict filter).

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::reassign::{check, request};
use crate::Cli;

/// DescribeClientQuotas and AlterClientQuotas v1 (flexible), what the broker and Kafka 4 serve.
const QUOTAS_VERSION: i16 = 1;
const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
/// DescribeClientQuotas match types: the name given, the default entity.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
/// How Kafka's tools print a default entity's name.
const DEFAULT_NAME: &str = "<default>";

#[derive(Subcommand)]
pub enum QuotasCommand {
    /// Quotas, one entity per line: every entity's, or exactly the one named.
    Describe {
        #[command(flatten)]
        entity: Entity,
    },
    /// Set and remove quotas of one entity (a user, a client id, or a user's client id).
    Alter {
        #[command(flatten)]
        entity: Entity,
        /// A quota to set, `KEY=VALUE` (producer_byte_rate, consumer_byte_rate in bytes per
        /// second; request_percentage in percent of one shard's time); repeatable, or
        /// comma-separated.
        #[arg(long = "add", value_name = "KEY=VALUE")]
        add: Vec<String>,
        /// A quota to remove, by key; repeatable, or comma-separated.
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

/// A user (or the default user) and/or a client id (or the default client id).
#[derive(Args)]
pub struct Entity {
    /// A user (the principal's name, `alice` for `User:alice`).
    #[arg(long, conflicts_with = "user_default")]
    user: Option<String>,
    /// The default user: the quota of users without their own.
    #[arg(long)]
    user_default: bool,
    /// A client id.
    #[arg(long, conflicts_with = "client_default")]
    client_id: Option<String>,
    /// The default client id.
    #[arg(long)]
    client_default: bool,
}

impl Entity {
    /// The entity's parts, type and name (`None` for the default), user first.
    fn parts(&self) -> Vec<(&'static str, Option<String>)> {
        let mut parts = Vec::new();
        if self.user_default {
            parts.push((USER, None));
        } else if let Some(u) = &self.user {
            parts.push((USER, Some(u.clone())));
        }
        if self.client_default {
            parts.push((CLIENT_ID, None));
        } else if let Some(c) = &self.client_id {
            parts.push((CLIENT_ID, Some(c.clone())));
        }
        parts
    }
}

/// `user=alice,client-id=<default>`.
fn entity_text<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> String {
    parts
        .into_iter()
        .map(|(t, n)| format!("{t}={}", n.unwrap_or(DEFAULT_NAME)))
        .collect::<Vec<_>>()
        .join(",")
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The `--add` and `--delete` operations, each key at most once, values positive numbers.
fn operations(add: &[String], delete: &[String]) -> Result<Vec<(String, Option<f64>)>> {
    let split = |args: &[String]| -> Vec<String> {
        args.iter()
            .flat_map(|a| a.split(','))
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    };
    let mut ops = Vec::new();
    let mut seen = BTreeSet::new();
    for item in split(add) {
        let (key, value) = crate::admin::parse_kv(&item)?;
        let number: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| anyhow!("--add {key}={value}: the value must be a positive number"))?;
        ops.push((key, Some(number)));
    }
    for key in split(delete) {
        ops.push((key, None));
    }
    for (key, _) in &ops {
        if !seen.insert(key.clone()) {
            bail!("quota {key} is named twice; set or delete each key once");
        }
    }
    if ops.is_empty() {
        bail!("nothing to alter: give --add KEY=VALUE or --delete KEY");
    }
    Ok(ops)
}

pub fn quotas(cli: &Cli, cmd: &QuotasCommand) -> Result<()> {
    match cmd {
        QuotasCommand::Describe { entity } => describe(cli, &entity.parts()),
        QuotasCommand::Alter {
            entity,
            add,
            delete,
        } => {
            let parts = entity.parts();
            if parts.is_empty() {
                bail!("name the entity: --user, --user-default, --client-id or --client-default");
            }
            let ops = operations(add, delete)?;
            alter(cli, &parts, &ops)
        }
    }
}

fn describe(cli: &Cli, parts: &[(&'static str, Option<String>)]) -> Result<()> {
    let req = DescribeClientQuotasRequest::default()
        .with_components(
            parts
                .iter()
                .map(|(t, n)| {
                    ComponentData::default()
                        .with_entity_type(s(t))
                        .with_match_type(if n.is_some() {
                            MATCH_EXACT
                        } else {
                            MATCH_DEFAULT
                        })
                        .with_match(n.as_deref().map(s))
                })
                .collect(),
        )
        // Naming entities shows exactly those, as kafka-configs.sh; naming none shows all.
        .with_strict(!parts.is_empty());
    let resp: DescribeClientQuotasResponse =
        request(cli, ApiKey::DescribeClientQuotas, QUOTAS_VERSION, &req)?;
    check(
        resp.error_code,
        resp.error_message.as_deref(),
        "describing quotas",
    )?;
    let mut lines = Vec::new();
    for e in resp.entries.unwrap_or_default() {
        let entity = entity_text(
            e.entity
                .iter()
                .map(|p| (p.entity_type.as_str(), p.entity_name.as_deref())),
        );
        let mut values: Vec<String> = e
            .values
            .iter()
            .map(|v| format!("{}={}", v.key.as_str(), v.value))
            .collect();
        values.sort();
        lines.push(format!("{entity}\t{}", values.join(",")));
    }
    lines.sort();
    println!("ENTITY\tQUOTAS");
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

fn alter(
    cli: &Cli,
    parts: &[(&'static str, Option<String>)],
    ops: &[(String, Option<f64>)],
) -> Result<()> {
    let entity = entity_text(parts.iter().map(|(t, n)| (*t, n.as_deref())));
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default()
            .with_entity(
                parts
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(s(t))
                            .with_entity_name(n.as_deref().map(s))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(key, value)| {
                        OpData::default()
                            .with_key(s(key))
                            .with_value(value.unwrap_or(0.0))
                            .with_remove(value.is_none())
                    })
                    .collect(),
            )])
        .with_validate_only(false);
    let resp: AlterClientQuotasResponse =
        request(cli, ApiKey::AlterClientQuotas, QUOTAS_VERSION, &req)?;
    let r = resp
        .entries
        .first()
        .ok_or_else(|| anyhow!("the broker answered nothing for {entity}"))?;
    check(
        r.error_code,
        r.error_message.as_deref(),
        &format!("altering the quotas of {entity}"),
    )?;
    let changes: Vec<String> = ops
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => format!("{k} removed"),
        })
        .collect();
    println!("altered the quotas of {entity}: {}", changes.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn operations_parse_like_kafka_configs() {
        let ops = operations(
            &strings(&["producer_byte_rate=1048576,consumer_byte_rate=2048"]),
            &strings(&["request_percentage"]),
        )
        .unwrap();
        assert_eq!(
            ops,
            vec![
                ("producer_byte_rate".to_string(), Some(1_048_576.0)),
                ("consumer_byte_rate".to_string(), Some(2048.0)),
                ("request_percentage".to_string(), None),
            ]
        );
        for (add, del, says) in [
            (&["producer_byte_rate=fast"][..], &[][..], "positive number"),
            (&["producer_byte_rate=-1"], &[], "positive number"),
            (&["producer_byte_rate"], &[], "KEY=VALUE"),
            (&["producer_byte_rate=1"], &["producer_byte_rate"], "twice"),
            (&[], &[], "nothing to alter"),
        ] {
            let e = operations(&strings(add), &strings(del))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{add:?} {del:?}: {e}");
        }
    }

    #[test]
    fn entities_print_as_kafka_names_them() {
        assert_eq!(
            entity_text([("user", Some("alice")), ("client-id", None)]),
            "user=alice,client-id=<default>"
        );
    }
}
