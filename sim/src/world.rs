//! The world around the nodes: the simulated clock and its event queue, the network, the
//! faults, the clients, and the checks after every step. Everything comes from one seeded
//! generator, so a seed replays exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Instant;

use tributary_protocol::ErrorCode;
use tributary_replication::LinkId;

use tributary_metadata::catalog::Catalog;

use crate::check::{self, Oracle};
use crate::node::Node;
use crate::rng::Rng;
use crate::{Body, Effects, Event, Limits, Target};

/// One run.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Events to process.
    pub steps: u64,
    pub limits: Limits,
    /// A fault every this many milliseconds on average.
    pub fault_every_ms: u64,
    /// Print every event but raft's and the clock's, with the state it met.
    pub trace: bool,
}

impl Options {
    pub fn new(seed: u64, steps: u64) -> Self {
        Self {
            seed,
            steps,
            limits: Limits::default(),
            fault_every_ms: 1500,
            trace: false,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub steps: u64,
    pub simulated_ms: u64,
    pub acknowledged: usize,
    pub produce_refused: u64,
    /// Batches refused as out of order, by a deposed leader unaware of it.
    pub out_of_order: u64,
    pub faults: u64,
    pub leader_epochs: usize,
    pub fencings: u64,
    /// Fencings by reason, as `tributary_broker_fencings_total` labels them.
    pub fencings_by_reason: BTreeMap<String, u64>,
    /// A hash of every event's time and kind in order: two runs of one seed agree on it.
    pub digest: u64,
}

/// Folds one event into the run's digest (FNV-1a over its time and its kind).
fn digest(mut h: u64, t: u64, event: &Event) -> u64 {
    if h == 0 {
        h = 0xcbf2_9ce4_8422_2325;
    }
    let kind = match event {
        Event::Tick(n, _) => 1 + *n as u64,
        Event::ControllerRound(n, _) => 10 + *n as u64,
        Event::IsrCheck(n, _) => 20 + *n as u64,
        Event::FetchDue(n, _, p) => 30 + *n as u64 * 4 + *p as u64,
        Event::AckDeadline(..) => 50,
        Event::Synced { upto, .. } => 60 + *upto as u64,
        Event::Deliver { from, .. } => 1000 + (*from as i64 + 10) as u64,
        Event::Fault => 70,
        Event::Shutdown(n) => 73 + *n as u64,
        Event::Heal(_) => 71,
        Event::Restart(n) => 72 + *n as u64,
        Event::LinkTimeout(_) => 80,
        Event::ProduceDue(c) => 90 + *c as u64,
        Event::ClientTimeout(..) => 95,
    };
    for v in [t, kind] {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A broken invariant, with all it takes to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub simulated_ms: u64,
    pub what: String,
    /// The canary the run had.
    pub canary: Option<crate::Canary>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed at step {} ({} ms simulated): {}; replay with `tributary-sim --seed {}{} \
             --steps {} --trace`",
            self.seed,
            self.step,
            self.simulated_ms,
            self.what,
            self.seed,
            self.canary
                .map_or(String::new(), |c| format!(" --canary {}", c.name())),
            self.step + 1
        )
    }
}

/// A client's batch: its first sequence and record ids. Sent again, unchanged, until it is
/// acknowledged (an idempotent producer's retries).
#[derive(Debug, Clone)]
struct Batch {
    first_seq: i32,
    ids: Vec<u64>,
}

/// A client's acks=all request in flight.
#[derive(Debug, Clone)]
struct Request {
    id: u64,
    partition: i32,
}

/// An idempotent producer: one batch at a time per partition.
struct Client {
    producer: i64,
    outstanding: BTreeMap<i32, Request>,
    /// Per partition, the batch being sent and the next sequence.
    batch: BTreeMap<i32, Batch>,
    next_seq: BTreeMap<i32, i32>,
}

struct World {
    now: u64,
    base: Instant,
    rng: Rng,
    limits: Limits,
    fault_every_ms: u64,
    nodes: Vec<Node>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    seq: u64,
    /// Active cuts: id → the directed pairs (from, to) no message crosses.
    cuts: BTreeMap<u64, Vec<(i32, i32)>>,
    /// (follower, leader) → the connection the follower's fetches use now.
    links: BTreeMap<(i32, i32), LinkId>,
    clients: Vec<Client>,
    next_id: u64,
    oracle: Oracle,
    report: Report,
    /// The most advanced image any node has held: the committed metadata the checks judge by.
    committed: Catalog,
    full_check_due: bool,
}

/// Runs one seed to `steps` events or the first broken invariant.
pub fn run(opts: &Options) -> Result<Report, Failure> {
    let mut w = World::new(opts);
    for n in &mut w.nodes {
        n.trace = opts.trace;
    }
    while w.report.steps < opts.steps {
        let Some(Reverse((t, seq))) = w.queue.pop() else {
            break;
        };
        let event = w.events.remove(&seq).expect("every queued event is stored");
        w.now = t;
        w.report.digest = digest(w.report.digest, t, &event);
        if opts.trace {
            w.trace(&event);
        }
        let outcome = w.dispatch(event).and_then(|()| w.check_step());
        w.report.steps += 1;
        if let Err(what) = outcome {
            return Err(w.failure(opts.seed, what));
        }
    }
    let last = check::all(&w.committed, &w.nodes, &w.oracle, w.limits.partitions);
    if let Err(what) = last {
        return Err(w.failure(opts.seed, what));
    }
    w.report.simulated_ms = w.now;
    w.report.acknowledged = w.oracle.acked_count();
    w.report.fencings_by_reason = w.committed.liveness.fencings.clone();
    w.report.fencings = w.report.fencings_by_reason.values().sum();
    Ok(w.report)
}

impl World {
    fn new(opts: &Options) -> Self {
        let mut rng = Rng::new(opts.seed);
        let limits = opts.limits.clone();
        let voters: Vec<i32> = (0..limits.nodes).collect();
        let nodes = voters
            .iter()
            .map(|&id| {
                let ticks =
                    limits.election_ticks as u64 + rng.range(0, limits.election_ticks as u64);
                Node::new(id, &voters, ticks as usize, limits.partitions)
            })
            .collect();
        let mut w = Self {
            now: 0,
            base: Instant::now(),
            rng,
            limits,
            fault_every_ms: opts.fault_every_ms,
            nodes,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            cuts: BTreeMap::new(),
            links: BTreeMap::new(),
            clients: (0..2)
                .map(|c| Client {
                    producer: 1000 + c,
                    outstanding: BTreeMap::new(),
                    batch: BTreeMap::new(),
                    next_seq: BTreeMap::new(),
                })
                .collect(),
            next_id: 1,
            oracle: Oracle::default(),
            report: Report::default(),
            committed: Catalog::empty(),
            full_check_due: false,
        };
        for n in 0..w.nodes.len() {
            let mut fx = Effects::default();
            w.nodes[n].start_timers(&mut fx);
            w.carry_out(fx).expect("nothing to check at start");
        }
        for c in 0..w.clients.len() {
            w.at(1000, Event::ProduceDue(c));
        }
        w.at(3000, Event::Fault);
        w
    }

    fn trace(&self, event: &Event) {
        match event {
            Event::Tick(..) | Event::ControllerRound(..) | Event::ProduceDue(_) => return,
            Event::Deliver {
                body: crate::Body::Raft(_),
                ..
            } => return,
            _ => {}
        }
        let parts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                let p = &n.parts[&0];
                format!(
                    "n{}{}{} leo {} dur {} hw {} {}",
                    n.id,
                    if n.alive { "" } else { " DEAD" },
                    if n.paused_until.is_some_and(|u| u > self.now) {
                        " PAUSED"
                    } else {
                        ""
                    },
                    p.log.log_end_offset(),
                    p.log.durable_offset(),
                    p.log.high_watermark(),
                    p.leading.as_ref().map_or(String::new(), |l| format!(
                        "LEADS e{} isr {:?}",
                        l.leader_epoch, l.isr
                    ))
                )
            })
            .collect();
        let img = &self.committed;
        let reg = img.partition(crate::TOPIC, 0);
        eprintln!(
            "{} {:?} | {} | image v{} p0 {:?}",
            self.now,
            event,
            parts.join(" ; "),
            img.version,
            reg.map(|r| (r.leader, r.leader_epoch, r.isr.clone()))
        );
    }

    fn failure(&self, seed: u64, what: String) -> Failure {
        Failure {
            seed,
            step: self.report.steps,
            simulated_ms: self.now,
            what,
            canary: self.limits.canary,
        }
    }

    fn at(&mut self, after_ms: u64, event: Event) {
        self.seq += 1;
        self.events.insert(self.seq, event);
        self.queue.push(Reverse((self.now + after_ms, self.seq)));
    }

    /// The node an event belongs to, if it still runs the process the event is for; an event
    /// of a paused node waits until it resumes.
    fn live(&mut self, node: i32, incarnation: u64, event: &Event) -> Option<usize> {
        let n = &self.nodes[node as usize];
        if !n.alive || n.incarnation != incarnation {
            return None;
        }
        if let Some(until) = n.paused_until.filter(|&u| u > self.now) {
            let wait = until - self.now;
            self.at(wait, event.clone());
            return None;
        }
        Some(node as usize)
    }

    fn dispatch(&mut self, event: Event) -> Result<(), String> {
        let mut fx = Effects::default();
        let (now, base) = (self.now, self.base);
        match &event {
            Event::Tick(n, inc) => {
                if let Some(i) = self.live(*n, *inc, &event) {
                    let node = &mut self.nodes[i];
                    node.tick();
                    node.handle_ready(now, base, &self.limits, &mut fx);
                    fx.timer(self.limits.tick_ms, event.clone());
                }
            }
            Event::ControllerRound(n, inc) => {
                if let Some(i) = self.live(*n, *inc, &event) {
                    self.nodes[i].controller_round(now, base, &self.limits, &mut fx);
                    fx.timer(self.limits.controller_round_ms, event.clone());
                }
            }
            Event::IsrCheck(n, inc) => {
                if let Some(i) = self.live(*n, *inc, &event) {
                    let node = &mut self.nodes[i];
                    node.check_isr(None, now, base, &self.limits);
                    node.handle_ready(now, base, &self.limits, &mut fx);
                    fx.timer(self.limits.isr_check_ms, event.clone());
                }
            }
            Event::FetchDue(n, inc, p) => {
                if let Some(i) = self.live(*n, *inc, &event) {
                    self.next_id += 1;
                    let id = self.next_id;
                    self.nodes[i].fetch_due(*p, now, id, &mut fx);
                }
            }
            Event::AckDeadline(n, inc, p) => {
                if let Some(i) = self.live(*n, *inc, &event) {
                    self.nodes[i].expire_acks(*p, now, &self.limits, &mut fx);
                }
            }
            Event::Synced {
                node,
                incarnation,
                partition,
                upto,
                generation,
            } => {
                if let Some(i) = self.live(*node, *incarnation, &event) {
                    let limits = &self.limits;
                    self.nodes[i].synced(*partition, *upto, *generation, limits, &mut fx);
                }
            }
            Event::Deliver { .. } => return self.deliver(event),
            Event::Fault => self.fault(),
            Event::Shutdown(n) => {
                let node = &mut self.nodes[*n as usize];
                if node.alive && node.paused_until.is_none_or(|u| u <= now) {
                    node.begin_shutdown(now, 1000);
                    node.handle_ready(now, base, &self.limits, &mut fx);
                }
            }
            Event::Heal(cut) => self.heal(*cut),
            Event::Restart(n) => self.restart(*n, &mut fx),
            Event::LinkTimeout(cut) => self.link_timeout(*cut, &mut fx),
            Event::ProduceDue(c) => self.produce_due(*c),
            Event::ClientTimeout(c, request) => {
                let out = &mut self.clients[*c].outstanding;
                out.retain(|_, r| r.id != *request);
            }
        }
        self.carry_out(fx)
    }

    fn is_cut(&self, from: i32, to: i32) -> bool {
        self.cuts.values().flatten().any(|&pair| pair == (from, to))
    }

    fn link(&mut self, follower: i32, leader: i32) -> LinkId {
        *self
            .links
            .entry((follower, leader))
            .or_insert_with(LinkId::next)
    }

    fn deliver(&mut self, event: Event) -> Result<(), String> {
        let Event::Deliver {
            from,
            to,
            to_incarnation,
            body,
        } = &event
        else {
            unreachable!("deliver is called with deliveries only");
        };
        let node = match *to {
            Target::Client(c) => return self.client_reply(c, *from, body),
            Target::Node(n) => n,
        };
        if *from >= 0 && self.is_cut(*from, node) {
            return Ok(());
        }
        let Some(i) = self.live(node, *to_incarnation, &event) else {
            return Ok(());
        };
        let mut fx = Effects::default();
        let (now, base) = (self.now, self.base);
        match body.clone() {
            Body::Raft(m) => {
                let n = &mut self.nodes[i];
                n.step_raft(*from, m, now);
                n.handle_ready(now, base, &self.limits, &mut fx);
            }
            Body::Fetch {
                partition,
                fetch,
                offset,
                current_epoch,
                last_fetched_epoch,
            } => {
                let link = self.link(*from, node);
                let f = (fetch, offset, current_epoch, last_fetched_epoch);
                let n = &mut self.nodes[i];
                n.answer_fetch(partition, *from, f, link, now, base, &self.limits, &mut fx);
                n.handle_ready(now, base, &self.limits, &mut fx);
            }
            Body::FetchReply {
                partition,
                fetch,
                answer,
            } => {
                let idle = self.rng.range(10, 200);
                self.nodes[i].fetched(partition, fetch, answer, idle, &mut fx);
            }
            Body::Produce {
                partition,
                client,
                request,
                producer,
                first_seq,
                ids,
            } => {
                let (l, batch) = (&self.limits, (producer, first_seq));
                let n = &mut self.nodes[i];
                n.produce(partition, client, request, batch, &ids, now, l, &mut fx);
            }
            Body::ProduceReply { .. } => {}
        }
        self.carry_out(fx)
    }

    /// A client's answer: an acknowledgement goes to the oracle, and is checked at once.
    fn client_reply(&mut self, c: usize, from: i32, body: &Body) -> Result<(), String> {
        let Body::ProduceReply {
            request, result, ..
        } = body
        else {
            return Ok(());
        };
        let out = &mut self.clients[c].outstanding;
        let Some((&p, _)) = out.iter().find(|(_, r)| r.id == *request) else {
            return Ok(());
        };
        let req = out.remove(&p).expect("just found");
        let client = &mut self.clients[c];
        match result {
            Ok(base) => {
                let batch = client
                    .batch
                    .remove(&req.partition)
                    .expect("a batch was sent");
                let next = batch.first_seq + batch.ids.len() as i32;
                client.next_seq.insert(req.partition, next);
                self.oracle.acknowledged(req.partition, *base, &batch.ids)?;
                let image = &self.committed;
                check::acked_on_isr(image, &self.nodes, req.partition, *base, &batch.ids)
            }
            // A deposed leader that does not know it yet lacks the batches acknowledged since:
            // refused, nothing written. The current leader must never refuse an in-order batch.
            Err(code) if *code == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER => {
                self.report.out_of_order += 1;
                let reg = self.committed.partition(crate::TOPIC, p);
                let current = reg.is_some_and(|r| {
                    r.leader == from
                        && self.nodes[from as usize].parts[&p]
                            .leading
                            .as_ref()
                            .is_some_and(|l| l.leader_epoch == r.leader_epoch)
                });
                if !current {
                    return Ok(());
                }
                Err(format!(
                    "the leader {from} of partition {p} refused producer {}'s batch at \
                     sequence {:?} as out of order, although the producer sends each batch only \
                     once the one before is acknowledged",
                    client.producer,
                    client.batch.get(&p).map(|b| b.first_seq)
                ))
            }
            Err(_) => {
                self.report.produce_refused += 1;
                Ok(())
            }
        }
    }

    /// Carries out what a node's step did.
    fn carry_out(&mut self, fx: Effects) -> Result<(), String> {
        for (from, to, body) in fx.sends {
            self.send(from, to, body);
        }
        for (after, event) in fx.timers {
            let after = after.unwrap_or_else(|| self.rng.range(0, 3));
            self.at(after, event);
        }
        for (p, epoch) in fx.began_leading {
            let node = self.leader_of_epoch(p, epoch);
            self.oracle.began_leading(p, epoch, node)?;
        }
        if !fx.truncated.is_empty() {
            self.full_check_due = true;
        }
        if let Some(n) = fx.exit {
            self.nodes[n as usize].exit();
            self.gone(n);
            self.full_check_due = true;
        }
        self.follow_commits();
        for (node, p) in fx.hw_moved {
            check::high_watermark_held(&self.committed, &self.nodes, node, p)?;
        }
        Ok(())
    }

    fn leader_of_epoch(&self, p: i32, epoch: i32) -> i32 {
        self.nodes
            .iter()
            .find(|n| {
                n.parts[&p]
                    .leading
                    .as_ref()
                    .is_some_and(|l| l.leader_epoch.0 == epoch)
            })
            .map_or(-1, |n| n.id)
    }

    fn send(&mut self, from: i32, to: Target, body: Body) {
        let to_incarnation = match to {
            Target::Node(n) => {
                if from >= 0 && self.is_cut(from, n) {
                    return;
                }
                self.nodes[n as usize].incarnation
            }
            Target::Client(_) => 0,
        };
        // A connection that dies loses what it carried: rarely, a message is lost.
        if self.rng.chance(1) {
            return;
        }
        let delay = if self.rng.chance(5) {
            self.rng.range(3, 40)
        } else {
            self.rng.range(0, 3)
        };
        let event = Event::Deliver {
            from,
            to,
            to_incarnation,
            body,
        };
        self.at(delay, event);
    }

    /// Takes the most advanced image any node holds now, if it is newer than the last one;
    /// whether it was.
    fn follow_commits(&mut self) -> bool {
        let latest = check::latest_image(&self.nodes);
        if latest.version <= self.committed.version {
            return false;
        }
        self.committed = latest.clone();
        true
    }

    /// After every step: a full check when the committed image moved or a log was truncated.
    fn check_step(&mut self) -> Result<(), String> {
        let moved = self.follow_commits();
        if moved || self.full_check_due {
            self.full_check_due = false;
            let p = self.limits.partitions;
            return check::all(&self.committed, &self.nodes, &self.oracle, p);
        }
        Ok(())
    }

    fn produce_due(&mut self, c: usize) {
        let next = self.rng.range(5, 40);
        self.at(next, Event::ProduceDue(c));
        let p = self.rng.range(0, self.limits.partitions as u64) as i32;
        if self.clients[c].outstanding.contains_key(&p) {
            return;
        }
        // The client's metadata: what some live broker's image says.
        let live: Vec<i32> = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.id)
            .collect();
        let Some(asked) = self.rng.pick(&live) else {
            return;
        };
        let image = &self.nodes[asked as usize].image;
        let Some(leader) = image.partition(crate::TOPIC, p).map(|r| r.leader) else {
            return;
        };
        if leader < 0 {
            return;
        }
        let count = self.rng.range(1, 4);
        let fresh: Vec<u64> = (0..count).map(|i| self.next_id + i).collect();
        self.next_id += count + 1;
        let request = self.next_id;
        let client = &mut self.clients[c];
        let first_seq = client.next_seq.get(&p).copied().unwrap_or(0);
        let batch = client.batch.entry(p).or_insert(Batch {
            first_seq,
            ids: fresh,
        });
        let body = Body::Produce {
            partition: p,
            client: c,
            request,
            producer: client.producer,
            first_seq: batch.first_seq,
            ids: batch.ids.clone(),
        };
        client.outstanding.insert(
            p,
            Request {
                id: request,
                partition: p,
            },
        );
        self.send(-1 - c as i32, Target::Node(leader), body);
        self.at(5000, Event::ClientTimeout(c, request));
    }

    fn fault(&mut self) {
        let next = self
            .rng
            .range(self.fault_every_ms / 2, self.fault_every_ms * 3 / 2);
        self.at(next, Event::Fault);
        self.report.faults += 1;
        let n = self.limits.nodes as u64;
        let victim = self.rng.range(0, n) as i32;
        match self.rng.range(0, 100) {
            0..=24 => self.crash(victim),
            25..=34 => self.at(0, Event::Shutdown(victim)),
            35..=49 => {
                let node = &mut self.nodes[victim as usize];
                if node.alive {
                    node.paused_until = Some(self.now + self.rng.range(200, 5000));
                }
            }
            50..=79 => {
                let other = (victim + 1 + self.rng.range(0, n - 1) as i32) % n as i32;
                let mut pairs = vec![(victim, other)];
                if self.rng.chance(70) {
                    pairs.push((other, victim));
                }
                self.cut(pairs);
            }
            _ => {
                let pairs = (0..n as i32)
                    .filter(|&o| o != victim)
                    .flat_map(|o| [(victim, o), (o, victim)])
                    .collect();
                self.cut(pairs);
            }
        }
    }

    fn crash(&mut self, victim: i32) {
        if !self.nodes[victim as usize].alive {
            return;
        }
        self.nodes[victim as usize].crash();
        self.gone(victim);
    }

    /// `victim`'s process ended: its sockets close and its port refuses, evidence for every
    /// node that reaches it; it starts again a little later.
    fn gone(&mut self, victim: i32) {
        for o in 0..self.limits.nodes {
            if o != victim && !self.is_cut(o, victim) && !self.is_cut(victim, o) {
                self.nodes[o as usize].evidence.insert(victim, self.now + 1);
            }
        }
        let back = self.rng.range(100, 5000);
        self.at(back, Event::Restart(victim));
    }

    fn restart(&mut self, n: i32, fx: &mut Effects) {
        let ticks = self.limits.election_ticks as u64;
        let ticks = (ticks + self.rng.range(0, ticks)) as usize;
        let node = &mut self.nodes[n as usize];
        node.restart(ticks);
        node.start_timers(fx);
        self.links.retain(|&(f, l), _| f != n && l != n);
    }

    fn cut(&mut self, pairs: Vec<(i32, i32)>) {
        self.seq += 1;
        let id = self.seq;
        self.cuts.insert(id, pairs);
        let heal = self.rng.range(200, 6000);
        self.at(heal, Event::Heal(id));
        self.at(self.limits.link_timeout_ms, Event::LinkTimeout(id));
    }

    fn heal(&mut self, cut: u64) {
        self.cuts.remove(&cut);
        // A dead node's port now refuses those who reach it again.
        for dead in self
            .nodes
            .iter()
            .filter(|n| !n.alive)
            .map(|n| n.id)
            .collect::<Vec<_>>()
        {
            for o in 0..self.limits.nodes {
                if o != dead && !self.is_cut(o, dead) && self.nodes[o as usize].alive {
                    self.nodes[o as usize].evidence.insert(dead, self.now);
                }
            }
        }
    }

    /// A cut outlived `replica.link.timeout.ms`: the kernel closes the connections across it.
    /// Each leader takes a follower whose fetches came over one out of sync; the follower
    /// connects again (a new link).
    fn link_timeout(&mut self, cut: u64, fx: &mut Effects) {
        let Some(pairs) = self.cuts.get(&cut).cloned() else {
            return;
        };
        let (now, base) = (self.now, self.base);
        for (a, b) in pairs {
            for (follower, leader) in [(a, b), (b, a)] {
                let Some(link) = self.links.remove(&(follower, leader)) else {
                    continue;
                };
                let node = &mut self.nodes[leader as usize];
                // A paused process handles the closed connection only once it runs again.
                if !node.alive || node.paused_until.is_some_and(|u| u > now) {
                    continue;
                }
                let mut marked = false;
                for part in node.parts.values_mut() {
                    if let Some(l) = part.leading.as_mut() {
                        marked |= l.link_lost(tributary_replication::NodeId(follower), link);
                    }
                }
                if marked {
                    node.check_isr(None, now, base, &self.limits);
                    node.handle_ready(now, base, &self.limits, fx);
                }
            }
        }
    }
}
