//! Kafka's client security properties (`security.protocol`, `sasl.mechanism`,
//! `sasl.jaas.config`, `ssl.truststore.location`, …), as `kafka-topics.sh --command-config`
//! takes them, turned into librdkafka's keys — for the tools (`trib --command-config`,
//! `tributary-bench --command-config`). PEM stores only: librdkafka reads no JKS. Errors name
//! the line, never its value (it may hold a password).

/// The librdkafka settings the properties `text` stand for, in order (a key set twice keeps
/// the later value).
pub fn translate(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| {
        out.retain(|(x, _)| x != k);
        out.push((k.to_string(), v.to_string()));
    };
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!(
                "line {n} is not key=value (it has no '='); write each property as key=value"
            ));
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "security.protocol" => set(k, v),
            "sasl.mechanism" => set("sasl.mechanisms", v),
            "sasl.jaas.config" => {
                let jaas = crate::jaas::JaasConfig::parse(v)
                    .map_err(|e| format!("line {n}: sasl.jaas.config: {e}"))?;
                match (jaas.option("username"), jaas.option("password")) {
                    (Some(u), Some(p)) => {
                        set("sasl.username", u);
                        set("sasl.password", p);
                    }
                    _ => {
                        return Err(format!(
                            "line {n}: sasl.jaas.config names no username and password; give both (username=\"...\" password=\"...\")"
                        ))
                    }
                }
            }
            "ssl.truststore.type" | "ssl.keystore.type" if !v.eq_ignore_ascii_case("PEM") => {
                return Err(format!(
                    "line {n}: {k}={v}: only PEM stores can be read; convert the store to PEM"
                ))
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {}
            "ssl.truststore.location" => set("ssl.ca.location", v),
            "ssl.keystore.location" => {
                // One PEM file holding the certificate chain and the key, as the broker's.
                set("ssl.certificate.location", v);
                set("ssl.key.location", v);
            }
            // Kafka turns hostname verification off with an empty value, librdkafka with `none`.
            "ssl.endpoint.identification.algorithm" if v.is_empty() => set(k, "none"),
            "ssl.endpoint.identification.algorithm" if v.eq_ignore_ascii_case("https") => {
                set(k, "https")
            }
            "ssl.endpoint.identification.algorithm" => {
                return Err(format!(
                    "line {n}: ssl.endpoint.identification.algorithm={v} is neither https (check the broker's name) nor empty (do not)"
                ))
            }
            "ssl.key.password" => set(k, v),
            other => {
                return Err(format!(
                    "line {n}: {other} is not a client security property understood here; use security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ssl.keystore.location, ssl.key.password, ssl.endpoint.identification.algorithm"
                ))
            }
        }
    }
    Ok(out)
}

/// Reads the properties file at `path` and translates it.
pub fn load(path: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    translate(&text).map_err(|e| format!("in {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_named_without_its_value() {
        let e = translate("security.protocol=SASL_SSL\nhunter2-password\n").unwrap_err();
        assert!(e.starts_with("line 2 is not key=value"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn kafka_keys_become_librdkafka_keys() {
        let got = translate(
            "# comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";\n\
             ssl.truststore.location=/ca.pem\nssl.endpoint.identification.algorithm=\n",
        )
        .unwrap();
        let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "security.protocol",
                "sasl.mechanisms",
                "sasl.username",
                "sasl.password",
                "ssl.ca.location",
                "ssl.endpoint.identification.algorithm"
            ]
        );
        assert_eq!(got[5].1, "none");
    }
}
