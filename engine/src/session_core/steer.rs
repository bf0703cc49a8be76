//! Extension `turn.steer` in the session core: the owner of a running chat
//! turn adds user guidance, applied at the turn's next provider round trip.
//!
//! Where it lands: the guidance is logged as a `client.message.send` when it
//! is applied, so it sits after the tool results it follows in the log and
//! in `result.events`. The session's cached history gets it at that point
//! too (which is exactly what a rebuild from the log gives), while this
//! turn's own requests send it after its in-memory tool rounds, where the
//! model should read it: [`super::TurnLoop`]'s `steers_in_cache` trailing
//! cache entries are held back from the cached part of those requests.

use proto::wire::EventType;
use serde_json::{json, Value};

use super::effect::{Effect, LogTag};
use super::turn::Steer;
use super::{Holder, SessionCore};
use crate::ConnId;

/// Why a waiting steer was not applied (`steer_rejected: not applied:
/// <why>`, docs/extensions.md): the turn failed with an error answer or a
/// `session.error` before its next provider call ...
pub const WHY_FAILED: &str = "the turn failed";
/// ... every provider of its chain failed (`all_providers_failed`) ...
pub const WHY_PROVIDERS_FAILED: &str = "all providers failed";
/// ... or it reached its round-trip limit (`loop_limit`).
pub const WHY_LOOP_LIMIT: &str = "the turn reached its loop limit";

/// Steers that may wait on one turn; more are refused.
pub const MAX_PENDING_STEERS: usize = 16;

/// Why a steer is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerRefusal {
    /// The turn is parked waiting for client tool results.
    Paused,
    NotRunning,
    Compaction,
    /// Another driver's turn holds the gate.
    NotOwner,
    TooMany,
}

impl SteerRefusal {
    /// The `steer_rejected` reason text.
    pub fn why(self) -> &'static str {
        match self {
            SteerRefusal::Paused => {
                "the turn is paused for client tool results; send them with session.sendMessage"
            }
            SteerRefusal::NotRunning => "no turn is running",
            SteerRefusal::Compaction => "a compaction is running",
            SteerRefusal::NotOwner => "only the driver whose turn is running may steer it",
            SteerRefusal::TooMany => {
                "too many steers are waiting for this turn's next provider call"
            }
        }
    }
}

impl SessionCore {
    /// `session.steerTurn` by driver `key_id` on stream `conn`: queued for
    /// the running turn's next provider call, or refused.
    pub fn steer(
        &mut self,
        conn: ConnId,
        key_id: &str,
        content: Value,
    ) -> Result<(), SteerRefusal> {
        match self.gate.holder() {
            Holder::Running => {}
            Holder::Paused(_) => return Err(SteerRefusal::Paused),
            _ => return Err(SteerRefusal::NotRunning),
        }
        let t = self.turn_mut().ok_or(SteerRefusal::NotRunning)?;
        if t.is_compaction() {
            return Err(SteerRefusal::Compaction);
        }
        if &*t.key_id != key_id {
            return Err(SteerRefusal::NotOwner);
        }
        if t.steers.len() >= MAX_PENDING_STEERS {
            return Err(SteerRefusal::TooMany);
        }
        t.steers.push(Steer { conn, content });
        Ok(())
    }

    /// At a provider round-trip boundary: records the waiting steers and
    /// adds them to the turn's in-memory tail, after its tool rounds.
    pub(super) fn apply_steers(&mut self) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        for steer in std::mem::take(&mut t.steers) {
            let payload = json!({"role": "user", "content": steer.content});
            let message = proto::provider::history_message("client.message.send", &payload);
            if let Some(t) = self.turn_mut() {
                t.tail.push(message.into());
                t.steers_in_cache += 1;
            }
            self.log_tagged(
                EventType::ClientMessageSend,
                payload,
                LogTag::Steer(steer.conn),
                false,
            );
        }
    }

    /// The turn goes on without another provider call: its waiting steers
    /// will never be applied.
    pub(super) fn retire_steers(&mut self, why: &'static str) {
        let steers = match self.turn_mut() {
            Some(t) => std::mem::take(&mut t.steers),
            None => Vec::new(),
        };
        for steer in steers {
            self.emit(Effect::SteerRetired {
                conn: steer.conn,
                why,
            });
        }
    }
}
