//! Broker-wide connection limits (`max.connections`, `max.connections.per.ip` and its overrides)
//! and each shard's request-memory budget (`queued.max.request.bytes`).
//!
//! Connection counts are the one piece of state every shard's accept loop shares: connections
//! land on whichever shard the kernel picks (SO_REUSEPORT), so a per-IP count kept per shard
//! would let a client open `shards` times its limit. The counts sit behind a `Mutex` taken once
//! when a connection is accepted and once when it closes — never on the request path, as in
//! Kafka's `ConnectionQuotas`. The memory budget is per shard and lives on its executor.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use crate::config::BrokerConfig;

/// Why a connection was refused at accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Broker { limit: usize },
    PerIp { ip: IpAddr, limit: usize },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Broker { limit } => write!(
                f,
                "the broker holds max.connections={limit} connections; raise max.connections or close idle clients"
            ),
            Refused::PerIp { ip, limit } => write!(
                f,
                "{ip} holds its limit of {limit} connections (max.connections.per.ip / max.connections.per.ip.overrides)"
            ),
        }
    }
}

/// The limits, replaceable at runtime (dynamic broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub max_per_ip: usize,
    pub per_ip_overrides: HashMap<IpAddr, usize>,
}

impl ConnectionLimits {
    pub fn from_config(c: &BrokerConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            max_per_ip: c.max_connections_per_ip,
            per_ip_overrides: c.max_connections_per_ip_overrides.iter().copied().collect(),
        }
    }

    fn per_ip(&self, ip: &IpAddr) -> usize {
        self.per_ip_overrides
            .get(ip)
            .copied()
            .unwrap_or(self.max_per_ip)
    }
}

struct Counts {
    limits: ConnectionLimits,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open connections of the whole broker, shared by every shard's accept loop.
pub struct ConnectionQuotas {
    total: AtomicUsize,
    counts: Mutex<Counts>,
}

impl ConnectionQuotas {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            total: AtomicUsize::new(0),
            counts: Mutex::new(Counts {
                limits,
                per_ip: HashMap::new(),
            }),
        })
    }

    /// Counts a new connection from `ip`, or says which limit refuses it. The returned slot
    /// gives the connection back when dropped.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refused> {
        // A poisoned lock only means another shard panicked while counting; the counts are
        // still whole numbers, so carry on with them.
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let total = self.total.load(Ordering::Relaxed);
        if total >= c.limits.max_connections {
            return Err(Refused::Broker {
                limit: c.limits.max_connections,
            });
        }
        let limit = c.limits.per_ip(&ip);
        let open = c.per_ip.get(&ip).copied().unwrap_or(0);
        if open >= limit {
            return Err(Refused::PerIp { ip, limit });
        }
        c.per_ip.insert(ip, open + 1);
        self.total.store(total + 1, Ordering::Relaxed);
        Ok(ConnectionSlot {
            quotas: self.clone(),
            ip,
        })
    }

    fn release(&self, ip: IpAddr) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match c.per_ip.get_mut(&ip) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                c.per_ip.remove(&ip);
            }
            None => unreachable!("released a connection of {ip} that was never admitted"),
        }
        self.total.fetch_sub(1, Ordering::Relaxed);
    }

    /// Open connections of the whole broker.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// New limits apply to connections accepted from now on; open ones are kept, as in Kafka.
    pub fn set_limits(&self, limits: ConnectionLimits) {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .limits = limits;
    }
}

/// One admitted connection; dropping it frees its place.
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.quotas.release(self.ip);
    }
}

/// A shard's budget of request bytes (`queued.max.request.bytes`): a connection takes a grant
/// for a frame's length before it allocates the frame's buffer, and the grant is returned when
/// the request has been answered. Waiters are served first come, first served, so one large
/// request is not starved by a stream of small ones.
pub struct RequestMemory {
    semaphore: Option<Rc<glommio::sync::Semaphore>>,
    capacity: usize,
}

/// Bytes of one request's grant; returned to the shard's budget when dropped.
pub struct RequestGrant(#[allow(dead_code)] Option<glommio::sync::StaticPermit>);

impl RequestGrant {
    /// No part of the budget: for a follower's fetch. Produce requests waiting for their ISR
    /// hold the budget, and only the followers' fetches let them finish; were those fetches to
    /// wait for room too, a full budget would hold both until a follower left the ISR.
    pub fn exempt() -> Self {
        Self(None)
    }
}

impl RequestMemory {
    /// `None`: no limit.
    pub fn new(capacity: Option<usize>) -> Self {
        Self {
            semaphore: capacity.map(|c| Rc::new(glommio::sync::Semaphore::new(c as u64))),
            capacity: capacity.unwrap_or(usize::MAX),
        }
    }

    /// Waits until `bytes` of the budget are free and takes them. Configuration refuses a
    /// budget below `socket.request.max.bytes`, so a frame always fits; were one ever larger,
    /// it would take the whole budget rather than wait forever.
    pub async fn grant(&self, bytes: usize) -> RequestGrant {
        let bytes = bytes.min(self.capacity);
        match &self.semaphore {
            None => RequestGrant(None),
            // The semaphore is never closed, so acquiring cannot fail.
            Some(s) => RequestGrant(s.acquire_static_permit(bytes as u64).await.ok()),
        }
    }

    /// Bytes of the budget not granted now.
    pub fn available(&self) -> usize {
        self.semaphore
            .as_ref()
            .map_or(usize::MAX, |s| s.available() as usize)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Request bodies at least this large are read into recycled buffers. Safe Rust must initialise
/// a buffer before a socket read fills it; zero-filling a fresh megabyte for every produce
/// request, and faulting its pages in, cost the broker more CPU than anything on the produce
/// path but the copies themselves (perf, 1 KiB messages at ~550 MB/s: memset 9 %, page faults
/// and page clearing another 6 % of broker samples).
const FRAME_REUSE_MIN_BYTES: usize = 64 * 1024;
/// Recycled request buffers a shard keeps for all its connections, by count and by bytes: they
/// are a cache outside `queued.max.request.bytes`, so they must stay small whatever the number
/// of connections.
const SHARD_SPARE_FRAMES_MAX: usize = 16;
const SHARD_SPARE_FRAME_BYTES_MAX: usize = 16 << 20;

/// Large request bodies whose requests have finished, kept initialised for the next ones.
#[derive(Default)]
pub struct SpareFrames {
    bufs: RefCell<Vec<Vec<u8>>>,
    bytes: Cell<usize>,
}

impl SpareFrames {
    /// A buffer of exactly `len` initialised bytes.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        if len >= FRAME_REUSE_MIN_BYTES {
            if let Some(mut buf) = self.bufs.borrow_mut().pop() {
                self.bytes.set(self.bytes.get() - buf.capacity());
                // Only bytes beyond what the buffer held before are zero-filled.
                buf.resize(len, 0);
                return buf;
            }
        }
        vec![0u8; len]
    }

    /// A second handle on `body` when it is large enough to be recycled after its request.
    pub(crate) fn claim(&self, body: &Bytes) -> Option<Bytes> {
        (body.len() >= FRAME_REUSE_MIN_BYTES).then(|| body.clone())
    }

    /// Keeps a claimed body for reuse if nothing else still refers to it (a request forwarded
    /// to another shard may outlive its response by a moment; that one is let go) and the
    /// shard's spares have room for it.
    pub(crate) fn give_back(&self, claimed: Option<Bytes>) {
        let Some(body) = claimed else { return };
        let mut spare = self.bufs.borrow_mut();
        if spare.len() >= SHARD_SPARE_FRAMES_MAX {
            return;
        }
        if let Ok(buf) = body.try_into_mut() {
            let buf = Vec::from(buf);
            if self.bytes.get() + buf.capacity() <= SHARD_SPARE_FRAME_BYTES_MAX {
                self.bytes.set(self.bytes.get() + buf.capacity());
                spare.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_ip: usize, overrides: &[(&str, usize)]) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            max_per_ip: per_ip,
            per_ip_overrides: overrides
                .iter()
                .map(|(ip, n)| (ip.parse().unwrap(), *n))
                .collect(),
        }
    }

    #[test]
    fn per_ip_limit_refuses_the_excess_and_slots_free_their_place() {
        let q = ConnectionQuotas::new(limits(100, 2, &[]));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = q.admit(a).unwrap();
        let _s2 = q.admit(a).unwrap();
        assert_eq!(q.admit(a).err(), Some(Refused::PerIp { ip: a, limit: 2 }));
        let _s3 = q.admit(b).unwrap();
        assert_eq!(q.open(), 3);
        drop(s1);
        assert_eq!(q.open(), 2);
        let _s4 = q.admit(a).unwrap();
    }

    #[test]
    fn overrides_replace_the_per_ip_default_and_the_broker_limit_holds_over_all() {
        let q = ConnectionQuotas::new(limits(3, 1, &[("127.0.0.1", 5)]));
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "10.1.1.1".parse().unwrap();
        let _o = q.admit(other).unwrap();
        assert!(matches!(
            q.admit(other),
            Err(Refused::PerIp { limit: 1, .. })
        ));
        let _l1 = q.admit(local).unwrap();
        let _l2 = q.admit(local).unwrap();
        assert_eq!(q.admit(local).err(), Some(Refused::Broker { limit: 3 }));
        q.set_limits(limits(10, 1, &[("127.0.0.1", 2)]));
        assert!(matches!(
            q.admit(local),
            Err(Refused::PerIp { limit: 2, .. })
        ));
    }

    #[test]
    fn request_memory_makes_the_next_request_wait_until_a_grant_is_returned() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let budget = Rc::new(RequestMemory::new(Some(100)));
                let first = budget.grant(60).await;
                assert_eq!(budget.available(), 40);
                let waited = Rc::new(std::cell::Cell::new(false));
                let second = glommio::spawn_local({
                    let (budget, waited) = (budget.clone(), waited.clone());
                    async move {
                        let g = budget.grant(60).await;
                        waited.set(true);
                        g
                    }
                })
                .detach();
                glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
                assert!(!waited.get(), "60 + 60 bytes do not fit a budget of 100");
                // A small request behind the waiting one waits its turn too.
                assert!(budget
                    .semaphore
                    .as_ref()
                    .unwrap()
                    .try_acquire(10)
                    .is_ok_and(|ok| !ok));
                drop(first);
                let second = second.await.unwrap();
                assert!(waited.get());
                assert_eq!(budget.available(), 40);
                drop(second);
                assert_eq!(budget.available(), 100);
                // A frame larger than the budget takes all of it instead of waiting forever.
                let all = budget.grant(1000).await;
                assert_eq!(budget.available(), 0);
                drop(all);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn large_bodies_are_recycled_once_unreferenced() {
        let spare = SpareFrames::default();
        let body = Bytes::from(spare.take(FRAME_REUSE_MIN_BYTES * 2));
        let ptr = body.as_ptr();
        let claimed = spare.claim(&body);
        // Still referenced by the handler: let go, not recycled.
        let handler_copy = body.clone();
        drop(body);
        spare.give_back(claimed);
        assert!(spare.bufs.borrow().is_empty());

        let claimed = spare.claim(&handler_copy);
        drop(handler_copy);
        spare.give_back(claimed);
        // The next large frame reads into the same allocation, exactly as long as asked.
        let again = spare.take(FRAME_REUSE_MIN_BYTES + 7);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again.len(), FRAME_REUSE_MIN_BYTES + 7);
    }

    #[test]
    fn small_bodies_are_not_claimed_and_the_pool_is_bounded() {
        let spare = SpareFrames::default();
        let small = Bytes::from(spare.take(100));
        assert!(spare.claim(&small).is_none());
        for _ in 0..SHARD_SPARE_FRAMES_MAX + 3 {
            let body = Bytes::from(vec![1u8; FRAME_REUSE_MIN_BYTES]);
            let claimed = spare.claim(&body);
            drop(body);
            spare.give_back(claimed);
        }
        assert_eq!(spare.bufs.borrow().len(), SHARD_SPARE_FRAMES_MAX);
        // A recycled buffer holds old bytes; the caller reads over exactly `len` of them.
        assert_eq!(
            spare.take(FRAME_REUSE_MIN_BYTES).len(),
            FRAME_REUSE_MIN_BYTES
        );
    }
}
