//! Decompression (and recompression) of a compressed batch's records section, for the produce
//! path's record validation and `compression.type` conversion and for the cleaner: gzip (codec
//! 1), snappy (2: raw, or in the xerial framing the Java client writes), lz4 (3: the LZ4 frame
//! format) and zstd (4).
//! Pure code; every decoder is bounded, so a batch that inflates past the limit is refused, not
//! held.

use std::io::Read;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("unknown compression codec {0}")]
    Unknown(i16),
    #[error("decompresses to more than {max} bytes")]
    TooLarge { max: usize },
    #[error("corrupt {codec} data: {detail}")]
    Corrupt { codec: &'static str, detail: String },
}

/// The xerial snappy stream header: magic, then version and compatible version (i32 each).
/// Passed as `like` to [`compress`], it asks for the xerial framing Kafka's Java code writes.
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_BYTES: usize = 16;

/// The records section `data` compressed with `codec` (the batch attributes' low 3 bits),
/// decompressed; at most `max` bytes. The bytes come from producers: a decoder that panics on
/// them is reported as corrupt data, never allowed to take the shard down.
pub fn decompress(codec: i16, data: &[u8], max: usize) -> Result<Vec<u8>, CodecError> {
    std::panic::catch_unwind(|| decompress_unguarded(codec, data, max)).unwrap_or_else(|_| {
        Err(CodecError::Corrupt {
            codec: "any",
            detail: "the decoder panicked".into(),
        })
    })
}

/// Maps a codec library's error to [`CodecError::Corrupt`] for `codec`.
fn corrupt<E: std::fmt::Display>(codec: &'static str) -> impl Fn(E) -> CodecError {
    move |e| CodecError::Corrupt {
        codec,
        detail: e.to_string(),
    }
}

fn decompress_unguarded(codec: i16, data: &[u8], max: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        1 => read_bounded(flate2::read::MultiGzDecoder::new(data), max).map_err(corrupt("gzip"))?,
        2 => snappy(data, max),
        3 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), max).map_err(corrupt("lz4"))?,
        4 => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(data).map_err(corrupt("zstd"))?;
            read_bounded(decoder, max).map_err(corrupt("zstd"))?
        }
        c => Err(CodecError::Unknown(c)),
    }
}

/// Bytes per block when writing xerial-framed snappy (the Java client's default).
const XERIAL_BLOCK_BYTES: usize = 32 << 10;

/// `data` compressed with `codec`, as the cleaner rewrites a batch it kept part of. Snappy is
/// framed as `like` (the batch's original records section) was: xerial or raw.
pub fn compress(codec: i16, data: &[u8], like: &[u8]) -> Result<Vec<u8>, CodecError> {
    use std::io::Write;
    match codec {
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).map_err(corrupt("gzip"))?;
            e.finish().map_err(corrupt("gzip"))
        }
        2 => {
            let mut enc = snap::raw::Encoder::new();
            let mut block = |b: &[u8]| enc.compress_vec(b).map_err(corrupt("snappy"));
            if !like.starts_with(&XERIAL_MAGIC) {
                return block(data);
            }
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // compatible version
            for chunk in data.chunks(XERIAL_BLOCK_BYTES) {
                let b = block(chunk)?;
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(&b);
            }
            Ok(out)
        }
        3 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).map_err(corrupt("lz4"))?;
            e.finish().map_err(corrupt("lz4"))
        }
        4 => Ok(ruzstd::encoding::compress_to_vec(
            data,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
        c => Err(CodecError::Unknown(c)),
    }
}

/// Reads all of `r`, or reports that it holds more than `max` bytes.
fn read_bounded(r: impl Read, max: usize) -> std::io::Result<Result<Vec<u8>, CodecError>> {
    let mut out = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > max {
        return Ok(Err(CodecError::TooLarge { max }));
    }
    Ok(Ok(out))
}

fn snappy(data: &[u8], max: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = corrupt::<String>("snappy");
    let mut out = Vec::new();
    let block = |bytes: &[u8], out: &mut Vec<u8>| -> Result<(), CodecError> {
        let n = snap::raw::decompress_len(bytes).map_err(|e| corrupt(e.to_string()))?;
        if out.len() + n > max {
            return Err(CodecError::TooLarge { max });
        }
        let start = out.len();
        out.resize(start + n, 0);
        snap::raw::Decoder::new()
            .decompress(bytes, &mut out[start..])
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(())
    };
    if !data.starts_with(&XERIAL_MAGIC) {
        block(data, &mut out)?;
        return Ok(out);
    }
    let mut at = XERIAL_HEADER_BYTES.min(data.len());
    while at < data.len() {
        let len = data
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| corrupt("truncated block length".into()))?;
        at += 4;
        let bytes = data
            .get(at..at.saturating_add(len))
            .ok_or_else(|| corrupt(format!("block of {len} bytes runs past the end")))?;
        block(bytes, &mut out)?;
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_protocol::fuzzing::SeededRng;

    fn sample() -> Vec<u8> {
        (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    /// Raw snappy, lz4 frame, gzip or zstd, through the encoders the cleaner rewrites with.
    fn compressed(codec: i16, data: &[u8]) -> Vec<u8> {
        compress(codec, data, b"").unwrap()
    }

    #[test]
    fn every_codec_round_trips_and_is_bounded() {
        let data = sample();
        for codec in 1..=4 {
            let c = compressed(codec, &data);
            assert!(c.len() < data.len() / 2, "codec {codec} compresses");
            assert_eq!(
                decompress(codec, &c, data.len()).unwrap(),
                data,
                "codec {codec}"
            );
            assert_eq!(
                decompress(codec, &c, data.len() - 1),
                Err(CodecError::TooLarge {
                    max: data.len() - 1
                }),
                "codec {codec}"
            );
            // Damage never panics; it is an error or (for codecs without checksums) other bytes.
            for cut in [0, 1, c.len() / 2, c.len() - 1] {
                let _ = decompress(codec, &c[..cut], data.len());
            }
            let mut flipped = c.clone();
            flipped[c.len() / 2] ^= 0x55;
            let _ = decompress(codec, &flipped, data.len());
        }
        assert_eq!(decompress(5, &[], 10), Err(CodecError::Unknown(5)));
    }

    #[test]
    fn random_and_mangled_input_is_an_error_not_a_panic() {
        // The decoders themselves, without the panic guard: a panic fails the test. Whatever
        // they return stays within the bound.
        let max = 6000;
        let bounded = |codec: i16, input: &[u8]| {
            if let Ok(out) = decompress_unguarded(codec, input, max) {
                assert!(out.len() <= max, "codec {codec}: {} bytes", out.len());
            }
        };
        let data = sample();
        let mut rng = SeededRng::from_env("codec input");
        for codec in 1..=4 {
            let good = compressed(codec, &data[..5000]);
            for _ in 0..300 {
                let mut input = good.clone();
                for _ in 0..rng.below(8) + 1 {
                    let at = rng.below(input.len());
                    input[at] = rng.next_u64() as u8;
                }
                input.truncate(rng.below(input.len() + 1));
                bounded(codec, &input);
                let noise: Vec<u8> = (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect();
                bounded(codec, &noise);
            }
        }
    }

    #[test]
    fn what_compress_writes_decompresses_and_snappy_keeps_its_framing() {
        let data = sample();
        for codec in 1..=4 {
            let like = compressed(codec, b"x");
            let c = compress(codec, &data, &like).unwrap();
            assert_eq!(
                decompress(codec, &c, data.len()).unwrap(),
                data,
                "codec {codec}"
            );
        }
        let mut xerial = XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        let framed = compress(2, &data, &xerial).unwrap();
        assert!(framed.starts_with(&XERIAL_MAGIC));
        assert_eq!(decompress(2, &framed, data.len()).unwrap(), data);
        let raw = compress(2, &data, b"not framed").unwrap();
        assert!(!raw.starts_with(&XERIAL_MAGIC));
    }

    #[test]
    fn xerial_framed_snappy_is_read_block_by_block() {
        let data = sample();
        let (a, b) = data.split_at(70_000);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1i32.to_be_bytes());
        framed.extend_from_slice(&1i32.to_be_bytes());
        for part in [a, b] {
            let block = snap::raw::Encoder::new().compress_vec(part).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(2, &framed, data.len()).unwrap(), data);
        assert!(decompress(2, &framed[..framed.len() - 3], data.len()).is_err());
    }
}
