//! DescribeClientQuotas and AlterClientQuotas requests (v0–v1; flexible from v1).

use crate::wire::{DecodeError, Reader};

const FLEXIBLE_FROM: i16 = 1;

/// One component of a DescribeClientQuotas filter: the entity type (`user`, `client-id`), how
/// to match (0 exactly `name`, 1 the default entity, 2 any) and the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaFilterComponent {
    pub entity_type: String,
    pub match_type: i8,
    pub name: Option<String>,
}

pub fn decode_describe(
    r: &mut Reader,
    version: i16,
) -> Result<(Vec<QuotaFilterComponent>, bool), DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let n = r.array_len_required("components", flex, 3)?;
    let mut components = Vec::with_capacity(n);
    for _ in 0..n {
        let entity_type = r.string("entity_type", flex)?;
        let match_type = r.i8("match_type")?;
        let name = r.nullable_string("match", flex)?;
        r.tagged_fields(flex)?;
        components.push(QuotaFilterComponent {
            entity_type,
            match_type,
            name,
        });
    }
    let strict = r.bool("strict")?;
    r.tagged_fields(flex)?;
    Ok((components, strict))
}

/// One entity's changes: its (type, name) parts (`None`: the default) and (key, value,
/// remove) operations.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, f64, bool)>,
}

pub fn decode_alter(
    r: &mut Reader,
    version: i16,
) -> Result<(Vec<QuotaAlteration>, bool), DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let n = r.array_len_required("entries", flex, 2)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let m = r.array_len_required("entity", flex, 2)?;
        let mut entity = Vec::with_capacity(m);
        for _ in 0..m {
            let t = r.string("entity_type", flex)?;
            let name = r.nullable_string("entity_name", flex)?;
            r.tagged_fields(flex)?;
            entity.push((t, name));
        }
        let k = r.array_len_required("ops", flex, 10)?;
        let mut ops = Vec::with_capacity(k);
        for _ in 0..k {
            let key = r.string("key", flex)?;
            let value = f64::from_bits(r.i64("value")? as u64);
            let remove = r.bool("remove")?;
            r.tagged_fields(flex)?;
            ops.push((key, value, remove));
        }
        r.tagged_fields(flex)?;
        entries.push(QuotaAlteration { entity, ops });
    }
    let validate_only = r.bool("validate_only")?;
    r.tagged_fields(flex)?;
    Ok((entries, validate_only))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::assert_prefixes_fail;
    use bytes::Bytes;

    #[test]
    fn quota_requests_decode_and_every_prefix_fails() {
        // AlterClientQuotas v0: user=alice, producer_byte_rate=1024.0 set; validate_only false.
        let mut b = vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 4];
        b.extend_from_slice(b"user");
        b.extend_from_slice(&[0, 5]);
        b.extend_from_slice(b"alice");
        b.extend_from_slice(&[0, 0, 0, 1, 0, 18]);
        b.extend_from_slice(b"producer_byte_rate");
        b.extend_from_slice(&1024f64.to_bits().to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        let bytes = Bytes::from(b);
        let mut r = Reader::new(bytes.clone());
        let (entries, validate_only) = decode_alter(&mut r, 0).unwrap();
        r.expect_end("request").unwrap();
        assert!(!validate_only);
        assert_eq!(
            entries[0].entity,
            vec![("user".to_string(), Some("alice".to_string()))]
        );
        assert_eq!(
            entries[0].ops,
            vec![("producer_byte_rate".to_string(), 1024.0, false)]
        );
        assert_prefixes_fail(&bytes, |r| decode_alter(r, 0));
        // DescribeClientQuotas v1: one component (user, default), strict.
        let bytes = Bytes::from_static(&[2, 5, b'u', b's', b'e', b'r', 1, 0, 0, 1, 0]);
        let mut r = Reader::new(bytes.clone());
        let (c, strict) = decode_describe(&mut r, 1).unwrap();
        r.expect_end("request").unwrap();
        assert!(strict);
        assert_eq!(c[0].match_type, 1);
        assert_eq!(c[0].name, None);
        assert_prefixes_fail(&bytes, |r| decode_describe(r, 1));
    }
}
