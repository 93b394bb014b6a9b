//! SASL PLAIN, the server side as Kafka's `PlainSaslServer` does it (RFC 4616): parse the single
//! client message `authzid NUL authcid NUL passwd` and check the password against the one the
//! caller's lookup returns, in constant time.
//!
//! Pure logic: no sockets, no credential store. It never puts the password into an error, a log
//! line or a `Debug` string, and every error's `Display` is the text Kafka sends the client.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest PLAIN message the server reads; checked before anything is parsed. Kafka bounds
/// it only by the SASL frame size, but a user name and a password never need more.
pub const PLAIN_MESSAGE_BYTES_MAX: usize = 8 * 1024;

/// The mechanism name a client sends in SaslHandshake.
pub const PLAIN_MECHANISM: &str = "PLAIN";

/// Why a PLAIN message was refused. `Display` is Kafka's message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    /// Not three NUL-separated fields (`count` fields were found).
    #[error("Invalid SASL/PLAIN response: expected 3 tokens, got {count}")]
    WrongTokenCount { count: usize },
    #[error("Invalid SASL/PLAIN response: not valid UTF-8")]
    NotUtf8,
    #[error("Invalid SASL/PLAIN response: {size} bytes is over the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("Authentication failed: username not specified")]
    UsernameMissing,
    #[error("Authentication failed: password not specified")]
    PasswordMissing,
    /// Unknown user or wrong password; the same words for both.
    #[error("Authentication failed: Invalid username or password")]
    InvalidCredentials,
    #[error("Authentication failed: Client requested an authorization id that is different from username")]
    AuthorizationIdMismatch,
}

/// The three fields of a PLAIN message.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainMessage {
    /// Empty when the client asked for no other identity.
    pub authzid: String,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for PlainMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Splits a PLAIN message into its fields. Refuses a message over [`PLAIN_MESSAGE_BYTES_MAX`],
/// one that is not UTF-8 or has other than three fields, an empty user name or password, and an
/// authzid that is neither empty nor the user name.
pub fn parse(msg: &[u8]) -> Result<PlainMessage, PlainError> {
    if msg.len() > PLAIN_MESSAGE_BYTES_MAX {
        return Err(PlainError::TooLarge {
            size: msg.len(),
            max: PLAIN_MESSAGE_BYTES_MAX,
        });
    }
    let text = std::str::from_utf8(msg).map_err(|_| PlainError::NotUtf8)?;
    let mut tokens = text.split('\0');
    let (Some(authzid), Some(username), Some(password), None) =
        (tokens.next(), tokens.next(), tokens.next(), tokens.next())
    else {
        return Err(PlainError::WrongTokenCount {
            count: text.split('\0').count(),
        });
    };
    if username.is_empty() {
        return Err(PlainError::UsernameMissing);
    }
    if password.is_empty() {
        return Err(PlainError::PasswordMissing);
    }
    if !authzid.is_empty() && authzid != username {
        return Err(PlainError::AuthorizationIdMismatch);
    }
    Ok(PlainMessage {
        authzid: authzid.to_string(),
        username: username.to_string(),
        password: password.to_string(),
    })
}

/// Checks one PLAIN message: parses it, asks `lookup` for the user's password, and compares
/// the two in constant time. Returns the authenticated user name.
pub fn verify(
    msg: &[u8],
    lookup: impl FnOnce(&str) -> Option<String>,
) -> Result<String, PlainError> {
    let message = parse(msg)?;
    let expected = lookup(&message.username);
    // An unknown user still costs one comparison, against a value no password hashes to, so
    // the time taken does not tell an unknown user from a wrong password.
    let matches = match &expected {
        Some(expected) => passwords_equal(expected.as_bytes(), message.password.as_bytes()),
        None => {
            let _ = passwords_equal(&[], message.password.as_bytes());
            false
        }
    };
    if !matches {
        tracing::debug!(
            user = %message.username,
            user_known = expected.is_some(),
            "SASL/PLAIN authentication failed"
        );
        return Err(PlainError::InvalidCredentials);
    }
    Ok(message.username)
}

/// Compares SHA-256 digests in constant time: comparing the digests rather than the bytes also
/// hides the expected password's length.
fn passwords_equal(expected: &[u8], given: &[u8]) -> bool {
    let expected = Sha256::digest(expected);
    let given = Sha256::digest(given);
    expected.ct_eq(&given).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn users(name: &str) -> Option<String> {
        match name {
            "admin" => Some("admin-secret".to_string()),
            "alice" => Some("alice-secret".to_string()),
            _ => None,
        }
    }

    #[test]
    fn good_credentials_authenticate() {
        assert_eq!(verify(b"\0alice\0alice-secret", users).unwrap(), "alice");
        assert_eq!(
            verify(b"admin\0admin\0admin-secret", users).unwrap(),
            "admin"
        );
    }

    #[test]
    fn wrong_password_and_unknown_user_fail_alike() {
        let wrong = verify(b"\0alice\0admin-secret", users).unwrap_err();
        let unknown = verify(b"\0mallory\0alice-secret", users).unwrap_err();
        assert_eq!(wrong, PlainError::InvalidCredentials);
        assert_eq!(unknown, PlainError::InvalidCredentials);
        assert_eq!(
            wrong.to_string(),
            "Authentication failed: Invalid username or password"
        );
        // A password that is a prefix of the right one is still wrong.
        assert_eq!(
            verify(b"\0alice\0alice", users).unwrap_err(),
            PlainError::InvalidCredentials
        );
    }

    #[test]
    fn authzid_must_be_empty_or_the_user() {
        let err = verify(b"admin\0alice\0alice-secret", users).unwrap_err();
        assert_eq!(err, PlainError::AuthorizationIdMismatch);
        assert_eq!(
            err.to_string(),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
    }

    #[test]
    fn malformed_messages_fail() {
        assert_eq!(
            parse(b"").unwrap_err(),
            PlainError::WrongTokenCount { count: 1 }
        );
        assert_eq!(
            parse(b"alice\0secret").unwrap_err(),
            PlainError::WrongTokenCount { count: 2 }
        );
        assert_eq!(
            parse(b"\0alice\0secret\0").unwrap_err(),
            PlainError::WrongTokenCount { count: 4 }
        );
        assert_eq!(
            parse(b"\0\0secret").unwrap_err(),
            PlainError::UsernameMissing
        );
        assert_eq!(
            parse(b"\0alice\0").unwrap_err(),
            PlainError::PasswordMissing
        );
        assert_eq!(parse(b"\0al\xffice\0pw").unwrap_err(), PlainError::NotUtf8);
        let long = vec![b'a'; PLAIN_MESSAGE_BYTES_MAX + 1];
        assert!(matches!(
            parse(&long).unwrap_err(),
            PlainError::TooLarge { .. }
        ));
        assert_eq!(
            PlainError::WrongTokenCount { count: 2 }.to_string(),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let message = parse(b"\0alice\0alice-secret").unwrap();
        let debug = format!("{message:?}");
        assert!(!debug.contains("alice-secret"), "{debug}");
        assert!(debug.contains("alice"), "{debug}");
    }

    #[test]
    fn lookup_is_asked_for_the_authcid() {
        let mut asked = String::new();
        let _ = verify(b"\0bob\0pw", |name| {
            asked = name.to_string();
            None
        });
        assert_eq!(asked, "bob");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(msg in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = verify(&msg, users);
        }

        #[test]
        fn random_fields_never_panic(a in "[^\\x00]{0,20}", u in "[^\\x00]{0,20}", p in "[^\\x00]{0,20}") {
            let msg = format!("{a}\0{u}\0{p}");
            match verify(msg.as_bytes(), users) {
                Ok(user) => prop_assert_eq!(Some(p), users(&user)),
                Err(err) => prop_assert!(users(&u) != Some(p.clone()) || !a.is_empty(), "{err}"),
            }
        }
    }
}
