//! The live session loop: the FIFO turn gate with paused turns (spec 01 §8),
//! `session.sendMessage`, the provider attempt walk (spec 05 §5), tool
//! dispatch (spec 06 §2) and the 8-iteration turn loop (spec 05 §9).
//!
//! A turn is a state machine parked in [`Engine::turns`] between inputs: it
//! waits for a history read or a provider reply, never for a socket. It runs
//! to completion even if its consumer disconnects (only frames are lost).

mod cache;
pub mod compact;
mod gate;
pub mod merge;
mod provider_walk;
mod recover;
pub mod round;
pub mod tools;
pub mod walk;

use proto::provider;
use serde_json::{json, Value};

use crate::conn::PendingRead;
use crate::history_load::{HistoryLoad, HistoryLoader, Progress};
use crate::rpc::StreamKind;
use crate::session_core::{Arrival, Limits, Refusal, Start};
use crate::store::{ReadResult, SessionState, StoreWrite};
use crate::telemetry::TurnEnd;
use crate::{CallId, ConnId, Engine, ProviderEntry};
use proto::jsonrpc::codes;
use proto::wire::EventType;

/// Round trips per turn before `loop_limit` (spec 05 §9).
pub const MAX_ITERATIONS: u32 = 8;
/// The assistant text of a turn that ended `ProvidersFailed`.
pub const UNAVAILABLE_TEXT: &str = "The provider is currently unavailable.";

pub use crate::ids::TurnId;
use crate::ids::{KeyId, SessionId};

pub use crate::session_core::{Holder, Op, Pause, Takeover, UserMessage, Waiter};

/// In-memory runtime state of an open session.
#[derive(Default)]
pub struct Live {
    /// The FIFO turn gate: holder and waiters.
    pub gate: crate::session_core::Gate,
    /// Provider-facing history as rebuilt from the log (`None` = not loaded).
    pub history: Option<Vec<Value>>,
    /// Usage of the newest successful non-compaction provider call (valid
    /// once `history` is loaded): the manual compaction `token_count`.
    pub newest_usage: Option<(u64, u64)>,
    /// Backoff armed by a failed automatic compaction (spec 07 §3.3).
    pub backoff: Option<compact::Backoff>,
}

/// An accepted steer waiting for its turn's next provider call.
pub struct PendingSteer {
    /// The `session.steerTurn` stream, answered when the steer is applied.
    pub conn: ConnId,
    pub content: Value,
}

/// A turn in flight.
pub struct Turn {
    pub session_id: SessionId,
    pub key_id: KeyId,
    /// The request's stream (`None` once the consumer is gone).
    pub conn: Option<ConnId>,
    /// EventView JSON of every event this request appended (`result.events`),
    /// shared with the event's live frames.
    pub events: Vec<std::sync::Arc<str>>,
    /// All-server tool rounds of this turn, kept in memory after the
    /// session's cached provider-facing history (never copied per turn).
    pub tail: Vec<Value>,
    pub tools: Vec<Value>,
    pub chain: Vec<ProviderEntry>,
    pub attempt: usize,
    pub iteration: u32,
    pub call: Option<CallId>,
    pub mode: Mode,
    /// `(input, output)` usage of this request's newest successful call.
    pub last_usage: Option<(u64, u64)>,
    /// Auto-compaction trigger carried from a resumed or retired pause.
    pub carried_trigger: Option<u64>,
    /// The tool round in progress (server tools may be asynchronous).
    pub round: Option<Box<round::Round>>,
    /// Steers waiting for the next provider call (extension `turn.steer`).
    pub steers: Vec<PendingSteer>,
    /// Applied steers at the end of the session's cached history: this
    /// turn's requests send them from `tail` instead (see `steer`).
    pub steers_in_cache: usize,
    /// The request's idempotency key and the retries attached to it.
    pub idem: Option<crate::session_core::Idem>,
    /// When the provider call in flight was sent (attempt latency).
    pub call_started: crate::MonoMs,
    /// Seqs of `events` (what an idempotent retry replays).
    pub event_seqs: Vec<u64>,
}

impl Turn {
    /// Every stream waiting for this turn's answer: the request's own and
    /// those of attached idempotent retries.
    pub fn streams(&self) -> Vec<ConnId> {
        let watchers = self.idem.iter().flat_map(|i| i.watchers.iter().copied());
        self.conn.into_iter().chain(watchers).collect()
    }
}

/// What the provider calls of a [`Turn`] are for.
pub enum Mode {
    Chat,
    Compaction(Box<compact::Run>),
}

pub(crate) enum Outcome {
    Completed(Value),
    Paused(Value, Pause),
    ProvidersFailed,
}

impl Engine {
    pub(crate) fn live_mut(&mut self, session_id: &str) -> &mut Live {
        let id = match self.live.get_key_value(session_id) {
            Some((id, _)) => id.clone(),
            None => self.catalog.session_id(session_id),
        };
        let faults = self.faults;
        self.live.entry(id).or_insert_with(|| Live {
            gate: crate::session_core::Gate::new(faults),
            ..Live::default()
        })
    }

    /// `session.sendMessage`: pre-gate checks, then the arrival rules.
    pub(crate) fn send_message(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_driver(conn, session_id, key_id, "session.sendMessage") {
            return;
        }
        let idempotent = self.stream_has(conn, proto::jsonrpc::Extension::SendIdempotent);
        if let Some(msg) = self.open_state_error(session_id) {
            // A finished key still gets its answer once the session is no
            // longer open (its turn may have been what ended it).
            if idempotent && self.replay_finished(conn, session_id, key_id, params) {
                return;
            }
            return self.terminal_error(conn, codes::APPLICATION_ERROR, &msg);
        }
        let mut message = match proto::jsonrpc::SendMessageParams::parse(params) {
            Ok(m) => UserMessage {
                role: m.role,
                content: m.content,
                idem: None,
            },
            Err(msg) => return self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        if idempotent {
            let key = match proto::jsonrpc::idempotency_key(params) {
                Ok(k) => k,
                Err(msg) => return self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
            };
            if let Some(key) = key {
                if self.idempotent_send(conn, session_id, key_id, key, &mut message) {
                    return;
                }
            }
        }
        self.arrive(conn, session_id, key_id, Op::Send(message));
    }

    /// A gated request passed its pre-gate checks. The first one after a
    /// start rebuilds history and any parked pause from the log (the
    /// reference loses pauses on restart; spec 01 §10 note 3).
    pub(crate) fn arrive(&mut self, conn: ConnId, session_id: &str, key_id: &str, op: Op) {
        let fresh = self
            .catalog
            .sessions
            .get(session_id)
            .is_some_and(|s| s.fresh);
        let (now, limits) = (self.now.mono, self.gate_limits());
        let waiter = Waiter::new(conn, self.catalog.key_id(key_id), op);
        self.history_cache.busy(session_id);
        let live = self.live_mut(session_id);
        let empty = live.history.is_none() && fresh;
        if empty {
            live.history = Some(Vec::new());
        }
        let (arrival, recover) = if live.history.is_some() {
            (live.gate.arrive(now, limits, waiter), false)
        } else {
            let start = live.gate.begin_recovery();
            (live.gate.enqueue(limits, waiter), start)
        };
        if live.gate.has_waiters() {
            self.note_waiting(session_id);
        }
        if empty {
            self.history_built(session_id);
        }
        self.route_arrival(conn, session_id, arrival);
        if recover {
            let (loader, read) = HistoryLoader::start(session_id);
            self.read(read, PendingRead::Recover { loader });
        }
        self.note_gate_idle(session_id);
    }

    fn gate_limits(&self) -> Limits {
        Limits {
            max_queued: self.config.max_queued_per_session,
            shutting_down: self.shutting_down,
        }
    }

    /// Acts on what the gate made of `conn`'s arrival.
    fn route_arrival(&mut self, conn: ConnId, session_id: &str, arrival: Arrival) {
        match arrival {
            Arrival::Start(start) => self.start_admitted(session_id, start),
            Arrival::Queued => {
                if let Some(s) = self.stream_mut(conn) {
                    s.kind = StreamKind::Queued;
                }
                self.tell_queue_positions(session_id);
            }
            Arrival::Refused(w, why) => self.refuse(w, why),
        }
    }

    /// Answers every stream of a request the gate would not take.
    pub(crate) fn refuse(&mut self, w: Waiter, why: Refusal) {
        let (code, message) = match why {
            Refusal::ShuttingDown => (codes::APPLICATION_ERROR, "server is shutting down"),
            Refusal::QueueFull => (
                codes::APPLICATION_ERROR,
                "turn queue full: too many requests are waiting on this session",
            ),
            Refusal::TurnInProgress => (
                codes::TURN_IN_PROGRESS,
                "turn in progress: resolve the paused turn before compacting",
            ),
        };
        for conn in w.streams() {
            self.terminal_error(conn, code, message);
        }
    }

    /// The gate admitted a request: a retired pause's abandonment is
    /// logged (a send's before it subscribes, so observers see it and the
    /// reclaiming caller does not, C-122; a compaction's after it attached,
    /// so it is streamed to it), then the turn or compaction starts.
    pub(crate) fn start_admitted(&mut self, session_id: &str, start: Start) {
        let Start { waiter, takeover } = start;
        match waiter.op {
            Op::Send(message) => {
                if let Takeover::Retire(p) = &takeover {
                    if !p.cancelled {
                        self.log_abandoned(session_id, &p.owner);
                    }
                }
                self.acquire(waiter.conn, session_id, &waiter.key_id, message, takeover);
            }
            Op::Compact(prompt) => {
                let reclaimed = match takeover {
                    Takeover::Retire(p) => Some(p),
                    _ => None,
                };
                self.acquire_compaction(waiter.conn, session_id, &waiter.key_id, prompt, reclaimed);
            }
        }
    }

    pub(crate) fn is_driver(&self, session_id: &str, key_id: &str) -> bool {
        self.catalog
            .drivers
            .get(session_id)
            .is_some_and(|d| d.contains(key_id))
    }

    pub(crate) fn log_abandoned(&mut self, session_id: &str, owner: &str) {
        let payload = json!({"reason": "driver_turn_abandoned", "owner_client_key_id": owner});
        self.append_event(session_id, Some(owner), EventType::SessionError, payload);
    }

    /// The request now holds the gate: re-check, record the user turn and
    /// start the loop.
    /// Makes `conn`'s request the gate holder and returns its turn id.
    pub(crate) fn hold_gate(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        mode: Mode,
    ) -> TurnId {
        let turn_id = self.next_turn;
        self.next_turn += 1;
        self.tell_queue_positions(session_id);
        let conn_alive = self.stream_mut(conn).is_some();
        if let Some(s) = self.stream_mut(conn) {
            s.kind = StreamKind::Turn;
        }
        self.turns.insert(
            turn_id,
            Turn {
                session_id: self.catalog.session_id(session_id),
                key_id: self.catalog.key_id(key_id),
                conn: conn_alive.then_some(conn),
                events: Vec::new(),
                tail: Vec::new(),
                tools: Vec::new(),
                chain: Vec::new(),
                attempt: 0,
                iteration: 0,
                call: None,
                mode,
                last_usage: None,
                carried_trigger: None,
                round: None,
                steers: Vec::new(),
                steers_in_cache: 0,
                idem: None,
                event_seqs: Vec::new(),
                call_started: crate::MonoMs(0),
            },
        );
        turn_id
    }

    fn acquire(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        mut message: UserMessage,
        takeover: Takeover,
    ) {
        let turn_id = self.hold_gate(conn, session_id, key_id, Mode::Chat);
        if self.telemetry.enabled() {
            let profile_id = self.profile_of(session_id);
            let conn = self.turns.get(&turn_id).and_then(|t| t.conn);
            let resumed = matches!(takeover, Takeover::Resume(_));
            let session = (session_id, profile_id.as_str(), key_id);
            (self.telemetry).turn_begin(turn_id, conn, session, resumed);
        }
        if let Some(idem) = message.idem.take() {
            for w in &idem.watchers {
                if let Some(s) = self.stream_mut(*w) {
                    s.kind = StreamKind::Turn;
                }
            }
            self.idem_started(session_id, key_id, &idem.key);
            if let Some(t) = self.turns.get_mut(&turn_id) {
                t.idem = Some(idem);
            }
        }
        if let Takeover::Resume(p) | Takeover::Retire(p) = &takeover {
            if let Some(t) = self.turns.get_mut(&turn_id) {
                t.carried_trigger = p.auto_trigger;
            }
        }
        if let Some(msg) = self.open_state_error(session_id) {
            return self.fail_turn(turn_id, codes::APPLICATION_ERROR, &msg);
        }
        // The single user message that follows the paused turn.
        let merged = match merge::user_turn(&takeover, &message.role, &message.content) {
            Ok(m) => Ok(m),
            Err(merge::Refused::NoPausedTurn) => {
                return self.fail_turn(
                    turn_id,
                    codes::APPLICATION_ERROR,
                    "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)",
                );
            }
            Err(merge::Refused::Invalid(reason)) => Err(reason),
        };
        let merged = merged.map(|mut m| {
            self.faults.merged_content(&mut m.content, &m.server_ids);
            m
        });
        let merged = match merged {
            Ok(m) => m,
            Err(reason) => {
                let payload = json!({"reason": "tool_result_merge_invalid", "detail": reason});
                self.turn_event(turn_id, EventType::SessionError, payload);
                self.set_state(session_id, SessionState::Error);
                return self.fail_turn(
                    turn_id,
                    codes::APPLICATION_ERROR,
                    &format!("tool result merge invalid: {reason}"),
                );
            }
        };
        // The request's own input is never echoed on its own stream (nor on
        // those of its attached retries).
        self.quiet = self
            .turns
            .get(&turn_id)
            .map(Turn::streams)
            .unwrap_or_default();
        let payload = json!({"role": message.role, "content": merged.content});
        self.turn_event(turn_id, EventType::ClientMessageSend, payload);
        for payload in merge::client_tool_results(&merged) {
            self.turn_event(turn_id, EventType::ToolResult, payload);
        }
        self.quiet.clear();
        // The profile and the provider chain are re-read every turn.
        let profile_id = self.profile_of(session_id);
        let Some(profile) = self
            .catalog
            .live_profile(&profile_id)
            .map(|p| p.row.clone())
        else {
            let payload = json!({"reason": "profile_unavailable", "profile_id": profile_id});
            self.turn_event(turn_id, EventType::SessionError, payload);
            self.set_state(session_id, SessionState::Error);
            return self.fail_turn(
                turn_id,
                codes::APPLICATION_ERROR,
                "profile_unavailable: the profile bound to this session is no longer available",
            );
        };
        let Some(primary) = self.provider(&profile.primary_provider).cloned() else {
            let detail = format!(
                "primary provider \"{}\" is not configured in bae-config.toml",
                profile.primary_provider
            );
            self.turn_event(
                turn_id,
                EventType::SessionError,
                json!({"reason": "provider_config", "detail": detail}),
            );
            self.set_state(session_id, SessionState::Error);
            return self.end_turn(turn_id, Outcome::ProvidersFailed);
        };
        let mut chain = vec![primary];
        for name in &profile.fallback_providers {
            match self.provider(name) {
                Some(p) => chain.push(p.clone()),
                None => {
                    tracing::error!(provider = %name, "fallback provider is not configured; skipped")
                }
            }
        }
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.chain = chain;
        }
        // History: the cache already holds the just-recorded message.
        self.once_history_loaded(turn_id);
    }

    /// Continues a turn or compaction once the session's provider-facing
    /// history is cached (normally already true: arrivals recover it first).
    pub(crate) fn once_history_loaded(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let session_id = t.session_id.clone();
        if self
            .live
            .get(&session_id)
            .is_some_and(|l| l.history.is_some())
        {
            return self.history_ready(turn_id);
        }
        let (loader, read) = HistoryLoader::start(&session_id);
        self.read(
            read,
            PendingRead::TurnHistory {
                turn: turn_id,
                loader,
            },
        );
    }

    /// Feeds a history load the answer to its last read: asks for the next
    /// one (and returns `None`) or returns the outcome.
    pub(crate) fn continue_history_load(
        &mut self,
        loader: HistoryLoader,
        result: Result<ReadResult, String>,
        again: impl FnOnce(HistoryLoader) -> PendingRead,
    ) -> Option<Result<HistoryLoad, String>> {
        match loader.advance(result) {
            Progress::Read(loader, read) => {
                self.read(read, again(loader));
                None
            }
            Progress::Done(load) => Some(Ok(load)),
            Progress::Failed(e) => Some(Err(e)),
        }
    }

    fn history_ready(&mut self, turn_id: TurnId) {
        match self.turns.get(&turn_id).map(|t| &t.mode) {
            Some(Mode::Compaction(_)) => self.compaction_history_ready(turn_id),
            Some(Mode::Chat) => self.start_loop(turn_id),
            None => {}
        }
    }

    pub(crate) fn on_turn_history(&mut self, turn_id: TurnId, result: Result<HistoryLoad, String>) {
        let Some(session_id) = self.turns.get(&turn_id).map(|t| t.session_id.clone()) else {
            return;
        };
        match result {
            Ok(load) => {
                let history: Vec<Value> = load
                    .messages
                    .iter()
                    .map(|(_, et, payload)| provider::history_message(et, payload))
                    .collect();
                let live = self.live_mut(&session_id);
                live.history = Some(history);
                live.newest_usage = load.newest_usage.flatten();
                self.history_built(&session_id);
                self.history_ready(turn_id);
            }
            Err(e) => {
                tracing::error!(error = %e, "history read failed");
                self.fail_turn(turn_id, codes::APPLICATION_ERROR, "session loop failed");
            }
        }
    }

    pub(crate) fn start_loop(&mut self, turn_id: TurnId) {
        if self.restore_mcp(turn_id) {
            return;
        }
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.tail.clear();
            t.iteration = 0;
        }
        self.next_round(turn_id);
    }

    /// One provider round trip: attempt 0 of the chain.
    fn next_round(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        if t.iteration >= MAX_ITERATIONS {
            let session_id = t.session_id.clone();
            let payload = json!({"reason": "loop_limit", "max_iterations": MAX_ITERATIONS});
            self.turn_event(turn_id, EventType::SessionError, payload);
            self.set_state(&session_id, SessionState::Error);
            return self.end_turn(turn_id, Outcome::ProvidersFailed);
        }
        t.iteration += 1;
        t.attempt = 0;
        self.apply_steers(turn_id);
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        // The tool list is recomputed for every round trip (spec 05 §9 3a):
        // an `updateClientTools` applies to the next provider call, never to
        // one already sent.
        let (session_id, key_id) = (t.session_id.clone(), t.key_id.clone());
        let tools = self.advertised_tools(&session_id, &key_id);
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.tools = tools;
        }
        self.send_attempt(turn_id);
    }

    /// Appends an event on behalf of a turn (and into its `result.events`).
    pub(crate) fn turn_event(
        &mut self,
        turn_id: TurnId,
        event_type: EventType,
        payload: Value,
    ) -> Option<crate::log::Appended> {
        self.turn_event_with(turn_id, |e, session_id, key_id| {
            e.append_event(session_id, Some(key_id), event_type, payload)
        })
    }

    /// [`Engine::turn_event`] with a payload already rendered as JSON text.
    pub(crate) fn turn_event_text(
        &mut self,
        turn_id: TurnId,
        event_type: EventType,
        payload: String,
    ) -> Option<crate::log::Appended> {
        self.turn_event_with(turn_id, |e, session_id, key_id| {
            e.append_event_text(session_id, Some(key_id), event_type, payload)
        })
    }

    fn turn_event_with(
        &mut self,
        turn_id: TurnId,
        append: impl FnOnce(&mut Self, &str, &str) -> crate::log::Appended,
    ) -> Option<crate::log::Appended> {
        let t = self.turns.get(&turn_id)?;
        let (session_id, key_id) = (t.session_id.clone(), t.key_id.clone());
        let ev = append(self, &session_id, &key_id);
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.events.push(ev.json.clone());
            t.event_seqs.push(ev.seq);
        }
        Some(ev)
    }

    pub(crate) fn set_state(&mut self, session_id: &str, state: SessionState) {
        // Terminal states are final (spec 02 §3): a turn still running when
        // its session was closed must not move it to `error`.
        if (self.catalog.sessions.get(session_id)).is_some_and(|s| s.state != SessionState::Open) {
            return;
        }
        let at = self.timestamp();
        if let Some(s) = self.catalog.sessions.get_mut(session_id) {
            s.state = state;
            s.closed_at = Some(crate::time::Stamp::At(self.now.unix));
        }
        self.write(StoreWrite::SetSessionState {
            id: session_id.to_string(),
            state,
            closed_at: Some(at),
        });
        // A session in `error` runs no more turns, so nothing can use its
        // MCP servers: free their children now rather than at DELETE.
        if state == SessionState::Error {
            self.mcp.close_session(session_id);
            self.telemetry.session_end(session_id, true);
        }
    }

    /// Terminal result for the turn's request, then gate bookkeeping.
    pub(crate) fn end_turn(&mut self, turn_id: TurnId, outcome: Outcome) {
        let Some(mut t) = self.turns.remove(&turn_id) else {
            return;
        };
        let why = match &outcome {
            Outcome::Paused(..) => "the turn paused for client tools before its next provider call",
            _ => "the turn ended before its next provider call",
        };
        if matches!(t.mode, Mode::Chat) {
            self.metrics.turn_ended(match &outcome {
                Outcome::Completed(_) => crate::metrics::TurnOutcome::Completed,
                Outcome::Paused(..) => crate::metrics::TurnOutcome::Paused,
                Outcome::ProvidersFailed => crate::metrics::TurnOutcome::ProvidersFailed,
            });
            let end = match &outcome {
                Outcome::Completed(_) => TurnEnd::Completed,
                Outcome::Paused(..) => TurnEnd::Paused,
                Outcome::ProvidersFailed => TurnEnd::ProvidersFailed,
            };
            self.telemetry.turn_end(turn_id, &t.session_id, end);
        }
        self.retire_steers(std::mem::take(&mut t.steers), why);
        let message = match &outcome {
            Outcome::Completed(m) | Outcome::Paused(m, _) => m.clone(),
            Outcome::ProvidersFailed => json!({
                "role": "assistant",
                "content": [{"type": "text", "text": UNAVAILABLE_TEXT}],
            }),
        };
        self.idem_finished(
            &t,
            json!({"result": {"message": message, "event_seqs": t.event_seqs}}),
        );
        let streams = t.streams();
        if !streams.is_empty() {
            let result = crate::respond::turn_result_parts(&message, &t.events);
            for conn in streams {
                self.terminal_result_parts(conn, &result);
            }
        }
        match outcome {
            Outcome::Paused(_, pause) => {
                if self.faults.release_gate_on_pause() {
                    return self.release_gate(&t.session_id);
                }
                // A compaction never waits on a pause (spec 07 §4.2 step 4).
                let refused = match self.live.get_mut(&t.session_id) {
                    Some(live) => live.gate.park(pause),
                    None => Vec::new(),
                };
                for w in refused {
                    self.refuse(w, Refusal::TurnInProgress);
                }
            }
            _ => self.release_gate(&t.session_id),
        }
    }

    /// Error terminal for a request holding the gate (nothing else recorded).
    pub(crate) fn fail_turn(&mut self, turn_id: TurnId, code: i64, message: &str) {
        let Some(mut t) = self.turns.remove(&turn_id) else {
            return;
        };
        self.retire_steers(std::mem::take(&mut t.steers), "the turn failed");
        (self.telemetry).turn_end(turn_id, &t.session_id, TurnEnd::Failed);
        self.idem_finished(&t, json!({"error": {"code": code, "message": message}}));
        for conn in t.streams() {
            self.terminal_error(conn, code, message);
        }
        self.release_gate(&t.session_id);
    }
}
