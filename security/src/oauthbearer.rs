//! The server side of SASL OAUTHBEARER (RFC 7628). The client's one message carries a JWS whose
//! claims name the principal (`sub`) and the expiry (`exp`, seconds since the epoch).
//!
//! - [`verify`]: Kafka's default, unsecured tokens (`OAuthBearerUnsecuredValidatorCallbackHandler`):
//!   the header says `"alg":"none"`. Such tokens prove nothing — for tests and trusted networks.
//! - [`SignedValidator`]: signed tokens checked against a JSON Web Key Set, as Kafka's
//!   `OAuthBearerValidatorCallbackHandler` (KIP-768): RS256/384/512 and ES256/384 signatures, the
//!   key chosen by the token's `kid`, `exp` and `nbf` within a clock skew, and the expected
//!   audience and issuer when configured.

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
    #[error("Authentication failed: the signed token is not valid ({0})")]
    Invalid(&'static str),
}

/// Validates the client's message, an unsecured token, at `now_ms` (milliseconds since the
/// epoch); returns the principal name and the token's expiry (ms since the epoch), which bounds
/// the session.
pub fn verify(msg: &[u8], now_ms: i64) -> Result<(String, i64), OAuthError> {
    let (authzid, token) = parse_message(msg)?;
    let (principal, exp) = validate_unsecured(token, now_ms)?;
    if authzid.is_some_and(|a| a != principal) {
        return Err(OAuthError::AuthorizationIdMismatch);
    }
    Ok((principal, exp))
}

/// The authorization id (if any) and the bearer token of a client's message.
fn parse_message(msg: &[u8]) -> Result<(Option<&str>, &str), OAuthError> {
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
    Ok((authzid, token))
}

/// One verification key of a JSON Web Key Set.
#[derive(Debug, Clone)]
struct Jwk {
    kid: Option<String>,
    key: PublicKey,
}

#[derive(Debug, Clone)]
enum PublicKey {
    /// Modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed point (0x04, x, y) on P-256 or P-384.
    Ec { p384: bool, point: Vec<u8> },
}

/// A JSON Web Key Set (RFC 7517): the RSA and EC (P-256, P-384) signing keys it holds; other
/// keys (symmetric ones, encryption keys) are passed over.
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

impl Jwks {
    /// Parses a JWKS document; an error says what is wrong with it.
    pub fn parse(json: &[u8]) -> Result<Self, String> {
        let doc: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
        let keys = doc
            .get("keys")
            .and_then(|k| k.as_array())
            .ok_or("no \"keys\" array")?;
        let b64 = |k: &serde_json::Value, field: &str| -> Result<Vec<u8>, String> {
            let v = k
                .get(field)
                .and_then(|v| v.as_str())
                .ok_or(format!("a key has no {field}"))?;
            URL_SAFE_NO_PAD
                .decode(v.trim_end_matches('='))
                .map_err(|_| format!("a key's {field} is not base64url"))
        };
        let mut out = Vec::new();
        for k in keys {
            if k.get("use")
                .and_then(|u| u.as_str())
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            let kid = k.get("kid").and_then(|v| v.as_str()).map(str::to_string);
            let key = match k.get("kty").and_then(|v| v.as_str()) {
                Some("RSA") => PublicKey::Rsa {
                    n: b64(k, "n")?,
                    e: b64(k, "e")?,
                },
                Some("EC") => {
                    let (p384, len) = match k.get("crv").and_then(|v| v.as_str()) {
                        Some("P-256") => (false, 32),
                        Some("P-384") => (true, 48),
                        _ => continue,
                    };
                    let (x, y) = (b64(k, "x")?, b64(k, "y")?);
                    if x.len() != len || y.len() != len {
                        return Err("an EC key's x or y has the wrong length".into());
                    }
                    let mut point = vec![4u8];
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    PublicKey::Ec { p384, point }
                }
                _ => continue,
            };
            out.push(Jwk { kid, key });
        }
        if out.is_empty() {
            return Err("it holds no RSA or EC (P-256, P-384) signing key".into());
        }
        Ok(Self { keys: out })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Kafka's `OAuthBearerValidatorCallbackHandler` settings: the keys, and the claims checked.
#[derive(Debug, Clone)]
pub struct SignedValidator {
    pub jwks: Jwks,
    /// `sasl.oauthbearer.expected.audience`: the token's `aud` must name one (none: unchecked).
    pub audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`: the token's `iss` must be it (none: unchecked).
    pub issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim naming the principal.
    pub sub_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds`, in milliseconds.
    pub clock_skew_ms: i64,
}

impl SignedValidator {
    /// Validates the client's message, a signed token, at `now_ms`; returns the principal and
    /// the token's expiry (ms since the epoch).
    pub fn verify(&self, msg: &[u8], now_ms: i64) -> Result<(String, i64), OAuthError> {
        let (authzid, token) = parse_message(msg)?;
        let (principal, exp) = self.validate(token, now_ms)?;
        if authzid.is_some_and(|a| a != principal) {
            return Err(OAuthError::AuthorizationIdMismatch);
        }
        Ok((principal, exp))
    }

    /// Checks, in order: the token's form, its signature (by the `alg` its header names, with
    /// the key its `kid` names), then its claims; returns the principal and the expiry.
    fn validate(&self, token: &str, now_ms: i64) -> Result<(String, i64), OAuthError> {
        let invalid = OAuthError::Invalid;
        let (header_b64, payload_b64, signature_b64) =
            jws_parts(token).ok_or(invalid("not three dot-separated parts"))?;
        let header = json_object(header_b64).ok_or(invalid("its header is not base64url JSON"))?;
        let alg = header.get("alg").and_then(|a| a.as_str()).unwrap_or("");
        let kid = header.get("kid").and_then(|k| k.as_str());
        let sig = URL_SAFE_NO_PAD
            .decode(signature_b64)
            .map_err(|_| invalid("its signature is not base64url"))?;
        let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
        let check = signature_check(alg, signed, &sig)?;
        self.verify_signature(kid, &*check)?;
        let claims =
            json_object(payload_b64).ok_or(invalid("its claims are not base64url JSON"))?;
        let exp_ms = self.check_validity_period(&claims, now_ms)?;
        self.check_issuer(&claims)?;
        self.check_audience(&claims)?;
        let principal = claims
            .get(&self.sub_claim)
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .ok_or(OAuthError::MissingClaim("subject"))?
            .to_string();
        Ok((principal, exp_ms))
    }

    /// Whether `check` accepts a key the token's `kid` names (any key of the set without one):
    /// refused when no key is named, or none of those named verifies the signature.
    fn verify_signature(
        &self,
        kid: Option<&str>,
        check: &dyn Fn(&PublicKey) -> bool,
    ) -> Result<(), OAuthError> {
        // The key the token names, else any key of the set.
        let candidates = self
            .jwks
            .keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid);
        let mut named = false;
        let mut verified = false;
        for k in candidates {
            named = true;
            if check(&k.key) {
                verified = true;
                break;
            }
        }
        if !named {
            return Err(OAuthError::Invalid("its kid names no key of the JWKS"));
        }
        if !verified {
            return Err(OAuthError::Invalid("its signature does not verify"));
        }
        Ok(())
    }

    /// Whether the token is valid at `now_ms`, within the clock skew: it has an `exp` that has
    /// not passed, and any `nbf` has come. Returns the expiry in milliseconds.
    fn check_validity_period(&self, claims: &JsonObject, now_ms: i64) -> Result<i64, OAuthError> {
        let seconds = |name: &str| claims.get(name).and_then(|v| v.as_f64());
        let exp_ms = (seconds("exp").ok_or(OAuthError::MissingClaim("exp"))? * 1000.0) as i64;
        if exp_ms.saturating_add(self.clock_skew_ms) <= now_ms {
            return Err(OAuthError::Expired);
        }
        if let Some(nbf) = seconds("nbf") {
            if ((nbf * 1000.0) as i64).saturating_sub(self.clock_skew_ms) > now_ms {
                return Err(OAuthError::Invalid("it is not valid yet (nbf)"));
            }
        }
        Ok(exp_ms)
    }

    /// Whether the token's `iss` is the expected issuer, when one is configured.
    fn check_issuer(&self, claims: &JsonObject) -> Result<(), OAuthError> {
        if let Some(issuer) = &self.issuer {
            if claims.get("iss").and_then(|v| v.as_str()) != Some(issuer.as_str()) {
                return Err(OAuthError::Invalid("its issuer is not the expected one"));
            }
        }
        Ok(())
    }

    /// Whether the token's `aud` (one name or a list) names an expected audience, when any
    /// are configured.
    fn check_audience(&self, claims: &JsonObject) -> Result<(), OAuthError> {
        if self.audience.is_empty() {
            return Ok(());
        }
        let named = |a: &serde_json::Value| {
            a.as_str()
                .is_some_and(|a| self.audience.iter().any(|e| e == a))
        };
        let ok = match claims.get("aud") {
            Some(serde_json::Value::Array(list)) => list.iter().any(named),
            Some(a) => named(a),
            None => false,
        };
        if !ok {
            return Err(OAuthError::Invalid("its audience is not an expected one"));
        }
        Ok(())
    }
}

/// Whether a key verifies a token's signature.
type SignatureCheck<'a> = Box<dyn Fn(&PublicKey) -> bool + 'a>;

/// How a signature by `alg` over `signed` is checked against a key: RS256/384/512 with an RSA
/// key, ES256/384 with an EC key of the curve. Refuses `none` and any other `alg`.
fn signature_check<'a>(
    alg: &str,
    signed: &'a [u8],
    sig: &'a [u8],
) -> Result<SignatureCheck<'a>, OAuthError> {
    use ring::signature;
    let rsa = |params: &'static signature::RsaParameters| {
        move |k: &PublicKey| match k {
            PublicKey::Rsa { n, e } => signature::RsaPublicKeyComponents { n, e }
                .verify(params, signed, sig)
                .is_ok(),
            _ => false,
        }
    };
    let ec = |p384: bool, alg: &'static signature::EcdsaVerificationAlgorithm| {
        move |k: &PublicKey| match k {
            PublicKey::Ec { p384: is384, point } if *is384 == p384 => {
                signature::UnparsedPublicKey::new(alg, point)
                    .verify(signed, sig)
                    .is_ok()
            }
            _ => false,
        }
    };
    Ok(match alg {
        "RS256" => Box::new(rsa(&signature::RSA_PKCS1_2048_8192_SHA256)),
        "RS384" => Box::new(rsa(&signature::RSA_PKCS1_2048_8192_SHA384)),
        "RS512" => Box::new(rsa(&signature::RSA_PKCS1_2048_8192_SHA512)),
        "ES256" => Box::new(ec(false, &signature::ECDSA_P256_SHA256_FIXED)),
        "ES384" => Box::new(ec(true, &signature::ECDSA_P384_SHA384_FIXED)),
        "none" => return Err(OAuthError::Invalid("it is unsecured (alg none)")),
        _ => {
            return Err(OAuthError::Invalid(
                "its alg is not RS256, RS384, RS512, ES256 or ES384",
            ))
        }
    })
}

/// A compact JWS's header, payload and signature.
fn jws_parts(token: &str) -> Option<(&str, &str, &str)> {
    let mut segments = token.split('.');
    match (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) {
        (Some(h), Some(p), Some(s), None) => Some((h, p, s)),
        _ => None,
    }
}

/// A JSON object: a token's header or its claims.
type JsonObject = serde_json::Map<String, serde_json::Value>;

/// A base64url-encoded JSON object.
fn json_object(part: &str) -> Option<JsonObject> {
    let bytes = URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn validate_unsecured(token: &str, now_ms: i64) -> Result<(String, i64), OAuthError> {
    let (header, payload, signature) =
        jws_parts(token).ok_or(OAuthError::NotUnsecured("not three dot-separated parts"))?;
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

    mod signed {
        use super::*;
        use ring::rand::SystemRandom;
        use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};

        fn b64(bytes: &[u8]) -> String {
            URL_SAFE_NO_PAD.encode(bytes)
        }

        /// A P-256 key pair and its JWK.
        fn ec_key(kid: &str) -> (EcdsaKeyPair, serde_json::Value) {
            let rng = SystemRandom::new();
            let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
            let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
            let point = pair.public_key().as_ref().to_vec();
            let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                "x": b64(&point[1..33]), "y": b64(&point[33..65])});
            (pair, jwk)
        }

        /// A 2048-bit RSA key pair (made by the openssl command line: ring makes none) and
        /// its JWK.
        fn rsa_key(kid: &str) -> (RsaKeyPair, serde_json::Value) {
            // PKCS#1 DER, the form ring reads an RSA key in.
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 | openssl rsa -outform DER -traditional")
                .output()
                .expect("the openssl command line");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let pair = RsaKeyPair::from_der(&out.stdout).unwrap();
            let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
            let jwk = serde_json::json!({"kty": "RSA", "kid": kid, "n": b64(&public.n),
                "e": b64(&public.e)});
            (pair, jwk)
        }

        fn es256(pair: &EcdsaKeyPair, kid: Option<&str>, claims: &serde_json::Value) -> String {
            let mut header = serde_json::json!({"alg": "ES256", "typ": "JWT"});
            if let Some(kid) = kid {
                header["kid"] = kid.into();
            }
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            let sig = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
            format!("{input}.{}", b64(sig.as_ref()))
        }

        fn rs256(pair: &RsaKeyPair, kid: &str, claims: &serde_json::Value) -> String {
            let header = serde_json::json!({"alg": "RS256", "kid": kid});
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            let mut sig = vec![0; pair.public().modulus_len()];
            pair.sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                input.as_bytes(),
                &mut sig,
            )
            .unwrap();
            format!("{input}.{}", b64(&sig))
        }

        fn validator(keys: &[serde_json::Value]) -> SignedValidator {
            let doc = serde_json::json!({"keys": keys});
            SignedValidator {
                jwks: Jwks::parse(doc.to_string().as_bytes()).unwrap(),
                audience: vec!["tributary".into()],
                issuer: Some("https://issuer.test".into()),
                sub_claim: "sub".into(),
                clock_skew_ms: 30_000,
            }
        }

        fn claims(extra: serde_json::Value) -> serde_json::Value {
            let mut c = serde_json::json!({"sub": "alice", "iss": "https://issuer.test",
                "aud": "tributary", "iat": 1_699_999_000, "exp": 1_700_003_600});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    c.as_object_mut().unwrap().remove(k);
                } else {
                    c[k] = v.clone();
                }
            }
            c
        }

        #[test]
        fn signed_tokens_name_their_subject_and_bad_ones_are_refused() {
            let (ec1, jwk1) = ec_key("ec-1");
            let (rsa, jwk2) = rsa_key("rsa-1");
            let (stranger, _) = ec_key("ec-1");
            let v = validator(&[jwk1, jwk2]);
            let ok = |t: &str| v.verify(&msg("n,,", t), NOW);
            let refused = |t: &str, want: &str| {
                let e = v.verify(&msg("n,,", t), NOW).unwrap_err().to_string();
                assert!(e.contains(want), "{want}: {e}");
            };
            let good = claims(serde_json::json!({}));
            assert_eq!(
                ok(&es256(&ec1, Some("ec-1"), &good)),
                Ok(("alice".into(), 1_700_003_600_000))
            );
            assert_eq!(
                ok(&rs256(&rsa, "rsa-1", &good)).map(|(p, _)| p),
                Ok("alice".into())
            );
            // No kid: any key of the set that verifies it.
            assert!(ok(&es256(&ec1, None, &good)).is_ok());
            // An array audience naming ours, and an expiry within the clock skew.
            let aud =
                claims(serde_json::json!({"aud": ["other", "tributary"], "exp": 1_699_999_990}));
            assert!(ok(&es256(&ec1, Some("ec-1"), &aud)).is_ok());
            assert_eq!(
                v.verify(&msg("n,a=bob,", &es256(&ec1, Some("ec-1"), &good)), NOW),
                Err(OAuthError::AuthorizationIdMismatch)
            );

            refused(&es256(&stranger, Some("ec-1"), &good), "does not verify");
            refused(&es256(&ec1, Some("nobody"), &good), "kid");
            refused(&rs256(&rsa, "ec-1", &good), "does not verify");
            let mut tampered = es256(&ec1, Some("ec-1"), &good);
            let forged = b64(claims(serde_json::json!({"sub": "root"}))
                .to_string()
                .as_bytes());
            let parts: Vec<&str> = tampered.split('.').collect();
            tampered = format!("{}.{forged}.{}", parts[0], parts[2]);
            refused(&tampered, "does not verify");
            refused(&token(r#"{"alg":"none"}"#, &good.to_string()), "unsecured");
            refused(&token(r#"{"alg":"HS256"}"#, &good.to_string()), "alg");
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"exp": 1_699_990_000})),
                ),
                "expired",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"exp": null})),
                ),
                "exp",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"nbf": 1_700_001_000})),
                ),
                "nbf",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"iss": "https://evil.test"})),
                ),
                "issuer",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"aud": "other"})),
                ),
                "audience",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"aud": null})),
                ),
                "audience",
            );
            refused(
                &es256(
                    &ec1,
                    Some("ec-1"),
                    &claims(serde_json::json!({"sub": null})),
                ),
                "subject",
            );
            refused("a.b", "three");
        }

        #[test]
        fn a_jwks_holds_signing_keys_or_says_what_is_wrong() {
            let (_, ec) = ec_key("a");
            let enc = serde_json::json!({"kty": "EC", "crv": "P-256", "use": "enc", "x": "AA", "y": "AA"});
            let oct = serde_json::json!({"kty": "oct", "k": "c2VjcmV0"});
            let doc = serde_json::json!({"keys": [ec, enc, oct]});
            assert_eq!(Jwks::parse(doc.to_string().as_bytes()).unwrap().len(), 1);
            for (bad, want) in [
                (&b"{"[..], "not JSON"),
                (br#"{"k":[]}"#, "keys"),
                (br#"{"keys":[{"kty":"oct","k":"x"}]}"#, "no RSA or EC"),
                (
                    br#"{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}"#,
                    "base64url",
                ),
                (br#"{"keys":[{"kty":"RSA","e":"AQAB"}]}"#, "no n"),
                (
                    br#"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}"#,
                    "length",
                ),
            ] {
                let e = Jwks::parse(bad).unwrap_err();
                assert!(e.contains(want), "{want}: {e}");
            }
        }

        proptest::proptest! {
            #[test]
            fn random_messages_never_panic_a_signed_validator(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
                let (_, jwk) = ec_key("k");
                let _ = validator(&[jwk]).verify(&bytes, NOW);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn random_messages_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = verify(&bytes, NOW);
        }
    }
}
