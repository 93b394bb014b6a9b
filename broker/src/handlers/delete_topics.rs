//! DeleteTopics: the controller removes the topics from the catalog and every owning shard
//! deletes the partitions' files.

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::delete_topics;
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, topic_name, HandlerResult};
use crate::shard::Shard;

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| delete_topics::decode(r, v))?;
    let may_delete = |t: &str| shard.allowed(conn, AclOperation::Delete, ResourceType::Topic, t);
    let catalog = shard.catalog();
    // Resolve topic ids (v6) to names.
    let names: Vec<(Option<String>, uuid::Uuid)> = req
        .topics
        .iter()
        .map(|(name, id)| {
            let id = uuid::Uuid::from_bytes(*id);
            match name {
                Some(n) => (
                    Some(n.clone()),
                    catalog.topics.get(n).map(|t| t.uuid()).unwrap_or_default(),
                ),
                None => (
                    catalog
                        .topics
                        .values()
                        .find(|t| t.uuid() == id)
                        .map(|t| t.name.clone()),
                    id,
                ),
            }
        })
        .collect();
    // Topics the principal may not DELETE are answered TOPIC_AUTHORIZATION_FAILED, untouched.
    let known: Vec<String> = names
        .iter()
        .filter_map(|(n, _)| n.clone())
        .filter(|n| may_delete(n))
        .collect();
    let n = known.len();
    let codes = if known.is_empty() {
        Vec::new()
    } else {
        crate::controller::ask(
            shard,
            |s, c| async move { c.delete_topics(&s, known).await },
        )
        .await
        .unwrap_or_else(|| vec![ErrorCode::UNKNOWN_SERVER_ERROR; n])
    };
    let mut codes = codes.into_iter();
    let responses = names
        .into_iter()
        .map(|(name, id)| {
            let code = match &name {
                Some(n) if !may_delete(n) => ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                Some(_) => codes.next().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
                None => ErrorCode::UNKNOWN_TOPIC_ID,
            };
            let mut r = DeletableTopicResult::default()
                .with_name(name.as_deref().map(topic_name))
                .with_error_code(code.code());
            if v >= 6 {
                r = r.with_topic_id(id);
            }
            r
        })
        .collect();
    frame(
        spec,
        header,
        &DeleteTopicsResponse::default().with_responses(responses),
    )
}
