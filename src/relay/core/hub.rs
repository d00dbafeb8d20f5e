//! Who is connected: the map from relay code to the agent and the phones holding it. This is the
//! relay's only shared state; each socket's outgoing side is its [`SendQueue`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::codec::OutFrame;
use super::metrics::RelayMetrics;
use super::queue::{lock, Cork, End, Ledger, Push, SendQueue};
use super::{Claim, MAX_PHONES_PER_CODE};
use crate::protocol::relay::{self, close as relay_close, header, Framing, Kind, PeerId, Presence};
use crate::protocol::{self, PeerRole, PeerState};

/// The agent of a relay code.
struct Agent {
    conn: u64,
    queue: Arc<SendQueue>,
    /// It speaks relay framing 3, so it marks the phones that proved the token (`PROVEN`) and the
    /// others may be closed to make room.
    marks_proven: bool,
}

/// One of the phones of a relay code.
struct Phone {
    peer: PeerId,
    conn: u64,
    queue: Arc<SendQueue>,
    /// It hears the relay's presence notices (a phone may ask for none).
    notices: bool,
    /// The agent said it proved the pairing's token (`PROVEN`): it is never closed to make room.
    proven: bool,
}

impl Phone {
    fn notify(&self, state: PeerState) {
        if self.notices {
            self.queue.push_notice(presence(PeerRole::Agent, state));
        }
    }
}

#[derive(Default)]
struct Members {
    agent: Option<Agent>,
    phones: Vec<Phone>,
}

impl Members {
    fn phone(&self, peer: PeerId) -> Option<&Phone> {
        self.phones.iter().find(|phone| phone.peer == peer)
    }

    /// Closes the oldest phone not proven (4003, it made room) and takes it out at once, the
    /// agent hearing `LEFT`; false when every phone is proven, or when no agent is there to say
    /// which are (none, or one of relay framing 2).
    fn make_room(&mut self) -> bool {
        if !self.agent.as_ref().is_some_and(|agent| agent.marks_proven) {
            return false;
        }
        // Phones are kept in the order they joined.
        let Some(oldest) = self.phones.iter().position(|phone| !phone.proven) else { return false };
        let phone = self.phones.remove(oldest);
        tracing::debug!("the code is full: closing its oldest phone not proven to make room");
        phone.queue.end(End::close(relay_close::TOO_MANY_PHONES, relay_close::MADE_ROOM_REASON));
        if let Some(agent) = &self.agent {
            agent.queue.push_notice(agent_notice(Kind::Left, phone.peer));
        }
        true
    }

    fn is_agent(&self, conn: u64) -> bool {
        self.agent.as_ref().is_some_and(|agent| agent.conn == conn)
    }
}

/// The sockets of one relay code.
#[derive(Default)]
pub(crate) struct Slot {
    members: Mutex<Members>,
}

/// Where a socket sits in its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seat {
    Agent { conn: u64 },
    Phone { peer: PeerId },
}

/// A slot that already holds [`MAX_PHONES_PER_CODE`] phones, every one of them proven.
#[derive(Debug)]
pub(crate) struct TooManyPhones;

/// Outcome of handing a frame to the other side.
pub(crate) enum Forward {
    /// Queued, or dropped because its receiver is not there (any more).
    Done,
    /// The receiver's queue is full.
    Full(OutFrame, Arc<SendQueue>),
}

fn presence(peer: PeerRole, state: PeerState) -> OutFrame {
    OutFrame::text(Presence::new(peer, state).to_text())
}

fn agent_notice(kind: Kind, peer: PeerId) -> OutFrame {
    OutFrame::tagged(header(kind, peer), Vec::new())
}

/// Relay codes to their slots. Locks are taken in one order: map, then slot, then a reader's
/// [`Cork`], then queue.
pub(crate) struct Hub {
    slots: Mutex<HashMap<u128, Arc<Slot>>>,
    /// The next phone's peer id: ids are never reused while the relay runs.
    next_peer: AtomicU32,
    pub ledger: Arc<Ledger>,
}

impl Hub {
    pub(crate) fn new(ledger: Arc<Ledger>) -> Self {
        Hub { slots: Mutex::default(), next_peer: AtomicU32::new(1), ledger }
    }

    pub(crate) fn metrics(&self) -> &RelayMetrics {
        &self.ledger.metrics
    }

    /// While the memory budget is exceeded, closes (1013) the oldest socket that holds more than
    /// an even share of what is held; its bytes leave the budget at once.
    pub(crate) fn enforce_budget(&self) {
        while self.ledger.over() {
            let sockets: Vec<(u64, Arc<SendQueue>)> = lock(&self.slots)
                .values()
                .flat_map(|slot| {
                    let members = lock(&slot.members);
                    let agent = members.agent.iter().map(|agent| (agent.conn, Arc::clone(&agent.queue)));
                    let phones = members.phones.iter().map(|phone| (phone.conn, Arc::clone(&phone.queue)));
                    agent.chain(phones).collect::<Vec<_>>()
                })
                .collect();
            let share = self.ledger.metrics.buffered() / sockets.len().max(1);
            let oldest = sockets
                .into_iter()
                .filter(|(_, queue)| !queue.is_ended() && queue.held() > share)
                .min_by_key(|(conn, _)| *conn);
            let Some((_, queue)) = oldest else { return };
            tracing::debug!("memory budget exceeded; closing the oldest socket holding more than its share");
            queue.end(End::close(protocol::close::TRY_AGAIN_LATER, "relay memory budget exceeded"));
        }
    }

    /// Seats a socket as `role` of `code` and tells the others about it.
    ///
    /// An agent replaces the agent before it, which is closed 4001 `replaced`; every phone hears
    /// `left` for the old one and `joined` for the new one, which hears `JOINED` for each phone.
    /// A phone takes a free place (of [`MAX_PHONES_PER_CODE`]), or that of the oldest phone not
    /// proven when the agent speaks relay framing 3, under a new peer id; the agent hears `JOINED`
    /// and the phone hears `joined` if the agent is there (and `notices` is set). A new agent's
    /// phones start unproven.
    pub(crate) fn join(&self, claim: &Claim, queue: &Arc<SendQueue>) -> Result<(Arc<Slot>, Seat), TooManyPhones> {
        let Claim { code, role, conn, notices, framing } = *claim;
        let mut slots = lock(&self.slots);
        let slot = Arc::clone(slots.entry(code).or_default());
        let mut members = lock(&slot.members);
        let seat = match role {
            PeerRole::Agent => {
                let marks_proven = framing == Framing::V3;
                let previous = members.agent.replace(Agent { conn, queue: Arc::clone(queue), marks_proven });
                if previous.is_none() && !members.phones.is_empty() {
                    self.metrics().pair_formed();
                }
                if let Some(previous) = &previous {
                    previous.queue.end(End::close(protocol::close::REPLACED, "replaced"));
                }
                for phone in &mut members.phones {
                    // Marks are the word of the agent that gave them.
                    phone.proven = false;
                }
                for phone in &members.phones {
                    if previous.is_some() {
                        phone.notify(PeerState::Left);
                    }
                    phone.notify(PeerState::Joined);
                    queue.push_notice(agent_notice(Kind::Joined, phone.peer));
                }
                Seat::Agent { conn }
            }
            PeerRole::Phone => {
                if members.phones.len() >= MAX_PHONES_PER_CODE && !members.make_room() {
                    let empty = members.agent.is_none() && members.phones.is_empty();
                    drop(members);
                    if empty {
                        slots.remove(&code);
                    }
                    return Err(TooManyPhones);
                }
                let peer = self.next_peer.fetch_add(1, Ordering::Relaxed);
                if let Some(agent) = &members.agent {
                    if members.phones.is_empty() {
                        self.metrics().pair_formed();
                    }
                    agent.queue.push_notice(agent_notice(Kind::Joined, peer));
                }
                let phone = Phone { peer, conn, queue: Arc::clone(queue), notices, proven: false };
                if members.agent.is_some() {
                    phone.notify(PeerState::Joined);
                }
                members.phones.push(phone);
                Seat::Phone { peer }
            }
        };
        drop(members);
        Ok((slot, seat))
    }

    /// Takes a socket out of its slot (unless it was replaced already) and tells the others.
    pub(crate) fn leave(&self, code: u128, slot: &Arc<Slot>, seat: Seat) {
        let mut slots = lock(&self.slots);
        let mut members = lock(&slot.members);
        match seat {
            Seat::Agent { conn } if members.is_agent(conn) => {
                members.agent = None;
                for phone in &members.phones {
                    phone.notify(PeerState::Left);
                }
                if !members.phones.is_empty() {
                    self.metrics().pair_broken();
                }
            }
            Seat::Agent { .. } => {}
            Seat::Phone { peer } => {
                let before = members.phones.len();
                members.phones.retain(|phone| phone.peer != peer);
                if let (Some(agent), true) = (&members.agent, members.phones.len() < before) {
                    agent.queue.push_notice(agent_notice(Kind::Left, peer));
                    if members.phones.is_empty() {
                        self.metrics().pair_broken();
                    }
                }
            }
        }
        let empty = members.agent.is_none() && members.phones.is_empty();
        drop(members);
        if empty && slots.get(&code).is_some_and(|current| Arc::ptr_eq(current, slot)) {
            slots.remove(&code);
        }
    }

    /// Queues a push receipt (the body of a `POST /ack`, unread) for the agent of `code`; false
    /// when no agent holds it. The edge bounds its size and how often it comes.
    pub(crate) fn receipt(&self, code: u128, body: &[u8]) -> bool {
        let Some(slot) = lock(&self.slots).get(&code).cloned() else { return false };
        let members = lock(&slot.members);
        let Some(agent) = &members.agent else { return false };
        agent.queue.push_notice(OutFrame::tagged(header(Kind::Receipt, 0), body.to_vec()));
        true
    }

    /// Whether an agent holds `code` now.
    pub(crate) fn has_agent(&self, code: u128) -> bool {
        let slot = lock(&self.slots).get(&code).cloned();
        slot.is_some_and(|slot| lock(&slot.members).agent.is_some())
    }

    /// Hands part of a message from phone `peer` to the agent `agent` (the one that got the
    /// message's first part). Parts of a phone that left, or for an agent that is gone, are
    /// dropped; a part for a full queue comes back with that queue, for the caller to wait on.
    pub(crate) fn to_agent(
        &self,
        slot: &Slot,
        peer: PeerId,
        agent: Option<u64>,
        frame: OutFrame,
        cork: Option<&Cork>,
    ) -> Forward {
        // Pushing under the slot lock keeps a departed socket's late parts from landing after the
        // notices about its leaving.
        let members = lock(&slot.members);
        if members.phone(peer).is_none() {
            return Forward::Done;
        }
        let Some(target) = members.agent.as_ref().filter(|target| Some(target.conn) == agent) else {
            return Forward::Done;
        };
        self.push(&target.queue, frame, PeerRole::Phone, cork)
    }

    /// Hands the first part of a message from phone `peer` to the agent there now, as
    /// [`Hub::to_agent`] does; also gives that agent's connection id (`None`: no agent), to which
    /// the message's other parts go.
    pub(crate) fn to_current_agent(
        &self,
        slot: &Slot,
        peer: PeerId,
        frame: OutFrame,
        cork: Option<&Cork>,
    ) -> (Forward, Option<u64>) {
        let members = lock(&slot.members);
        let Some(target) = members.agent.as_ref() else { return (Forward::Done, None) };
        if members.phone(peer).is_none() {
            return (Forward::Done, Some(target.conn));
        }
        (self.push(&target.queue, frame, PeerRole::Phone, cork), Some(target.conn))
    }

    /// Hands part of a message from the agent `conn` to phone `peer`. Frames of a replaced agent
    /// and frames for a phone that is not there are dropped: a frame for a peer id only ever
    /// reaches that one socket.
    pub(crate) fn to_phone(
        &self,
        slot: &Slot,
        conn: u64,
        peer: PeerId,
        frame: OutFrame,
        cork: Option<&Cork>,
    ) -> Forward {
        let members = lock(&slot.members);
        if !members.is_agent(conn) {
            return Forward::Done;
        }
        let Some(phone) = members.phone(peer) else { return Forward::Done };
        self.push(&phone.queue, frame, PeerRole::Agent, cork)
    }

    /// Hands a frame to `queue`; with a `cork`, corked there where it would be written at once.
    fn push(&self, queue: &Arc<SendQueue>, frame: OutFrame, from: PeerRole, cork: Option<&Cork>) -> Forward {
        // A message's last part counts it as a frame; bytes are the payload's, without the
        // relay's header.
        let fin = frame.fin && frame.tag.is_none_or(|tag| tag[0] != Kind::Part.byte());
        let len = frame.payload.len();
        let pushed = match cork {
            Some(cork) => {
                let pushed = queue.push_corked(frame);
                if matches!(pushed, Push::Corked) {
                    cork.hold(queue);
                }
                pushed
            }
            None => queue.push(frame),
        };
        match pushed {
            Push::Full(frame) => Forward::Full(frame, Arc::clone(queue)),
            Push::Queued | Push::Corked => {
                self.metrics().forwarded(from, len, fin);
                Forward::Done
            }
            Push::Dropped => Forward::Done,
        }
    }

    /// Marks phone `peer` proven, as the agent `conn` said (`PROVEN`); a mark from a replaced
    /// agent, or for a phone that is not there, is dropped.
    pub(crate) fn prove(&self, slot: &Slot, conn: u64, peer: PeerId) {
        let mut members = lock(&slot.members);
        if !members.is_agent(conn) {
            return;
        }
        if let Some(phone) = members.phones.iter_mut().find(|phone| phone.peer == peer) {
            phone.proven = true;
        }
    }

    /// Closes phone `peer` as the agent `conn` asked (a code the relay may send, and a reason),
    /// once the frames the agent sent it before are written.
    pub(crate) fn close_phone(&self, slot: &Slot, conn: u64, peer: PeerId, code: u16, reason: &str) {
        let members = lock(&slot.members);
        if !members.is_agent(conn) {
            return;
        }
        if let Some(phone) = members.phone(peer) {
            let reason = crate::text::prefix(reason, relay::MAX_CLOSE_REASON).to_owned();
            phone.queue.end_when_sent(End::Close { code, reason: reason.into() });
        }
    }

    /// Relay codes with at least one socket.
    #[cfg(test)]
    fn codes(&self) -> usize {
        lock(&self.slots).len()
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
