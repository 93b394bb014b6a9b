//! Primitive Kafka types read from and written to byte buffers: fixed-width integers, varints,
//! (compact) strings and bytes, array lengths and tagged fields.
//!
//! `Reader` keeps *need more bytes* (`Truncated`) apart from *malformed* (`Malformed`), and every
//! array length it returns has been checked against the bytes that remain, so a caller can never
//! be talked into allocating for elements that are not there.

use bytes::{Buf, BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "truncated reading {what} at byte {position}: needed {needed} bytes, {available} available"
    )]
    Truncated {
        what: &'static str,
        position: usize,
        needed: usize,
        available: usize,
    },
    #[error("malformed {what} at byte {position}: {detail}")]
    Malformed {
        what: &'static str,
        position: usize,
        detail: String,
    },
}

/// A cursor over one request's bytes. Slices it hands out share the request's allocation.
#[derive(Debug, Clone)]
pub struct Reader {
    buf: Bytes,
    start_len: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        let start_len = buf.len();
        Self { buf, start_len }
    }

    pub fn position(&self) -> usize {
        self.start_len - self.buf.len()
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, what: &'static str, needed: usize) -> Result<(), DecodeError> {
        if self.buf.len() < needed {
            return Err(DecodeError::Truncated {
                what,
                position: self.position(),
                needed,
                available: self.buf.len(),
            });
        }
        Ok(())
    }

    pub fn malformed(&self, what: &'static str, detail: impl Into<String>) -> DecodeError {
        DecodeError::Malformed {
            what,
            position: self.position(),
            detail: detail.into(),
        }
    }

    pub fn i8(&mut self, what: &'static str) -> Result<i8, DecodeError> {
        self.need(what, 1)?;
        Ok(self.buf.get_i8())
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        Ok(self.i8(what)? != 0)
    }

    pub fn i16(&mut self, what: &'static str) -> Result<i16, DecodeError> {
        self.need(what, 2)?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.need(what, 4)?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.need(what, 8)?;
        Ok(self.buf.get_i64())
    }

    pub fn uuid(&mut self, what: &'static str) -> Result<[u8; 16], DecodeError> {
        self.need(what, 16)?;
        let mut out = [0u8; 16];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }

    pub fn bytes(&mut self, what: &'static str, len: usize) -> Result<Bytes, DecodeError> {
        self.need(what, len)?;
        Ok(self.buf.split_to(len))
    }

    /// Unsigned LEB128 varint of at most 5 bytes (a Kafka `UNSIGNED_VARINT`).
    pub fn uvarint(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            self.need(what, 1)?;
            let byte = self.buf.get_u8();
            if i == 4 && byte > 0x0f {
                return Err(self.malformed(what, "unsigned varint longer than 32 bits"));
            }
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed(what, "unsigned varint longer than 5 bytes"))
    }

    /// A length prefix: `INT16`/`INT32` style when not flexible, `UNSIGNED_VARINT` (length + 1)
    /// when flexible. `None` means null. The length is checked against the remaining bytes times
    /// `min_element_bytes`, so the caller may allocate for it.
    fn length(
        &mut self,
        what: &'static str,
        flexible: bool,
        wide: bool,
        min_element_bytes: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let len: i64 = if flexible {
            i64::from(self.uvarint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if len < -1 {
            return Err(self.malformed(what, format!("negative length {len}")));
        }
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| self.malformed(what, "length overflow"))?;
        let needed = len.saturating_mul(min_element_bytes.max(1));
        self.need(what, needed)?;
        Ok(Some(len))
    }

    pub fn nullable_string(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<Option<String>, DecodeError> {
        let Some(len) = self.length(what, flexible, false, 1)? else {
            return Ok(None);
        };
        let raw = self.buf.split_to(len);
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| self.malformed(what, "string is not UTF-8"))
    }

    pub fn string(&mut self, what: &'static str, flexible: bool) -> Result<String, DecodeError> {
        self.nullable_string(what, flexible)?
            .ok_or_else(|| self.malformed(what, "null where a string is required"))
    }

    pub fn nullable_bytes(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<Option<Bytes>, DecodeError> {
        let Some(len) = self.length(what, flexible, true, 1)? else {
            return Ok(None);
        };
        Ok(Some(self.buf.split_to(len)))
    }

    /// An array length; `None` is a null array. `min_element_bytes` is the smallest encoding of
    /// one element, used to refuse counts the remaining bytes cannot hold.
    pub fn array_len(
        &mut self,
        what: &'static str,
        flexible: bool,
        min_element_bytes: usize,
    ) -> Result<Option<usize>, DecodeError> {
        self.length(what, flexible, true, min_element_bytes)
    }

    /// A non-null array length.
    pub fn array_len_required(
        &mut self,
        what: &'static str,
        flexible: bool,
        min_element_bytes: usize,
    ) -> Result<usize, DecodeError> {
        self.array_len(what, flexible, min_element_bytes)?
            .ok_or_else(|| self.malformed(what, "null where an array is required"))
    }

    /// Skips a tagged-field section when `flexible`; unknown tags are ignored as Kafka does.
    pub fn tagged_fields(&mut self, flexible: bool) -> Result<(), DecodeError> {
        if !flexible {
            return Ok(());
        }
        let count = self.uvarint("tagged field count")?;
        for _ in 0..count {
            let _tag = self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")? as usize;
            self.bytes("tagged field", size)?;
        }
        Ok(())
    }

    pub fn expect_end(&self, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.malformed(
                what,
                format!("{} unexpected trailing bytes", self.buf.len()),
            ))
        }
    }
}

/// Writers for the primitives the hand-written encoders need.
pub fn put_uvarint(out: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

pub fn put_string(out: &mut BytesMut, value: &str, flexible: bool) {
    if flexible {
        put_uvarint(out, len_u32(value.len()) + 1);
    } else {
        out.put_i16(i16::try_from(value.len()).unwrap_or(i16::MAX));
    }
    out.put_slice(value.as_bytes());
}

pub fn put_array_len(out: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(out, len_u32(len) + 1);
    } else {
        out.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
    }
}

pub fn put_null_array(out: &mut BytesMut, flexible: bool) {
    if flexible {
        put_uvarint(out, 0);
    } else {
        out.put_i32(-1);
    }
}

pub fn put_nullable_bytes_len(out: &mut BytesMut, len: Option<usize>, flexible: bool) {
    match (len, flexible) {
        (None, true) => put_uvarint(out, 0),
        (None, false) => out.put_i32(-1),
        (Some(n), true) => put_uvarint(out, len_u32(n) + 1),
        (Some(n), false) => out.put_i32(i32::try_from(n).unwrap_or(i32::MAX)),
    }
}

pub fn put_empty_tagged_fields(out: &mut BytesMut, flexible: bool) {
    if flexible {
        out.put_u8(0);
    }
}

fn len_u32(len: usize) -> u32 {
    // Responses are bounded far below 4 GiB by the fetch byte limits.
    u32::try_from(len).unwrap_or(u32::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_round_trip() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut out = BytesMut::new();
            put_uvarint(&mut out, v);
            let mut r = Reader::new(out.freeze());
            assert_eq!(r.uvarint("v").unwrap(), v);
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn huge_array_count_is_refused_before_allocation() {
        let mut out = BytesMut::new();
        out.put_i32(i32::MAX);
        out.put_u8(0);
        let mut r = Reader::new(out.freeze());
        assert!(matches!(
            r.array_len("topics", false, 4),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn negative_lengths_are_malformed() {
        let mut out = BytesMut::new();
        out.put_i16(-2);
        let mut r = Reader::new(out.freeze());
        assert!(matches!(
            r.nullable_string("s", false),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn compact_string_and_tagged_fields() {
        let mut out = BytesMut::new();
        put_string(&mut out, "abc", true);
        out.put_u8(1); // one tagged field
        put_uvarint(&mut out, 7);
        put_uvarint(&mut out, 2);
        out.put_slice(&[9, 9]);
        let mut r = Reader::new(out.freeze());
        assert_eq!(r.string("s", true).unwrap(), "abc");
        r.tagged_fields(true).unwrap();
        r.expect_end("end").unwrap();
    }
}
