//! SASL on a connection (Kafka's `SaslServerAuthenticator`): what a listener offers, where a
//! connection is in its authentication, and the SaslHandshake and SaslAuthenticate requests
//! that move it on. The mechanisms themselves (PLAIN, SCRAM) are the security crate's; SCRAM
//! credentials come from the metadata image, PLAIN's users from the listener's JAAS config.
//!
//! On a SASL listener a connection may send ApiVersions, then SaslHandshake naming a
//! mechanism, then the mechanism's tokens: in SaslAuthenticate requests (handshake v1), or as
//! bare length-prefixed frames with no Kafka header (handshake v0, as old clients do). Any
//! other request before it is authenticated closes the connection, as does a failed
//! authentication (after its response). With `connections.max.reauth.ms` the session ends that
//! long after it began (KIP-368): the client authenticates again on the same connection before
//! then, and a connection whose session has ended is closed at its next request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info};
use tributary_protocol::ErrorCode;
use tributary_security::scram::{BoxedScramLookup, ScramCredential, ScramMechanism, ScramServer};

use crate::catalog::Catalog;
use crate::cluster::config::{ListenerSpec, SecurityProtocol};
use crate::config::BrokerConfig;

/// The principal of a connection that did not authenticate (PLAINTEXT), as Kafka names it.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// What one listener offers: its name, protocol, SASL mechanisms and PLAIN users. Built once
/// per shard and listener; every connection accepted there shares it.
pub struct ListenerCtx {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// `sasl.enabled.mechanisms` on a SASL listener; empty otherwise.
    pub mechanisms: Vec<String>,
    /// PLAIN's users and passwords, from `listener.name.NAME.plain.sasl.jaas.config`.
    plain_users: HashMap<String, String>,
    /// Signed OAUTHBEARER tokens are checked against a JWKS (Kafka's validator set for this
    /// listener); `None`: unsecured tokens, Kafka's default.
    oauth: Option<std::sync::Arc<tributary_security::oauthbearer::SignedValidator>>,
    /// `connections.max.reauth.ms`; `None`: sessions never end.
    pub reauth: Option<Duration>,
    /// Salts the fake credential SCRAM answers an unknown user with, the same on every
    /// connection so that asking twice tells nothing.
    unknown_user_key: [u8; 32],
}

impl ListenerCtx {
    pub fn new(config: &BrokerConfig, spec: ListenerSpec) -> Self {
        let sasl = spec.protocol.is_sasl();
        let plain_users = config
            .listener_props
            .get(&format!(
                "listener.name.{}.plain.sasl.jaas.config",
                spec.name.to_ascii_lowercase()
            ))
            .and_then(|jaas| tributary_security::jaas::JaasConfig::parse(jaas).ok())
            .map(|j| tributary_security::jaas::plain_users(&j))
            .unwrap_or_default();
        let oauth = config.oauth_validators.get(&spec.name).cloned();
        Self {
            name: spec.name,
            protocol: spec.protocol,
            mechanisms: if sasl {
                config.security.sasl_enabled_mechanisms.clone()
            } else {
                Vec::new()
            },
            plain_users,
            oauth,
            reauth: (config.security.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(config.security.connections_max_reauth_ms)),
            unknown_user_key: config.security.scram_unknown_user_key,
        }
    }

    pub fn is_sasl(&self) -> bool {
        self.protocol.is_sasl()
    }
}

/// A mechanism in progress (its state is its own).
pub enum Exchange {
    Plain,
    OAuthBearer,
    Scram(Box<ScramServer<BoxedScramLookup>>),
}

/// Where a connection is in its authentication.
pub enum AuthState {
    /// Needs nothing (PLAINTEXT) or is authenticated: the principal, and when its session
    /// ends.
    Authenticated {
        principal: String,
        expires: Option<Instant>,
    },
    /// On a SASL listener, before SaslHandshake (or, re-authenticating, between sessions).
    AwaitingHandshake {
        /// The principal of the session being renewed; a renewal must keep it.
        renewing: Option<String>,
    },
    /// After SaslHandshake: the mechanism's tokens come next, bare (`raw`, handshake v0) or in
    /// SaslAuthenticate requests.
    Exchanging {
        mechanism: String,
        exchange: Exchange,
        raw: bool,
        renewing: Option<String>,
    },
}

impl AuthState {
    pub fn new(listener: &ListenerCtx) -> Self {
        if listener.is_sasl() {
            Self::AwaitingHandshake { renewing: None }
        } else {
            Self::Authenticated {
                principal: ANONYMOUS.to_string(),
                expires: None,
            }
        }
    }

    /// Whether a request of `api_key` may be served now; `Err` says why the connection closes.
    pub fn admits(&self, api_key: i16, now: Instant) -> Result<(), String> {
        use tributary_protocol::registry::api_key as k;
        let auth_request = api_key == k::SASL_HANDSHAKE || api_key == k::SASL_AUTHENTICATE;
        match self {
            Self::Authenticated { expires, .. } => match expires {
                Some(at) if now >= *at && !auth_request => Err(
                    "the SASL session expired (connections.max.reauth.ms) and the client did not re-authenticate".into(),
                ),
                _ => Ok(()),
            },
            Self::AwaitingHandshake { .. } if auth_request || api_key == k::API_VERSIONS => Ok(()),
            Self::Exchanging { raw: false, .. } if api_key == k::SASL_AUTHENTICATE => Ok(()),
            _ => Err(format!(
                "unexpected request (API key {api_key}) during SASL authentication"
            )),
        }
    }

    /// Whether the next frame is a bare SASL token (after a v0 handshake), not a request.
    pub fn expects_raw_token(&self) -> bool {
        matches!(self, Self::Exchanging { raw: true, .. })
    }

    pub fn principal(&self) -> Option<&str> {
        match self {
            Self::Authenticated { principal, .. } => Some(principal),
            _ => None,
        }
    }
}

/// What a step of the exchange decided, besides its response.
pub enum Step {
    /// Send the response and wait for the next token.
    Continue,
    /// Authenticated; the session lasts this long (`None`: for ever).
    Done(Option<Duration>),
    /// Send the response, then close the connection.
    Close,
}

/// SaslHandshake: picks the mechanism. UNSUPPORTED_SASL_MECHANISM (then closed) for one the
/// listener does not offer; ILLEGAL_SASL_STATE on a listener without SASL or mid-exchange.
pub fn handshake(
    listener: &ListenerCtx,
    state: &mut AuthState,
    version: i16,
    mechanism: &str,
    image: &Arc<Catalog>,
) -> (SaslHandshakeResponse, Step) {
    let offered: Vec<StrBytes> = listener
        .mechanisms
        .iter()
        .map(|m| StrBytes::from_string(m.clone()))
        .collect();
    let reply = |code: ErrorCode| {
        SaslHandshakeResponse::default()
            .with_error_code(code.code())
            .with_mechanisms(offered.clone())
    };
    let renewing = match state {
        AuthState::AwaitingHandshake { renewing } => renewing.take(),
        AuthState::Authenticated { principal, .. } if listener.is_sasl() => Some(principal.clone()),
        _ => return (reply(ErrorCode::ILLEGAL_SASL_STATE), Step::Close),
    };
    let mechanism = mechanism.to_string();
    if !listener.mechanisms.contains(&mechanism) {
        debug!(listener = %listener.name, %mechanism, "SASL mechanism not enabled");
        return (reply(ErrorCode::UNSUPPORTED_SASL_MECHANISM), Step::Close);
    }
    let exchange = match mechanism.as_str() {
        "PLAIN" => Exchange::Plain,
        "OAUTHBEARER" => Exchange::OAuthBearer,
        m => match ScramMechanism::from_name(m) {
            Some(mech) => Exchange::Scram(Box::new(scram_server(
                mech,
                image.clone(),
                listener.unknown_user_key,
            ))),
            None => return (reply(ErrorCode::UNSUPPORTED_SASL_MECHANISM), Step::Close),
        },
    };
    *state = AuthState::Exchanging {
        mechanism,
        exchange,
        raw: version == 0,
        renewing,
    };
    (reply(ErrorCode::NONE), Step::Continue)
}

fn scram_server(
    mech: ScramMechanism,
    image: Arc<Catalog>,
    unknown_user_key: [u8; 32],
) -> ScramServer<BoxedScramLookup> {
    let lookup: BoxedScramLookup = Box::new(move |user: &str| {
        let r = image.scram.get(user)?.get(&mech.type_id())?;
        Some(ScramCredential {
            salt: r.salt.clone(),
            stored_key: r.stored_key.clone(),
            server_key: r.server_key.clone(),
            iterations: r.iterations.max(0) as u32,
        })
    });
    ScramServer::new(mech, lookup).with_unknown_user_key(unknown_user_key)
}

/// One token of the exchange (a SaslAuthenticate's bytes, or a bare frame after a v0
/// handshake): the bytes to send back and what follows. A failure's message is safe to show
/// the client: it names neither the password nor the proof.
pub fn step(
    listener: &ListenerCtx,
    state: &mut AuthState,
    token: &[u8],
    now: Instant,
) -> Result<(Vec<u8>, Step), String> {
    let AuthState::Exchanging {
        mechanism,
        exchange,
        renewing,
        ..
    } = state
    else {
        return Err(
            "a SASL token arrived with no mechanism chosen (send SaslHandshake first)".into(),
        );
    };
    // When the credential itself expires (an OAUTHBEARER token), ms since the epoch.
    let mut credential_expiry: Option<i64> = None;
    let (out, user) = match exchange {
        Exchange::Plain => {
            let users = &listener.plain_users;
            let user = tributary_security::plain::verify(token, |u| users.get(u).cloned())
                .map_err(|e| e.to_string())?;
            (Vec::new(), Some(user))
        }
        Exchange::OAuthBearer => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let (user, exp) = match &listener.oauth {
                Some(validator) => validator.verify(token, now_ms),
                None => tributary_security::oauthbearer::verify(token, now_ms),
            }
            .map_err(|e| e.to_string())?;
            credential_expiry = Some(exp.saturating_sub(now_ms).max(0));
            (Vec::new(), Some(user))
        }
        Exchange::Scram(server) => {
            let out = server.step(token).map_err(|e| e.to_string())?;
            let user = server
                .is_complete()
                .then(|| server.authenticated_user().map(str::to_string))
                .flatten();
            (out, user)
        }
    };
    let Some(user) = user else {
        return Ok((out, Step::Continue));
    };
    let principal = format!("User:{user}");
    if let Some(previous) = renewing.as_deref() {
        if previous != principal {
            return Err(format!(
                "re-authentication as {principal} on a connection authenticated as {previous}: a connection keeps its principal"
            ));
        }
    }
    if renewing.is_none() {
        info!(listener = %listener.name, %principal, mechanism = %mechanism, "authenticated");
    }
    // As Kafka: with re-authentication on, a session ends at connections.max.reauth.ms or
    // when its credential expires, whichever is first.
    let lifetime = listener.reauth.map(|d| match credential_expiry {
        Some(left) => d.min(Duration::from_millis(left as u64)),
        None => d,
    });
    *state = AuthState::Authenticated {
        principal,
        expires: lifetime.map(|d| now + d),
    };
    Ok((out, Step::Done(lifetime)))
}

/// SaslAuthenticate: `step` in Kafka's envelope. A failure answers
/// SASL_AUTHENTICATION_FAILED with its message, and the connection closes after it.
pub fn authenticate(
    listener: &ListenerCtx,
    state: &mut AuthState,
    token: &[u8],
    now: Instant,
) -> (SaslAuthenticateResponse, Step) {
    match step(listener, state, token, now) {
        Ok((out, step)) => {
            let lifetime = match &step {
                Step::Done(Some(d)) => d.as_millis() as i64,
                _ => 0,
            };
            (
                SaslAuthenticateResponse::default()
                    .with_auth_bytes(out.into())
                    .with_session_lifetime_ms(lifetime),
                step,
            )
        }
        Err(message) => {
            debug!(listener = %listener.name, %message, "SASL authentication failed");
            (
                SaslAuthenticateResponse::default()
                    .with_error_code(ErrorCode::SASL_AUTHENTICATION_FAILED.code())
                    .with_error_message(Some(StrBytes::from_string(message))),
                Step::Close,
            )
        }
    }
}

/// SCRAM credentials given before the broker starts (`tributary --add-scram`, as
/// `kafka-storage format --add-scram`): kept in this file of the data directory until the
/// node next starts and writes them to the cluster's metadata, then removed. One JSON line
/// per credential (user, mechanism type, salted credential): never the password.
pub const BOOTSTRAP_SCRAM_FILE: &str = "bootstrap-scram.json";

/// Parses Kafka's `--add-scram` form (`SCRAM-SHA-256=[name=admin,password=admin-secret]`, or
/// with `iterations`, `salt` and `saltedpassword`) and appends the salted credential to the
/// data directory's bootstrap file.
pub fn add_bootstrap_scram(data_dir: &std::path::Path, arg: &str) -> anyhow::Result<String> {
    use std::io::Write;
    let (mech, user, c) = tributary_security::scram::parse_add_scram(arg)
        .map_err(|e| anyhow::anyhow!("--add-scram: {e}"))?;
    let record = crate::catalog::ScramRecord {
        salt: c.salt,
        stored_key: c.stored_key,
        server_key: c.server_key,
        iterations: c.iterations as i32,
    };
    std::fs::create_dir_all(data_dir)?;
    let path = data_dir.join(BOOTSTRAP_SCRAM_FILE);
    let line = serde_json::to_string(&(user.clone(), mech.type_id(), record))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    writeln!(f, "{line}")?;
    f.sync_all()?;
    Ok(format!(
        "{} credential for user {user} written to {}; it reaches the cluster's metadata when this node starts",
        mech.name(),
        path.display()
    ))
}

/// The credentials waiting in the bootstrap file, as one metadata command; `None` when there
/// are none.
pub fn bootstrap_scram_command(
    bytes: &[u8],
) -> anyhow::Result<Option<tributary_metadata::command::MetadataCommand>> {
    let mut upsert = Vec::new();
    for (n, line) in String::from_utf8_lossy(bytes).lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry: (String, i8, crate::catalog::ScramRecord) = serde_json::from_str(line)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{BOOTSTRAP_SCRAM_FILE} line {}: {e}; remove the line and add the credential again with --add-scram",
                    n + 1
                )
            })?;
        upsert.push(entry);
    }
    Ok((!upsert.is_empty()).then_some(
        tributary_metadata::command::MetadataCommand::AlterScramCredentials {
            upsert,
            delete: Vec::new(),
        },
    ))
}
