//! Observers: nodes outside `controller.quorum.voters` (Kafka's broker-only nodes) that follow
//! the committed metadata log without voting. Both ends live here:
//!
//! - **on a voter**, the two connection kinds an observer opens: a fetch connection, where
//!   each request names the next raft index the observer needs and the answer carries the
//!   committed entries from there (or the voter's snapshot, when its log was compacted past
//!   that index), held up to the request's wait while nothing new is committed; and a proposal
//!   connection, one way, whose commands the voter proposes with the observer's own context;
//! - **on the observer**, the task that fetches and applies, preferring the leader (the active
//!   controller hears from its brokers through their fetches, as Kafka's does), and the task
//!   that sends proposals to the leader. The observer resolves its own proposal when it
//!   applies the entry carrying its context, exactly as a voter does.
//!
//! An observer keeps nothing on disk: at start it fetches the snapshot and the log after it.
//!
//! ```text
//! fetch request:  [from u64BE][max wait ms u32BE]
//! fetch answer:   [leader i32BE, -1 unknown][term u64BE][commit u64BE][upto u64BE]
//!                 [snapshot u8: 0 | 1 [index u64BE][len u32BE][bytes]]
//!                 [count u32BE] count × [index u64BE][context len u32BE][context][len u32BE][data]
//! proposal:       [context len u32BE][context][command]
//! ```
//! `upto` is the last raft index the answer covers (entries that are not commands are left
//! out); the observer's next request asks from `upto + 1`. Every frame is length-checked
//! before its buffer is allocated and decoding never trusts a length it has not checked.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use futures::channel::oneshot;
use futures::io::AsyncWriteExt;
use glommio::net::TcpStream;
use raft::eraftpb::{Entry, EntryType};

use crate::config::raft_id;
use crate::core::{Core, Input};
use crate::driver::{decode_context, encode_context};
use crate::quorum::Shared;
use crate::transport::{
    dial_as, read_frame, with_timeout, Channel, BACKOFF_MAX, BACKOFF_MIN, FRAME_BYTES_MAX,
    WRITE_TIMEOUT,
};
use crate::{ProposeError, StateMachine, COMMAND_BYTES_MAX};

/// How long a voter holds a fetch while nothing new is committed.
pub const FETCH_WAIT_MAX: Duration = Duration::from_millis(500);
/// Entry bytes one fetch answer carries, at most (one entry always goes, whatever its size).
const FETCH_ENTRY_BYTES_MAX: usize = 1 << 20;
/// An observer whose answer does not arrive this long after the wait it asked for reconnects.
const ANSWER_SLACK: Duration = Duration::from_secs(5);
/// A voter drops an observer connection that sent nothing for this long (the observer is gone
/// without a FIN, e.g. behind a network cut).
const OBSERVER_IDLE_MAX: Duration = Duration::from_secs(30);
const FETCH_REQUEST_BYTES: usize = 8 + 4;
/// A proposal frame: its context and a command of at most `COMMAND_BYTES_MAX`.
const PROPOSAL_FRAME_MAX: usize = COMMAND_BYTES_MAX + 4 + 64;

/// What a voter's driver answers an observer's fetch with.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FetchAnswer {
    pub leader: Option<i32>,
    pub term: u64,
    pub commit: u64,
    /// The last raft index this answer covers.
    pub upto: u64,
    /// The voter's snapshot (its index and state-machine bytes), when its log no longer holds
    /// the index asked for.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Committed commands after the snapshot (or from the index asked for): index, context,
    /// data.
    pub entries: Vec<(u64, Vec<u8>, Vec<u8>)>,
}

impl FetchAnswer {
    /// Fills the entries from a voter's log: the commands among `log` (contiguous entries)
    /// with index in `from..=upto`, at most [`FETCH_ENTRY_BYTES_MAX`] of them (at least one);
    /// `upto` is lowered to the last entry taken when the limit cuts the answer short.
    pub fn take_entries(&mut self, log: &[Entry], from: u64, upto: u64) {
        let (mut bytes, mut taken) = (0usize, 0usize);
        self.upto = from.saturating_sub(1);
        for e in log.iter().filter(|e| e.index >= from && e.index <= upto) {
            let size = e.data.len() + e.context.len();
            if taken > 0 && bytes + size > FETCH_ENTRY_BYTES_MAX {
                break;
            }
            bytes += size;
            taken += 1;
            if crate::driver::is_command(e) {
                self.entries
                    .push((e.index, e.context.to_vec(), e.data.to_vec()));
            }
            self.upto = e.index;
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.leader.unwrap_or(-1).to_be_bytes());
        out.extend_from_slice(&self.term.to_be_bytes());
        out.extend_from_slice(&self.commit.to_be_bytes());
        out.extend_from_slice(&self.upto.to_be_bytes());
        match &self.snapshot {
            Some((index, data)) => {
                out.push(1);
                out.extend_from_slice(&index.to_be_bytes());
                put_bytes(&mut out, data);
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (index, context, data) in &self.entries {
            out.extend_from_slice(&index.to_be_bytes());
            put_bytes(&mut out, context);
            put_bytes(&mut out, data);
        }
        out
    }

    /// Decodes an answer; `None` when the bytes are not one (short, trailing bytes, lengths
    /// past the end, or entries out of order).
    pub fn decode(bytes: &[u8]) -> Option<FetchAnswer> {
        let mut r = Reader(bytes);
        let leader = r.i32()?;
        let mut answer = FetchAnswer {
            leader: (leader >= 0).then_some(leader),
            term: r.u64()?,
            commit: r.u64()?,
            upto: r.u64()?,
            ..FetchAnswer::default()
        };
        answer.snapshot = match r.u8()? {
            0 => None,
            1 => Some((r.u64()?, r.bytes()?.to_vec())),
            _ => return None,
        };
        let count = r.u32()?;
        let mut last = answer.snapshot.as_ref().map_or(0, |(i, _)| *i);
        for _ in 0..count {
            let index = r.u64()?;
            let context = r.bytes()?.to_vec();
            let data = r.bytes()?.to_vec();
            if index <= last || index > answer.upto {
                return None;
            }
            last = index;
            answer.entries.push((index, context, data));
        }
        r.0.is_empty().then_some(answer)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A cursor over bytes from the network: every read checks what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

// ---- the voter's side ----

/// Serves an admitted observer's fetch connection until it closes; returns why it stopped.
pub async fn serve_fetches(stream: &mut TcpStream, core: &Core, observer: i32) -> String {
    loop {
        let request =
            with_timeout(OBSERVER_IDLE_MAX, read_frame(stream, FETCH_REQUEST_BYTES)).await;
        let request = match request {
            Ok(r) if r.len() == FETCH_REQUEST_BYTES => r,
            Ok(_) => return "malformed fetch request".to_string(),
            Err(e) => return e.to_string(),
        };
        let mut r = Reader(&request);
        let (Some(from), Some(wait_ms)) = (r.u64(), r.u32()) else {
            return "malformed fetch request".to_string();
        };
        core.heard_from(raft_id(observer));
        let wait = Duration::from_millis(wait_ms.into()).min(FETCH_WAIT_MAX);
        let Some(mut answer) = ask_driver(core, from).await else {
            return "driver gone".to_string();
        };
        if answer.snapshot.is_none() && answer.upto < from {
            // Nothing new: hold the request until a commit moves or the wait ends.
            let moved = core.commit_moved.listen();
            futures_lite::future::or(moved, glommio::timer::sleep(wait)).await;
            match ask_driver(core, from).await {
                Some(again) => answer = again,
                None => return "driver gone".to_string(),
            }
        }
        let bytes = answer.encode();
        if bytes.len() > FRAME_BYTES_MAX {
            tracing::error!(
                observer,
                len = bytes.len(),
                "a fetch answer exceeds the frame limit; the snapshot is too large to send"
            );
            return "answer too large".to_string();
        }
        if let Err(e) = with_timeout(WRITE_TIMEOUT, stream.write_all(&frame(&bytes))).await {
            return e.to_string();
        }
    }
}

async fn ask_driver(core: &Core, from: u64) -> Option<FetchAnswer> {
    let (reply, answer) = oneshot::channel();
    core.inbox
        .send(Input::ObserverFetch { from, reply })
        .await
        .ok()?;
    answer.await.ok()
}

/// Hands an admitted observer's proposals to the driver until the connection closes; returns
/// why it stopped. A proposal whose context names another node is refused (the connection
/// closes): an observer resolves only its own.
pub async fn serve_proposals(stream: &mut TcpStream, core: &Core, observer: i32) -> String {
    loop {
        let payload =
            match with_timeout(OBSERVER_IDLE_MAX, read_frame(stream, PROPOSAL_FRAME_MAX)).await {
                Ok(p) => p,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
                Err(e) => return e.to_string(),
            };
        let mut r = Reader(&payload);
        let Some(context) = r.bytes() else {
            return "malformed proposal".to_string();
        };
        if decode_context(context).is_none_or(|(node, _, _)| node != observer) {
            tracing::warn!(
                observer,
                "an observer's proposal names another proposer; closing"
            );
            return "proposal for another node".to_string();
        }
        let input = Input::Forward {
            context: context.to_vec(),
            data: r.0.to_vec(),
        };
        if core.inbox.send(input).await.is_err() {
            return "driver gone".to_string();
        }
    }
}

// ---- the observer's side ----

/// Starts the observer's tasks: the fetcher (which keeps `shared` up to date with the
/// committed log) and the proposal sender (which drains the core's inbox).
pub fn start<S: StateMachine>(shared: &Rc<Shared<S>>, inbox: async_channel::Receiver<Input>) {
    let core = shared.core.clone();
    let fetcher = shared.clone();
    core.spawn_counted(async move {
        let c = fetcher.core.clone();
        c.until_closed(fetch_loop(fetcher)).await;
    });
    let sender = shared.clone();
    core.spawn_counted(async move {
        let c = sender.core.clone();
        c.until_closed(propose_loop(sender, inbox)).await;
    });
}

/// The voter to talk to: the leader when known (and a voter), otherwise the next in turn.
fn pick(core: &Core, leader: Option<i32>, turn: &mut usize) -> (i32, SocketAddr) {
    if let Some(v) = leader.and_then(|l| core.voters.iter().find(|(id, _)| *id == l)) {
        return *v;
    }
    *turn = (*turn + 1) % core.voters.len();
    core.voters[*turn]
}

async fn fetch_loop<S: StateMachine>(shared: Rc<Shared<S>>) {
    let core = shared.core.clone();
    let mut turn = 0usize;
    let mut backoff = BACKOFF_MIN;
    loop {
        let (voter, addr) = pick(&core, shared.leader.get(), &mut turn);
        let mut stream = match dial_as(core.node_id, voter, addr, Channel::ObserverFetch).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(voter, %addr, error = %e, "observer cannot reach a voter");
                if shared.leader.get() == Some(voter) {
                    shared.set_view(None, shared.term.get(), shared.commit.get());
                }
                glommio::timer::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        backoff = BACKOFF_MIN;
        let why = follow(&shared, &mut stream, voter).await;
        tracing::debug!(voter, reason = %why, "observer fetch connection ended");
    }
}

/// Fetches from one voter until the connection fails or the voter names another leader.
async fn follow<S: StateMachine>(shared: &Shared<S>, stream: &mut TcpStream, voter: i32) -> String {
    loop {
        let from = shared.applied_index() + 1;
        let mut request = Vec::with_capacity(FETCH_REQUEST_BYTES);
        request.extend_from_slice(&from.to_be_bytes());
        request.extend_from_slice(&(FETCH_WAIT_MAX.as_millis() as u32).to_be_bytes());
        let exchange = with_timeout(FETCH_WAIT_MAX + ANSWER_SLACK, async {
            stream.write_all(&frame(&request)).await?;
            let bytes = read_frame(stream, FRAME_BYTES_MAX).await?;
            FetchAnswer::decode(&bytes).ok_or_else(|| invalid("undecodable fetch answer"))
        })
        .await;
        let answer = match exchange {
            Ok(a) => a,
            Err(e) => return e.to_string(),
        };
        // The view is read first: the answer (a snapshot, perhaps) moves into the apply.
        let (leader, term, commit) = (answer.leader, answer.term, answer.commit);
        if let Err(why) = apply_answer(shared, from, answer) {
            return why;
        }
        shared.set_view(leader, term, commit);
        if let Some(leader) = leader {
            if leader != voter && shared.core.is_voter(leader) {
                return format!("voter {voter} names {leader} the leader");
            }
        }
    }
}

/// Applies a fetch answer that continues the log from `from`.
fn apply_answer<S: StateMachine>(
    shared: &Shared<S>,
    from: u64,
    answer: FetchAnswer,
) -> Result<(), String> {
    if let Some((index, data)) = &answer.snapshot {
        shared
            .sm
            .borrow_mut()
            .restore(data)
            .map_err(|e| format!("restoring the voter's snapshot: {e:#}"))?;
        tracing::info!(
            node = shared.core.node_id,
            index,
            "observer restored a snapshot"
        );
        shared.set_applied(*index);
    } else if answer.upto + 1 < from {
        return Err(format!(
            "the voter answered up to {} for a fetch from {from}",
            answer.upto
        ));
    }
    for (index, context, data) in answer.entries {
        if index <= shared.applied_index() {
            continue;
        }
        let mut entry = Entry::default();
        entry.set_entry_type(EntryType::EntryNormal);
        entry.index = index;
        entry.context = context.into();
        entry.data = data.into();
        shared.apply_entry(&entry);
    }
    if answer.upto > shared.applied_index() {
        shared.set_applied(answer.upto);
    }
    Ok(())
}

async fn propose_loop<S: StateMachine>(
    shared: Rc<Shared<S>>,
    inbox: async_channel::Receiver<Input>,
) {
    let core = shared.core.clone();
    let mut conn: Option<(i32, TcpStream)> = None;
    while let Ok(input) = inbox.recv().await {
        let Input::Propose {
            seq,
            data,
            leader_term,
        } = input
        else {
            continue;
        };
        if let Some(term) = leader_term {
            shared.resolve(seq, Err(ProposeError::NotLeader { term }));
            continue;
        }
        let Some(leader) = shared.leader.get() else {
            shared.resolve(seq, Err(ProposeError::NoLeader));
            continue;
        };
        if conn.as_ref().is_some_and(|(to, _)| *to != leader) {
            conn = None;
        }
        if conn.is_none() {
            let Some((_, addr)) = core.voters.iter().find(|(id, _)| *id == leader) else {
                shared.resolve(seq, Err(ProposeError::NoLeader));
                continue;
            };
            match dial_as(core.node_id, leader, *addr, Channel::ObserverPropose).await {
                Ok(s) => conn = Some((leader, s)),
                Err(e) => {
                    tracing::debug!(leader, error = %e, "observer cannot reach the leader to propose");
                    shared.resolve(seq, Err(ProposeError::NoLeader));
                    continue;
                }
            }
        }
        let context = encode_context(core.node_id, shared.incarnation, seq);
        let mut payload = Vec::with_capacity(4 + context.len() + data.len());
        put_bytes(&mut payload, &context);
        payload.extend_from_slice(&data);
        let Some((_, stream)) = conn.as_mut() else {
            continue;
        };
        if let Err(e) = with_timeout(WRITE_TIMEOUT, stream.write_all(&frame(&payload))).await {
            tracing::debug!(leader, error = %e, "observer proposal connection lost");
            conn = None;
            shared.resolve(seq, Err(ProposeError::NoLeader));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, data: &[u8], context: &[u8]) -> Entry {
        Entry {
            index,
            data: data.to_vec().into(),
            context: context.to_vec().into(),
            ..Default::default()
        }
    }

    #[test]
    fn answers_round_trip_and_every_prefix_fails() {
        let answer = FetchAnswer {
            leader: Some(2),
            term: 7,
            commit: 12,
            upto: 12,
            snapshot: Some((9, b"state".to_vec())),
            entries: vec![
                (10, b"ctx".to_vec(), b"a".to_vec()),
                (12, vec![], b"b".to_vec()),
            ],
        };
        let bytes = answer.encode();
        assert_eq!(FetchAnswer::decode(&bytes), Some(answer));
        for cut in 0..bytes.len() {
            assert_eq!(FetchAnswer::decode(&bytes[..cut]), None, "prefix {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(FetchAnswer::decode(&long), None);
        let none = FetchAnswer::default();
        let decoded = FetchAnswer::decode(&none.encode()).unwrap();
        assert_eq!(decoded.leader, None);
    }

    #[test]
    fn answers_with_entries_out_of_order_or_past_upto_are_refused() {
        let mut answer = FetchAnswer {
            upto: 5,
            entries: vec![(4, vec![], b"a".to_vec()), (3, vec![], b"b".to_vec())],
            ..FetchAnswer::default()
        };
        assert_eq!(FetchAnswer::decode(&answer.encode()), None);
        answer.entries = vec![(6, vec![], b"a".to_vec())];
        assert_eq!(FetchAnswer::decode(&answer.encode()), None);
        answer.snapshot = Some((6, vec![]));
        answer.upto = 8;
        assert_eq!(
            FetchAnswer::decode(&answer.encode()),
            None,
            "not after the snapshot"
        );
    }

    #[test]
    fn take_entries_keeps_commands_in_range_and_bounds_bytes() {
        let big = vec![7u8; FETCH_ENTRY_BYTES_MAX];
        let log = vec![
            entry(3, b"x", b"c"),
            entry(4, b"", b""), // a leader's empty entry: covered, not sent
            entry(5, &big, b"c"),
            entry(6, b"y", b"c"),
        ];
        let mut a = FetchAnswer::default();
        a.take_entries(&log, 4, 6);
        assert_eq!(
            a.upto, 4,
            "the big entry would pass the limit after one entry"
        );
        assert!(a.entries.is_empty());
        let mut a = FetchAnswer::default();
        a.take_entries(&log, 5, 6);
        assert_eq!(a.upto, 5, "one entry always goes");
        assert_eq!(a.entries.len(), 1);
        let mut a = FetchAnswer::default();
        a.take_entries(&log, 6, 5);
        assert_eq!(a.upto, 5, "nothing committed past 5");
        assert!(a.entries.is_empty());
    }
}
