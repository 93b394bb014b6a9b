//! Kafka framing: every request and response is a 4-byte big-endian length followed by that many
//! bytes. A negative length, a length below the smallest request header, or one above
//! `socket.request.max.bytes` is a framing error: the connection is closed, nothing is answered.

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

#[cfg(test)]
mod tests {
    use super::*;

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
