//! The engine's side of the live session loop: a request's way to the FIFO
//! turn gate (spec 01 §8) and, once admitted, to its session's
//! [`SessionCore`], which runs the turn (spec 05 §5, §9; spec 06 §2;
//! spec 07). This layer only routes: it builds the [`World`] the core reads
//! (`world.rs`), feeds it inputs, and performs the effects it asks for
//! (`exec.rs`).

mod exec;
mod gate;
mod tools;
mod world;

use serde_json::json;

use crate::conn::{LiveRead, PendingRead};
use crate::history_load::{HistoryLoad, HistoryLoader, Progress};
use crate::ids::{KeyId, SessionId};
use crate::live::LiveCx;
use crate::services::Services;
use crate::session_core::{Arrival, Limits, Refusal, SessionCore, Start, TurnLoop, World};
use crate::store::{ReadError, ReadResult, SessionState, StoreWrite};
use crate::streams::StreamKind;
use crate::ConnId;
use proto::jsonrpc::{codes, SendMessageCall};
use proto::wire::EventType;

/// The assistant text of a turn that ended `ProvidersFailed`.
pub const UNAVAILABLE_TEXT: &str = "The provider is currently unavailable.";

pub use crate::ids::TurnId;
pub(crate) use gate::Cancelled;

pub use crate::session_core::{Holder, Mode, Op, Pause, Takeover, UserMessage, Waiter};

impl LiveCx<'_> {
    /// `session.sendMessage`: pre-gate checks, then the arrival rules.
    pub(crate) fn send_message(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: SendMessageCall,
    ) {
        if !self
            .catalog
            .require_driver(self.svc, conn, session_id, key_id, "session.sendMessage")
        {
            return;
        }
        let idempotent = self
            .svc
            .stream_has(conn, proto::jsonrpc::Extension::SendIdempotent);
        if let Some(msg) = self.catalog.open_state_error(session_id) {
            // A finished key still gets its answer once the session is no
            // longer open (its turn may have been what ended it).
            if idempotent
                && self
                    .sessions
                    .idem_replay_finished(self.svc, conn, session_id, key_id, &params)
            {
                return;
            }
            return self
                .svc
                .terminal_error(conn, codes::APPLICATION_ERROR, &msg);
        }
        let mut message = match params.message {
            Ok(m) => UserMessage {
                role: m.role,
                content: m.content,
                idem: None,
            },
            Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        if idempotent {
            let key = match params.idempotency_key {
                Ok(k) => k,
                Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
            };
            if let Some(key) = key {
                let svc = &mut self.svc;
                if (self.sessions).idem_send(svc, conn, session_id, key_id, key, &mut message) {
                    return;
                }
            }
        }
        // Quotas: a used-up token budget refuses a new turn before any
        // provider call (a running turn is never cut; an idempotent retry
        // of an answered key was replayed above). A refused key's later
        // retry runs as a first use.
        if let Some(r) = self.catalog.quota_turn(self.svc, session_id, key_id) {
            return self.svc.quota_error(conn, &r);
        }
        self.arrive(conn, session_id, key_id, Op::Send(message));
    }

    /// A gated request passed its pre-gate checks. The first one after a
    /// start rebuilds history and any parked pause from the log (the
    /// reference loses pauses on restart; spec 01 §10 note 3).
    pub(crate) fn arrive(&mut self, conn: ConnId, session_id: &SessionId, key_id: &KeyId, op: Op) {
        let fresh = self
            .catalog
            .sessions
            .get(session_id)
            .is_some_and(|s| s.fresh);
        let (now, limits) = (self.svc.now.mono, self.gate_limits());
        let waiter = Waiter::new(conn, key_id.clone(), op);
        self.sessions.history_busy(session_id);
        let live = self.sessions.core_of(self.catalog, session_id);
        let empty = live.history.is_none() && fresh;
        if empty {
            live.history = Some(proto::provider::HistoryText::new());
        }
        let (arrival, recover) = if live.history.is_some() {
            (live.gate.arrive(now, limits, waiter), false)
        } else {
            let start = live.gate.begin_recovery();
            (live.gate.enqueue(limits, waiter), start)
        };
        if live.gate.has_waiters() {
            self.sessions.mark_waiting(self.catalog, session_id);
        }
        if empty {
            self.sessions.history_built(session_id);
        }
        self.route_arrival(conn, session_id, arrival);
        if recover {
            let (loader, read) = HistoryLoader::start(session_id);
            self.svc
                .read(read, PendingRead::Live(LiveRead::Recover { loader }));
        }
        self.sessions
            .note_gate_idle(self.catalog, session_id, self.svc.now.mono);
    }

    fn gate_limits(&self) -> Limits {
        Limits {
            max_queued: self.svc.config.max_queued_per_session,
            shutting_down: self.shutting_down,
        }
    }

    /// Acts on what the gate made of `conn`'s arrival.
    fn route_arrival(&mut self, conn: ConnId, session_id: &SessionId, arrival: Arrival) {
        match arrival {
            Arrival::Start(start) => self.start_admitted(session_id, start),
            Arrival::Queued => {
                if let Some(s) = self.svc.stream_mut(conn) {
                    s.kind = StreamKind::Queued;
                }
                self.sessions.tell_queue_positions(self.svc, session_id);
            }
            Arrival::Refused(w, why) => self.svc.refuse(w, why),
        }
    }

    /// The gate admitted a request: a retired pause's abandonment is
    /// logged (a send's before it subscribes, so observers see it and the
    /// reclaiming caller does not, C-122; a compaction's after it attached,
    /// so it is streamed to it), then the turn or compaction starts.
    pub(crate) fn start_admitted(&mut self, session_id: &SessionId, start: Start) {
        let Start { waiter, takeover } = start;
        match waiter.op {
            Op::Send(message) => {
                if let Takeover::Retire(p) = &takeover {
                    if !p.cancelled {
                        let fanout = self.sessions.streams_mut(session_id);
                        self.svc.log_abandoned(fanout, session_id, &p.owner);
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

    /// Makes `conn`'s request the gate holder of `session_id` with a fresh
    /// turn in `mode`, and returns the turn's id.
    fn hold_gate(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        mode: Mode,
    ) -> TurnId {
        let turn_id = (self.routes).start_turn(session_id.clone());
        self.sessions.tell_queue_positions(self.svc, session_id);
        let conn_alive = self.svc.stream_mut(conn).is_some();
        if let Some(s) = self.svc.stream_mut(conn) {
            s.kind = StreamKind::Turn;
        }
        let key_id = key_id.clone();
        let turn = TurnLoop::new(turn_id, key_id, conn_alive.then_some(conn), mode);
        self.sessions.core_of(self.catalog, session_id).begin(turn);
        turn_id
    }

    /// A `sendMessage` holds the gate: its idempotency key is recorded and
    /// the session core runs the turn.
    fn acquire(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        mut message: UserMessage,
        takeover: Takeover,
    ) {
        let turn_id = self.hold_gate(conn, session_id, key_id, Mode::Chat);
        if self.svc.telemetry.enabled() {
            let profile_id = self.catalog.profile_of(session_id);
            let conn = self
                .sessions
                .core_of(self.catalog, session_id)
                .turn()
                .and_then(|t| t.conn);
            let resumed = matches!(takeover, Takeover::Resume(_));
            let session = (session_id.as_str(), profile_id.as_str(), key_id.as_str());
            (self.svc.telemetry).turn_begin(turn_id, conn, session, resumed);
        }
        if let Some(idem) = message.idem.take() {
            for w in &idem.watchers {
                if let Some(s) = self.svc.stream_mut(*w) {
                    s.kind = StreamKind::Turn;
                }
            }
            (self.sessions).idem_started(self.svc, session_id, key_id, &idem.key);
            if let Some(t) = self.sessions.core_of(self.catalog, session_id).turn_mut() {
                t.idem = Some(idem);
            }
        }
        self.with_core(session_id, |core, world, _| {
            core.start_chat(&message, &takeover, world)
        });
    }

    /// A `session.compact` holds the gate (spec 07 §4.2 steps 5–8),
    /// optionally retiring an expired pause first.
    fn acquire_compaction(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        prompt: Option<String>,
        reclaimed: Option<Pause>,
    ) {
        let mode = Mode::Compaction(Box::default());
        self.hold_gate(conn, session_id, key_id, mode);
        if let Some(p) = &reclaimed {
            // Logged after the caller attached: it is streamed to it. A
            // cancelled pause logged its abandonment at the cancel (found
            // by sim seed 514: a compaction logged a second one).
            if !p.cancelled {
                let fanout = self.sessions.streams_mut(session_id);
                self.svc.log_abandoned(fanout, session_id, &p.owner);
            }
        }
        self.with_core(session_id, |core, world, _| {
            core.start_compaction(prompt, reclaimed.as_ref(), world)
        });
    }

    /// Calls into `session_id`'s core with the world it reads, then
    /// performs every effect it queued. `None` when the session has no core.
    pub(crate) fn with_core<R>(
        &mut self,
        session_id: &SessionId,
        f: impl FnOnce(&mut SessionCore, &dyn World, crate::MonoMs) -> R,
    ) -> Option<R> {
        let r = self.core_step(session_id, f)?;
        self.run_effects(session_id);
        Some(r)
    }

    /// The history a turn's [`crate::session_core::Effect::LoadHistory`]
    /// asked for was read.
    pub(crate) fn on_turn_history(
        &mut self,
        turn_id: TurnId,
        result: Result<HistoryLoad, ReadError>,
    ) {
        let Some(session_id) = self.routes.turn_session(turn_id).cloned() else {
            return;
        };
        let loaded = result.map(|load| {
            let history = crate::history_load::history_text(&load);
            (history, load.newest_usage.flatten())
        });
        self.with_core(&session_id, |core, world, _| {
            core.history_loaded(loaded, world)
        });
    }

    /// Every provider call of `session_id` stops (its turn was cancelled
    /// or the session closed). A streamed one's connection is closed, so
    /// its slot in the provider limits is free at once; an unstreamed one
    /// runs to its end and keeps its slot until its (ignored) reply.
    /// Attempts still waiting for a slot or a retry leave their queue.
    pub(crate) fn abort_calls(&mut self, session_id: &SessionId) {
        let now = self.svc.now.mono;
        for (call, streamed) in self.routes.calls.remove_session(session_id) {
            if streamed {
                self.provider_limits.done(now, call, None);
            }
            self.svc
                .outputs
                .push_back(crate::Output::AbortProvider(call));
        }
        self.provider_limits.leave(now, session_id);
    }

    /// Body bytes of a streamed call, for the turn that made it.
    pub(crate) fn on_provider_chunk(&mut self, call: crate::CallId, bytes: &[u8]) {
        let Some(session_id) = self.routes.calls.session(call).cloned() else {
            return;
        };
        let rearm = self.with_core(&session_id, |core, world, now| {
            core.on_chunk(call, bytes, world, now)
        });
        if let Some(Some(Some(at))) = rearm {
            self.routes.calls.rearm(call, at);
        }
    }

    /// Streamed calls whose watchdog check is due: each core judges its
    /// own, and arms the next check while the stream lives.
    pub(crate) fn check_provider_streams(&mut self) {
        for call in self.routes.calls.due(self.svc.now.mono) {
            let Some(session_id) = self.routes.calls.session(call).cloned() else {
                continue;
            };
            let next = self.with_core(&session_id, |core, world, now| {
                core.stream_check(call, world, now)
            });
            if let Some(Some(at)) = next {
                self.routes.calls.rearm(call, at);
            }
        }
    }

    /// A provider reply, for the turn that made the call. An advised
    /// instant becomes a delay against the engine's wall clock here.
    pub(crate) fn on_provider_done(&mut self, call: crate::CallId, reply: crate::ProviderReply) {
        let Some(session_id) = self.routes.calls.remove(call) else {
            return self.provider_limits.done(self.svc.now.mono, call, None);
        };
        let mut reply = reply;
        if let crate::ProviderReply::Http { advice, .. } = &mut reply {
            if let Some(ms) = advice.delay_ms(self.svc.now.unix.0) {
                *advice = proto::provider::retry::RetryAdvice::AfterMs(ms);
            }
        }
        let taken = self.with_core(&session_id, |core, world, now| {
            core.on_reply(call, reply, world, now)
        });
        if taken != Some(true) {
            self.svc.telemetry.attempt_end(call, false);
        }
        // Its slot is free (the core's fact settled it, with its usage, if
        // the turn still waited).
        self.provider_limits.done(self.svc.now.mono, call, None);
    }

    /// Routes what the provider limits decided: a waiting attempt leaves,
    /// or fails for having waited too long.
    pub(crate) fn route_limit_notices(&mut self) {
        use crate::provider_limits::Notice;
        while let Some(n) = self.provider_limits.poll_notice() {
            match n {
                Notice::Go { call, session } => {
                    let taken = self.with_core(&session, |c, _, _| c.admitted(call));
                    if taken != Some(true) {
                        self.provider_limits.done(self.svc.now.mono, call, None);
                    }
                }
                Notice::Expired {
                    call,
                    session,
                    waited_ms,
                } => {
                    self.with_core(&session, |c, w, now| {
                        c.admission_expired(call, waited_ms, w, now)
                    });
                }
            }
        }
    }

    /// An MCP call finished: the turn that made it goes on.
    pub(crate) fn on_mcp_call_done(
        &mut self,
        token: crate::mcp::CallToken,
        outcome: proto::mcp::CallOutcome,
    ) {
        let Some((session_id, turn)) = self.routes.end_mcp_call(token) else {
            return;
        };
        if self.sessions.running_turn_id(&session_id) != Some(turn) {
            return;
        }
        self.with_core(&session_id, |core, world, now| {
            core.on_mcp_done(outcome, world, now)
        });
    }

    /// A turn's sandbox exec finished: the turn goes on.
    pub(crate) fn on_sandbox_tool_done(
        &mut self,
        turn: TurnId,
        index: usize,
        session_id: &SessionId,
        handle: &crate::sandbox::Handle,
        result: Result<crate::sandbox::ExecOutput, crate::sandbox::SandboxError>,
    ) {
        if self.sessions.running_turn_id(session_id) != Some(turn) {
            return;
        }
        let sandbox = (handle.image.as_str(), handle.container.as_str());
        self.with_core(session_id, |core, world, now| {
            core.on_exec_done(index, sandbox, result, world, now)
        });
    }

    pub(crate) fn set_state(&mut self, session_id: &SessionId, state: SessionState) {
        // Terminal states are final (spec 02 §3): a turn still running when
        // its session was closed must not move it to `error`.
        if (self.catalog.sessions.get(session_id)).is_some_and(|s| s.state != SessionState::Open) {
            return;
        }
        let at = self.svc.timestamp();
        if let Some(s) = self.catalog.sessions.get_mut(session_id) {
            let (creator, profile) = (s.creator.clone(), s.profile_id.clone());
            s.state = state;
            s.closed_at = Some(crate::time::Stamp::At(self.svc.now.unix));
            (self.catalog.quotas).session_closed(&creator, &profile);
        }
        self.svc.write(StoreWrite::SetSessionState {
            id: session_id.to_string(),
            state,
            closed_at: Some(at),
        });
        // A session in `error` runs no more turns, so nothing can use its
        // MCP servers: free their children now rather than at DELETE.
        if state == SessionState::Error {
            self.sessions.close_mcp(self.mcp, session_id);
            self.svc.telemetry.session_end(session_id, true);
        }
    }

    /// [`LiveCx::with_core`] without performing the effects: for answers
    /// given while they are being performed (the caller's loop goes on).
    pub(crate) fn core_step<R>(
        &mut self,
        session_id: &SessionId,
        f: impl FnOnce(&mut SessionCore, &dyn World, crate::MonoMs) -> R,
    ) -> Option<R> {
        let now = self.svc.now.mono;
        let LiveCx {
            sessions,
            catalog,
            svc,
            ..
        } = self;
        let (core, mcp, sandbox) = sessions.core_and_parts(session_id)?;
        let world = world::EngineWorld {
            session_id,
            catalog,
            config: &svc.config,
            mcp,
            sandbox,
        };
        Some(f(core, &world, now))
    }
}

impl Services {
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

    pub(crate) fn log_abandoned(
        &mut self,
        fanout: crate::streams::Fanout<'_>,
        session_id: &str,
        owner: &str,
    ) {
        let payload = json!({"reason": "driver_turn_abandoned", "owner_client_key_id": owner});
        self.append_event(
            fanout,
            session_id,
            Some(owner),
            EventType::SessionError,
            payload,
        );
    }

    /// Feeds a history load the answer to its last read: asks for the next
    /// one (and returns `None`) or returns the outcome.
    pub(crate) fn continue_history_load(
        &mut self,
        loader: HistoryLoader,
        result: Result<ReadResult, ReadError>,
        again: impl FnOnce(HistoryLoader) -> PendingRead,
    ) -> Option<Result<HistoryLoad, ReadError>> {
        match loader.advance(result) {
            Progress::Read(loader, read) => {
                self.read(read, again(loader));
                None
            }
            Progress::Done(load) => Some(Ok(load)),
            Progress::Failed(e) => Some(Err(e)),
        }
    }
}
