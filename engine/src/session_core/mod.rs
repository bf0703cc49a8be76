//! The transport-free core of one session's live loop ([`SessionCore`]):
//! the FIFO turn gate with its waiters and parked pauses (spec 01 §8), the
//! cached provider-facing history, and the turn holding the gate with its
//! provider attempt walk (spec 05 §5), tool rounds (spec 06 §2), pauses,
//! steering and compaction (spec 07). It owns its data, takes typed inputs
//! and queues typed [`Effect`]s; it knows nothing of connections' bytes,
//! streams or the store, and reads what only the engine knows through the
//! read-only [`World`]. Time arrives as a monotonic millisecond argument.
//!
//! Its tests (`tests/`) drive it in-process with virtual time.

pub mod compaction;
mod effect;
mod gate;
pub mod merge;
pub(crate) mod recovery;
mod request;
pub mod retry;
pub mod round;
mod session;
pub(crate) mod steer;
mod stream;
#[cfg(test)]
mod tests;
mod tools;
mod traffic;
mod turn;
pub mod walk;

pub use effect::{Admission, Call, ChainError, Effect, Ending, Fact, Log, SubagentAnswer, World};
pub use gate::{Arrival, Gate, Limits, Refusal, Start};
pub use session::SessionCore;
pub use steer::SteerRefusal;
pub use tools::marked_streams;
pub use turn::{Mode, Steer, TurnLoop};

use crate::{ConnId, MonoMs};
use serde_json::Value;

/// Who holds a session's gate.
#[derive(Debug, Default)]
pub enum Holder {
    #[default]
    Free,
    /// Rebuilding history and a possible pause from the log after a start.
    Recovering,
    Running,
    Paused(Pause),
}

/// A parked paused turn: the gate stays taken for its owner.
#[derive(Debug, Clone, PartialEq)]
pub struct Pause {
    pub owner: crate::ids::KeyId,
    /// Monotonic ms after which another arrival may retire the turn.
    pub deadline: MonoMs,
    /// `tool_use` ids of the paused assistant message, in order.
    pub expected: Vec<String>,
    /// Server-dispatched results produced before the pause.
    pub server_results: Vec<Value>,
    /// An auto-compaction crossing observed before the pause (spec 07 §3.2).
    pub auto_trigger: Option<u64>,
    /// Cancelled by its owner or an operator (extension `turn.cancel`): the
    /// next arrival, the owner's too, retires it at once; the abandonment
    /// was logged at the cancel.
    pub cancelled: bool,
}

/// How a request came to hold the gate.
#[derive(Debug, PartialEq)]
pub enum Takeover {
    Fresh,
    /// The paused turn's owner came back.
    Resume(Pause),
    /// Another arrival (or the owner after a cancel) retired an expired
    /// pause.
    Retire(Pause),
}

/// A queued gated request.
#[derive(Debug)]
pub struct Waiter {
    pub conn: ConnId,
    pub key_id: crate::ids::KeyId,
    pub op: Op,
    /// The last queue position told to it (extension `turn.queue`).
    pub told: usize,
}

impl Waiter {
    pub fn new(conn: ConnId, key_id: crate::ids::KeyId, op: Op) -> Self {
        Waiter {
            conn,
            key_id,
            op,
            told: 0,
        }
    }

    /// Its own stream and those of attached idempotent retries.
    pub fn streams(&self) -> Vec<ConnId> {
        let mut all = vec![self.conn];
        if let Op::Send(UserMessage { idem: Some(i), .. }) = &self.op {
            all.extend(i.watchers.iter().copied());
        }
        all
    }

    /// `conn` went away: an attached retry leaves; if it was the request's
    /// own stream, the oldest attached retry takes its place.
    pub fn forget(&mut self, conn: ConnId) {
        let Op::Send(UserMessage { idem: Some(i), .. }) = &mut self.op else {
            return;
        };
        i.watchers.retain(|w| *w != conn);
        if self.conn == conn && !i.watchers.is_empty() {
            self.conn = i.watchers.remove(0);
        }
    }
}

/// What a gated request wants to do once admitted.
#[derive(Debug)]
pub enum Op {
    Send(UserMessage),
    /// `session.compact` with its call-level prompt.
    Compact(Option<String>),
}

/// `params.message` of `session.sendMessage`.
#[derive(Debug, Clone)]
pub struct UserMessage {
    pub role: String,
    pub content: Value,
    /// Its idempotency key and attached retries (extension
    /// `send.idempotent`).
    pub idem: Option<Idem>,
}

/// The idempotency key of a request, carried through the queue into its
/// turn, with the retries attached to it.
#[derive(Debug, Clone, Default)]
pub struct Idem {
    pub key: String,
    /// Streams of retries that attached while it waited or ran.
    pub watchers: Vec<ConnId>,
}
