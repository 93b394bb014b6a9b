//! What every handler shares: the result types, encoding a response frame, the protocol's
//! string types, decoding a request body, authorized-operation bit fields, and proposing a
//! metadata command through the controller's shard.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use bytes::BytesMut;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tributary_protocol::frame::ResponseFrame;
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::response::encode_frame;
use tributary_protocol::Reader;

use crate::shard::Shard;

/// The response frame, in pieces (record bytes are sent from the buffers they were read into);
/// `None` when none is due.
pub type HandlerResult = Result<Option<ResponseFrame>, String>;

/// A response still being worked on: resolves to the response frame (`None` when none is due).
pub type PendingResponse = Pin<Box<dyn Future<Output = HandlerResult>>>;

pub(crate) fn frame<M: Encodable>(
    spec: &ApiSpec,
    header: &RequestHeader,
    body: &M,
) -> HandlerResult {
    let mut out = BytesMut::new();
    encode_frame(
        &mut out,
        spec,
        header.api_version,
        header.correlation_id,
        body,
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(out.into()))
}

/// Authorized operations as Kafka answers them when no authorizer runs: every operation that
/// applies to the resource type (`AclEntry.supportedOperations`), as a bit field over
/// `AclOperation` codes — READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
/// CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
pub(crate) mod authorized_operations {
    const fn bits(codes: &[u8]) -> i32 {
        let mut out = 0;
        let mut i = 0;
        while i < codes.len() {
            out |= 1 << codes[i];
            i += 1;
        }
        out
    }

    /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
    pub const TOPIC: i32 = bits(&[3, 4, 5, 6, 7, 8, 10, 11]);
    /// CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
    pub const CLUSTER: i32 = bits(&[5, 7, 8, 9, 10, 11, 12]);
    /// READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (Kafka 4's group configs).
    pub const GROUP: i32 = bits(&[3, 6, 8, 10, 11]);
    /// The value when the client did not ask.
    pub const NOT_REQUESTED: i32 = i32::MIN;

    /// `ops` when the client asked for them, else [`NOT_REQUESTED`].
    pub fn when(asked: bool, ops: i32) -> i32 {
        if asked {
            ops
        } else {
            NOT_REQUESTED
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn bit_fields_match_kafkas() {
            assert_eq!(super::TOPIC, 3576);
            assert_eq!(super::CLUSTER, 8096);
            assert_eq!(super::GROUP, 3400);
        }
    }
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Decodes a request body. Bytes after the last field are ignored, as Kafka ignores them:
/// librdkafka, for one, sends Metadata v9+ "all topics" requests with a 4-byte placeholder where
/// a 1-byte null array length belongs.
pub(crate) fn decode_all<T>(
    r: &mut Reader,
    decode: impl FnOnce(&mut Reader) -> Result<T, tributary_protocol::DecodeError>,
) -> Result<T, String> {
    decode(r).map_err(|e| e.to_string())
}

/// Proposes a metadata command a handler decided (ACLs, quotas, SCRAM credentials) through the
/// controller's shard; its outcome as a code and message.
pub(crate) async fn propose_metadata(
    shard: &Rc<Shard>,
    cmd: crate::cluster::command::MetadataCommand,
) -> (tributary_protocol::ErrorCode, Option<String>) {
    crate::controller::ask(shard, |_, c| async move { c.answer(cmd).await })
        .await
        .unwrap_or((
            tributary_protocol::ErrorCode::UNKNOWN_SERVER_ERROR,
            Some("the controller shard did not answer".into()),
        ))
}

/// How long a Metadata or FindCoordinator answer waits while a leader it would name is one this
/// node doubts (its process seen gone, the controller's fencing not yet in the image): a kill's
/// fencing and the new leader's election reach the image within tens of milliseconds, and a
/// client answered "no leader" instead asks again only at its next topic scan, a second later.
pub const DOUBTED_LEADER_WAIT: std::time::Duration = std::time::Duration::from_millis(300);

/// The catalog to answer from: the shard's, once `names_doubted` no longer holds of it and the
/// doubts of the moment, or after [`DOUBTED_LEADER_WAIT`]. Without doubts (nearly always) it
/// returns at once, without waiting.
pub async fn past_doubted_leaders(
    shard: &Shard,
    names_doubted: impl Fn(&crate::catalog::Catalog, &[i32]) -> bool,
) -> std::sync::Arc<crate::catalog::Catalog> {
    let deadline = std::time::Instant::now() + DOUBTED_LEADER_WAIT;
    loop {
        let catalog = shard.catalog();
        let now = std::time::Instant::now();
        let doubted = shard.doubts.doubted(now);
        if doubted.is_empty() || now >= deadline || !names_doubted(&catalog, &doubted) {
            return catalog;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
    }
}
