//! Performing what a session core asks ([`Effect`]), in order: events
//! appended and published, provider, MCP and sandbox calls sent, answers
//! given to the core, streams answered, the gate parked or passed on.

use proto::jsonrpc::codes;
use proto::wire::json;
use serde_json::json;

use super::{Mode, UNAVAILABLE_TEXT};
use crate::conn::{LiveRead, PendingRead};
use crate::history_load::HistoryLoader;
use crate::ids::SessionId;
use crate::live::LiveCx;
use crate::services::Services;
use crate::session_core::{Effect, Ending, Fact, Log, Refusal, TurnLoop};
use crate::store::SessionState;
use crate::telemetry::{ToolChild, TurnEnd};
use crate::ConnId;
use crate::{Output, ProviderCall};

impl LiveCx<'_> {
    /// Performs `session_id`'s queued effects until none is left (an
    /// effect's answer may queue more, which come first).
    pub(crate) fn run_effects(&mut self, session_id: &SessionId) {
        while let Some(effect) = self
            .sessions
            .core_mut(session_id)
            .and_then(|c| c.poll_effect())
        {
            self.perform(session_id, effect);
        }
    }

    fn perform(&mut self, session_id: &SessionId, effect: Effect) {
        match effect {
            Effect::Log(log) => self.perform_log(session_id, log),
            Effect::SessionError => self.set_state(session_id, SessionState::Error),
            Effect::LoadHistory => {
                let Some(turn) = self.sessions.running_turn_id(session_id) else {
                    return;
                };
                let (loader, read) = HistoryLoader::start(session_id);
                self.svc.read(
                    read,
                    PendingRead::Live(LiveRead::TurnHistory { turn, loader }),
                );
            }
            Effect::RestoreMcp => {
                let Some(turn) = self.sessions.running_turn_id(session_id) else {
                    return;
                };
                if !self.restore_mcp(session_id, turn) {
                    self.core_step(session_id, |c, w, _| c.mcp_ready(w));
                }
            }
            Effect::Call(call) => self.perform_call(session_id, *call),
            Effect::Admit(admission) => self.perform_admit(session_id, admission),
            Effect::CallMcp {
                tool_use_id,
                tool,
                input,
            } => {
                let Some(turn) = self.sessions.running_turn_id(session_id) else {
                    return;
                };
                let session = session_id.clone();
                let token = self.routes.start_mcp_call(session, turn);
                let now = self.svc.now.mono;
                let hub = &mut *self.mcp;
                (self.sessions)
                    .with_mcp(session_id, |set| set.call(hub, &tool, &input, token, now));
                if self.svc.telemetry.enabled() {
                    let set = self.sessions.mcp(session_id);
                    let server = set.and_then(|s| s.route(&tool)).unwrap_or("");
                    let child = ToolChild::Mcp { server };
                    self.svc
                        .telemetry
                        .tool_child_begin(turn, &tool_use_id, child);
                }
            }
            Effect::Exec {
                index,
                tool_use_id,
                command,
            } => {
                let Some(turn) = self.sessions.running_turn_id(session_id) else {
                    return;
                };
                let requester = crate::sandbox::Requester::Turn { turn, index };
                let now = self.svc.now.mono;
                let hub = &mut *self.sandbox;
                if let Some(b) = self.sessions.sandbox_mut(session_id) {
                    b.exec(hub, &command, requester, now);
                }
                self.svc
                    .telemetry
                    .tool_child_begin(turn, &tool_use_id, ToolChild::Sandbox);
            }
            Effect::Subagent {
                tool_use_id,
                name,
                input,
            } => {
                let Some((turn, key_id)) = self.sessions.running_turn(session_id) else {
                    return;
                };
                let answer = self.sandbox_cx().subagent_tool(
                    session_id,
                    (turn, &key_id),
                    &tool_use_id,
                    &name,
                    &input,
                );
                self.core_step(session_id, |c, w, now| c.subagent_answered(answer, w, now));
            }
            Effect::SteerApplied { conn, event_id } => {
                let body = json!({"steered": true, "event_id": event_id});
                self.svc.terminal_result(conn, &json::text(&body));
            }
            Effect::SteerRetired { conn, why } => {
                let msg = format!("steer_rejected: not applied: {why}");
                self.svc.terminal_error(conn, codes::STEER_REJECTED, &msg);
            }
            Effect::HistoryRebuilt => self.sessions.history_built(session_id),
            Effect::Deltas(batch) => {
                let (limits, now) = (self.svc.delta_limits(), self.svc.now.mono);
                let fanout = self.sessions.fanout(session_id);
                let out = (self.svc.streams).deltas(&fanout, session_id, &batch, limits, now);
                for (conn, bytes) in out {
                    self.svc.send_ungated(conn, bytes);
                }
            }
            Effect::DeltasEnded { request, reason } => {
                let fanout = self.sessions.fanout(session_id);
                self.svc.deltas_ended(&fanout, session_id, &request, reason);
            }
            Effect::AbortCall(call) => {
                self.routes.calls.remove(call);
                self.svc.outputs.push_back(Output::AbortProvider(call));
            }
            Effect::Fact(fact) => self.perform_fact(session_id, fact),
            Effect::End(ending) => self.end_turn(session_id, ending),
        }
    }

    /// Appends the event for the turn's driver, its own input unechoed on
    /// its streams, and tells the core.
    fn perform_log(&mut self, session_id: &SessionId, log: Log) {
        let Some(t) = self.sessions.core(session_id).and_then(|c| c.turn()) else {
            return;
        };
        let key_id = t.key_id.clone();
        if log.quiet {
            self.svc.quiet = t.streams();
        }
        if let Some(bytes) = log.grew {
            self.sessions.history_grew(session_id, bytes);
        }
        let fanout = self.sessions.streams_mut(session_id);
        let ev =
            (self.svc).append_event_text(fanout, session_id, Some(&key_id), log.event, log.payload);
        self.svc.quiet.clear();
        if let Some(core) = self.sessions.core_mut(session_id) {
            core.logged(log.tag, &ev);
        }
    }

    fn perform_call(&mut self, session_id: &SessionId, call: crate::session_core::Call) {
        let Some(t) = self.sessions.core(session_id).and_then(|c| c.turn()) else {
            return;
        };
        let (turn, conn) = (t.id, t.conn);
        let id = match call.ticket {
            Some(id) => id,
            None => self.routes.new_call(),
        };
        let now = self.svc.now.mono;
        let check = (self.sessions.core_mut(session_id)).and_then(|core| core.call_sent(id, now));
        (self.routes.calls).insert(id, session_id.clone(), check);
        if self.svc.telemetry.enabled() {
            (self.svc.telemetry).attempt_begin(id, turn, conn, &call.entry, call.attempt);
        }
        self.svc
            .outputs
            .push_back(Output::CallProvider(ProviderCall {
                id,
                url: call.url,
                headers: call.headers,
                auth_template: call.entry.auth_template,
                auth: call.auth,
                body: call.body,
                timeout_ms: self.svc.config.provider_timeout_ms,
                stream: call.entry.stream.is_some(),
            }));
    }

    /// An attempt asks for its provider slot (a limited entry, or a
    /// retry's wait): it gets its call id now, and leaves now or when the
    /// limits say ([`LiveCx::route_limit_notices`]). A backoff's jitter is
    /// drawn from the engine's entropy.
    fn perform_admit(&mut self, session_id: &SessionId, a: crate::session_core::Admission) {
        use crate::provider_limits::{Ask, Verdict};
        use crate::session_core::retry::Delay;
        let id = self.routes.new_call();
        let now = self.svc.now.mono;
        let wait = a.delay.map(|d| match d {
            Delay::Advised(_) if self.svc.faults.retry_without_wait() => 0,
            Delay::Advised(ms) => ms,
            Delay::Backoff { .. } => d.resolve(u64::from_le_bytes(self.svc.random_bytes::<8>())),
        });
        if a.delay.is_some() {
            self.provider_limits.note_retry(&a.entry);
        }
        let ask = Ask {
            call: id,
            session: session_id.clone(),
            entry: &a.entry,
            tokens: a.tokens,
            not_before: wait.map(|ms| now + ms),
        };
        let go = self.provider_limits.ask(now, ask) == Verdict::Go;
        self.core_step(session_id, |c, _, _| c.admission(id, go));
    }

    fn perform_fact(&mut self, session_id: &SessionId, fact: Fact) {
        let turn = self.sessions.running_turn_id(session_id);
        match fact {
            Fact::ProviderReturned {
                call,
                kind,
                ok,
                latency_ms,
                input_tokens,
            } => {
                self.svc.metrics.provider_returned(kind, ok, latency_ms);
                (self.provider_limits).done(self.svc.now.mono, call, input_tokens);
                self.svc.telemetry.attempt_end(call, ok);
            }
            Fact::ToolCalled {
                tool_use_id,
                name,
                dispatch,
                input_bytes,
            } => {
                self.svc.metrics.tool_called(dispatch);
                if let Some(turn) = turn.filter(|_| self.svc.telemetry.enabled()) {
                    (self.svc.telemetry).dispatch_begin(
                        turn,
                        &tool_use_id,
                        &name,
                        dispatch,
                        input_bytes,
                    );
                }
            }
            Fact::ToolDone {
                tool_use_id,
                dispatch,
                is_error,
                output_bytes,
                latency_ms,
            } => {
                if let Some(turn) = turn.filter(|_| self.svc.telemetry.enabled()) {
                    let result = Some((is_error, output_bytes));
                    (self.svc.telemetry).dispatch_end(turn, &tool_use_id, result);
                }
                if let Some(latency_ms) = latency_ms {
                    self.svc.metrics.tool_finished(dispatch, latency_ms);
                }
            }
            Fact::Tokens {
                entry,
                model,
                tokens,
                compaction,
            } => self.account(session_id, entry, model, tokens, compaction),
            Fact::ToolChildEnded {
                tool_use_id,
                ok,
                exit_code,
            } => {
                if let Some(turn) = turn {
                    (self.svc.telemetry).tool_child_end(turn, &tool_use_id, ok, exit_code);
                }
            }
        }
    }

    /// A successful attempt's tokens: counted, and kept durably in the
    /// batch of its `provider.response` (the event just appended).
    fn account(
        &mut self,
        session_id: &SessionId,
        entry: String,
        model: String,
        tokens: proto::provider::Tokens,
        compaction: bool,
    ) {
        self.svc.metrics.provider_tokens(&entry, &tokens);
        let Some(t) = self.sessions.core(session_id).and_then(|c| c.turn()) else {
            return;
        };
        let (Some(&event_seq), Some(&turn_seq), Some(turn_event_id)) = (
            t.event_seqs.last(),
            t.event_seqs.first(),
            t.first_event_id.clone(),
        ) else {
            return;
        };
        let profile_id = (self.catalog.sessions.get(session_id))
            .map_or_else(String::new, |s| s.profile_id.to_string());
        let row = crate::store::UsageRow {
            session_id: session_id.to_string(),
            event_seq,
            turn_seq,
            turn_event_id,
            client_key_id: t.key_id.to_string(),
            profile_id,
            provider: entry,
            model,
            compaction,
            created_ms: self.svc.now.unix.0,
            tokens,
        };
        let billed = crate::quotas::billed(&row.tokens);
        (self.catalog.quotas).credit(
            &row.client_key_id,
            &row.profile_id,
            billed,
            self.svc.now.unix,
        );
        self.svc.write(crate::store::StoreWrite::InsertUsage(row));
    }

    /// The turn is over: its answer goes to its streams (and its
    /// idempotency key), then the gate is parked on a pause or passed on.
    fn end_turn(&mut self, session_id: &SessionId, ending: Ending) {
        let Some(mut t) = self.sessions.take_turn(self.routes, session_id) else {
            return;
        };
        use crate::metrics::TurnOutcome;
        let (message, pause, outcome, end) = match ending {
            Ending::Completed(m) => (m, None, TurnOutcome::Completed, TurnEnd::Completed),
            Ending::Paused(m, p) => (m, Some(p), TurnOutcome::Paused, TurnEnd::Paused),
            Ending::ProvidersFailed => {
                let m = json!({
                    "role": "assistant",
                    "content": [{"type": "text", "text": UNAVAILABLE_TEXT}],
                });
                (
                    json::text(&m),
                    None,
                    TurnOutcome::ProvidersFailed,
                    TurnEnd::ProvidersFailed,
                )
            }
            Ending::Failed { code, message } => {
                return self.fail_turn(session_id, t, code, &message);
            }
            Ending::Compacted(completed) => {
                if let Some(conn) = t.conn {
                    match completed {
                        Some(json) => self.svc.terminal_result(conn, &json),
                        None => self.svc.terminal_error(
                            conn,
                            codes::APPLICATION_ERROR,
                            "compaction failed",
                        ),
                    }
                }
                return self.release_gate(session_id);
            }
        };
        if matches!(t.mode, Mode::Chat) {
            self.svc.metrics.turn_ended(outcome);
            self.svc.telemetry.turn_end(t.id, session_id, end);
        }
        let why = match pause {
            Some(_) => "the turn paused for client tools before its next provider call",
            None => "the turn ended before its next provider call",
        };
        self.svc.retire_steers(std::mem::take(&mut t.steers), why);
        self.sessions.idem_finished(self.svc, session_id, &t, || {
            crate::idempotency::result_outcome(&message, &t.event_seqs)
        });
        let streams = t.streams();
        if !streams.is_empty() {
            let result = crate::respond::turn_result_parts(&message, &t.events);
            for conn in streams {
                self.svc.terminal_result_parts(conn, &result);
            }
        }
        let Some(pause) = pause else {
            return self.release_gate(session_id);
        };
        if self.svc.faults.release_gate_on_pause() {
            return self.release_gate(session_id);
        }
        // A compaction never waits on a pause (spec 07 §4.2 step 4).
        let refused = match self.sessions.core_mut(session_id) {
            Some(core) => core.gate.park(pause),
            None => Vec::new(),
        };
        for w in refused {
            self.svc.refuse(w, Refusal::TurnInProgress);
        }
    }

    /// Error terminal for a request holding the gate (nothing else recorded).
    fn fail_turn(
        &mut self,
        session_id: &SessionId,
        mut t: Box<TurnLoop>,
        code: i64,
        message: &str,
    ) {
        let why = crate::session_core::steer::WHY_FAILED;
        self.svc.retire_steers(std::mem::take(&mut t.steers), why);
        (self.svc.telemetry).turn_end(t.id, session_id, TurnEnd::Failed);
        self.sessions.idem_finished(self.svc, session_id, &t, || {
            json!({"error": {"code": code, "message": message}}).to_string()
        });
        for conn in t.streams() {
            self.svc.terminal_error(conn, code, message);
        }
        self.release_gate(session_id);
    }

    /// Extension (`reconnect = true` servers): a session that existed
    /// before this process started has no MCP connections; its first chat
    /// turn connects the profile's reconnecting servers before the first
    /// provider call. Returns whether turn `turn_id` now waits for them.
    pub(crate) fn restore_mcp(
        &mut self,
        session_id: &SessionId,
        turn_id: crate::turn::TurnId,
    ) -> bool {
        let Some(session) = self.catalog.sessions.get(session_id.as_str()) else {
            return false;
        };
        // A session created by this process connected them at open.
        if session.mcp_checked {
            return false;
        }
        let profile_id = session.profile_id.clone();
        if let Some(s) = self.catalog.sessions.get_mut(session_id.as_str()) {
            s.mcp_checked = true;
        }
        let names = self
            .catalog
            .live_profile(&profile_id)
            .map(|p| p.row.mcp_servers.clone())
            .unwrap_or_default();
        let servers: Vec<crate::mcp::McpServerSpec> = names
            .iter()
            .filter_map(|n| self.svc.config.mcp_servers.iter().find(|s| &s.name == n))
            .filter(|s| s.reconnect)
            .cloned()
            .collect();
        if servers.is_empty() || self.sessions.has_mcp(session_id) {
            return false;
        }
        self.sessions.await_mcp(session_id.clone(), turn_id);
        let now = self.svc.now.mono;
        (self.sessions).connect_mcp(self.mcp, session_id, servers, now);
        true
    }
}

impl Services {
    /// The windows of delta delivery (extension `turn.deltas`).
    pub(crate) fn delta_limits(&self) -> crate::streams::DeltaLimits {
        crate::streams::DeltaLimits {
            window: self.config.delta_window_bytes,
            gapless_window: self.config.subscriber_window_bytes,
        }
    }

    /// A streaming attempt's deltas end: held text goes out (completed) or
    /// the discard marker does (failed, cancelled).
    pub(crate) fn deltas_ended(
        &mut self,
        fanout: &[ConnId],
        session_id: &str,
        request: &str,
        reason: Option<proto::jsonrpc::DiscardReason>,
    ) {
        let now = self.now.mono;
        for (conn, bytes) in (self.streams).deltas_ended(fanout, session_id, request, reason, now) {
            self.send_ungated(conn, bytes);
        }
    }

    /// Waiting steers that will never be applied are answered.
    pub(crate) fn retire_steers(&mut self, steers: Vec<crate::session_core::Steer>, why: &str) {
        for steer in steers {
            let msg = format!("steer_rejected: not applied: {why}");
            self.terminal_error(steer.conn, codes::STEER_REJECTED, &msg);
        }
    }
}
