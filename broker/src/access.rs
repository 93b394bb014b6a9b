//! What a request may do and how long its connection holds back, on this shard: the ACL checks
//! against the shard's authorizer (`authz`) and the client quotas against its image and sensors
//! (`quota`). The rules are theirs; this binds them to the shard's state.

use std::time::{Duration, Instant};

use tributary_protocol::registry::api_key;
use tributary_protocol::Reader;
use tributary_security::acl::{AclOperation, Decision, ResourceType};

use crate::authz::host;
use crate::conn::Conn;
use crate::quota::{
    from_follower, quota_for, request_quota_exempt, throttle_kind, user_of, REQUEST_PERCENTAGE,
};
use crate::shard::Shard;

impl Shard {
    /// Whether the connection's principal may do `op` on the resource.
    pub fn allowed(&self, conn: Conn<'_>, op: AclOperation, rt: ResourceType, name: &str) -> bool {
        match self.authorizer() {
            None => true,
            Some(a) => {
                a.authorize(conn.principal, host(conn.peer), op, rt, name) == Decision::Allowed
            }
        }
    }

    /// Whether `op` is allowed on the cluster resource.
    pub fn allowed_on_cluster(&self, conn: Conn<'_>, op: AclOperation) -> bool {
        self.allowed(
            conn,
            op,
            ResourceType::Cluster,
            tributary_security::acl::CLUSTER_RESOURCE_NAME,
        )
    }

    /// The authorized-operations bit field Metadata, DescribeGroups and DescribeCluster report:
    /// `all` (every operation of the type) without an authorizer, else what the ACLs allow.
    pub fn authorized_ops(&self, conn: Conn<'_>, rt: ResourceType, name: &str, all: i32) -> i32 {
        match self.authorizer() {
            None => all,
            Some(a) => tributary_security::acl::to_bitfield(&a.authorized_operations(
                conn.principal,
                host(conn.peer),
                rt,
                name,
            )),
        }
    }

    /// Kafka's KIP-679 check: `op` on some resource of the type (an idempotent producer may
    /// write if it may write to any topic).
    pub fn allowed_on_any(&self, conn: Conn<'_>, op: AclOperation, rt: ResourceType) -> bool {
        match self.authorizer() {
            None => true,
            Some(a) => {
                a.authorize_by_resource_type(conn.principal, host(conn.peer), op, rt)
                    == Decision::Allowed
            }
        }
    }
}

impl Shard {
    /// Records `bytes` a request moved against the `key` quota of the connection's user and
    /// the request's client id (its header's); how long the connection is to hold back (zero
    /// without a quota or within it).
    pub fn throttle(
        &self,
        conn: crate::conn::Conn<'_>,
        client_id: Option<&str>,
        key: &'static str,
        bytes: u64,
    ) -> Duration {
        if !self.has_client_quotas() {
            return Duration::ZERO;
        }
        let catalog = self.catalog();
        let client_id = client_id.unwrap_or_default();
        let user = user_of(&conn);
        let Some(quota) = quota_for(&catalog, user, client_id, key) else {
            return Duration::ZERO;
        };
        let d = self.quota_sensors.borrow_mut().record_bytes(
            Instant::now(),
            (user, client_id),
            key,
            quota,
            bytes,
            self.config.quota_sensors_max,
        );
        self.held_back(conn, key, d);
        d
    }

    /// The `request_percentage` quota of the connection's user and the request's client id,
    /// `None` when none applies or the request is exempt ([`request_quota_exempt`], a
    /// follower's fetch). With no quota set at all it returns before any other work.
    pub fn request_quota(
        &self,
        conn: crate::conn::Conn<'_>,
        (key, version): (i16, i16),
        client_id: Option<&str>,
        body: &Reader,
    ) -> Option<f64> {
        if !self.has_client_quotas() || request_quota_exempt(key) {
            return None;
        }
        let quota = quota_for(
            &self.catalog(),
            user_of(&conn),
            client_id.unwrap_or_default(),
            REQUEST_PERCENTAGE,
        )?;
        if key == api_key::FETCH && from_follower(body, version) {
            return None;
        }
        // As Kafka: an acks=0 produce is exempt from request throttling (it gets no response
        // to carry a throttle); its bytes still count against a byte rate.
        if key == api_key::PRODUCE
            && tributary_protocol::requests::produce::acks(body, version) == Some(0)
        {
            return None;
        }
        Some(quota)
    }

    /// Records `busy` of shard time a request took against its `request_percentage` quota of
    /// `percent`; how long the connection is to hold back (zero within the quota).
    pub fn record_request_time(
        &self,
        conn: crate::conn::Conn<'_>,
        client_id: Option<&str>,
        percent: f64,
        busy: Duration,
    ) -> Duration {
        let d = self.quota_sensors.borrow_mut().record_request(
            Instant::now(),
            (user_of(&conn), client_id.unwrap_or_default()),
            percent,
            busy,
            self.config.quota_sensors_max,
        );
        self.held_back(conn, REQUEST_PERCENTAGE, d);
        d
    }

    /// The connection holds back for the longest throttle its request earned (a Produce or
    /// Fetch past both a byte rate and its request quota waits the longer, not both).
    fn held_back(&self, conn: crate::conn::Conn<'_>, key: &str, d: Duration) {
        if d > conn.throttle.get() {
            conn.throttle.set(d);
        }
        if !d.is_zero() {
            self.metrics.throttled(throttle_kind(key), d);
        }
    }
}
