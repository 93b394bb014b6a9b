//! Who sent a request, as the handlers and the services they call see it: the connection's
//! peer, listener and principal, its quota throttle, and the replica link it may be.

use tributary_replication::LinkId;

/// Who sent a request: the peer's address and the listener it connected to (brokers'
/// endpoints are answered on that listener).
#[derive(Debug, Clone, Copy)]
pub struct Conn<'a> {
    pub peer: &'a str,
    pub listener: &'a str,
    /// Who authenticated on the connection (`User:NAME`; `User:ANONYMOUS` without SASL).
    pub principal: &'a str,
    /// Set by a handler whose request put the client over a quota: the connection reads
    /// nothing more for this long after queueing the response (KIP-219).
    pub throttle: &'a std::cell::Cell<std::time::Duration>,
    /// The follower whose fetches the connection carries, once one came.
    pub link: &'a ReplicaLink,
}

/// What a connection knows of the follower whose fetches it carries.
#[derive(Debug)]
pub struct ReplicaLink {
    pub id: LinkId,
    /// Set by the first follower fetch: the connection is a replica link from then on.
    pub follower: std::cell::Cell<Option<i32>>,
}

impl ReplicaLink {
    pub fn new() -> Self {
        Self {
            id: LinkId::next(),
            follower: std::cell::Cell::new(None),
        }
    }
}

impl Default for ReplicaLink {
    fn default() -> Self {
        Self::new()
    }
}
