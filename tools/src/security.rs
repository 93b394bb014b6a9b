//! `--command-config FILE`: Kafka's client properties (`security.protocol`, `sasl.mechanism`,
//! `sasl.jaas.config`, `ssl.truststore.location`, …), as `kafka-topics.sh --command-config`
//! takes them, turned into librdkafka's keys. PEM stores only: librdkafka reads no JKS.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// Reads `path` and returns the librdkafka settings it stands for.
pub fn load(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --command-config {}", path.display()))?;
    translate(&text).with_context(|| format!("in --command-config {}", path.display()))
}

fn translate(text: &str) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| {
        out.retain(|(x, _)| x != k);
        out.push((k.to_string(), v.to_string()));
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            bail!("line {}: {line:?} is not key=value", n + 1);
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "security.protocol" => set(k, v),
            "sasl.mechanism" => set("sasl.mechanisms", v),
            "sasl.jaas.config" => {
                let jaas = tributary_security::jaas::JaasConfig::parse(v)
                    .map_err(|e| anyhow::anyhow!("sasl.jaas.config: {e}"))?;
                match (jaas.option("username"), jaas.option("password")) {
                    (Some(u), Some(p)) => {
                        set("sasl.username", u);
                        set("sasl.password", p);
                    }
                    _ => bail!(
                        "sasl.jaas.config names no username and password; give both (username=\"...\" password=\"...\")"
                    ),
                }
            }
            "ssl.truststore.type" | "ssl.keystore.type" if !v.eq_ignore_ascii_case("PEM") => {
                bail!("{k}={v}: only PEM stores can be read; convert the store to PEM")
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {}
            "ssl.truststore.location" => set("ssl.ca.location", v),
            "ssl.keystore.location" => {
                // One PEM file holding the certificate chain and the key, as the broker's.
                set("ssl.certificate.location", v);
                set("ssl.key.location", v);
            }
            "ssl.key.password" | "ssl.endpoint.identification.algorithm" => set(k, v),
            other => bail!(
                "line {}: {other} is not a client security property trib understands; use security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ssl.keystore.location, ssl.key.password, ssl.endpoint.identification.algorithm",
                n + 1
            ),
        }
    }
    Ok(out)
}

/// Whether the settings leave the connection in plaintext without authentication.
pub fn is_plaintext(settings: &[(String, String)]) -> bool {
    settings
        .iter()
        .find(|(k, _)| k == "security.protocol")
        .is_none_or(|(_, v)| v.eq_ignore_ascii_case("PLAINTEXT"))
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
        assert!(!is_plaintext(&got));
        assert!(is_plaintext(&[]));
        for (bad, want) in [
            ("ssl.truststore.type=JKS", "PEM"),
            ("bootstrap.servers=x", "not a client security property"),
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
}
