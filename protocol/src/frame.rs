//! Kafka framing: every request and response is a 4-byte big-endian length followed by that many
//! bytes. A negative length, a length below the smallest request header, or one above
//! `socket.request.max.bytes` is a framing error: the connection is closed, nothing is answered.

use bytes::{Bytes, BytesMut};

/// Bytes in a frame's length prefix.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// The smallest request: api key, api version and correlation id (client id may follow).
pub const REQUEST_HEADER_FIXED_BYTES: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {length} is negative")]
    Negative { length: i32 },
    #[error("frame length {length} is shorter than a request header ({REQUEST_HEADER_FIXED_BYTES} bytes)")]
    TooShort { length: i32 },
    #[error("frame length {length} exceeds socket.request.max.bytes ({max})")]
    TooLarge { length: i32, max: usize },
}

/// Checks a request frame's length prefix *before* anything is allocated for its body.
pub fn request_frame_length(
    prefix: [u8; FRAME_PREFIX_BYTES],
    max: usize,
) -> Result<usize, FrameError> {
    let length = i32::from_be_bytes(prefix);
    if length < 0 {
        return Err(FrameError::Negative { length });
    }
    let len = length as usize;
    if len < REQUEST_HEADER_FIXED_BYTES {
        return Err(FrameError::TooShort { length });
    }
    if len > max {
        return Err(FrameError::TooLarge { length, max });
    }
    Ok(len)
}

/// Record bytes shorter than this are copied into the frame; longer ones become pieces of their
/// own, written to the socket from the buffer they were read into.
pub const RECORDS_BY_REFERENCE_MIN: usize = 4096;

/// A response frame in pieces, written to the socket in order. Encoded fields are in the pieces
/// between; record bytes go as they are.
#[derive(Debug, Clone, Default)]
pub struct ResponseFrame {
    pieces: Vec<Bytes>,
}

impl ResponseFrame {
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// Bytes in the whole frame, length prefix included.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The frame in one buffer (a copy), for tests and tools.
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

/// A frame already encoded in one buffer, length prefix included.
impl From<BytesMut> for ResponseFrame {
    fn from(out: BytesMut) -> Self {
        Self {
            pieces: vec![out.freeze()],
        }
    }
}

/// Builds a [`ResponseFrame`]: fields are encoded into the current piece (it derefs to a
/// `BytesMut`), record bytes are added with [`FrameBuilder::put_records`], and
/// [`FrameBuilder::finish`] writes the length prefix.
#[derive(Debug, Default)]
pub struct FrameBuilder {
    done: Vec<Bytes>,
    first: Option<BytesMut>,
    current: BytesMut,
}

impl FrameBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds record bytes: copied if short, otherwise referenced.
    pub fn put_records(&mut self, records: &Bytes) {
        if records.len() < RECORDS_BY_REFERENCE_MIN {
            self.current.extend_from_slice(records);
            return;
        }
        let encoded = std::mem::take(&mut self.current);
        if self.first.is_none() {
            self.first = Some(encoded);
        } else {
            self.done.push(encoded.freeze());
        }
        self.done.push(records.clone());
    }

    /// The frame, with its length prefix (the first four bytes written, as `begin_response`
    /// leaves them) set to the length of everything after it.
    pub fn finish(self) -> ResponseFrame {
        let (mut first, rest, last) = match self.first {
            Some(first) => (first, self.done, Some(self.current)),
            None => (self.current, self.done, None),
        };
        let total = first.len()
            + rest.iter().map(Bytes::len).sum::<usize>()
            + last.as_ref().map_or(0, BytesMut::len);
        assert!(
            first.len() >= FRAME_PREFIX_BYTES,
            "frame begun with its length prefix"
        );
        let len = i32::try_from(total - FRAME_PREFIX_BYTES).unwrap_or(i32::MAX);
        first[..FRAME_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
        let mut pieces = Vec::with_capacity(rest.len() + 2);
        pieces.push(first.freeze());
        pieces.extend(rest);
        pieces.extend(last.filter(|l| !l.is_empty()).map(BytesMut::freeze));
        ResponseFrame { pieces }
    }
}

impl std::ops::Deref for FrameBuilder {
    type Target = BytesMut;
    fn deref(&self) -> &BytesMut {
        &self.current
    }
}

impl std::ops::DerefMut for FrameBuilder {
    fn deref_mut(&mut self) -> &mut BytesMut {
        &mut self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn a_built_frame_is_the_encoded_frame_with_long_records_referenced_not_copied() {
        let small = Bytes::from(vec![1u8; RECORDS_BY_REFERENCE_MIN - 1]);
        let large = Bytes::from(vec![2u8; RECORDS_BY_REFERENCE_MIN * 3]);
        let mut b = FrameBuilder::new();
        let mut flat = BytesMut::new();
        for out in [&mut *b, &mut flat] {
            out.put_i32(0);
            out.put_i32(7);
        }
        for records in [&small, &large, &large, &small] {
            b.put_i16(5);
            b.put_records(records);
            flat.put_i16(5);
            flat.extend_from_slice(records);
        }
        let len = (flat.len() - FRAME_PREFIX_BYTES) as i32;
        flat[..4].copy_from_slice(&len.to_be_bytes());
        let frame = b.finish();
        assert_eq!(frame.to_vec(), flat.to_vec());
        assert_eq!(frame.len(), flat.len());
        let referenced = frame
            .pieces()
            .iter()
            .filter(|p| p.as_ptr() == large.as_ptr())
            .count();
        assert_eq!(referenced, 2, "the long records are pieces of their own");
        // Nothing referenced: one piece.
        let mut b = FrameBuilder::new();
        b.put_i32(0);
        b.put_records(&small);
        assert_eq!(b.finish().pieces().len(), 1);
    }

    #[test]
    fn lengths() {
        assert_eq!(request_frame_length(10i32.to_be_bytes(), 100), Ok(10));
        assert_eq!(
            request_frame_length((-1i32).to_be_bytes(), 100),
            Err(FrameError::Negative { length: -1 })
        );
        assert_eq!(
            request_frame_length(101i32.to_be_bytes(), 100),
            Err(FrameError::TooLarge {
                length: 101,
                max: 100
            })
        );
        assert_eq!(
            request_frame_length(3i32.to_be_bytes(), 100),
            Err(FrameError::TooShort { length: 3 })
        );
        // "GET " read as a length is 1195725856: far above any sane request limit.
        assert!(request_frame_length(*b"GET ", 104_857_600).is_err());
    }
}
