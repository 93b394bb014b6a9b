//! The server side of SASL OAUTHBEARER (RFC 7628) with Kafka's unsecured tokens
//! (`OAuthBearerUnsecuredValidatorCallbackHandler`): the client's one message carries a JWS
//! whose header says `"alg":"none"` and whose claims name the principal (`sub`) and the expiry
//! (`exp`, seconds since the epoch). Such tokens prove nothing — they are for tests and trusted
//! networks, as in Kafka; signed tokens (JWKS) are not validated here.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Longest client message accepted (a token and its framing).
pub const OAUTHBEARER_MESSAGE_BYTES_MAX: usize = 16 * 1024;
/// How far a token's `exp` may be in the past, or its `iat` in the future (Kafka's
/// `unsecuredValidatorAllowableClockSkewMs` default is 0; a little slack for clocks).
pub const ALLOWABLE_CLOCK_SKEW_MS: i64 = 0;
/// The claim naming the principal (Kafka's default).
pub const PRINCIPAL_CLAIM: &str = "sub";

/// Why a token was refused. The message is safe to send to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("Authentication failed: the OAUTHBEARER message is malformed ({0})")]
    Malformed(&'static str),
    #[error("Authentication failed: the OAUTHBEARER message is longer than {max} bytes")]
    TooLarge { max: usize },
    #[error("Authentication failed: the token is not an unsecured JWS ({0}); only alg none tokens are accepted")]
    NotUnsecured(&'static str),
    #[error("Authentication failed: the token has no {0} claim")]
    MissingClaim(&'static str),
    #[error("Authentication failed: the token expired")]
    Expired,
    #[error("Authentication failed: the token's authorization id does not match its principal")]
    AuthorizationIdMismatch,
}

/// Validates the client's message at `now_ms` (milliseconds since the epoch); returns the
/// principal name and the token's expiry (ms since the epoch), which bounds the session.
pub fn verify(msg: &[u8], now_ms: i64) -> Result<(String, i64), OAuthError> {
    if msg.len() > OAUTHBEARER_MESSAGE_BYTES_MAX {
        return Err(OAuthError::TooLarge {
            max: OAUTHBEARER_MESSAGE_BYTES_MAX,
        });
    }
    let text = std::str::from_utf8(msg).map_err(|_| OAuthError::Malformed("not UTF-8"))?;
    // gs2-header "n,," or "n,a=authzid," then kvpairs separated by 0x01, ending in 0x01 0x01.
    let (gs2, rest) = text
        .split_once('\u{1}')
        .ok_or(OAuthError::Malformed("no key-value pairs"))?;
    let mut parts = gs2.splitn(3, ',');
    if parts.next() != Some("n") {
        return Err(OAuthError::Malformed(
            "the gs2 header does not start with n",
        ));
    }
    let authzid = match parts.next() {
        Some("") => None,
        Some(a) => Some(a.strip_prefix("a=").ok_or(OAuthError::Malformed(
            "the gs2 header has a field other than a=",
        ))?),
        None => return Err(OAuthError::Malformed("the gs2 header is not terminated")),
    };
    if parts.next() != Some("") {
        return Err(OAuthError::Malformed("the gs2 header is not terminated"));
    }
    let mut token = None;
    for kv in rest.split('\u{1}').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or(OAuthError::Malformed("a key-value pair has no ="))?;
        if k == "auth" {
            let t = v
                .strip_prefix("Bearer ")
                .ok_or(OAuthError::Malformed("auth is not \"Bearer <token>\""))?;
            token = Some(t.trim());
        }
    }
    let token = token.ok_or(OAuthError::Malformed("no auth key"))?;
    let (principal, exp) = validate_unsecured(token, now_ms)?;
    if authzid.is_some_and(|a| a != principal) {
        return Err(OAuthError::AuthorizationIdMismatch);
    }
    Ok((principal, exp))
}

fn validate_unsecured(token: &str, now_ms: i64) -> Result<(String, i64), OAuthError> {
    let mut segments = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return Err(OAuthError::NotUnsecured("not three dot-separated parts"));
    };
    if !signature.is_empty() {
        return Err(OAuthError::NotUnsecured("it carries a signature"));
    }
    let json = |part: &str| -> Result<serde_json::Map<String, serde_json::Value>, OAuthError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .map_err(|_| OAuthError::NotUnsecured("a part is not base64url"))?;
        match serde_json::from_slice(&bytes) {
            Ok(serde_json::Value::Object(m)) => Ok(m),
            _ => Err(OAuthError::NotUnsecured("a part is not a JSON object")),
        }
    };
    let header = json(header)?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("none") {
        return Err(OAuthError::NotUnsecured("its alg is not none"));
    }
    let claims = json(payload)?;
    let principal = claims
        .get(PRINCIPAL_CLAIM)
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .ok_or(OAuthError::MissingClaim(PRINCIPAL_CLAIM))?
        .to_string();
    // Kafka's claims are seconds, possibly fractional.
    let exp = claims
        .get("exp")
        .and_then(|e| e.as_f64())
        .ok_or(OAuthError::MissingClaim("exp"))?;
    let exp_ms = (exp * 1000.0) as i64;
    if exp_ms + ALLOWABLE_CLOCK_SKEW_MS <= now_ms {
        return Err(OAuthError::Expired);
    }
    Ok((principal, exp_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(header: &str, claims: &str) -> String {
        format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        )
    }

    fn msg(gs2: &str, token: &str) -> Vec<u8> {
        format!("{gs2}\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn an_unsecured_token_names_the_principal() {
        let t = token(
            r#"{"alg":"none"}"#,
            r#"{"sub":"alice","iat":1699999999,"exp":1700003600}"#,
        );
        assert_eq!(
            verify(&msg("n,,", &t), NOW),
            Ok(("alice".to_string(), 1_700_003_600_000))
        );
        assert_eq!(
            verify(&msg("n,a=alice,", &t), NOW).map(|(p, _)| p),
            Ok("alice".to_string())
        );
        assert_eq!(
            verify(&msg("n,a=bob,", &t), NOW),
            Err(OAuthError::AuthorizationIdMismatch)
        );
    }

    #[test]
    fn bad_tokens_are_refused() {
        let good_claims = r#"{"sub":"alice","exp":1700003600}"#;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (msg("n,,", &token(r#"{"alg":"RS256"}"#, good_claims)), "alg"),
            (
                msg(
                    "n,,",
                    &format!("{}sig", token(r#"{"alg":"none"}"#, good_claims)),
                ),
                "signature",
            ),
            (
                msg("n,,", &token(r#"{"alg":"none"}"#, r#"{"exp":1700003600}"#)),
                "sub",
            ),
            (
                msg("n,,", &token(r#"{"alg":"none"}"#, r#"{"sub":"a"}"#)),
                "exp",
            ),
            (
                msg(
                    "n,,",
                    &token(r#"{"alg":"none"}"#, r#"{"sub":"a","exp":1600000000}"#),
                ),
                "expired",
            ),
            (msg("n,,", "a.b"), "three"),
            (msg("n,,", "!!!.!!!."), "base64url"),
            (msg("y,,", &token(r#"{"alg":"none"}"#, good_claims)), "gs2"),
            (b"n,,".to_vec(), "key-value"),
            (b"n,,\x01auth=Basic x\x01\x01".to_vec(), "Bearer"),
            (b"n,,\x01host=x\x01\x01".to_vec(), "no auth"),
            (vec![0xff, 0xfe], "UTF-8"),
            (vec![b'n'; OAUTHBEARER_MESSAGE_BYTES_MAX + 1], "longer"),
        ];
        for (m, want) in cases {
            let e = verify(&m, NOW).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn random_messages_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = verify(&bytes, NOW);
        }
    }
}
