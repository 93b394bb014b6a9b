//! `--command-config FILE`: Kafka's client properties (`security.protocol`, `sasl.mechanism`,
//! `sasl.jaas.config`, `ssl.truststore.location`, …), as `kafka-topics.sh --command-config`
//! takes them, turned into librdkafka's keys (`tributary_security::client_properties`).
//! [`raw`] reads the same keys back for trib's own connections (the raw-request commands).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use tributary_security::scram::ScramMechanism;

/// Reads `path` and returns the librdkafka settings it stands for.
pub fn load(path: &Path) -> Result<Vec<(String, String)>> {
    tributary_security::client_properties::load(path)
        .map_err(|e| anyhow::anyhow!("--command-config: {e}"))
}

#[cfg(test)]
fn translate(text: &str) -> Result<Vec<(String, String)>> {
    tributary_security::client_properties::translate(text).map_err(anyhow::Error::msg)
}

/// What trib's own connections (the raw-request commands) need of the settings: TLS for SSL
/// and SASL_SSL, SASL for SASL_PLAINTEXT and SASL_SSL.
#[derive(Debug, Default)]
pub struct RawSecurity {
    pub tls: Option<RawTls>,
    pub sasl: Option<RawSasl>,
}

#[derive(Debug)]
pub struct RawTls {
    /// PEM CA certificates to trust; `None`: the system's CA bundle.
    pub truststore: Option<PathBuf>,
    /// PEM certificate chain and private key, presented when the broker asks (mutual TLS).
    pub keystore: Option<PathBuf>,
    /// Whether the broker's certificate must name the host trib connects to
    /// (`ssl.endpoint.identification.algorithm=https`, the default).
    pub verify_hostname: bool,
}

/// A SASL mechanism trib's raw connections speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl RawMechanism {
    pub fn name(self) -> &'static str {
        match self {
            RawMechanism::Plain => "PLAIN",
            RawMechanism::Scram(m) => m.name(),
        }
    }
}

pub struct RawSasl {
    pub mechanism: RawMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for RawSasl {
    // The password stays out of any message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Reads the translated settings (from [`load`]) back for trib's own connections. Refuses what
/// those connections cannot do, saying what to use instead; librdkafka's commands do not call
/// it, so they keep whatever librdkafka supports.
pub fn raw(settings: &[(String, String)]) -> Result<RawSecurity> {
    let get = |k: &str| {
        settings
            .iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.as_str())
    };
    let protocol = get("security.protocol").unwrap_or("PLAINTEXT");
    let (tls, sasl) = match protocol.to_ascii_uppercase().as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => bail!(
            "security.protocol={other} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
        ),
    };
    let mut out = RawSecurity::default();
    if tls {
        if get("ssl.key.password").is_some() {
            bail!(
                "ssl.key.password is set, but trib's raw-request commands read only unencrypted private keys; give ssl.keystore.location a PEM file with an unencrypted key (openssl pkcs8 -nocrypt)"
            );
        }
        out.tls = Some(RawTls {
            truststore: get("ssl.ca.location").map(PathBuf::from),
            keystore: get("ssl.certificate.location").map(PathBuf::from),
            verify_hostname: get("ssl.endpoint.identification.algorithm") != Some("none"),
        });
    }
    if sasl {
        let mechanism = match get("sasl.mechanisms") {
            None => bail!(
                "security.protocol={protocol} needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); Kafka's default, GSSAPI, is not supported"
            ),
            Some("PLAIN") => RawMechanism::Plain,
            Some("OAUTHBEARER") => bail!(
                "sasl.mechanism=OAUTHBEARER is not supported by trib's raw-request commands; authenticate with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 through a listener that enables one"
            ),
            Some(name) => RawMechanism::Scram(ScramMechanism::from_name(name).ok_or_else(
                || {
                    anyhow::anyhow!(
                        "sasl.mechanism={name} is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                    )
                },
            )?),
        };
        let (Some(username), Some(password)) = (get("sasl.username"), get("sasl.password")) else {
            bail!(
                "security.protocol={protocol} needs sasl.jaas.config with a username and password (username=\"...\" password=\"...\")"
            );
        };
        out.sasl = Some(RawSasl {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_client_properties_become_librdkafka_keys() {
        let got = translate(
            "# a comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"a-secret\";\n\
             ssl.truststore.location=/ca.pem\nssl.truststore.type=PEM\n",
        )
        .unwrap();
        let get = |k: &str| got.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("alice"));
        assert_eq!(get("sasl.password"), Some("a-secret"));
        assert_eq!(get("ssl.ca.location"), Some("/ca.pem"));
        for (bad, want) in [
            ("ssl.truststore.type=JKS", "PEM"),
            ("bootstrap.servers=x", "not a client security property"),
            ("ssl.endpoint.identification.algorithm=http", "neither https"),
            ("garbage", "key=value"),
            (
                "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required;",
                "username",
            ),
        ] {
            let e = format!("{:#}", translate(bad).unwrap_err());
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn raw_connections_read_the_same_settings() {
        let settings = translate(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"a-secret\";\n\
             ssl.truststore.location=/ca.pem\nssl.keystore.location=/me.pem\n\
             ssl.endpoint.identification.algorithm=\n",
        )
        .unwrap();
        let both = raw(&settings).unwrap();
        let tls = both.tls.unwrap();
        assert_eq!(tls.truststore.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(tls.keystore.as_deref(), Some(Path::new("/me.pem")));
        assert!(!tls.verify_hostname);
        let sasl = both.sasl.unwrap();
        assert_eq!(sasl.mechanism, RawMechanism::Scram(ScramMechanism::Sha512));
        assert_eq!(
            (sasl.username.as_str(), sasl.password.as_str()),
            ("alice", "a-secret")
        );
        assert!(!format!("{sasl:?}").contains("a-secret"));

        let plain = raw(&translate("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\" password=\"b\";").unwrap()).unwrap();
        assert!(plain.tls.is_none());
        assert_eq!(plain.sasl.unwrap().mechanism, RawMechanism::Plain);
        let ssl = raw(&translate("security.protocol=SSL").unwrap()).unwrap();
        assert!(ssl.tls.unwrap().verify_hostname);
        assert!(raw(&[]).unwrap().tls.is_none());

        for (bad, want) in [
            ("security.protocol=SASL_PLAINTEXT", "needs sasl.mechanism"),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN",
                "username",
            ),
            (
                "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER",
                "not supported by trib's raw",
            ),
            (
                "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI",
                "not supported",
            ),
            ("security.protocol=SSL\nssl.key.password=x", "unencrypted"),
            ("security.protocol=TLS", "not one of"),
        ] {
            let e = format!("{:#}", raw(&translate(bad).unwrap()).unwrap_err());
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
