//! `trib users create|delete|list`: SCRAM credentials (KIP-554) with
//! AlterUserScramCredentials and DescribeUserScramCredentials, as `kafka-configs.sh
//! --entity-type users --alter --add-config SCRAM-SHA-256=[...]` does: the salt is drawn here
//! and the password salted here, so only the salted password travels. The password is never
//! printed nor put in an error.

use std::io::BufRead;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tributary_security::scram::{ScramMechanism, DEFAULT_ITERATIONS, SALT_BYTES};

use crate::reassign::{check, describe_error, entries_done, request};
use crate::Cli;

/// AlterUserScramCredentials and DescribeUserScramCredentials v0, the only version.
const SCRAM_VERSION: i16 = 0;
/// The longest password line `--password-stdin` reads, in bytes: far beyond any password, and a
/// bound on what a mistaken pipe makes trib hold.
const PASSWORD_BYTES_MAX: usize = 64 * 1024;

#[derive(Subcommand)]
pub enum UsersCommand {
    /// Create or replace a user's SCRAM credential for one mechanism.
    Create {
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, value_parser = parse_mechanism)]
        mechanism: ScramMechanism,
        /// PBKDF2 iterations, 4096–16384 as Kafka allows.
        #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
        iterations: u32,
        #[command(flatten)]
        password: PasswordSource,
    },
    /// Delete a user's SCRAM credential for one mechanism.
    Delete {
        name: String,
        #[arg(long, value_parser = parse_mechanism)]
        mechanism: ScramMechanism,
    },
    /// Users with SCRAM credentials, one mechanism per line: all of them, or these.
    List { names: Vec<String> },
}

/// Where the password comes from.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct PasswordSource {
    /// The password (visible to other local users in the process list: prefer
    /// `--password-stdin`).
    #[arg(long)]
    password: Option<String>,
    /// Read the password from the first line of stdin (no prompt, nothing echoed).
    #[arg(long)]
    password_stdin: bool,
}

/// A SCRAM mechanism by its SASL name, in any case.
fn parse_mechanism(text: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::from_name(&text.to_ascii_uppercase()).ok_or_else(|| {
        format!("unknown SCRAM mechanism {text:?}; use SCRAM-SHA-256 or SCRAM-SHA-512")
    })
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The first line of `input` without its line end.
fn read_password(input: impl BufRead) -> Result<String> {
    let mut line = String::new();
    input
        .take(PASSWORD_BYTES_MAX as u64 + 2)
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.len() > PASSWORD_BYTES_MAX {
        bail!("the password line on stdin is longer than {PASSWORD_BYTES_MAX} bytes");
    }
    if password.is_empty() {
        bail!("no password on stdin: give it as the first line");
    }
    Ok(password.to_string())
}

pub fn users(cli: &Cli, cmd: &UsersCommand) -> Result<()> {
    match cmd {
        UsersCommand::Create {
            name,
            mechanism,
            iterations,
            password,
        } => {
            let m = *mechanism;
            if !(m.min_iterations()..=m.max_iterations()).contains(iterations) {
                bail!(
                    "--iterations {iterations}: {m} takes {} to {}",
                    m.min_iterations(),
                    m.max_iterations()
                );
            }
            let password = match &password.password {
                Some(p) if p.is_empty() => bail!("the password is empty"),
                Some(p) => p.clone(),
                None if password.password_stdin => read_password(std::io::stdin().lock())?,
                None => bail!("give the password with --password-stdin or --password"),
            };
            let mut salt = vec![0u8; SALT_BYTES];
            getrandom::getrandom(&mut salt)
                .map_err(|e| anyhow!("no random bytes for the salt from the system: {e}"))?;
            let salted = m.salted_password(password.as_bytes(), &salt, *iterations);
            let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(s(name))
                    .with_mechanism(m.type_id())
                    .with_iterations(i32::try_from(*iterations).unwrap_or(i32::MAX))
                    .with_salt(Bytes::from(salt))
                    .with_salted_password(Bytes::from(salted)),
            ]);
            alter(cli, &req, name, m)?;
            println!("created the {m} credential of {name} ({iterations} iterations)");
            Ok(())
        }
        UsersCommand::Delete { name, mechanism } => {
            let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                ScramCredentialDeletion::default()
                    .with_name(s(name))
                    .with_mechanism(mechanism.type_id()),
            ]);
            alter(cli, &req, name, *mechanism)?;
            println!("deleted the {mechanism} credential of {name}");
            Ok(())
        }
        UsersCommand::List { names } => list(cli, names),
    }
}

/// Sends one alteration for `name` and checks the broker's answer for it.
fn alter(
    cli: &Cli,
    req: &AlterUserScramCredentialsRequest,
    name: &str,
    mechanism: ScramMechanism,
) -> Result<()> {
    let resp: AlterUserScramCredentialsResponse =
        request(cli, ApiKey::AlterUserScramCredentials, SCRAM_VERSION, req)?;
    let r = resp
        .results
        .iter()
        .find(|r| r.user.as_str() == name)
        .ok_or_else(|| anyhow!("the broker answered nothing for user {name}"))?;
    check(
        r.error_code,
        r.error_message.as_deref(),
        &format!("the {mechanism} credential of {name}"),
    )
}

fn list(cli: &Cli, names: &[String]) -> Result<()> {
    let req = DescribeUserScramCredentialsRequest::default().with_users(if names.is_empty() {
        None
    } else {
        Some(
            names
                .iter()
                .map(|n| UserName::default().with_name(s(n)))
                .collect(),
        )
    });
    let resp: DescribeUserScramCredentialsResponse = request(
        cli,
        ApiKey::DescribeUserScramCredentials,
        SCRAM_VERSION,
        &req,
    )?;
    check(
        resp.error_code,
        resp.error_message.as_deref(),
        "listing SCRAM credentials",
    )?;
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for r in &resp.results {
        if r.error_code != 0 {
            failures.push(format!(
                "user {}: {}",
                r.user.as_str(),
                describe_error(r.error_code, r.error_message.as_deref())
            ));
            continue;
        }
        for c in &r.credential_infos {
            let mechanism = ScramMechanism::from_type_id(c.mechanism)
                .map_or_else(|| format!("mechanism {}", c.mechanism), |m| m.to_string());
            rows.push((r.user.to_string(), mechanism, c.iterations));
        }
    }
    rows.sort();
    println!("USER\tMECHANISM\tITERATIONS");
    for (user, mechanism, iterations) in rows {
        println!("{user}\t{mechanism}\t{iterations}");
    }
    entries_done(failures, resp.results.len(), "users")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_by_name_in_any_case() {
        assert_eq!(parse_mechanism("SCRAM-SHA-256"), Ok(ScramMechanism::Sha256));
        assert_eq!(parse_mechanism("scram-sha-512"), Ok(ScramMechanism::Sha512));
        let e = parse_mechanism("PLAIN").unwrap_err();
        assert!(e.contains("SCRAM-SHA-256 or SCRAM-SHA-512"), "{e}");
    }

    #[test]
    fn the_password_is_the_first_line_without_its_end() {
        let mut input = "s3cret\r\nsecond line\n".as_bytes();
        assert_eq!(read_password(&mut input).unwrap(), "s3cret");
        let mut input = "no newline".as_bytes();
        assert_eq!(read_password(&mut input).unwrap(), "no newline");
        let mut empty = "".as_bytes();
        let e = read_password(&mut empty).unwrap_err().to_string();
        assert!(e.contains("no password on stdin"), "{e}");
        let long = "x".repeat(PASSWORD_BYTES_MAX + 10);
        let e = read_password(&mut long.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
    }
}
