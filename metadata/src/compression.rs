//! `compression.type`, the broker and topic key: which codec batches are stored with.

use std::fmt;

/// A codec of Kafka's batch attributes (the low three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// The values `compression.type` takes, as the error names them.
pub const CONFIG_VALUES: &str = "producer, uncompressed, gzip, snappy, lz4 or zstd";

/// A `compression.type` that is none of [`CONFIG_VALUES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCompression(pub String);

impl fmt::Display for UnknownCompression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: use {CONFIG_VALUES}", self.0)
    }
}

impl std::error::Error for UnknownCompression {}

impl Compression {
    /// The codec id in a batch's attributes.
    pub fn id(self) -> i16 {
        match self {
            Compression::Uncompressed => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// A `compression.type` value: `None` for `producer` (batches keep the producer's codec).
    pub fn parse_config(v: &str) -> Result<Option<Compression>, UnknownCompression> {
        Ok(Some(match v {
            "producer" => return Ok(None),
            "uncompressed" => Compression::Uncompressed,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => return Err(UnknownCompression(v.to_string())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_map_to_kafkas_codec_ids() {
        let id = |v: &str| Compression::parse_config(v).map(|c| c.map(Compression::id));
        assert_eq!(id("producer"), Ok(None));
        assert_eq!(id("uncompressed"), Ok(Some(0)));
        assert_eq!(id("gzip"), Ok(Some(1)));
        assert_eq!(id("snappy"), Ok(Some(2)));
        assert_eq!(id("lz4"), Ok(Some(3)));
        assert_eq!(id("zstd"), Ok(Some(4)));
        let e = Compression::parse_config("brotli").unwrap_err();
        assert_eq!(e.to_string(), format!("\"brotli\": use {CONFIG_VALUES}"));
    }
}
