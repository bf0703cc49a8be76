//! [`SessionCore`]: one open session's live state, transport-free. It owns
//! the FIFO gate, the provider-facing history cache, the usage and
//! compaction backoff that history feeds, and the turn holding the gate;
//! it takes typed inputs (a request admitted, a provider reply, a tool
//! outcome, a logged event) and queues typed [`Effect`]s for the engine.

use std::collections::VecDeque;

use proto::provider::HistoryText;
use proto::wire::{json, EventType};
use serde_json::Value;

use super::compaction::Backoff;
use super::effect::{Effect, Ending, Fact, Log, LogTag};
use super::turn::TurnLoop;
use super::Gate;
use crate::faults::Faults;
use crate::streams::Appended;

/// One session's live loop.
#[derive(Default)]
pub struct SessionCore {
    /// The FIFO turn gate: holder and waiters.
    pub gate: Gate,
    /// Provider-facing history as rebuilt from the log (`None`: not
    /// loaded), kept as the text requests send: extended message by
    /// message, never rendered again.
    pub history: Option<HistoryText>,
    /// Usage of the newest successful non-compaction provider call (valid
    /// once `history` is loaded): the manual compaction `token_count`.
    pub newest_usage: Option<(u64, u64)>,
    /// Backoff armed by a failed automatic compaction (spec 07 §3.3).
    pub backoff: Option<Backoff>,
    /// The turn or compaction holding the gate.
    pub(super) turn: Option<Box<TurnLoop>>,
    effects: VecDeque<Effect>,
    faults: Faults,
}

impl SessionCore {
    pub fn new(faults: Faults) -> Self {
        SessionCore {
            gate: Gate::new(faults),
            faults,
            ..SessionCore::default()
        }
    }

    pub(crate) fn faults(&self) -> Faults {
        self.faults
    }

    /// The next thing to do; drain after every call into the core.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Installs the turn that now holds the gate (the engine admitted it).
    pub fn begin(&mut self, turn: TurnLoop) {
        self.turn = Some(Box::new(turn));
    }

    pub fn turn(&self) -> Option<&TurnLoop> {
        self.turn.as_deref()
    }

    pub fn turn_mut(&mut self) -> Option<&mut TurnLoop> {
        self.turn.as_deref_mut()
    }

    /// Removes the turn (after its [`Effect::End`], a cancel or a close);
    /// its queued effects go with it.
    pub fn take_turn(&mut self) -> Option<Box<TurnLoop>> {
        self.effects.clear();
        self.turn.take()
    }

    /// Runs `step` so that the effects it queues come before any still
    /// queued: a call made while the engine drains effects (an answer to
    /// one) acts as if the turn had run on synchronously.
    pub(super) fn step(&mut self, step: impl FnOnce(&mut Self)) {
        let rest = std::mem::take(&mut self.effects);
        step(self);
        self.effects.extend(rest);
    }

    pub(super) fn emit(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    pub(super) fn fact(&mut self, fact: Fact) {
        self.emit(Effect::Fact(fact));
    }

    /// Logs an event on the turn's behalf. Message events also extend the
    /// cached history (when loaded) at once, as a rebuild from the log
    /// would.
    pub(super) fn log(&mut self, event: EventType, payload: Value) {
        self.log_tagged(event, payload, LogTag::Plain, false);
    }

    pub(super) fn log_tagged(
        &mut self,
        event: EventType,
        payload: Value,
        tag: LogTag,
        quiet: bool,
    ) {
        let text = json::text(&payload);
        self.log_rendered(event, payload, text, tag, quiet);
    }

    /// Logs the assistant's message as `server.message.send` and returns
    /// its JSON: the same text is the turn's `result.message`, so the
    /// message is serialised once for both.
    pub(super) fn log_answer(&mut self, message: Value) -> String {
        let text = json::text(&message);
        let event = EventType::ServerMessageSend;
        self.log_rendered(event, message, text.clone(), LogTag::Plain, false);
        text
    }

    /// `payload` already rendered as `text`; a message event's payload
    /// moves into the cached history.
    fn log_rendered(
        &mut self,
        event: EventType,
        payload: Value,
        text: String,
        tag: LogTag,
        quiet: bool,
    ) {
        let mut grew = None;
        if matches!(
            event,
            EventType::ClientMessageSend | EventType::ServerMessageSend
        ) {
            if let Some(h) = self.history.as_mut() {
                let message = proto::provider::into_history_message(event.as_str(), payload);
                let before = h.weight();
                h.push(&message);
                grew = Some(h.weight().saturating_sub(before));
            }
        }
        self.emit(Effect::Log(Log {
            event,
            payload: text,
            quiet,
            tag,
            grew,
        }));
    }

    pub(super) fn log_text(&mut self, event: EventType, payload: String) {
        self.emit(Effect::Log(Log {
            event,
            payload,
            quiet: false,
            tag: LogTag::Plain,
            grew: None,
        }));
    }

    pub(super) fn end(&mut self, ending: Ending) {
        self.emit(Effect::End(ending));
    }

    pub(super) fn fail(&mut self, code: i64, message: impl Into<String>) {
        self.end(Ending::Failed {
            code,
            message: message.into(),
        });
    }

    /// The engine appended the event of an [`Effect::Log`]: it joins the
    /// turn's `result.events`, and a tagged one moves the turn on.
    pub fn logged(&mut self, tag: LogTag, ev: &Appended) {
        let Some(t) = self.turn.as_deref_mut() else {
            return;
        };
        t.events.push(ev.json.clone());
        t.event_seqs.push(ev.seq);
        if t.first_event_id.is_none() {
            t.first_event_id = Some(ev.id.clone());
        }
        match tag {
            LogTag::Plain => {}
            LogTag::TurnInput => t.input_event = Some(std::sync::Arc::from(ev.id.as_str())),
            LogTag::Request => t.request_event = Some(std::sync::Arc::from(ev.id.as_str())),
            LogTag::Steer(conn) => self.step(|c| {
                c.emit(Effect::SteerApplied {
                    conn,
                    event_id: ev.id.clone(),
                })
            }),
            LogTag::CompactionPart => self.step(|c| c.compaction_part_logged(&ev.id)),
            LogTag::CompactionDone => self.step(|c| c.compaction_logged(ev.json.clone())),
        }
    }
}
