//! CreateAcls, DescribeAcls and DeleteAcls requests (v0–v3; flexible from v2). Version 0 has
//! no pattern type: its bindings are LITERAL, its filters match LITERAL patterns.

use crate::wire::{DecodeError, Reader};

/// First flexible version of all three.
const FLEXIBLE_FROM: i16 = 2;

/// Kafka's `PatternType.LITERAL`, implied by version 0.
pub const PATTERN_LITERAL: i8 = 3;

/// One ACL to create, codes as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclCreation {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// A filter over ACLs; `None` strings match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

pub fn decode_create(r: &mut Reader, version: i16) -> Result<Vec<AclCreation>, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let n = r.array_len_required("creations", flex, 7)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let resource_type = r.i8("resource_type")?;
        let resource_name = r.string("resource_name", flex)?;
        let pattern_type = if version >= 1 {
            r.i8("resource_pattern_type")?
        } else {
            PATTERN_LITERAL
        };
        let principal = r.string("principal", flex)?;
        let host = r.string("host", flex)?;
        let operation = r.i8("operation")?;
        let permission_type = r.i8("permission_type")?;
        r.tagged_fields(flex)?;
        out.push(AclCreation {
            resource_type,
            resource_name,
            pattern_type,
            principal,
            host,
            operation,
            permission_type,
        });
    }
    r.tagged_fields(flex)?;
    Ok(out)
}

fn decode_filter(r: &mut Reader, version: i16, flex: bool) -> Result<AclFilter, DecodeError> {
    let resource_type = r.i8("resource_type_filter")?;
    let resource_name = r.nullable_string("resource_name_filter", flex)?;
    let pattern_type = if version >= 1 {
        r.i8("pattern_type_filter")?
    } else {
        PATTERN_LITERAL
    };
    let principal = r.nullable_string("principal_filter", flex)?;
    let host = r.nullable_string("host_filter", flex)?;
    let operation = r.i8("operation")?;
    let permission_type = r.i8("permission_type")?;
    Ok(AclFilter {
        resource_type,
        resource_name,
        pattern_type,
        principal,
        host,
        operation,
        permission_type,
    })
}

pub fn decode_describe(r: &mut Reader, version: i16) -> Result<AclFilter, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let f = decode_filter(r, version, flex)?;
    r.tagged_fields(flex)?;
    Ok(f)
}

pub fn decode_delete(r: &mut Reader, version: i16) -> Result<Vec<AclFilter>, DecodeError> {
    let flex = version >= FLEXIBLE_FROM;
    let n = r.array_len_required("filters", flex, 7)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(decode_filter(r, version, flex)?);
        r.tagged_fields(flex)?;
    }
    r.tagged_fields(flex)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::assert_prefixes_fail;
    use bytes::Bytes;

    #[test]
    fn acl_requests_decode_and_every_prefix_fails() {
        // CreateAcls v1: one TOPIC "t" PREFIXED, User:a, *, READ, ALLOW.
        let mut b = vec![0, 0, 0, 1, 2, 0, 1, b't', 4, 0, 6];
        b.extend_from_slice(b"User:a");
        b.extend_from_slice(&[0, 1, b'*', 3, 3]);
        let bytes = Bytes::from(b);
        let mut r = Reader::new(bytes.clone());
        let c = decode_create(&mut r, 1).unwrap();
        r.expect_end("request").unwrap();
        assert_eq!(c[0].resource_name, "t");
        assert_eq!(c[0].pattern_type, 4);
        assert_eq!(c[0].principal, "User:a");
        assert_prefixes_fail(&bytes, |r| decode_create(r, 1));
        // DescribeAcls v3 (flexible): ANY type, null name, ANY pattern, null principal and
        // host, ANY operation and permission.
        let bytes = Bytes::from_static(&[1, 0, 1, 0, 0, 1, 1, 0]);
        let mut r = Reader::new(bytes.clone());
        let f = decode_describe(&mut r, 3).unwrap();
        r.expect_end("request").unwrap();
        assert_eq!(f.resource_name, None);
        assert_eq!(f.pattern_type, 1);
        assert_prefixes_fail(&bytes, |r| decode_describe(r, 3));
        // DeleteAcls v0: one filter, LITERAL implied.
        let bytes = Bytes::from_static(&[0, 0, 0, 1, 2, 0, 1, b't', 0xff, 0xff, 0xff, 0xff, 2, 3]);
        let mut r = Reader::new(bytes.clone());
        let d = decode_delete(&mut r, 0).unwrap();
        r.expect_end("request").unwrap();
        assert_eq!(d[0].pattern_type, PATTERN_LITERAL);
        assert_eq!(d[0].resource_name.as_deref(), Some("t"));
        assert_prefixes_fail(&bytes, |r| decode_delete(r, 0));
    }
}
