//! The client side of a SASL login as Kafka clients make it, for the mechanisms a Tributary
//! process logs in with (a broker to other brokers, `trib` to a broker): PLAIN's one message,
//! and SCRAM's two rounds with the server's signature checked. Free of I/O: the caller carries
//! each token in a SaslAuthenticate request and hands back the server's answer.

use crate::scram::{ScramClient, ScramClientError, ScramMechanism};

/// The most SaslAuthenticate rounds a login takes (SCRAM's two); a server asking for more is
/// not following the mechanism.
pub const SASL_ROUNDS_MAX: usize = 2;

/// One login in progress.
pub enum SaslLogin {
    /// PLAIN: `\0user\0password`, sent once (taken when sent).
    Plain(Vec<u8>),
    Scram(Box<ScramClient>),
}

/// Why a login cannot go on. Never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum SaslLoginError {
    /// The mechanism is not one this client speaks.
    #[error(
        "{0} is not a mechanism this client logs in with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
    )]
    Unsupported(String),
    /// The SCRAM exchange failed; `ScramClientError::ServerSignature` means the peer does not
    /// hold the user's credential.
    #[error(transparent)]
    Scram(#[from] ScramClientError),
}

impl SaslLogin {
    /// A login as `user` with `password` over `mechanism` (Kafka's name for it).
    pub fn new(mechanism: &str, user: &str, password: &str) -> Result<Self, SaslLoginError> {
        if mechanism == "PLAIN" {
            let mut token = Vec::with_capacity(2 + user.len() + password.len());
            token.push(0);
            token.extend_from_slice(user.as_bytes());
            token.push(0);
            token.extend_from_slice(password.as_bytes());
            return Ok(SaslLogin::Plain(token));
        }
        let scram = ScramMechanism::from_name(mechanism)
            .ok_or_else(|| SaslLoginError::Unsupported(mechanism.to_string()))?;
        Ok(SaslLogin::Scram(Box::new(ScramClient::new(
            scram, user, password,
        )?)))
    }

    /// The first token to send.
    pub fn first(&mut self) -> Result<Vec<u8>, SaslLoginError> {
        match self {
            SaslLogin::Plain(token) => Ok(std::mem::take(token)),
            SaslLogin::Scram(c) => Ok(c.client_first()?),
        }
    }

    /// The token answering the server's `answer`, or `None` once logged in (for SCRAM, once
    /// the server's signature verified).
    pub fn next(&mut self, answer: &[u8]) -> Result<Option<Vec<u8>>, SaslLoginError> {
        match self {
            SaslLogin::Plain(_) => Ok(None),
            SaslLogin::Scram(c) if c.is_complete() => Ok(None),
            // The server's first message carries the nonce; its final one the signature.
            SaslLogin::Scram(c) if answer.starts_with(b"r=") => Ok(Some(c.client_final(answer)?)),
            SaslLogin::Scram(c) => {
                c.verify_server_final(answer)?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::{ScramCredential, ScramServer};

    #[test]
    fn plain_is_one_message() {
        let mut login = SaslLogin::new("PLAIN", "broker", "pw").unwrap();
        assert_eq!(login.first().unwrap(), b"\0broker\0pw");
        assert!(login.next(b"").unwrap().is_none());
    }

    #[test]
    fn scram_logs_in_against_the_server_in_two_rounds() {
        let m = ScramMechanism::Sha512;
        let cred = ScramCredential::generate(m, b"secret", 4096).unwrap();
        let mut server = ScramServer::new(m, move |_user: &str| Some(cred));
        let mut login = SaslLogin::new("SCRAM-SHA-512", "broker", "secret").unwrap();
        let mut token = login.first().unwrap();
        let mut rounds = 0;
        loop {
            rounds += 1;
            let answer = server.step(&token).unwrap();
            match login.next(&answer).unwrap() {
                Some(next) => token = next,
                None => break,
            }
        }
        assert_eq!(rounds, SASL_ROUNDS_MAX);
        assert!(server.is_complete());
        assert!(matches!(
            SaslLogin::new("GSSAPI", "u", "p"),
            Err(SaslLoginError::Unsupported(_))
        ));
    }
}
