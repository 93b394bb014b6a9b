//! Client quota records as the metadata image keeps them (Kafka's `producer_byte_rate`,
//! `consumer_byte_rate` and `request_percentage`, set with AlterClientQuotas by user, client id
//! or both, with `<default>` entities). Measuring and throttling stay in the broker.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The quota keys served.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Also the index of each key's rate in a pair's sensor.
pub const QUOTA_KEYS: &[&str] = &[PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE];

/// One quota entity: its user part and client-id part, each absent, the default (`Some(None)`)
/// or a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    #[serde(with = "entity_part")]
    pub user: Option<Option<String>>,
    #[serde(with = "entity_part")]
    pub client: Option<Option<String>>,
}

/// How an entity part is kept in the metadata log: absent as `null`, a name as its string, the
/// default as `{"default":true}`. (Plain serde writes the default as `null` too, so it came
/// back absent: a `<default>` quota lost its entity. Records written that way read as absent,
/// as they always did.)
mod entity_part {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Part {
        Name(String),
        Default { default: bool },
    }

    pub fn serialize<S: Serializer>(
        part: &Option<Option<String>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match part {
            None => s.serialize_none(),
            Some(Some(name)) => Part::Name(name.clone()).serialize(s),
            Some(None) => Part::Default { default: true }.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Ok(match Option::<Part>::deserialize(d)? {
            None | Some(Part::Default { default: false }) => None,
            Some(Part::Name(name)) => Some(Some(name)),
            Some(Part::Default { default: true }) => Some(None),
        })
    }
}

/// An AlterClientQuotas change: per entity, each key set (`Some`) or removed (`None`).
pub type QuotaChange = (QuotaEntity, Vec<(String, Option<f64>)>);

/// One entity's quota values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, f64>,
}

/// Values are checked finite and positive before they reach the image, so equality is total.
impl Eq for QuotaRecord {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_parts_survive_the_metadata_log() {
        for (user, client) in [
            (None, Some(Some("c".to_string()))),
            (Some(None), None),
            (Some(None), Some(None)),
            (Some(Some("u".to_string())), Some(None)),
            (Some(Some("u".to_string())), None),
        ] {
            let e = QuotaEntity { user, client };
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(
                serde_json::from_str::<QuotaEntity>(&json).unwrap(),
                e,
                "{json}"
            );
        }
        // Written before parts kept the default apart: null reads as absent, as it did.
        let old: QuotaEntity = serde_json::from_str(r#"{"user":null,"client":"c"}"#).unwrap();
        assert_eq!((old.user, old.client), (None, Some(Some("c".to_string()))));
    }

    #[test]
    fn the_keys_keep_their_order() {
        // The broker's sensors index their rates by this order.
        assert_eq!(
            QUOTA_KEYS,
            [
                "producer_byte_rate",
                "consumer_byte_rate",
                "request_percentage"
            ]
        );
    }
}
