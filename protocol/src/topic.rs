//! Topic name rules, as Kafka's `org.apache.kafka.common.internals.Topic.validate` states them.

/// Kafka's longest legal topic name: 255 minus room for a partition suffix and a delete marker.
pub const TOPIC_NAME_LENGTH_MAX: usize = 249;

/// Why a topic name is not legal; the text is what the broker tells the client.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be \"{name}\""));
    }
    if name.len() > TOPIC_NAME_LENGTH_MAX {
        return Err(format!(
            "topic name is {} characters long, the maximum is {TOPIC_NAME_LENGTH_MAX}",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "topic name {name:?} contains {bad:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_and_illegal_names() {
        assert!(validate_topic_name("orders.v1_eu-west").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name(".").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }
}
