//! InitProducerId request (v0–v4).

use super::flexible;
use crate::registry::api_key;
use crate::wire::{DecodeError, Reader};

#[derive(Debug, Clone)]
pub struct InitProducerIdRequest {
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

pub fn decode(r: &mut Reader, version: i16) -> Result<InitProducerIdRequest, DecodeError> {
    let flex = flexible(api_key::INIT_PRODUCER_ID, version);
    let transactional_id = r.nullable_string("transactional_id", flex)?;
    let transaction_timeout_ms = r.i32("transaction_timeout_ms")?;
    let (producer_id, producer_epoch) = if version >= 3 {
        (r.i64("producer_id")?, r.i16("producer_epoch")?)
    } else {
        (-1, -1)
    };
    r.tagged_fields(flex)?;
    Ok(InitProducerIdRequest {
        transactional_id,
        transaction_timeout_ms,
        producer_id,
        producer_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::InitProducerIdRequest as Kp;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn decodes_what_an_independent_encoder_writes() {
        for v in 0..=4 {
            let req = Kp::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000);
            let mut b = BytesMut::new();
            req.encode(&mut b, v).unwrap();
            let bytes = b.freeze();
            let got = decode(&mut crate::Reader::new(bytes.clone()), v).unwrap();
            assert_eq!(got.transaction_timeout_ms, 60_000);
            assert!(got.transactional_id.is_none());
            crate::requests::assert_prefixes_fail(&bytes, |r| decode(r, v));
        }
    }
}
