//! Authorization on a shard: the ACLs of the metadata image, indexed by the security crate's
//! `Authorizer` (Kafka's StandardAuthorizer rules), rebuilt on the shard when an image changes
//! them, so a check reads only this shard's memory. With no `authorizer.class.name` every
//! request is allowed, as in Kafka.

use std::rc::Rc;

use tributary_security::acl::{
    AclBinding, AclOperation, AclPermissionType, Authorizer, PatternType, ResourceType,
};

use crate::catalog::AclRecord;
use crate::config::BrokerConfig;

/// The authorizer for `acls`, or `None` when no authorizer is configured.
pub fn build(config: &BrokerConfig, acls: &[AclRecord]) -> Option<Rc<Authorizer>> {
    if !config.security.authorizer_enabled {
        return None;
    }
    let mut a = Authorizer::new(
        config.security.super_users.clone(),
        config.security.allow_everyone_if_no_acl_found,
    );
    // Bindings were validated before they reached the image; one that no longer validates
    // (written by a newer version) is left out with a warning rather than failing them all.
    for acl in acls {
        if let Err(e) = a.add(vec![binding(acl)]) {
            tracing::warn!(error = %e, ?acl, "an ACL of the metadata image is not valid here; ignored");
        }
    }
    Some(Rc::new(a))
}

/// The security model's binding for an ACL of the image (Kafka's codes given meaning).
pub fn binding(acl: &AclRecord) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::from_code(acl.resource_type),
        name: acl.name.clone(),
        pattern_type: PatternType::from_code(acl.pattern_type),
        principal: acl.principal.clone(),
        host: acl.host.clone(),
        operation: AclOperation::from_code(acl.operation),
        permission: AclPermissionType::from_code(acl.permission),
    }
}

/// The image's record of a binding: its codes as on the wire.
pub fn record(b: &AclBinding) -> AclRecord {
    AclRecord {
        resource_type: b.resource_type.code(),
        name: b.name.clone(),
        pattern_type: b.pattern_type.code(),
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: b.operation.code(),
        permission: b.permission.code(),
    }
}

/// The client's address without its port: what ACL hosts match.
pub fn host(peer: &str) -> &str {
    match peer.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_address_without_its_port() {
        assert_eq!(host("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host("[::1]:5000"), "::1");
        assert_eq!(host("x"), "x");
    }
}
