//! SASL SCRAM-SHA-256 and SCRAM-SHA-512, the server side as Kafka speaks it (RFC 5802 and
//! RFC 7677): the two mechanisms and their Kafka type ids, the salted credential a broker stores
//! (and the `SCRAM-SHA-256=[name=...,password=...]` text form `kafka-storage --add-scram` takes),
//! and the server's state machine over the three client messages — plus the client's side
//! ([`ScramClient`]), for tools that authenticate to a broker.
//!
//! Pure logic: it never touches a socket, a clock or the credential store. The caller hands the
//! server a lookup and the client's bytes, and sends back what `step` returns. It must not reveal
//! whether a user exists before the final message (an unknown user gets a fake credential and
//! fails where a wrong password fails), and it never puts a password, a proof or a key into an
//! error or a log line. (Kafka itself refuses an unknown user at the client-first message; waiting
//! costs nothing and keeps a client from probing for names.)
//!
//! Like Kafka, passwords are used as their UTF-8 bytes without SASLprep normalization, so a
//! credential made here verifies against a Kafka client and one imported from Kafka verifies here.

use std::collections::BTreeMap;
use std::fmt;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The longest SCRAM message the server reads. Real client messages are well under 512 bytes
/// (a user name, a nonce, a base64 proof); the bound is checked before anything is parsed.
pub const SCRAM_MESSAGE_BYTES_MAX: usize = 8 * 1024;
/// Salt length of credentials made by [`ScramCredential::generate`] and of the fake credential
/// given to unknown users.
pub const SALT_BYTES: usize = 32;
/// Random bytes in a server nonce (base64 makes it 32 printable characters).
pub const SERVER_NONCE_BYTES: usize = 24;
/// Iterations used when `--add-scram` names none, as in Kafka.
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// The longest `--add-scram` argument [`parse_add_scram`] accepts.
pub const ADD_SCRAM_ARG_BYTES_MAX: usize = 8 * 1024;
/// Kafka's lower bound on iterations, the same for both mechanisms.
const MIN_ITERATIONS: u32 = 4096;
/// Kafka's upper bound on iterations, the same for both mechanisms.
const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism Kafka supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// Both mechanisms, in Kafka's type-id order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name a client sends in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism with this exact SASL name (names are case-sensitive, as in Kafka).
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanism's id in Alter/DescribeUserScramCredentials and in the metadata log's
    /// UserScramCredentialRecord.
    pub fn type_id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism with this Kafka type id (0 is Kafka's UNKNOWN and maps to `None`).
    pub fn from_type_id(id: i8) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.type_id() == id)
    }

    /// The fewest PBKDF2 iterations Kafka accepts for a credential.
    pub fn min_iterations(self) -> u32 {
        MIN_ITERATIONS
    }

    /// The most PBKDF2 iterations Kafka accepts for a credential.
    pub fn max_iterations(self) -> u32 {
        MAX_ITERATIONS
    }

    /// Bytes of the hash, and so of every key, proof and signature.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes a key of any length (long keys are hashed), so construction cannot fail.
        match self {
            ScramMechanism::Sha256 => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key)
                    .expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// Hi(password, salt, i) of RFC 5802: PBKDF2 with this mechanism's HMAC — what a client
    /// sends in AlterUserScramCredentials.
    ///
    /// # Panics
    ///
    /// If `iterations` is 0.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        assert!(iterations > 0, "PBKDF2 needs at least one iteration");
        let mut out = vec![0u8; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a SCRAM exchange or a credential was refused. The `Display` of every variant is fit to
/// send to the client as SaslAuthenticate's `error_message`: it never holds a password, a proof,
/// a key, or anything that tells an unknown user from a wrong password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// Wrong password, unknown user, or a stored credential the server will not use; the same
    /// words for each so a client cannot tell which.
    #[error("Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")]
    InvalidCredentials { mechanism: ScramMechanism },
    /// The client's message breaks the SCRAM grammar or contradicts the exchange so far.
    #[error("Authentication failed: invalid {mechanism} {message}: {reason}")]
    Malformed {
        mechanism: ScramMechanism,
        /// "client-first message" or "client-final message".
        message: &'static str,
        reason: &'static str,
    },
    /// The client's message is longer than [`SCRAM_MESSAGE_BYTES_MAX`].
    #[error("Authentication failed: {mechanism} message of {size} bytes is over the limit of {max} bytes")]
    TooLarge {
        mechanism: ScramMechanism,
        size: usize,
        max: usize,
    },
    /// The client asked for channel binding (`p=`), which Kafka does not offer.
    #[error(
        "Authentication failed: channel binding is not supported with SASL mechanism {mechanism}"
    )]
    ChannelBindingUnsupported { mechanism: ScramMechanism },
    /// The client sent a SCRAM extension, such as `tokenauth=true` for delegation tokens.
    #[error("Authentication failed: SCRAM extensions (such as delegation token authentication) are not supported with SASL mechanism {mechanism}")]
    UnsupportedExtension { mechanism: ScramMechanism },
    /// The client asked to act as someone other than the user it authenticates as.
    #[error("Authentication failed: Client requested an authorization id that is different from username")]
    AuthorizationIdMismatch,
    /// A message arrived after the exchange completed or failed; Kafka answers these with
    /// ILLEGAL_SASL_STATE rather than SASL_AUTHENTICATION_FAILED.
    #[error("Unexpected SASL message in {mechanism} server state {state}")]
    IllegalState {
        mechanism: ScramMechanism,
        state: &'static str,
    },
    /// The operating system's random source failed.
    #[error("Authentication failed: the server could not generate a random {what}")]
    Random { what: &'static str },
    /// A credential could not be made, or an `--add-scram` argument was wrong.
    #[error("invalid SCRAM credential: {reason}")]
    Credential { reason: String },
}

impl ScramError {
    /// True when Kafka would answer with ILLEGAL_SASL_STATE instead of
    /// SASL_AUTHENTICATION_FAILED.
    pub fn is_illegal_state(&self) -> bool {
        matches!(self, ScramError::IllegalState { .. })
    }

    fn credential(reason: impl Into<String>) -> ScramError {
        ScramError::Credential {
            reason: reason.into(),
        }
    }
}

/// What a broker stores for one user and one mechanism: enough to check a client's proof and to
/// prove the server knows the password, but not the password nor the salted password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    /// H(HMAC(salted password, "Client Key")).
    pub stored_key: Vec<u8>,
    /// HMAC(salted password, "Server Key").
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// The credential for `password` with this salt and iteration count. Refuses an empty salt
    /// and iterations outside the mechanism's bounds.
    pub fn new(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        check_salt_and_iterations(mechanism, &salt, iterations)?;
        let salted = mechanism.salted_password(password, &salt, iterations);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential for `password` with a fresh random salt of [`SALT_BYTES`].
    pub fn generate(
        mechanism: ScramMechanism,
        password: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        let salt = random_bytes(SALT_BYTES, "salt")?;
        Self::new(mechanism, password, salt, iterations)
    }

    /// The credential from an already salted password (the `saltedpassword=` form of
    /// `--add-scram`), which must be as long as the mechanism's hash.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        check_salt_and_iterations(mechanism, &salt, iterations)?;
        if salted_password.len() != mechanism.hash_len() {
            return Err(ScramError::credential(format!(
                "the salted password is {} bytes but {mechanism} needs {}",
                salted_password.len(),
                mechanism.hash_len()
            )));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            iterations,
        })
    }
}

impl fmt::Debug for ScramCredential {
    // The keys stay out of logs: the server key lets its holder impersonate the server.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("salt", &STANDARD.encode(&self.salt))
            .field("stored_key", &"<redacted>")
            .field("server_key", &"<redacted>")
            .field("iterations", &self.iterations)
            .finish()
    }
}

fn check_salt_and_iterations(
    mechanism: ScramMechanism,
    salt: &[u8],
    iterations: u32,
) -> Result<(), ScramError> {
    if salt.is_empty() {
        return Err(ScramError::credential("the salt is empty"));
    }
    if iterations < mechanism.min_iterations() {
        return Err(ScramError::credential(format!(
            "iterations must be >= {} for {mechanism}, got {iterations}",
            mechanism.min_iterations()
        )));
    }
    if iterations > mechanism.max_iterations() {
        return Err(ScramError::credential(format!(
            "iterations must be <= {} for {mechanism}, got {iterations}",
            mechanism.max_iterations()
        )));
    }
    Ok(())
}

fn random_bytes(len: usize, what: &'static str) -> Result<Vec<u8>, ScramError> {
    let mut bytes = vec![0u8; len];
    getrandom::getrandom(&mut bytes).map_err(|_| ScramError::Random { what })?;
    Ok(bytes)
}

/// A fresh key for [`ScramServer::with_unknown_user_key`]; make it once per broker process.
pub fn generate_unknown_user_key() -> Result<[u8; 32], ScramError> {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|_| ScramError::Random {
        what: "unknown-user key",
    })?;
    Ok(key)
}

/// Parses one `--add-scram` argument of `kafka-storage format`:
/// `SCRAM-SHA-256=[name=alice,password=alice-secret]` (iterations default to
/// [`DEFAULT_ITERATIONS`], the salt is random, `salt=` may fix it) or
/// `SCRAM-SHA-512=[name=alice,iterations=8192,salt="base64",saltedpassword="base64"]`.
/// Values may be wrapped in double quotes; a value cannot hold a comma (nor can it in Kafka).
/// Returns the mechanism, the user name and the credential. Errors never quote the password.
pub fn parse_add_scram(arg: &str) -> Result<(ScramMechanism, String, ScramCredential), ScramError> {
    if arg.len() > ADD_SCRAM_ARG_BYTES_MAX {
        return Err(ScramError::credential(format!(
            "the argument is {} bytes, over the limit of {ADD_SCRAM_ARG_BYTES_MAX}",
            arg.len()
        )));
    }
    let arg = arg.trim();
    let Some((mechanism_name, config)) = arg.split_once('=') else {
        return Err(ScramError::credential(
            "no '=' after the mechanism (expected e.g. SCRAM-SHA-256=[name=alice,password=secret])",
        ));
    };
    let mechanism_name = mechanism_name.trim();
    let mechanism = ScramMechanism::from_name(mechanism_name).ok_or_else(|| {
        ScramError::credential(format!(
            "mechanism '{mechanism_name}' is not supported (use SCRAM-SHA-256 or SCRAM-SHA-512)"
        ))
    })?;
    let config = config.trim();
    let Some(inner) = config.strip_prefix('[') else {
        return Err(ScramError::credential(
            "the configuration must start with '['",
        ));
    };
    let Some(inner) = inner.strip_suffix(']') else {
        return Err(ScramError::credential(
            "the configuration must end with ']'",
        ));
    };
    let mut fields = parse_add_scram_fields(inner)?;
    let credential = add_scram_credential(mechanism, &mut fields)?;
    let name = fields.name;
    Ok((mechanism, name, credential))
}

struct AddScramFields {
    name: String,
    salt: Option<Vec<u8>>,
    iterations: Option<u32>,
    password: Option<String>,
    salted_password: Option<Vec<u8>>,
}

fn parse_add_scram_fields(inner: &str) -> Result<AddScramFields, ScramError> {
    let mut map: BTreeMap<&str, &str> = BTreeMap::new();
    for component in inner.split(',') {
        let Some((key, value)) = component.split_once('=') else {
            return Err(ScramError::credential(format!(
                "component '{}' has no '='",
                redact_component(component)
            )));
        };
        let key = key.trim();
        let value = value.trim();
        let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(unquoted) => unquoted,
            None => value,
        };
        if map.insert(key, value).is_some() {
            return Err(ScramError::credential(format!("'{key}' is given twice")));
        }
    }
    let name = match map.remove("name") {
        Some(name) if !name.is_empty() => name.to_string(),
        Some(_) => return Err(ScramError::credential("'name' is empty")),
        None => return Err(ScramError::credential("you must supply 'name'")),
    };
    let salt = match map.remove("salt") {
        Some(s) => Some(
            STANDARD
                .decode(s)
                .map_err(|_| ScramError::credential("'salt' is not valid base64"))?,
        ),
        None => None,
    };
    let iterations = match map.remove("iterations") {
        Some(s) => Some(s.parse::<u32>().map_err(|_| {
            ScramError::credential(format!("'iterations' is not a positive integer: '{s}'"))
        })?),
        None => None,
    };
    let password = map.remove("password").map(str::to_string);
    let salted_password = match map.remove("saltedpassword") {
        Some(s) => Some(
            STANDARD
                .decode(s)
                .map_err(|_| ScramError::credential("'saltedpassword' is not valid base64"))?,
        ),
        None => None,
    };
    if !map.is_empty() {
        let unknown: Vec<&str> = map.keys().copied().collect();
        return Err(ScramError::credential(format!(
            "unknown SCRAM configurations: {}",
            unknown.join(", ")
        )));
    }
    Ok(AddScramFields {
        name,
        salt,
        iterations,
        password,
        salted_password,
    })
}

/// The key of a `key=value` component, or a placeholder: the text may be part of a password.
fn redact_component(component: &str) -> &str {
    if component.trim().is_empty() {
        ""
    } else {
        "<redacted>"
    }
}

fn add_scram_credential(
    mechanism: ScramMechanism,
    fields: &mut AddScramFields,
) -> Result<ScramCredential, ScramError> {
    let iterations = fields.iterations.unwrap_or(DEFAULT_ITERATIONS);
    match (fields.password.take(), fields.salted_password.take()) {
        (Some(_), Some(_)) => Err(ScramError::credential(
            "supply only one of 'password' and 'saltedpassword'",
        )),
        (None, None) => Err(ScramError::credential(
            "you must supply one of 'password' or 'saltedpassword'",
        )),
        (Some(password), None) => match fields.salt.take() {
            Some(salt) => ScramCredential::new(mechanism, password.as_bytes(), salt, iterations),
            None => ScramCredential::generate(mechanism, password.as_bytes(), iterations),
        },
        (None, Some(salted)) => match fields.salt.take() {
            Some(salt) => {
                ScramCredential::from_salted_password(mechanism, &salted, salt, iterations)
            }
            None => Err(ScramError::credential(
                "you must supply 'salt' with 'saltedpassword'",
            )),
        },
    }
}

/// A lookup that can live in a connection's state next to other mechanisms' servers:
/// `ScramServer<BoxedScramLookup>` names one type whatever closure the broker passes.
pub type BoxedScramLookup = Box<dyn FnOnce(&str) -> Option<ScramCredential>>;

/// The server side of one SCRAM exchange. `F` finds a user's credential for this mechanism; it
/// runs once, on the client-first message.
///
/// ```text
/// client-first  n,,n=user,r=<client nonce>            -> server-first r=<nonces>,s=<salt>,i=<n>
/// client-final  c=biws,r=<nonces>,p=<proof>           -> server-final v=<server signature>
/// ```
///
/// Any error ends the exchange: every later `step` fails with [`ScramError::IllegalState`], as
/// does a step after completion.
pub struct ScramServer<F> {
    mechanism: ScramMechanism,
    state: State<F>,
    server_nonce: Option<String>,
    unknown_user_key: Option<[u8; 32]>,
}

enum State<F> {
    AwaitClientFirst { lookup: F },
    AwaitClientFinal(Box<Exchange>),
    Complete { user: String },
    Failed,
}

/// What the client-first message settled, kept for the client-final message.
struct Exchange {
    user: String,
    /// `n,,` or `y,,` or with an authzid; `c=` must be its base64.
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    /// Client nonce followed by server nonce.
    nonce: String,
    credential: ScramCredential,
    /// Only for the server's own log: the client learns nothing of it.
    user_known: bool,
}

const CLIENT_FIRST: &str = "client-first message";
const CLIENT_FINAL: &str = "client-final message";

impl<F> ScramServer<F>
where
    F: FnOnce(&str) -> Option<ScramCredential>,
{
    /// A server waiting for the client-first message.
    pub fn new(mechanism: ScramMechanism, lookup: F) -> ScramServer<F> {
        ScramServer {
            mechanism,
            state: State::AwaitClientFirst { lookup },
            server_nonce: None,
            unknown_user_key: None,
        }
    }

    /// Uses this server nonce instead of a random one. For tests and known-answer vectors
    /// only: a fixed nonce lets a recorded exchange be replayed.
    ///
    /// # Panics
    /// If the nonce is empty or holds a character SCRAM does not allow in a nonce (anything
    /// outside printable ASCII, or a comma); this is a programming error.
    pub fn with_server_nonce(mut self, nonce: impl Into<String>) -> ScramServer<F> {
        let nonce = nonce.into();
        assert!(!nonce.is_empty(), "a SCRAM nonce is never empty");
        assert!(
            nonce.bytes().all(is_nonce_byte),
            "a SCRAM nonce is printable and has no comma"
        );
        self.server_nonce = Some(nonce);
        self
    }

    /// Derives the fake salt shown to unknown users from this key and the user name, so the
    /// same unknown name gets the same salt on every connection, as a real user would. Without
    /// it the fake salt is random per exchange, which a client that asks twice could notice.
    /// Use one key for the life of the broker ([`generate_unknown_user_key`]).
    pub fn with_unknown_user_key(mut self, key: [u8; 32]) -> ScramServer<F> {
        self.unknown_user_key = Some(key);
        self
    }

    /// The mechanism this server speaks.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// True once the client's proof was verified and the server-final message returned.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete { .. })
    }

    /// The user who authenticated, once the exchange is complete.
    pub fn authenticated_user(&self) -> Option<&str> {
        match &self.state {
            State::Complete { user } => Some(user),
            _ => None,
        }
    }

    /// Takes the client's next message and returns the server's answer.
    pub fn step(&mut self, client_msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        match state {
            State::AwaitClientFirst { lookup } => {
                let exchange = self.client_first(client_msg, lookup)?;
                let answer = exchange.server_first.clone().into_bytes();
                self.state = State::AwaitClientFinal(Box::new(exchange));
                Ok(answer)
            }
            State::AwaitClientFinal(exchange) => {
                let (answer, user) = self.client_final(client_msg, *exchange)?;
                self.state = State::Complete { user };
                Ok(answer)
            }
            State::Complete { .. } => Err(ScramError::IllegalState {
                mechanism: self.mechanism,
                state: "COMPLETE",
            }),
            State::Failed => Err(ScramError::IllegalState {
                mechanism: self.mechanism,
                state: "FAILED",
            }),
        }
    }

    fn client_first(&self, msg: &[u8], lookup: F) -> Result<Exchange, ScramError> {
        let text = message_text(self.mechanism, msg, CLIENT_FIRST)?;
        let first = parse_client_first(self.mechanism, text)?;
        if let Some(authzid) = &first.authzid {
            if *authzid != first.user {
                return Err(ScramError::AuthorizationIdMismatch);
            }
        }
        let (credential, user_known) = match lookup(&first.user) {
            Some(credential) if credential.iterations < self.mechanism.min_iterations() => {
                tracing::warn!(
                    user = %first.user,
                    iterations = credential.iterations,
                    mechanism = %self.mechanism,
                    "stored SCRAM credential has fewer iterations than the minimum; refusing it"
                );
                return Err(ScramError::InvalidCredentials {
                    mechanism: self.mechanism,
                });
            }
            Some(credential) => (credential, true),
            None => (self.fake_credential(&first.user)?, false),
        };
        let server_nonce = match &self.server_nonce {
            Some(nonce) => nonce.clone(),
            None => URL_SAFE_NO_PAD.encode(random_bytes(SERVER_NONCE_BYTES, "nonce")?),
        };
        let nonce = format!("{}{}", first.nonce, server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&credential.salt),
            credential.iterations
        );
        Ok(Exchange {
            user: first.user,
            gs2_header: first.gs2_header.to_string(),
            client_first_bare: first.bare.to_string(),
            server_first,
            nonce,
            credential,
            user_known,
        })
    }

    /// A credential nobody can match, shaped like a real one so the server-first message of an
    /// unknown user looks like that of a known one.
    fn fake_credential(&self, user: &str) -> Result<ScramCredential, ScramError> {
        let mut salt = match &self.unknown_user_key {
            Some(key) => self.mechanism.hmac(key, user.as_bytes()),
            None => random_bytes(SALT_BYTES, "salt")?,
        };
        salt.truncate(SALT_BYTES);
        let hash_len = self.mechanism.hash_len();
        Ok(ScramCredential {
            salt,
            stored_key: random_bytes(hash_len, "key")?,
            server_key: random_bytes(hash_len, "key")?,
            iterations: DEFAULT_ITERATIONS,
        })
    }

    fn client_final(
        &self,
        msg: &[u8],
        exchange: Exchange,
    ) -> Result<(Vec<u8>, String), ScramError> {
        let mechanism = self.mechanism;
        let malformed = |reason| ScramError::Malformed {
            mechanism,
            message: CLIENT_FINAL,
            reason,
        };
        let text = message_text(mechanism, msg, CLIENT_FINAL)?;
        let final_msg = parse_client_final(mechanism, text)?;
        let channel_binding = STANDARD
            .decode(final_msg.channel_binding)
            .map_err(|_| malformed("channel binding (c=) is not valid base64"))?;
        if channel_binding != exchange.gs2_header.as_bytes() {
            return Err(malformed(
                "channel binding (c=) does not match the gs2 header",
            ));
        }
        // Kafka's check is `endsWith`, not equality, and clients rely on it: librdkafka before
        // 2.1 sends its own nonce again in front of the combined one.
        if !final_msg.nonce.ends_with(&exchange.nonce) {
            return Err(malformed("nonce (r=) is not the one the server sent"));
        }
        let proof = STANDARD
            .decode(final_msg.proof)
            .map_err(|_| malformed("proof (p=) is not valid base64"))?;
        if proof.len() != mechanism.hash_len() {
            return Err(malformed("proof (p=) has the wrong length"));
        }
        let auth_message = format!(
            "{},{},{}",
            exchange.client_first_bare, exchange.server_first, final_msg.without_proof
        );
        let credential = &exchange.credential;
        let client_signature = mechanism.hmac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let computed_stored_key = mechanism.hash(&client_key);
        let proof_ok: bool = computed_stored_key.ct_eq(&credential.stored_key).into();
        if !proof_ok {
            tracing::debug!(
                user = %exchange.user,
                user_known = exchange.user_known,
                mechanism = %mechanism,
                "SCRAM client proof did not verify"
            );
            return Err(ScramError::InvalidCredentials { mechanism });
        }
        let server_signature = mechanism.hmac(&credential.server_key, auth_message.as_bytes());
        let answer = format!("v={}", STANDARD.encode(server_signature)).into_bytes();
        Ok((answer, exchange.user))
    }
}

impl<F> fmt::Debug for ScramServer<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::AwaitClientFirst { .. } => "AwaitClientFirst",
            State::AwaitClientFinal(_) => "AwaitClientFinal",
            State::Complete { .. } => "Complete",
            State::Failed => "Failed",
        };
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish()
    }
}

/// The message as text, after the size, UTF-8 and NUL checks every SCRAM message needs.
fn message_text<'a>(
    mechanism: ScramMechanism,
    msg: &'a [u8],
    message: &'static str,
) -> Result<&'a str, ScramError> {
    if msg.len() > SCRAM_MESSAGE_BYTES_MAX {
        return Err(ScramError::TooLarge {
            mechanism,
            size: msg.len(),
            max: SCRAM_MESSAGE_BYTES_MAX,
        });
    }
    let text = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed {
        mechanism,
        message,
        reason: "not UTF-8",
    })?;
    if text.contains('\0') {
        return Err(ScramError::Malformed {
            mechanism,
            message,
            reason: "contains a NUL character",
        });
    }
    Ok(text)
}

/// printable = %x21-2B / %x2D-7E (RFC 5802): visible ASCII except the comma.
fn is_nonce_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b','
}

struct ClientFirst<'a> {
    gs2_header: &'a str,
    authzid: Option<String>,
    bare: &'a str,
    user: String,
    nonce: &'a str,
}

fn parse_client_first(
    mechanism: ScramMechanism,
    text: &str,
) -> Result<ClientFirst<'_>, ScramError> {
    let malformed = |reason| ScramError::Malformed {
        mechanism,
        message: CLIENT_FIRST,
        reason,
    };
    let Some((cbind_flag, rest)) = text.split_once(',') else {
        return Err(malformed("no gs2 header"));
    };
    match cbind_flag {
        // "y": the client could bind channels but thinks the server cannot; right, it cannot.
        "n" | "y" => {}
        flag if flag.starts_with("p=") => {
            return Err(ScramError::ChannelBindingUnsupported { mechanism })
        }
        _ => return Err(malformed("gs2 header does not start with n, y or p=")),
    }
    let Some((authz_field, bare)) = rest.split_once(',') else {
        return Err(malformed("gs2 header is not terminated by a comma"));
    };
    let authzid = if authz_field.is_empty() {
        None
    } else {
        let Some(name) = authz_field.strip_prefix("a=") else {
            return Err(malformed("gs2 header has a field other than a="));
        };
        Some(
            decode_saslname(name)
                .ok_or_else(|| malformed("authorization id (a=) is not a valid saslname"))?,
        )
    };
    let gs2_header = &text[..text.len() - bare.len()];
    let mut fields = bare.split(',');
    let user_field = fields.next().unwrap_or_default();
    if user_field.starts_with("m=") {
        return Err(malformed("mandatory extensions (m=) are not supported"));
    }
    let Some(user_name) = user_field.strip_prefix("n=") else {
        return Err(malformed("no user name (n=)"));
    };
    let user = decode_saslname(user_name)
        .ok_or_else(|| malformed("user name (n=) is not a valid saslname"))?;
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return Err(malformed("no nonce (r=) after the user name"));
    };
    if nonce.is_empty() || !nonce.bytes().all(is_nonce_byte) {
        return Err(malformed("nonce (r=) is empty or not printable"));
    }
    if fields.next().is_some() {
        return Err(ScramError::UnsupportedExtension { mechanism });
    }
    Ok(ClientFirst {
        gs2_header,
        authzid,
        bare,
        user,
        nonce,
    })
}

/// Decodes a saslname: `=2C` is a comma, `=3D` an equals sign, any other `=` is an error, and
/// the name is not empty.
fn decode_saslname(name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        match escape {
            "=2C" => out.push(','),
            "=3D" => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

struct ClientFinal<'a> {
    without_proof: &'a str,
    channel_binding: &'a str,
    nonce: &'a str,
    proof: &'a str,
}

fn parse_client_final(
    mechanism: ScramMechanism,
    text: &str,
) -> Result<ClientFinal<'_>, ScramError> {
    let malformed = |reason| ScramError::Malformed {
        mechanism,
        message: CLIENT_FINAL,
        reason,
    };
    let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
        return Err(malformed("no proof (p=) at the end"));
    };
    if proof.contains(',') {
        return Err(malformed("proof (p=) is not the last attribute"));
    }
    let mut fields = without_proof.split(',');
    let Some(channel_binding) = fields.next().and_then(|f| f.strip_prefix("c=")) else {
        return Err(malformed("no channel binding (c=) first"));
    };
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return Err(malformed("no nonce (r=) after the channel binding"));
    };
    if fields.next().is_some() {
        return Err(ScramError::UnsupportedExtension { mechanism });
    }
    Ok(ClientFinal {
        without_proof,
        channel_binding,
        nonce,
        proof,
    })
}

/// Why the client side of a SCRAM exchange stopped. Like [`ScramError`], no variant holds the
/// password, the salted password, a key or a proof, so each is fit for a log line or a user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramClientError {
    /// The user name is empty (SCRAM has no anonymous form).
    #[error("{mechanism} needs a user name; it is empty")]
    EmptyUser { mechanism: ScramMechanism },
    /// The server's message breaks the SCRAM grammar or contradicts the exchange so far.
    #[error("invalid {mechanism} {message} from the server: {reason}")]
    Malformed {
        mechanism: ScramMechanism,
        /// "server-first message" or "server-final message".
        message: &'static str,
        reason: &'static str,
    },
    /// The server asked for an iteration count outside Kafka's bounds: too few would weaken
    /// the proof the client sends, too many would keep the client hashing for minutes.
    #[error("the server asked for {iterations} {mechanism} iterations; Kafka's bounds are {min} to {max}")]
    Iterations {
        mechanism: ScramMechanism,
        iterations: u32,
        min: u32,
        max: u32,
    },
    /// The server ended the exchange with an `e=` error in its final message.
    #[error("the server refused the {mechanism} proof: {error}")]
    ServerError {
        mechanism: ScramMechanism,
        error: String,
    },
    /// The server's signature is not the one a holder of this password's credential makes: the
    /// peer does not know the credential, so it is not the server it claims to be.
    #[error("the server's {mechanism} signature does not verify: it does not hold this user's credential")]
    ServerSignature { mechanism: ScramMechanism },
    /// A method was called out of order (each runs once: first, final, verify).
    #[error("{mechanism} client asked to {step} in state {state}")]
    IllegalState {
        mechanism: ScramMechanism,
        step: &'static str,
        state: &'static str,
    },
    /// The operating system's random source failed.
    #[error("could not generate a random {mechanism} client nonce")]
    Random { mechanism: ScramMechanism },
}

/// The client side of one SCRAM exchange, as Kafka's clients speak it: no channel binding
/// (`n,,`), no authorization id, the password's UTF-8 bytes without SASLprep.
///
/// ```text
/// client_first()              -> n,,n=user,r=<client nonce>
/// client_final(server-first)  -> c=biws,r=<nonces>,p=<proof>
/// verify_server_final(v=...)  -> Ok once the server proved it holds the credential
/// ```
///
/// The exchange is not complete until [`ScramClient::verify_server_final`] returns `Ok`: a peer
/// that accepts the proof but cannot sign the exchange is an impostor.
pub struct ScramClient {
    mechanism: ScramMechanism,
    /// The user name with `=` and `,` escaped as a saslname.
    saslname: String,
    password: Vec<u8>,
    nonce: String,
    state: ClientState,
}

enum ClientState {
    Start,
    /// The client-first message without its gs2 header, for the auth message.
    SentFirst {
        client_first_bare: String,
    },
    SentFinal {
        server_signature: Vec<u8>,
    },
    Complete,
    Failed,
}

impl ClientState {
    fn name(&self) -> &'static str {
        match self {
            ClientState::Start => "START",
            ClientState::SentFirst { .. } => "SENT_CLIENT_FIRST",
            ClientState::SentFinal { .. } => "SENT_CLIENT_FINAL",
            ClientState::Complete => "COMPLETE",
            ClientState::Failed => "FAILED",
        }
    }
}

/// The only gs2 header a Kafka client sends: no channel binding, no authorization id.
const CLIENT_GS2_HEADER: &str = "n,,";
const SERVER_FIRST: &str = "server-first message";
const SERVER_FINAL: &str = "server-final message";

impl ScramClient {
    /// A client for `user` and `password` with a fresh random nonce of [`SERVER_NONCE_BYTES`]
    /// (the same length a server uses).
    pub fn new(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
    ) -> Result<ScramClient, ScramClientError> {
        let bytes = random_bytes(SERVER_NONCE_BYTES, "nonce")
            .map_err(|_| ScramClientError::Random { mechanism })?;
        Self::with_nonce(mechanism, user, password, URL_SAFE_NO_PAD.encode(bytes))
    }

    /// As [`ScramClient::new`] with this client nonce. For tests and known-answer vectors only:
    /// a fixed nonce lets a recorded exchange be replayed.
    ///
    /// # Panics
    /// If the nonce is empty or holds a character SCRAM does not allow in a nonce; this is a
    /// programming error.
    pub fn with_nonce(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        nonce: impl Into<String>,
    ) -> Result<ScramClient, ScramClientError> {
        let nonce = nonce.into();
        assert!(
            !nonce.is_empty() && nonce.bytes().all(is_nonce_byte),
            "a SCRAM nonce is printable, not empty, and has no comma"
        );
        if user.is_empty() {
            return Err(ScramClientError::EmptyUser { mechanism });
        }
        Ok(ScramClient {
            mechanism,
            saslname: user.replace('=', "=3D").replace(',', "=2C"),
            password: password.as_bytes().to_vec(),
            nonce,
            state: ClientState::Start,
        })
    }

    /// The mechanism this client speaks.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// True once the server's signature verified.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ClientState::Complete)
    }

    fn illegal(&self, step: &'static str) -> ScramClientError {
        ScramClientError::IllegalState {
            mechanism: self.mechanism,
            step,
            state: self.state.name(),
        }
    }

    /// The client-first message, sent in the first SaslAuthenticate request.
    pub fn client_first(&mut self) -> Result<Vec<u8>, ScramClientError> {
        if !matches!(self.state, ClientState::Start) {
            return Err(self.illegal("send the client-first message"));
        }
        let client_first_bare = format!("n={},r={}", self.saslname, self.nonce);
        let message = format!("{CLIENT_GS2_HEADER}{client_first_bare}").into_bytes();
        self.state = ClientState::SentFirst { client_first_bare };
        Ok(message)
    }

    /// Takes the server-first message and returns the client-final message with the proof.
    /// Any error ends the exchange.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramClientError> {
        let state = std::mem::replace(&mut self.state, ClientState::Failed);
        let ClientState::SentFirst { client_first_bare } = state else {
            self.state = state;
            return Err(self.illegal("answer the server-first message"));
        };
        let mechanism = self.mechanism;
        let malformed = |reason| ScramClientError::Malformed {
            mechanism,
            message: SERVER_FIRST,
            reason,
        };
        let text = server_text(mechanism, server_first, SERVER_FIRST)?;
        let mut fields = text.split(',');
        let first_field = fields.next().unwrap_or_default();
        if first_field.starts_with("m=") {
            return Err(malformed(
                "it demands an extension (m=) Kafka does not define",
            ));
        }
        let Some(nonce) = first_field.strip_prefix("r=") else {
            return Err(malformed("no nonce (r=) first"));
        };
        if nonce.len() <= self.nonce.len()
            || !nonce.starts_with(&self.nonce)
            || !nonce.bytes().all(is_nonce_byte)
        {
            return Err(malformed(
                "the nonce (r=) does not extend the client's nonce with printable characters",
            ));
        }
        let Some(salt) = fields.next().and_then(|f| f.strip_prefix("s=")) else {
            return Err(malformed("no salt (s=) after the nonce"));
        };
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| malformed("the salt (s=) is not valid base64"))?;
        if salt.is_empty() {
            return Err(malformed("the salt (s=) is empty"));
        }
        let Some(iterations) = fields.next().and_then(|f| f.strip_prefix("i=")) else {
            return Err(malformed("no iteration count (i=) after the salt"));
        };
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| malformed("the iteration count (i=) is not a positive integer"))?;
        let (min, max) = (mechanism.min_iterations(), mechanism.max_iterations());
        if !(min..=max).contains(&iterations) {
            return Err(ScramClientError::Iterations {
                mechanism,
                iterations,
                min,
                max,
            });
        }
        // Later attributes are extensions RFC 5802 tells a client to ignore.
        let without_proof = format!("c={},r={nonce}", STANDARD.encode(CLIENT_GS2_HEADER));
        let auth_message = format!("{client_first_bare},{text},{without_proof}");
        let salted = mechanism.salted_password(&self.password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        self.state = ClientState::SentFinal {
            server_signature: mechanism.hmac(&server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: `v=` must carry the signature only a holder of the
    /// user's credential can make; `e=` is the server's refusal.
    pub fn verify_server_final(&mut self, server_final: &[u8]) -> Result<(), ScramClientError> {
        let state = std::mem::replace(&mut self.state, ClientState::Failed);
        let ClientState::SentFinal { server_signature } = state else {
            self.state = state;
            return Err(self.illegal("verify the server-final message"));
        };
        let mechanism = self.mechanism;
        let malformed = |reason| ScramClientError::Malformed {
            mechanism,
            message: SERVER_FINAL,
            reason,
        };
        let text = server_text(mechanism, server_final, SERVER_FINAL)?;
        let first_field = text.split(',').next().unwrap_or_default();
        if let Some(error) = first_field.strip_prefix("e=") {
            return Err(ScramClientError::ServerError {
                mechanism,
                error: error.to_string(),
            });
        }
        let Some(signature) = first_field.strip_prefix("v=") else {
            return Err(malformed("neither a verifier (v=) nor an error (e=)"));
        };
        let signature = STANDARD
            .decode(signature)
            .map_err(|_| malformed("the verifier (v=) is not valid base64"))?;
        let matches: bool = signature.ct_eq(&server_signature).into();
        if !matches {
            return Err(ScramClientError::ServerSignature { mechanism });
        }
        self.state = ClientState::Complete;
        Ok(())
    }
}

impl fmt::Debug for ScramClient {
    // The password stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("saslname", &self.saslname)
            .field("state", &self.state.name())
            .finish()
    }
}

/// A server message as text, after the size and UTF-8 checks.
fn server_text<'a>(
    mechanism: ScramMechanism,
    msg: &'a [u8],
    message: &'static str,
) -> Result<&'a str, ScramClientError> {
    let malformed = |reason| ScramClientError::Malformed {
        mechanism,
        message,
        reason,
    };
    if msg.len() > SCRAM_MESSAGE_BYTES_MAX {
        return Err(malformed("it is over the SCRAM message size limit"));
    }
    std::str::from_utf8(msg).map_err(|_| malformed("not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Lookup = BoxedScramLookup;

    fn server_for(mechanism: ScramMechanism, user: &str, password: &str) -> ScramServer<Lookup> {
        let credential = ScramCredential::generate(mechanism, password.as_bytes(), 4096).unwrap();
        let user = user.to_string();
        let lookup: Lookup = Box::new(move |name: &str| (name == user).then_some(credential));
        ScramServer::new(mechanism, lookup)
    }

    /// A minimal SCRAM client, enough to drive the server the way Kafka's client does.
    struct TestClient {
        mechanism: ScramMechanism,
        password: String,
        gs2_header: String,
        client_first_bare: String,
        expected_server_signature: Vec<u8>,
    }

    impl TestClient {
        fn new(mechanism: ScramMechanism, user: &str, password: &str, nonce: &str) -> TestClient {
            let escaped = user.replace('=', "=3D").replace(',', "=2C");
            TestClient {
                mechanism,
                password: password.to_string(),
                gs2_header: "n,,".to_string(),
                client_first_bare: format!("n={escaped},r={nonce}"),
                expected_server_signature: Vec::new(),
            }
        }

        fn client_first(&self) -> String {
            format!("{}{}", self.gs2_header, self.client_first_bare)
        }

        fn client_final(&mut self, server_first: &str) -> String {
            let m = self.mechanism;
            let mut nonce = "";
            let mut salt = Vec::new();
            let mut iterations = 0;
            for field in server_first.split(',') {
                if let Some(v) = field.strip_prefix("r=") {
                    nonce = v;
                } else if let Some(v) = field.strip_prefix("s=") {
                    salt = STANDARD.decode(v).unwrap();
                } else if let Some(v) = field.strip_prefix("i=") {
                    iterations = v.parse().unwrap();
                }
            }
            let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
            let client_key = m.hmac(&salted, b"Client Key");
            let stored_key = m.hash(&client_key);
            let without_proof = format!("c={},r={nonce}", STANDARD.encode(&self.gs2_header));
            let auth = format!("{},{server_first},{without_proof}", self.client_first_bare);
            let signature = m.hmac(&stored_key, auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = m.hmac(&salted, b"Server Key");
            self.expected_server_signature = m.hmac(&server_key, auth.as_bytes());
            format!("{without_proof},p={}", STANDARD.encode(proof))
        }

        /// As librdkafka before 2.1 answers: its own nonce again in front of the combined
        /// one (Kafka accepts it: it checks that the nonce ends with the server's).
        fn client_final_repeating_nonce(&mut self, server_first: &str) -> String {
            let cnonce = self
                .client_first_bare
                .rsplit_once(",r=")
                .map(|(_, n)| n.to_string())
                .unwrap_or_default();
            let doubled = server_first.replacen("r=", &format!("r={cnonce}"), 1);
            let msg = self.client_final(&doubled);
            // The proof is over what the client sent; the server's own first message was the
            // one without the doubled nonce, so recompute with it.
            let m = self.mechanism;
            let (without_proof, _) = msg.rsplit_once(",p=").unwrap();
            let mut salt = Vec::new();
            let mut iterations = 0;
            for field in server_first.split(',') {
                if let Some(v) = field.strip_prefix("s=") {
                    salt = STANDARD.decode(v).unwrap();
                } else if let Some(v) = field.strip_prefix("i=") {
                    iterations = v.parse().unwrap();
                }
            }
            let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
            let client_key = m.hmac(&salted, b"Client Key");
            let stored_key = m.hash(&client_key);
            let auth = format!("{},{server_first},{without_proof}", self.client_first_bare);
            let signature = m.hmac(&stored_key, auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = m.hmac(&salted, b"Server Key");
            self.expected_server_signature = m.hmac(&server_key, auth.as_bytes());
            format!("{without_proof},p={}", STANDARD.encode(proof))
        }

        fn verify_server_final(&self, server_final: &str) -> bool {
            server_final == format!("v={}", STANDARD.encode(&self.expected_server_signature))
        }
    }

    fn run(
        server: &mut ScramServer<Lookup>,
        client: &mut TestClient,
    ) -> Result<String, ScramError> {
        let server_first = server.step(client.client_first().as_bytes())?;
        let server_first = String::from_utf8(server_first).unwrap();
        let client_final = client.client_final(&server_first);
        let server_final = server.step(client_final.as_bytes())?;
        Ok(String::from_utf8(server_final).unwrap())
    }

    #[test]
    fn rfc7677_sha256_vector() {
        let m = ScramMechanism::Sha256;
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::new(m, b"pencil", salt, 4096).unwrap();
        let lookup: Lookup = Box::new(move |name: &str| (name == "user").then_some(credential));
        let mut server =
            ScramServer::new(m, lookup).with_server_nonce("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        let server_first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        assert!(!server.is_complete());
        let server_final = server
            .step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(
            server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert!(server.is_complete());
        assert_eq!(server.authenticated_user(), Some("user"));
        // A step after completion is an illegal state, and ends the exchange.
        let err = server.step(b"c=biws").unwrap_err();
        assert!(err.is_illegal_state(), "{err}");
        assert!(!server.is_complete());
    }

    #[test]
    fn every_prefix_of_the_rfc_messages_is_handled() {
        let m = ScramMechanism::Sha256;
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::new(m, b"pencil", salt, 4096).unwrap();
        let first: &[u8] = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let last: &[u8] = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let make_server = || {
            let credential = credential.clone();
            let lookup: Lookup = Box::new(move |_: &str| Some(credential));
            ScramServer::new(m, lookup).with_server_nonce("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
        };
        // A prefix of the client-first message may still be a valid (shorter) message; it
        // must only never panic.
        for len in 0..first.len() {
            let _ = make_server().step(&first[..len]);
        }
        // Every proper prefix of the client-final message is refused.
        for len in 0..last.len() {
            let mut server = make_server();
            server.step(first).unwrap();
            assert!(server.step(&last[..len]).is_err(), "prefix of {len} bytes");
            assert!(!server.is_complete());
        }
        let mut server = make_server();
        server.step(first).unwrap();
        server.step(last).unwrap();
        assert!(server.is_complete());
    }

    #[test]
    fn sha512_round_trip_with_test_client() {
        let m = ScramMechanism::Sha512;
        let mut server = server_for(m, "alice", "alice-secret");
        let mut client = TestClient::new(m, "alice", "alice-secret", "fyko+d2lbbFgONRv9qkxdawL");
        let server_final = run(&mut server, &mut client).unwrap();
        assert!(client.verify_server_final(&server_final), "{server_final}");
        assert!(server.is_complete());
        assert_eq!(server.authenticated_user(), Some("alice"));
    }

    #[test]
    fn sha256_round_trip_with_escaped_name_and_y_flag_and_authzid() {
        let m = ScramMechanism::Sha256;
        let mut server = server_for(m, "a,b=c", "pw");
        let mut client = TestClient::new(m, "a,b=c", "pw", "abc");
        client.gs2_header = "y,a=a=2Cb=3Dc,".to_string();
        let server_final = run(&mut server, &mut client).unwrap();
        assert!(client.verify_server_final(&server_final));
        assert_eq!(server.authenticated_user(), Some("a,b=c"));
    }

    #[test]
    fn wrong_password_fails_with_kafkas_message() {
        let m = ScramMechanism::Sha256;
        let mut server = server_for(m, "alice", "alice-secret");
        let mut client = TestClient::new(m, "alice", "guess", "nonce1");
        let err = run(&mut server, &mut client).unwrap_err();
        assert_eq!(err, ScramError::InvalidCredentials { mechanism: m });
        assert_eq!(
            err.to_string(),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
        );
        assert!(!err.to_string().contains("guess"));
        assert!(!server.is_complete());
        assert_eq!(server.authenticated_user(), None);
        assert!(server
            .step(b"n,,n=alice,r=x")
            .unwrap_err()
            .is_illegal_state());
    }

    #[test]
    fn unknown_user_fails_only_at_the_final_step() {
        let m = ScramMechanism::Sha512;
        let mut server = server_for(m, "alice", "alice-secret");
        let mut client = TestClient::new(m, "mallory", "alice-secret", "nonce2");
        let server_first = server.step(client.client_first().as_bytes()).unwrap();
        let server_first = String::from_utf8(server_first).unwrap();
        assert!(server_first.starts_with("r=nonce2"), "{server_first}");
        assert!(server_first.ends_with(",i=4096"), "{server_first}");
        let client_final = client.client_final(&server_first);
        let err = server.step(client_final.as_bytes()).unwrap_err();
        assert_eq!(err, ScramError::InvalidCredentials { mechanism: m });
    }

    #[test]
    fn unknown_user_salt_is_stable_with_a_key() {
        let m = ScramMechanism::Sha256;
        let key = generate_unknown_user_key().unwrap();
        let salt_of = |user: &str| {
            let lookup: Lookup = Box::new(|_: &str| None);
            let mut server = ScramServer::new(m, lookup).with_unknown_user_key(key);
            let first = server
                .step(format!("n,,n={user},r=abc").as_bytes())
                .unwrap();
            let first = String::from_utf8(first).unwrap();
            let salt = first
                .split(',')
                .find_map(|f| f.strip_prefix("s="))
                .unwrap()
                .to_string();
            assert_eq!(STANDARD.decode(&salt).unwrap().len(), SALT_BYTES);
            salt
        };
        assert_eq!(salt_of("ghost"), salt_of("ghost"));
        assert_ne!(salt_of("ghost"), salt_of("spirit"));
    }

    #[test]
    fn authzid_must_be_the_user() {
        let m = ScramMechanism::Sha256;
        let mut server = server_for(m, "alice", "pw");
        let err = server.step(b"n,a=admin,n=alice,r=abc").unwrap_err();
        assert_eq!(err, ScramError::AuthorizationIdMismatch);
    }

    #[test]
    fn stored_credential_below_minimum_iterations_is_refused() {
        let m = ScramMechanism::Sha256;
        let mut weak = ScramCredential::new(m, b"pw", vec![1; 16], 4096).unwrap();
        weak.iterations = 1000;
        let lookup: Lookup = Box::new(move |_: &str| Some(weak));
        let mut server = ScramServer::new(m, lookup);
        let err = server.step(b"n,,n=alice,r=abc").unwrap_err();
        assert_eq!(err, ScramError::InvalidCredentials { mechanism: m });
    }

    /// A server whose credential costs no PBKDF2 run, for the many-case property tests.
    fn cheap_server(mechanism: ScramMechanism) -> ScramServer<Lookup> {
        let salted = vec![7u8; mechanism.hash_len()];
        let credential =
            ScramCredential::from_salted_password(mechanism, &salted, vec![1; 16], 4096).unwrap();
        let lookup: Lookup = Box::new(move |name: &str| (name == "alice").then_some(credential));
        ScramServer::new(mechanism, lookup)
    }

    fn first_step_error(msg: &[u8]) -> ScramError {
        let mut server = server_for(ScramMechanism::Sha256, "alice", "pw");
        server.step(msg).unwrap_err()
    }

    #[test]
    fn malformed_client_first_messages_fail() {
        let m = ScramMechanism::Sha256;
        for msg in [
            &b""[..],
            b"n",
            b"n,",
            b"n,,",
            b"x,,n=alice,r=abc",
            b"n,,r=abc",
            b"n,,n=alice",
            b"n,,n=alice,r=",
            b"n,,n=,r=abc",
            b"n,,n=al=ice,r=abc",
            b"n,,n=alice=2,r=abc",
            b"n,b=x,n=alice,r=abc",
            b"n,,m=ext,n=alice,r=abc",
            b"n,,n=alice,r=ab c",
            b"n,,n=alice,r=abc\x00",
        ] {
            let err = first_step_error(msg);
            assert!(
                matches!(err, ScramError::Malformed { .. }),
                "{:?} gave {err:?}",
                String::from_utf8_lossy(msg)
            );
        }
        assert_eq!(
            first_step_error(b"p=tls-unique,,n=alice,r=abc"),
            ScramError::ChannelBindingUnsupported { mechanism: m }
        );
        assert_eq!(
            first_step_error(b"n,,n=alice,r=abc,tokenauth=true"),
            ScramError::UnsupportedExtension { mechanism: m }
        );
        assert!(matches!(
            first_step_error(b"n,,n=\xff\xfe,r=abc"),
            ScramError::Malformed {
                reason: "not UTF-8",
                ..
            }
        ));
        let mut long = b"n,,n=alice,r=".to_vec();
        long.resize(SCRAM_MESSAGE_BYTES_MAX + 1, b'a');
        assert!(matches!(
            first_step_error(&long),
            ScramError::TooLarge { .. }
        ));
    }

    #[test]
    fn a_client_repeating_its_nonce_is_accepted_as_kafka_accepts_it() {
        let m = ScramMechanism::Sha256;
        let mut server = server_for(m, "alice", "pw");
        let mut client = TestClient::new(m, "alice", "pw", "cnonce");
        let server_first = server.step(client.client_first().as_bytes()).unwrap();
        let server_first = String::from_utf8(server_first).unwrap();
        let last = client.client_final_repeating_nonce(&server_first);
        assert!(last.contains(",r=cnoncecnonce"), "{last}");
        let server_final = server.step(last.as_bytes()).unwrap();
        assert!(client.verify_server_final(std::str::from_utf8(&server_final).unwrap()));
        assert_eq!(server.authenticated_user(), Some("alice"));
    }

    #[test]
    fn malformed_client_final_messages_fail() {
        let m = ScramMechanism::Sha256;
        let mut client = TestClient::new(m, "alice", "pw", "cnonce");
        // One credential for every server here, so the good message fits each of them.
        let credential = ScramCredential::new(m, b"pw", b"salt".to_vec(), 4096).unwrap();
        let make_server = || {
            let credential = credential.clone();
            let lookup: Lookup = Box::new(move |_: &str| Some(credential));
            let mut server = ScramServer::new(m, lookup).with_server_nonce("snonce");
            let first = server.step(b"n,,n=alice,r=cnonce").unwrap();
            (server, String::from_utf8(first).unwrap())
        };
        let (_, server_first) = make_server();
        let good = client.client_final(&server_first);
        let proof = good.rsplit_once(",p=").unwrap().1.to_string();
        let cases: Vec<String> = vec![
            String::new(),
            "c=biws,r=cnoncesnonce".to_string(),
            format!("r=cnoncesnonce,p={proof}"),
            format!("c=biws,p={proof}"),
            format!("c=eSws,r=cnoncesnonce,p={proof}"),
            format!("c=!!!,r=cnoncesnonce,p={proof}"),
            format!("c=biws,r=cnonceXXXXXX,p={proof}"),
            "c=biws,r=cnoncesnonce,p=!!!".to_string(),
            "c=biws,r=cnoncesnonce,p=YWJj".to_string(),
            format!("c=biws,r=cnoncesnonce,p={proof},x=1"),
        ];
        for case in cases {
            let (mut server, _) = make_server();
            let err = server.step(case.as_bytes()).unwrap_err();
            assert!(
                matches!(err, ScramError::Malformed { .. }),
                "{case:?} gave {err:?}"
            );
            assert!(!err.to_string().contains(&proof));
        }
        let (mut server, _) = make_server();
        let err = server
            .step(format!("c=biws,r=cnoncesnonce,ext=1,p={proof}").as_bytes())
            .unwrap_err();
        assert_eq!(err, ScramError::UnsupportedExtension { mechanism: m });
        let (mut server, _) = make_server();
        assert!(matches!(
            server.step(&[0xff; 10]).unwrap_err(),
            ScramError::Malformed {
                reason: "not UTF-8",
                ..
            }
        ));
        let (mut server, _) = make_server();
        assert!(matches!(
            server
                .step(&vec![b'a'; SCRAM_MESSAGE_BYTES_MAX + 1])
                .unwrap_err(),
            ScramError::TooLarge { .. }
        ));
        // The genuine message still works on a fresh exchange.
        let (mut server, _) = make_server();
        let server_final = server.step(good.as_bytes()).unwrap();
        assert!(client.verify_server_final(std::str::from_utf8(&server_final).unwrap()));
    }

    #[test]
    fn mechanism_names_and_ids() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(m.name()), Some(m));
            assert_eq!(ScramMechanism::from_type_id(m.type_id()), Some(m));
            assert_eq!(m.min_iterations(), 4096);
            assert_eq!(m.max_iterations(), 16384);
        }
        assert_eq!(ScramMechanism::Sha256.type_id(), 1);
        assert_eq!(ScramMechanism::Sha512.type_id(), 2);
        assert_eq!(ScramMechanism::Sha512.hash_len(), 64);
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_type_id(0), None);
    }

    #[test]
    fn credential_bounds_and_debug_redaction() {
        let m = ScramMechanism::Sha256;
        assert!(ScramCredential::new(m, b"pw", vec![1], 4095).is_err());
        assert!(ScramCredential::new(m, b"pw", vec![1], 16385).is_err());
        assert!(ScramCredential::new(m, b"pw", Vec::new(), 4096).is_err());
        assert!(ScramCredential::from_salted_password(m, &[0; 31], vec![1], 4096).is_err());
        let c = ScramCredential::new(m, b"pw", vec![1], 16384).unwrap();
        let debug = format!("{c:?}");
        assert!(debug.contains("redacted"), "{debug}");
        assert!(!debug.contains(&STANDARD.encode(&c.server_key)), "{debug}");
    }

    #[test]
    fn add_scram_password_form() {
        let (m, user, c) =
            parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]").unwrap();
        assert_eq!(m, ScramMechanism::Sha256);
        assert_eq!(user, "alice");
        assert_eq!(c.iterations, DEFAULT_ITERATIONS);
        assert_eq!(c.salt.len(), SALT_BYTES);
        assert_eq!(
            c,
            ScramCredential::new(m, b"alice-secret", c.salt.clone(), 4096).unwrap()
        );

        let (m, user, c) = parse_add_scram(
            r#"SCRAM-SHA-512=[name="bob",password="b-pw",iterations=8192,salt="c2FsdA=="]"#,
        )
        .unwrap();
        assert_eq!((m, user.as_str()), (ScramMechanism::Sha512, "bob"));
        assert_eq!(
            c,
            ScramCredential::new(m, b"b-pw", b"salt".to_vec(), 8192).unwrap()
        );
    }

    #[test]
    fn add_scram_salted_password_form_matches_password_form() {
        let m = ScramMechanism::Sha256;
        let salt = b"1lv4pdnw4fwq7notcxm0yy1k7q".to_vec();
        let salted = m.salted_password(b"alice-secret", &salt, 8192);
        let arg = format!(
            r#"SCRAM-SHA-256=[name=alice,iterations=8192,salt="{}",saltedpassword="{}"]"#,
            STANDARD.encode(&salt),
            STANDARD.encode(&salted)
        );
        let (_, user, c) = parse_add_scram(&arg).unwrap();
        assert_eq!(user, "alice");
        assert_eq!(
            c,
            ScramCredential::new(m, b"alice-secret", salt, 8192).unwrap()
        );
    }

    #[test]
    fn add_scram_errors_say_what_was_wrong() {
        let cases = [
            ("SCRAM-SHA-256", "no '='"),
            ("SCRAM-SHA-1=[name=a,password=b]", "not supported"),
            ("SCRAM-SHA-256=name=a,password=b]", "start with '['"),
            ("SCRAM-SHA-256=[name=a,password=b", "end with ']'"),
            ("SCRAM-SHA-256=[password=b]", "'name'"),
            ("SCRAM-SHA-256=[name=,password=b]", "'name' is empty"),
            (
                "SCRAM-SHA-256=[name=a]",
                "one of 'password' or 'saltedpassword'",
            ),
            (
                "SCRAM-SHA-256=[name=a,saltedpassword=YWJj]",
                "'salt' with 'saltedpassword'",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,saltedpassword=YWJj]",
                "only one of",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,salt=!!]",
                "'salt' is not valid base64",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=lots]",
                "'iterations'",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
                ">= 4096",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,iterations=20000]",
                "<= 16384",
            ),
            (
                "SCRAM-SHA-256=[name=a,password=b,colour=red]",
                "unknown SCRAM configurations: colour",
            ),
            (
                "SCRAM-SHA-256=[name=a,name=b,password=c]",
                "'name' is given twice",
            ),
            ("SCRAM-SHA-256=[name=a,hunter2]", "has no '='"),
            (
                "SCRAM-SHA-256=[name=a,salt=YWJj,saltedpassword=YWJj]",
                "salted password is 3 bytes",
            ),
        ];
        for (arg, expected) in cases {
            let err = parse_add_scram(arg).unwrap_err().to_string();
            assert!(err.contains(expected), "{arg}: {err}");
            assert!(!err.contains("hunter2"), "{arg}: {err}");
        }
        let long = format!(
            "SCRAM-SHA-256=[name=a,password={}]",
            "x".repeat(ADD_SCRAM_ARG_BYTES_MAX)
        );
        assert!(parse_add_scram(&long)
            .unwrap_err()
            .to_string()
            .contains("over the limit"));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(first in proptest::collection::vec(any::<u8>(), 0..256),
                                    second in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut server = cheap_server(ScramMechanism::Sha256);
            let _ = server.step(&first);
            let _ = server.step(&second);
            let _ = server.step(&second);
            prop_assert!(!server.is_complete());
        }

        #[test]
        fn random_final_after_valid_first_never_panics(
            tail in "[ -~]{0,120}",
        ) {
            let mut server = cheap_server(ScramMechanism::Sha512);
            server.step(b"n,,n=alice,r=abc").unwrap();
            let msg = format!("c=biws,r=abc{tail}");
            prop_assert!(server.step(msg.as_bytes()).is_err());
        }

        #[test]
        fn random_printable_first_never_panics(msg in "[ -~]{0,200}") {
            let mut server = cheap_server(ScramMechanism::Sha256);
            let _ = server.step(msg.as_bytes());
        }
    }
}

/// [`ScramClient`] against [`ScramServer`]: the two halves written apart must agree.
#[cfg(test)]
mod client_tests {
    use super::*;

    fn server(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
    ) -> ScramServer<BoxedScramLookup> {
        let credential = ScramCredential::generate(mechanism, password.as_bytes(), 4096).unwrap();
        let user = user.to_string();
        let lookup: BoxedScramLookup =
            Box::new(move |name: &str| (name == user).then_some(credential));
        ScramServer::new(mechanism, lookup)
    }

    /// Runs one exchange; the server's error if it refused the client, else the client's
    /// verdict on the server-final message.
    fn run(
        client: &mut ScramClient,
        server: &mut ScramServer<BoxedScramLookup>,
    ) -> Result<Result<(), ScramClientError>, ScramError> {
        let server_first = server.step(&client.client_first().unwrap())?;
        let client_final = client.client_final(&server_first).unwrap();
        let server_final = server.step(&client_final)?;
        Ok(client.verify_server_final(&server_final))
    }

    #[test]
    fn client_and_server_agree_for_both_mechanisms() {
        for m in ScramMechanism::ALL {
            // A name with the two characters a saslname escapes.
            let mut server = server(m, "al,i=ce", "alice-secret");
            let mut client = ScramClient::new(m, "al,i=ce", "alice-secret").unwrap();
            run(&mut client, &mut server).unwrap().unwrap();
            assert!(client.is_complete(), "{m}");
            assert!(server.is_complete(), "{m}");
            assert_eq!(server.authenticated_user(), Some("al,i=ce"), "{m}");
            // Each step runs once.
            let again = client.client_first().unwrap_err();
            assert!(
                matches!(again, ScramClientError::IllegalState { .. }),
                "{again}"
            );
        }
    }

    #[test]
    fn a_wrong_password_is_refused_by_the_server() {
        for m in ScramMechanism::ALL {
            let mut server = server(m, "alice", "alice-secret");
            let mut client = ScramClient::new(m, "alice", "hunter2").unwrap();
            let err = run(&mut client, &mut server).unwrap_err();
            assert_eq!(err, ScramError::InvalidCredentials { mechanism: m });
            assert!(!client.is_complete());
            assert!(!format!("{client:?}").contains("hunter2"));
        }
    }

    #[test]
    fn a_server_without_the_credential_fails_the_signature_check() {
        let m = ScramMechanism::Sha512;
        let mut server = server(m, "alice", "alice-secret");
        let mut client = ScramClient::new(m, "alice", "alice-secret").unwrap();
        let server_first = server.step(&client.client_first().unwrap()).unwrap();
        let client_final = client.client_final(&server_first).unwrap();
        server.step(&client_final).unwrap();
        // An impostor that accepts any proof signs with a key it made up.
        let forged = format!("v={}", STANDARD.encode(vec![0u8; m.hash_len()]));
        assert_eq!(
            client.verify_server_final(forged.as_bytes()).unwrap_err(),
            ScramClientError::ServerSignature { mechanism: m }
        );
        assert!(!client.is_complete());
    }

    #[test]
    fn bad_server_messages_are_named() {
        let m = ScramMechanism::Sha256;
        let first = |server_first: &str| {
            let mut client = ScramClient::with_nonce(m, "alice", "pw", "cnonce").unwrap();
            client.client_first().unwrap();
            client.client_final(server_first.as_bytes())
        };
        let salt = STANDARD.encode(b"salt");
        assert!(first(&format!("r=cnoncesnonce,s={salt},i=4096")).is_ok());
        for (msg, want) in [
            (format!("r=othersnonce,s={salt},i=4096"), "client's nonce"),
            (format!("r=cnonce,s={salt},i=4096"), "client's nonce"),
            (format!("m=x,r=cnoncesnonce,s={salt},i=4096"), "extension"),
            ("r=cnoncesnonce,s=!!,i=4096".to_string(), "base64"),
            ("r=cnoncesnonce,s=,i=4096".to_string(), "empty"),
            (format!("r=cnoncesnonce,s={salt}"), "iteration"),
            (format!("r=cnoncesnonce,s={salt},i=many"), "iteration"),
            (format!("r=cnoncesnonce,s={salt},i=1000"), "bounds"),
            (format!("r=cnoncesnonce,s={salt},i=100000000"), "bounds"),
            ("e=other-error".to_string(), "nonce"),
        ] {
            let err = first(&msg).unwrap_err().to_string();
            assert!(err.contains(want), "{msg}: {err}");
        }
        let mut client = ScramClient::with_nonce(m, "alice", "pw", "cnonce").unwrap();
        client.client_first().unwrap();
        client
            .client_final(format!("r=cnoncesnonce,s={salt},i=4096").as_bytes())
            .unwrap();
        assert_eq!(
            client.verify_server_final(b"e=invalid-proof").unwrap_err(),
            ScramClientError::ServerError {
                mechanism: m,
                error: "invalid-proof".into()
            }
        );
        assert_eq!(
            ScramClient::new(m, "", "pw").unwrap_err(),
            ScramClientError::EmptyUser { mechanism: m }
        );
    }
}
