//! The invariants, checked as the run goes: one leader per partition epoch; no two records
//! acknowledged at one offset; every acknowledged record durable on every member of the ISR
//! (so on whichever of them leads next: nothing acknowledged is lost); a leader's high
//! watermark never above what an ISR member holds durably; replicas identical below their high
//! watermarks.

use std::collections::BTreeMap;

use tributary_metadata::catalog::{Catalog, PartitionRegistration};

use crate::node::Node;
use crate::TOPIC;

/// What the clients were told, and who led when.
#[derive(Debug, Default)]
pub struct Oracle {
    /// (partition, offset) → the record id acknowledged there.
    pub acked: BTreeMap<(i32, i64), u64>,
    /// (partition, leader epoch) → the node that led it.
    leaders: BTreeMap<(i32, i32), i32>,
}

impl Oracle {
    /// Records an acknowledgement of `ids` at `base..`; two different records at one offset
    /// fail the run.
    pub fn acknowledged(&mut self, p: i32, base: i64, ids: &[u64]) -> Result<(), String> {
        for (i, &id) in ids.iter().enumerate() {
            let offset = base + i as i64;
            if let Some(&had) = self.acked.get(&(p, offset)) {
                if had != id {
                    return Err(format!(
                        "two records acknowledged at partition {p} offset {offset}: {had} and {id}"
                    ));
                }
            }
            self.acked.insert((p, offset), id);
        }
        Ok(())
    }

    pub fn began_leading(&mut self, p: i32, epoch: i32, node: i32) -> Result<(), String> {
        match self.leaders.insert((p, epoch), node) {
            Some(other) if other != node => Err(format!(
                "two leaders of partition {p} at leader epoch {epoch}: nodes {other} and {node}"
            )),
            _ => Ok(()),
        }
    }

    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }
}

/// The most advanced image any node holds now: every node's is a prefix of the committed log
/// (the world keeps the most advanced ever seen, since a node that restarts replays its own
/// from the start).
pub fn latest_image(nodes: &[Node]) -> &Catalog {
    nodes
        .iter()
        .map(|n| &n.image)
        .max_by_key(|i| i.version)
        .expect("a cluster has nodes")
}

fn registration(image: &Catalog, p: i32) -> Option<&PartitionRegistration> {
    image.partition(TOPIC, p)
}

/// Acknowledged records `base..base+ids.len()` of `p` are durable on every ISR member.
pub fn acked_on_isr(
    image: &Catalog,
    nodes: &[Node],
    p: i32,
    base: i64,
    ids: &[u64],
) -> Result<(), String> {
    let Some(reg) = registration(image, p) else {
        return Ok(());
    };
    for &r in &reg.isr {
        let log = nodes[r as usize].log(p);
        for (i, &id) in ids.iter().enumerate() {
            let offset = base + i as i64;
            let held = log.durable_records().get(offset as usize).map(|rec| rec.id);
            if held != Some(id) {
                return Err(format!(
                    "acknowledged record {id} at partition {p} offset {offset} is not durable on \
                     ISR member {r} (it holds {held:?}; durable end {}, ISR {:?}, leader {} at \
                     epoch {})",
                    log.durable_offset(),
                    reg.isr,
                    reg.leader,
                    reg.leader_epoch
                ));
            }
        }
    }
    Ok(())
}

/// A leader's high watermark of `p`, if the latest image says it leads at its epoch, is at most
/// the durable end of every ISR member.
pub fn high_watermark_held(
    image: &Catalog,
    nodes: &[Node],
    leader: i32,
    p: i32,
) -> Result<(), String> {
    let Some(reg) = registration(image, p) else {
        return Ok(());
    };
    let node = &nodes[leader as usize];
    let part = &node.parts[&p];
    let current = part
        .leading
        .as_ref()
        .is_some_and(|l| reg.leader == leader && l.leader_epoch == reg.leader_epoch);
    if !current || !node.alive {
        return Ok(());
    }
    let hw = part.log.high_watermark();
    for &r in &reg.isr {
        let durable = nodes[r as usize].log(p).durable_offset();
        if hw > durable {
            return Err(format!(
                "the high watermark {hw} of partition {p} on its leader {leader} is above ISR \
                 member {r}'s durable end {durable} (image: leader {} at epoch {}, ISR {:?}; the \
                 leader's ISR {:?}, pending {:?})",
                reg.leader,
                reg.leader_epoch,
                reg.isr,
                part.leading.as_ref().map(|l| l.isr.clone()),
                part.leading.as_ref().map(|l| l.pending_isr.clone())
            ));
        }
    }
    Ok(())
}

/// Below its high watermark, a replica holds each idempotent batch once, each producer's in
/// sequence order.
fn no_duplicates(node: &Node, p: i32) -> Result<(), String> {
    let log = node.log(p);
    let mut last: BTreeMap<i64, i32> = BTreeMap::new();
    for (offset, batch) in log.batches_below(log.high_watermark()) {
        let first = batch[0];
        if let Some(&seen) = last.get(&first.producer) {
            if first.first_seq <= seen {
                return Err(format!(
                    "replica {} of partition {p} holds producer {}'s batch at sequence {} at \
                     offset {offset}, after its sequence {seen}: a duplicate or out of order",
                    node.id, first.producer, first.first_seq
                ));
            }
        }
        last.insert(first.producer, first.last_seq);
    }
    Ok(())
}

/// Everything: each acknowledged record on each ISR member, no duplicates, and every two
/// replicas identical below the lower of their high watermarks.
pub fn all(
    image: &Catalog,
    nodes: &[Node],
    oracle: &Oracle,
    partitions: i32,
) -> Result<(), String> {
    for (&(p, offset), &id) in &oracle.acked {
        acked_on_isr(image, nodes, p, offset, &[id])?;
    }
    for p in 0..partitions {
        for n in nodes {
            no_duplicates(n, p)?;
        }
        for a in nodes {
            for b in nodes.iter().filter(|b| b.id > a.id) {
                let (la, lb) = (a.log(p), b.log(p));
                let below = la.high_watermark().min(lb.high_watermark()).max(0) as usize;
                let (ra, rb) = (&la.records()[..below], &lb.records()[..below]);
                if let Some(i) = (0..below).find(|&i| ra[i] != rb[i]) {
                    return Err(format!(
                        "replicas {} and {} of partition {p} differ at offset {i}, below both \
                         high watermarks: {:?} and {:?}",
                        a.id, b.id, ra[i], rb[i]
                    ));
                }
            }
        }
    }
    Ok(())
}
