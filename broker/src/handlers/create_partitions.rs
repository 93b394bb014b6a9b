//! CreatePartitions: the request's shape is checked here (duplicates, internal topics); counts,
//! limits and replica assignments are checked, and partitions added, by the controller against
//! its catalog (an assignment's replication factor is the topic's, which only the image knows).

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use tributary_protocol::header::RequestHeader;
use tributary_protocol::registry::ApiSpec;
use tributary_protocol::requests::create_partitions::{self, CreatePartitionsTopic};
use tributary_protocol::{ErrorCode, Reader};

use super::common::{decode_all, frame, str_bytes, topic_name, HandlerResult};
use crate::controller::PartitionGrowth;
use crate::shard::Shard;

type Outcome = (ErrorCode, Option<String>);

pub async fn handle(
    shard: &Rc<Shard>,
    spec: &ApiSpec,
    header: &RequestHeader,
    r: &mut Reader,
    conn: crate::conn::Conn<'_>,
) -> HandlerResult {
    use tributary_security::acl::{AclOperation, ResourceType};
    let v = header.api_version;
    let req = decode_all(r, |r| create_partitions::decode(r, v))?;
    // Counted once: a request may name very many topics, and a search per topic would be
    // quadratic in a count the client chose.
    let mut named: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(req.topics.len());
    for t in &req.topics {
        *named.entry(t.name.as_str()).or_default() += 1;
    }
    let mut outcomes: Vec<Option<Outcome>> = req
        .topics
        .iter()
        .map(|t| {
            // ALTER on the topic, as in Kafka.
            if !shard.allowed(conn, AclOperation::Alter, ResourceType::Topic, &t.name) {
                return Some((
                    ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                    Some(format!("ALTER on topic {} is not allowed", t.name)),
                ));
            }
            check_shape(t, named[t.name.as_str()] > 1).err()
        })
        .collect();
    let (idx, growths): (Vec<usize>, Vec<PartitionGrowth>) = req
        .topics
        .iter()
        .enumerate()
        .filter(|(i, _)| outcomes[*i].is_none())
        .map(|(i, t)| {
            let g = PartitionGrowth {
                topic: t.name.clone(),
                count: t.count,
                assignments: t.assignments.clone(),
            };
            (i, g)
        })
        .unzip();
    if !growths.is_empty() {
        let n = growths.len();
        let validate_only = req.validate_only;
        let results = crate::controller::ask(shard, move |s, c| async move {
            c.create_partitions(&s, growths, validate_only).await
        })
        .await
        .unwrap_or_else(|| vec![(ErrorCode::UNKNOWN_SERVER_ERROR, None); n]);
        for (i, out) in idx.into_iter().zip(results) {
            outcomes[i] = Some(out);
        }
    }
    let results = req
        .topics
        .iter()
        .zip(outcomes)
        .map(|(t, out)| {
            let (code, msg) = out.unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None));
            CreatePartitionsTopicResult::default()
                .with_name(topic_name(&t.name))
                .with_error_code(code.code())
                .with_error_message(msg.as_deref().map(str_bytes))
        })
        .collect();
    frame(
        spec,
        header,
        &CreatePartitionsResponse::default().with_results(results),
    )
}

/// The checks that need no catalog: a topic named twice and an internal topic. Replica
/// assignments are the controller's (`placement::check_manual`): each must name as many
/// distinct, registered brokers as the topic's partitions have replicas, which only the image
/// knows.
fn check_shape(t: &CreatePartitionsTopic, named_twice: bool) -> Result<(), Outcome> {
    if named_twice {
        return Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!("duplicate topic {:?} in the request", t.name)),
        ));
    }
    if crate::group::is_internal(&t.name) {
        return Err((
            ErrorCode::INVALID_REQUEST,
            Some(format!(
                "the partition count of internal topic {} is fixed: groups are placed by hashing over it",
                t.name
            )),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, assignments: Option<Vec<Vec<i32>>>) -> CreatePartitionsTopic {
        CreatePartitionsTopic {
            name: name.into(),
            count: 3,
            assignments,
        }
    }

    #[test]
    fn shape_checks() {
        let a = topic("a", None);
        assert!(check_shape(&a, false).is_ok());
        assert_eq!(
            check_shape(&a, true).unwrap_err().0,
            ErrorCode::INVALID_REQUEST
        );
        let off = topic("__consumer_offsets", None);
        assert_eq!(
            check_shape(&off, false).unwrap_err().0,
            ErrorCode::INVALID_REQUEST
        );
        // Replicated assignments are the controller's to judge, against the topic's
        // replication factor.
        let replicated = topic("a", Some(vec![vec![1, 2, 3], vec![2, 3, 1]]));
        assert!(check_shape(&replicated, false).is_ok());
    }
}
