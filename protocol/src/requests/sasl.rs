//! SaslHandshake (v0–v1), SaslAuthenticate (v0–v2), DescribeUserScramCredentials (v0) and
//! AlterUserScramCredentials (v0) requests.

use bytes::Bytes;

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

/// SaslHandshake: the mechanism the client wants.
pub fn decode_handshake(r: &mut Reader, _version: i16) -> Result<String, DecodeError> {
    r.string("mechanism", false)
}

/// SaslAuthenticate: one token of the mechanism's exchange.
pub fn decode_authenticate(r: &mut Reader, version: i16) -> Result<Bytes, DecodeError> {
    let flex = flexible(api_key::SASL_AUTHENTICATE, version);
    let bytes = r
        .nullable_bytes("auth_bytes", flex)?
        .ok_or_else(|| r.malformed("auth_bytes", "null where bytes are required"))?;
    r.tagged_fields(flex)?;
    Ok(bytes)
}

/// DescribeUserScramCredentials: the users asked about; `None` for every user.
pub fn decode_describe_scram(
    r: &mut Reader,
    _version: i16,
) -> Result<Option<Vec<String>>, DecodeError> {
    let users = match r.array_len("users", true, 2)? {
        None => None,
        Some(n) => {
            let mut users = Vec::with_capacity(n);
            for _ in 0..n {
                users.push(r.string("name", true)?);
                r.tagged_fields(true)?;
            }
            Some(users)
        }
    };
    r.tagged_fields(true)?;
    Ok(users)
}

/// One credential to set: the salted password, never the password itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUpsertion {
    pub name: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Bytes,
    pub salted_password: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterUserScramCredentialsRequest {
    /// (user, mechanism type) to delete.
    pub deletions: Vec<(String, i8)>,
    pub upsertions: Vec<ScramUpsertion>,
}

pub fn decode_alter_scram(
    r: &mut Reader,
    _version: i16,
) -> Result<AlterUserScramCredentialsRequest, DecodeError> {
    let n = r.array_len_required("deletions", true, 3)?;
    let mut deletions = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("name", true)?;
        let mechanism = r.i8("mechanism")?;
        r.tagged_fields(true)?;
        deletions.push((name, mechanism));
    }
    let n = r.array_len_required("upsertions", true, 10)?;
    let mut upsertions = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string("name", true)?;
        let mechanism = r.i8("mechanism")?;
        let iterations = r.i32("iterations")?;
        let salt = r
            .nullable_bytes("salt", true)?
            .ok_or_else(|| r.malformed("salt", "null where bytes are required"))?;
        let salted_password = r
            .nullable_bytes("salted_password", true)?
            .ok_or_else(|| r.malformed("salted_password", "null where bytes are required"))?;
        r.tagged_fields(true)?;
        upsertions.push(ScramUpsertion {
            name,
            mechanism,
            iterations,
            salt,
            salted_password,
        });
    }
    r.tagged_fields(true)?;
    Ok(AlterUserScramCredentialsRequest {
        deletions,
        upsertions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::assert_prefixes_fail;

    #[test]
    fn alter_scram_decodes_and_every_prefix_fails() {
        // deletions: [("bob", 1)], upsertions: [("al", 2, 4096, salt "s", salted "pw")]
        let mut b = vec![2u8, 4, b'b', b'o', b'b', 1, 0];
        b.extend_from_slice(&[2, 3, b'a', b'l', 2]);
        b.extend_from_slice(&4096i32.to_be_bytes());
        b.extend_from_slice(&[2, b's', 3, b'p', b'w', 0, 0]);
        let bytes = Bytes::from(b);
        let mut r = Reader::new(bytes.clone());
        let req = decode_alter_scram(&mut r, 0).unwrap();
        r.expect_end("request").unwrap();
        assert_eq!(req.deletions, vec![("bob".to_string(), 1)]);
        assert_eq!(req.upsertions[0].name, "al");
        assert_eq!(req.upsertions[0].iterations, 4096);
        assert_eq!(&req.upsertions[0].salted_password[..], b"pw");
        assert_prefixes_fail(&bytes, |r| decode_alter_scram(r, 0));
    }

    #[test]
    fn authenticate_and_describe_decode() {
        let bytes = Bytes::from_static(&[0, 0, 0, 3, b'a', 0, b'b']);
        let mut r = Reader::new(bytes.clone());
        assert_eq!(&decode_authenticate(&mut r, 1).unwrap()[..], b"a\0b");
        assert_prefixes_fail(&bytes, |r| decode_authenticate(r, 1));
        let bytes = Bytes::from_static(&[0, 0]);
        let mut r = Reader::new(bytes);
        assert_eq!(decode_describe_scram(&mut r, 0).unwrap(), None);
        let bytes = Bytes::from_static(&[2, 2, b'x', 0, 0]);
        let mut r = Reader::new(bytes.clone());
        assert_eq!(
            decode_describe_scram(&mut r, 0).unwrap(),
            Some(vec!["x".to_string()])
        );
        assert_prefixes_fail(&bytes, |r| decode_describe_scram(r, 0));
    }
}
