//! The invariants. Each `inv_*` name below is documented in
//! docs/simulation.md; a violation carries that name, the step and the
//! virtual time at which it was detected, and a human-readable detail.
//!
//! Three vantage points are used:
//! - the *emitted* log: every `StoreWrite::InsertEvent` in the order the
//!   engine emitted it (what the engine decided), checked as it appears;
//! - the *committed* store: what the simulated SQLite driver made durable;
//! - the *wire*: bytes the simulated clients actually parsed.

use std::collections::{BTreeMap, BTreeSet};

use engine::store::{EventRow, SessionState, StoreWrite};
use serde_json::Value;

pub const INV_SINGLE_GATE_HOLDER: &str = "inv_single_gate_holder";
pub const INV_PAUSED_OWNER_ONLY: &str = "inv_paused_owner_only";
pub const INV_TURN_EVENTS_ATTRIBUTED: &str = "inv_turn_events_attributed";
pub const INV_ABANDON_AFTER_DEADLINE: &str = "inv_abandon_after_deadline";
pub const INV_FIFO_ADMISSION: &str = "inv_fifo_admission";
pub const INV_TOOL_USE_ANSWERED: &str = "inv_tool_use_answered";
pub const INV_ROLE_ALTERNATION: &str = "inv_role_alternation";
pub const INV_STORE_SEQ_GAPLESS: &str = "inv_store_seq_gapless";
pub const INV_COMMITTED_BEFORE_WIRE: &str = "inv_committed_before_wire";
pub const INV_NO_ACK_LOST: &str = "inv_no_ack_lost";
pub const INV_STREAM_EXACTLY_ONCE: &str = "inv_stream_exactly_once";
pub const INV_TURN_STREAM: &str = "inv_turn_stream";
pub const INV_EVENTS_PAGE: &str = "inv_events_page";
pub const INV_WIRE_WELL_FORMED: &str = "inv_wire_well_formed";
pub const INV_LIVENESS: &str = "inv_liveness";
pub const INV_ENGINE_PANIC: &str = "inv_engine_no_panic";
pub const INV_SESSION_STATE_MACHINE: &str = "inv_session_state_machine";
pub const INV_TERMINAL_SESSION_QUIET: &str = "inv_terminal_session_quiet";
pub const INV_AUTH_CONSISTENT: &str = "inv_auth_consistent";
pub const INV_SHUTDOWN_NO_ADMISSION: &str = "inv_shutdown_no_admission";
// MCP (checked by `sim/src/mcp.rs`).
pub const INV_MCP_ONE_RESULT: &str = "inv_mcp_one_result";
pub const INV_MCP_CALL_BOUNDED: &str = "inv_mcp_call_bounded";
pub const INV_MCP_TEARDOWN: &str = "inv_mcp_teardown";
pub const INV_MCP_ONE_IN_FLIGHT: &str = "inv_mcp_one_in_flight";
pub const INV_MCP_PROTOCOL: &str = "inv_mcp_protocol";
pub const INV_MCP_ROUTING: &str = "inv_mcp_routing";
pub const INV_MCP_NO_REPLAY: &str = "inv_mcp_no_replay";
// Remote sandboxes and subagents (checked by `sim/src/sandbox.rs`).
pub const INV_SANDBOX_ONE_PER_SESSION: &str = "inv_sandbox_one_per_session";
pub const INV_SANDBOX_NO_DISPATCH_AFTER_REMOVE: &str = "inv_sandbox_no_dispatch_after_remove";
pub const INV_SANDBOX_EXEC_BOUNDED: &str = "inv_sandbox_exec_bounded";
pub const INV_SANDBOX_STOPPED_AT_CLOSE: &str = "inv_sandbox_stopped_at_close";
pub const INV_SUBAGENT_ONE_TERMINAL: &str = "inv_subagent_one_terminal";
// Opt-in extensions (checked by `sim/src/ext.rs` and `world/ext.rs`).
pub const INV_IDEMPOTENCY_ONE_TURN: &str = "inv_idempotency_one_turn";
pub const INV_NO_ORPHAN_TOOL_USE: &str = "inv_no_orphan_tool_use";
pub const INV_GAPLESS_COMPLETE: &str = "inv_gapless_complete";
pub const INV_EXTENSION_ANSWERS: &str = "inv_extension_answers";
pub const INV_STEER_DELIVERED: &str = "inv_steer_delivered";
// Forks, exports and imports (checked by `world/transfer.rs`).
pub const INV_FORK_COMPLETE_POINT: &str = "inv_fork_complete_point";
pub const INV_COPY_FAITHFUL: &str = "inv_copy_faithful";
pub const INV_FORK_PARENT_UNCHANGED: &str = "inv_fork_parent_unchanged";
/// A streamed reply logs what the same reply unstreamed logs.
pub const INV_STREAM_ORACLE: &str = "inv_stream_oracle";
/// Deltas reach only opted-in streams, before their terminal frame, and
/// add up to a prefix of each block's final text.
pub const INV_DELTAS: &str = "inv_deltas";
/// A cancelled turn's streamed call is closed at once.
pub const INV_STREAM_CLOSED_AFTER_CANCEL: &str = "inv_stream_closed_after_cancel";
// Provider traffic (checked by `sim/src/traffic/oracle.rs`).
/// No retry leaves before the wait its failure advised (or half its backoff).
pub const INV_RETRY_NOT_EARLY: &str = "inv_retry_not_early";
/// Retries follow the entry's policy and are logged as the spec's attempts.
pub const INV_RETRY_POLICY: &str = "inv_retry_policy";
/// Never more calls admitted to an entry than its `max_concurrent`.
pub const INV_PROVIDER_CONCURRENCY: &str = "inv_provider_concurrency";
/// Admissions to an entry stay within its `requests_per_minute` bucket.
pub const INV_PROVIDER_RPM: &str = "inv_provider_rpm";
/// No call waits for a slot past `max_wait_ms`, nor while a slot is free.
pub const INV_SLOT_WAIT_BOUNDED: &str = "inv_slot_wait_bounded";
/// An entry's waiting calls are admitted in the order they joined its queue.
pub const INV_SLOT_FIFO: &str = "inv_slot_fifo";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub step: u64,
    pub time_ms: u64,
    pub detail: String,
}

/// The gate as reconstructed from one session's emitted events.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    Free,
    Running {
        key: String,
    },
    Paused {
        key: String,
        /// Emission time (virtual mono ms) of the pausing message.
        at_ms: u64,
        tool_ids: Vec<String>,
    },
    Compacting {
        key: String,
    },
    /// The session was closed; `turn` is the key whose turn (or
    /// compaction) was still running at that moment.
    Closed {
        turn: Option<String>,
    },
}

#[derive(Default)]
pub struct Checker {
    pub violations: Vec<Violation>,
    pub step: u64,
    pub now_ms: u64,
    pub turn_timeout_ms: u64,
    /// Committed events: id → seq, and per-session seqs in order.
    pub ids: BTreeMap<String, u64>,
    pub by_session: BTreeMap<String, Vec<u64>>,
    pub max_seq: u64,
    /// Gate per session, from the emitted log (reset by a restart).
    pub gates: BTreeMap<String, Gate>,
    /// Every event id a client has seen on the wire.
    pub seen_on_wire: BTreeSet<String>,
    /// Session ids acknowledged to clients (201 responses).
    pub acked_sessions: BTreeSet<String>,
    /// Gate per session, from the committed log (what a restart recovers).
    pub committed_gates: BTreeMap<String, Gate>,
    /// A graceful shutdown is in progress (no new turn may start).
    pub shutting_down: bool,
    /// Suppresses reports (replaying the committed log).
    pub silent: bool,
    /// Session state as emitted (`InsertSession` / `SetSessionState`).
    pub states: BTreeMap<String, SessionState>,
    /// The input being handled is a `session.cancelTurn` of this (session,
    /// key) that answered `paused`: its abandonment is not a timeout.
    pub cancel_pause: Option<(String, String)>,
    /// Set when that abandonment was emitted.
    pub cancel_pause_seen: bool,
    /// Running turns cancelled at the emitted position `after_seq`, not yet
    /// applied to `committed_gates`: `(session, key, after_seq)`.
    pub pending_cancels: Vec<(String, String, u64)>,
    /// Nonces of `session.steerTurn` messages.
    pub steer_nonces: BTreeSet<String>,
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The payload, parsed only for the event types whose members the checks
/// read (parsing every payload dominates a debug-build run otherwise).
fn parse_payload(row: &EventRow, provider_request: bool) -> Value {
    match row.event_type.as_str() {
        "provider.request" if provider_request => {
            serde_json::from_str(&row.payload).unwrap_or(Value::Null)
        }
        "server.message.send" | "session.error" => {
            serde_json::from_str(&row.payload).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    }
}

fn is_tool_result(b: &Value) -> bool {
    b.get("type").and_then(Value::as_str) == Some("tool_result")
}

/// `tool_use` blocks marked for client dispatch in an assistant message.
pub fn client_tool_ids(content: &Value) -> Vec<String> {
    content
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|b| s(b, "type") == "tool_use" && s(b, "dispatch") == "client")
                .map(|b| s(b, "id").to_string())
                .collect()
        })
        .unwrap_or_default()
}

impl Checker {
    pub fn fail(&mut self, invariant: &'static str, detail: String) {
        if self.silent {
            return;
        }
        self.violations.push(Violation {
            invariant,
            step: self.step,
            time_ms: self.now_ms,
            detail,
        });
    }

    // ---- emitted log ------------------------------------------------------

    /// Every event the engine emits, in emission order.
    pub fn on_emit(&mut self, row: &EventRow) {
        // An applied steer is logged as `client.message.send` too, inside
        // a turn admitted earlier.
        let steer =
            || crate::ext::nonce_in(&row.payload).is_some_and(|n| self.steer_nonces.contains(n));
        if self.shutting_down
            && ((row.event_type == "client.message.send" && !steer())
                || (row.event_type == "session.compaction.started"
                    && row.payload.contains("\"client\"")))
        {
            self.fail(
                INV_SHUTDOWN_NO_ADMISSION,
                format!(
                    "session {}: {} {} admitted during graceful shutdown",
                    row.session_id, row.event_type, row.id
                ),
            );
        }
        let payload = parse_payload(row, true);
        self.gate_step(row, &payload);
        if row.event_type == "provider.request" {
            self.check_provider_request(row, &payload);
        }
    }

    /// Advances the gate model of `row`'s session (checks included unless
    /// `silent`).
    fn gate_step(&mut self, row: &EventRow, payload: &Value) {
        let key = row.client_key_id.clone().unwrap_or_default();
        let sid = row.session_id.clone();
        let gate = self.gates.get(&sid).cloned().unwrap_or(Gate::Free);
        let compaction = row.payload.contains("\"purpose\":\"compaction\"");
        let ty = row.event_type.as_str();
        // The close-time teardown (spec 01 §4.3 step 2, spec 02 attribution
        // table) follows `session.close`: the sandbox stop and its outcome,
        // and the cancels of running remote subagents.
        let teardown = matches!(ty, "session.sandbox.stop" | "session.sandbox.stopped")
            || (ty == "session.sandbox.error" && row.payload.contains("\"phase\":\"stop\""))
            || (ty == "session.subagent.cancelled"
                && row.payload.contains("\"reason\":\"session_close\""));
        if matches!(gate, Gate::Closed { .. }) && teardown {
            return;
        }
        if let Gate::Closed { turn } = &gate {
            let running = match turn {
                Some(k) => format!(" (the turn of {k} was running at close)"),
                None => String::new(),
            };
            self.fail(
                INV_TERMINAL_SESSION_QUIET,
                format!(
                    "session {sid}: {ty} {} by {key} appended after session.close{running}",
                    row.id
                ),
            );
            return;
        }
        let next = match ty {
            "client.message.send" => {
                match &gate {
                    Gate::Running { key: k } if *k != key => self.fail(
                        INV_SINGLE_GATE_HOLDER,
                        format!(
                            "session {sid}: client.message.send {} by {key} while the turn of {k} is running",
                            row.id
                        ),
                    ),
                    Gate::Paused { key: k, .. } if *k != key => self.fail(
                        INV_PAUSED_OWNER_ONLY,
                        format!(
                            "session {sid}: client.message.send {} by {key} continues the turn paused by {k} without driver_turn_abandoned",
                            row.id
                        ),
                    ),
                    _ => {}
                }
                Some(Gate::Running { key: key.clone() })
            }
            "provider.request" | "provider.response" | "tool.call" | "tool.result"
            | "mcp.request" | "mcp.response" | "sandbox.request" | "sandbox.response" => {
                let ok = match &gate {
                    Gate::Running { key: k } => *k == key,
                    Gate::Compacting { key: k } => *k == key,
                    _ => false,
                };
                if !ok {
                    self.fail(
                        INV_TURN_EVENTS_ATTRIBUTED,
                        format!(
                            "session {sid}: {ty} {} by {key} while the gate is {gate:?}",
                            row.id
                        ),
                    );
                }
                None
            }
            "server.message.send" => {
                let synthetic = payload.get("synthetic").is_some();
                match &gate {
                    Gate::Running { key: k } if *k == key && !synthetic && !compaction => {
                        let ids = client_tool_ids(&payload["content"]);
                        if ids.is_empty() {
                            Some(Gate::Free)
                        } else {
                            Some(Gate::Paused {
                                key: key.clone(),
                                at_ms: self.now_ms,
                                tool_ids: ids,
                            })
                        }
                    }
                    Gate::Compacting { key: k } if *k == key => None,
                    Gate::Free if synthetic => Some(Gate::Compacting { key: key.clone() }),
                    _ => {
                        self.fail(
                            INV_TURN_EVENTS_ATTRIBUTED,
                            format!(
                                "session {sid}: server.message.send {} by {key} while the gate is {gate:?}",
                                row.id
                            ),
                        );
                        None
                    }
                }
            }
            "session.error" => match s(payload, "reason") {
                "driver_turn_abandoned" => {
                    match &gate {
                        Gate::Paused { key: k, at_ms, .. } => {
                            if *k != key {
                                self.fail(
                                    INV_PAUSED_OWNER_ONLY,
                                    format!("session {sid}: driver_turn_abandoned {} names {key} but the pause belongs to {k}", row.id),
                                );
                            }
                            let waited = self.now_ms.saturating_sub(*at_ms);
                            // A cancel (extension `turn.cancel`) retires
                            // its own pause at once.
                            let cancel = self.cancel_pause.as_ref() == Some(&(sid.clone(), key.clone()));
                            if cancel {
                                self.cancel_pause_seen = true;
                            }
                            if waited < self.turn_timeout_ms && !cancel {
                                self.fail(
                                    INV_ABANDON_AFTER_DEADLINE,
                                    format!(
                                        "session {sid}: pause of {k} retired after {waited} ms < turn timeout {} ms ({})",
                                        self.turn_timeout_ms, row.id
                                    ),
                                );
                            }
                        }
                        other => self.fail(
                            INV_PAUSED_OWNER_ONLY,
                            format!("session {sid}: driver_turn_abandoned {} with no parked pause (gate {other:?})", row.id),
                        ),
                    }
                    Some(Gate::Free)
                }
                "provider_call_failed" => None,
                // Terminal errors end the turn (and the session).
                _ => Some(Gate::Free),
            },
            "session.compaction.started" => {
                if let Gate::Running { key: k } = &gate {
                    if *k != key {
                        self.fail(
                            INV_SINGLE_GATE_HOLDER,
                            format!("session {sid}: compaction by {key} starts while the turn of {k} is running"),
                        );
                    }
                }
                Some(Gate::Compacting { key: key.clone() })
            }
            "session.compaction.completed" => Some(Gate::Free),
            "session.close" => Some(Gate::Closed {
                turn: match &gate {
                    Gate::Running { key } | Gate::Compacting { key } => Some(key.clone()),
                    _ => None,
                },
            }),
            _ => None,
        };
        if let Some(g) = next {
            self.gates.insert(sid, g);
        }
    }

    /// Session rows as written: `open` → `closed` | `error` only, never out
    /// of a terminal state (spec 02 §3).
    pub fn on_emit_write(&mut self, w: &StoreWrite) {
        match w {
            StoreWrite::InsertSession(row) => {
                self.states.insert(row.id.clone(), row.state);
            }
            StoreWrite::SetSessionState { id, state, .. } => {
                let from = self.states.get(id).copied();
                if from != Some(SessionState::Open) || *state == SessionState::Open {
                    self.fail(
                        INV_SESSION_STATE_MACHINE,
                        format!("session {id}: state {from:?} -> {state:?}"),
                    );
                }
                self.states.insert(id.clone(), *state);
            }
            _ => {}
        }
    }

    /// `inv_role_alternation` and `inv_tool_use_answered` on the messages a
    /// provider call actually carries (Anthropic: the normalised list).
    fn check_provider_request(&mut self, row: &EventRow, payload: &Value) {
        if s(payload, "provider") != "anthropic" {
            return;
        }
        let Some(msgs) = payload.get("messages").and_then(Value::as_array) else {
            self.fail(
                INV_ROLE_ALTERNATION,
                format!("provider.request {} has no messages array", row.id),
            );
            return;
        };
        let roles: Vec<&str> = msgs.iter().map(|m| s(m, "role")).collect();
        let alternates = !roles.is_empty()
            && roles[0] == "user"
            && roles.windows(2).all(|w| w[0] != w[1])
            && roles.iter().all(|r| *r == "user" || *r == "assistant")
            && roles.last() == Some(&"user");
        if !alternates {
            self.fail(
                INV_ROLE_ALTERNATION,
                format!("provider.request {}: roles {roles:?}", row.id),
            );
        }
        let blocks = |m: &Value| -> Vec<Value> {
            match m.get("content") {
                Some(Value::Array(a)) => a.clone(),
                Some(Value::String(t)) => vec![serde_json::json!({"type":"text","text":t})],
                _ => Vec::new(),
            }
        };
        for (i, m) in msgs.iter().enumerate() {
            let content = blocks(m);
            if s(m, "role") == "assistant" {
                let uses: Vec<String> = content
                    .iter()
                    .filter(|b| s(b, "type") == "tool_use")
                    .map(|b| s(b, "id").to_string())
                    .collect();
                if uses.is_empty() {
                    continue;
                }
                let next = msgs.get(i + 1).map(blocks).unwrap_or_default();
                let mut results: Vec<String> = Vec::new();
                let mut after_other = false;
                let mut misplaced = false;
                for b in &next {
                    if is_tool_result(b) {
                        if after_other {
                            misplaced = true;
                        }
                        results.push(s(b, "tool_use_id").to_string());
                    } else {
                        after_other = true;
                    }
                }
                let mut problems = Vec::new();
                for u in &uses {
                    let n = results.iter().filter(|r| *r == u).count();
                    if n != 1 {
                        problems.push(format!("tool_use {u} answered {n} times"));
                    }
                }
                for r in &results {
                    if !uses.contains(r) {
                        problems.push(format!("tool_result for unknown id {r}"));
                    }
                }
                if misplaced {
                    problems.push("tool_result after other user content".to_string());
                }
                if problems.is_empty() {
                    continue;
                }
                let detail = format!(
                    "provider.request {} message {i}: {}",
                    row.id,
                    problems.join("; ")
                );
                self.fail(INV_TOOL_USE_ANSWERED, detail);
            } else if i == 0 || s(&msgs[i - 1], "role") != "assistant" {
                // A user message not preceded by an assistant tool_use turn
                // must not carry results.
                if let Some(r) = content.iter().find(|b| is_tool_result(b)) {
                    self.fail(
                        INV_TOOL_USE_ANSWERED,
                        format!(
                            "provider.request {} message {i}: orphan tool_result {}",
                            row.id,
                            s(r, "tool_use_id")
                        ),
                    );
                }
            } else {
                let prev_uses: Vec<String> = blocks(&msgs[i - 1])
                    .iter()
                    .filter(|b| s(b, "type") == "tool_use")
                    .map(|b| s(b, "id").to_string())
                    .collect();
                if prev_uses.is_empty() {
                    if let Some(r) = content.iter().find(|b| is_tool_result(b)) {
                        self.fail(
                            INV_TOOL_USE_ANSWERED,
                            format!(
                                "provider.request {} message {i}: orphan tool_result {}",
                                row.id,
                                s(r, "tool_use_id")
                            ),
                        );
                    }
                }
            }
        }
    }

    /// `session.cancelTurn` answered `running` for `key`'s turn (extension
    /// `turn.cancel`): nothing is logged for it, so the gate model is told.
    /// `after_seq`: the last event emitted before the cancel (the committed
    /// model frees the gate once the log has passed it).
    pub fn on_cancel_running(
        &mut self,
        sid: &str,
        key: &str,
        after_seq: u64,
    ) -> Result<(), String> {
        let gate = self.gates.get(sid).cloned().unwrap_or(Gate::Free);
        match &gate {
            Gate::Running { key: k } if k == key => {
                self.gates.insert(sid.to_string(), Gate::Free);
                self.pending_cancels
                    .push((sid.to_string(), key.to_string(), after_seq));
                Ok(())
            }
            other => Err(format!("the log shows the gate as {other:?}")),
        }
    }

    /// Applies the cancels the committed log has passed (before `row`).
    fn apply_committed_cancels(&mut self, row: &EventRow) {
        if self.pending_cancels.is_empty() {
            return;
        }
        let mut keep = Vec::new();
        for (sid, key, after) in std::mem::take(&mut self.pending_cancels) {
            if sid == row.session_id && row.seq > after {
                if let Some(Gate::Running { key: k }) = self.committed_gates.get(&sid) {
                    if *k == key {
                        self.committed_gates.insert(sid, Gate::Free);
                    }
                }
            } else {
                keep.push((sid, key, after));
            }
        }
        self.pending_cancels = keep;
    }

    /// A restart: running turns are gone; a pause whose message is the
    /// session's last committed message is recovered from the log with a
    /// fresh deadline (counted here from the restart, a lower bound).
    pub fn on_restart(&mut self) {
        // Cancelled running turns are gone anyway.
        self.pending_cancels.clear();
        let now = self.now_ms;
        self.gates = self
            .committed_gates
            .iter()
            .map(|(sid, g)| {
                let g = match g {
                    Gate::Paused { key, tool_ids, .. } => Gate::Paused {
                        key: key.clone(),
                        at_ms: now,
                        tool_ids: tool_ids.clone(),
                    },
                    Gate::Closed { .. } => Gate::Closed { turn: None },
                    _ => Gate::Free,
                };
                (sid.clone(), g)
            })
            .collect();
    }

    /// After a restart: every event a client saw and every session a client
    /// was told about is still in the store.
    pub fn check_acks(&mut self, sessions: &BTreeSet<String>) {
        let missing: Vec<String> = self
            .seen_on_wire
            .iter()
            .filter(|id| !self.ids.contains_key(*id))
            .cloned()
            .collect();
        for id in missing {
            self.fail(
                INV_NO_ACK_LOST,
                format!("event {id} was seen by a client but is not in the store after restart"),
            );
        }
        let lost: Vec<String> = self
            .acked_sessions
            .iter()
            .filter(|s| !sessions.contains(*s))
            .cloned()
            .collect();
        for sid in lost {
            self.fail(
                INV_NO_ACK_LOST,
                format!(
                    "session {sid} was acknowledged (201) but is not in the store after restart"
                ),
            );
        }
    }

    // ---- committed store ----------------------------------------------------

    /// Called for every event row right before the simulated driver commits
    /// it. Returns false when the row must not be applied (duplicate rowid).
    pub fn on_commit_event(&mut self, row: &EventRow) -> bool {
        if row.seq != self.max_seq + 1 {
            self.fail(
                INV_STORE_SEQ_GAPLESS,
                format!(
                    "event {} ({}) committed with seq {} but the store's last seq is {}",
                    row.id, row.event_type, row.seq, self.max_seq
                ),
            );
            if row.seq <= self.max_seq {
                return false;
            }
        }
        if self.ids.contains_key(&row.id) {
            self.fail(
                INV_STORE_SEQ_GAPLESS,
                format!("event id {} committed twice", row.id),
            );
            return false;
        }
        self.max_seq = row.seq;
        self.apply_committed_cancels(row);
        // Replay the committed log through the gate model, silently.
        std::mem::swap(&mut self.gates, &mut self.committed_gates);
        self.silent = true;
        let payload = parse_payload(row, false);
        self.gate_step(row, &payload);
        self.silent = false;
        std::mem::swap(&mut self.gates, &mut self.committed_gates);
        self.ids.insert(row.id.clone(), row.seq);
        self.by_session
            .entry(row.session_id.clone())
            .or_default()
            .push(row.seq);
        true
    }

    /// The committed seq of the session event right after `after` (0 = the
    /// session's first event).
    pub fn next_in_session(&self, session: &str, after: u64) -> Option<u64> {
        let v = self.by_session.get(session)?;
        let i = v.partition_point(|s| *s <= after);
        v.get(i).copied()
    }

    // ---- wire ------------------------------------------------------------

    /// An EventView reached a client: it must be committed. Returns its seq.
    pub fn on_wire_event(&mut self, who: &str, ev: &Value) -> Option<u64> {
        let id = s(ev, "id").to_string();
        match self.ids.get(&id) {
            Some(seq) => {
                self.seen_on_wire.insert(id);
                Some(*seq)
            }
            None => {
                self.fail(
                    INV_COMMITTED_BEFORE_WIRE,
                    format!(
                        "{who} received event {id} ({}) before it was committed",
                        s(ev, "event_type")
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(seq: u64, key: &str, ty: &str, payload: Value) -> EventRow {
        EventRow {
            seq,
            id: format!("evt_{seq}"),
            session_id: "ses_a".into(),
            client_key_id: Some(key.into()),
            event_type: ty.into(),
            payload: payload.to_string(),
            created_at: String::new(),
        }
    }

    #[test]
    fn interleaved_turns_are_flagged() {
        let mut c = Checker::default();
        c.on_emit(&row(1, "k1", "client.message.send", json!({"content":"a"})));
        c.on_emit(&row(2, "k2", "client.message.send", json!({"content":"b"})));
        assert_eq!(c.violations[0].invariant, INV_SINGLE_GATE_HOLDER);
    }

    #[test]
    fn pause_continuation_by_other_driver_is_flagged() {
        let mut c = Checker {
            turn_timeout_ms: 100,
            ..Checker::default()
        };
        c.on_emit(&row(1, "k1", "client.message.send", json!({"content":"a"})));
        let paused = json!({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","dispatch":"client"}]});
        c.on_emit(&row(2, "k1", "server.message.send", paused));
        c.now_ms = 50;
        c.on_emit(&row(
            3,
            "k1",
            "session.error",
            json!({"reason":"driver_turn_abandoned"}),
        ));
        assert_eq!(c.violations[0].invariant, INV_ABANDON_AFTER_DEADLINE);
        c.on_emit(&row(4, "k2", "client.message.send", json!({"content":"b"})));
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
    }

    #[test]
    fn unanswered_tool_use_is_flagged() {
        let mut c = Checker::default();
        c.on_emit(&row(1, "k1", "client.message.send", json!({"content":"a"})));
        let req = json!({"provider":"anthropic","messages":[
            {"role":"user","content":"a"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x"}]},
            {"role":"user","content":[{"type":"text","text":"hi"}]}
        ]});
        c.on_emit(&row(2, "k1", "provider.request", req));
        assert_eq!(c.violations[0].invariant, INV_TOOL_USE_ANSWERED);
        let dup = json!({"provider":"anthropic","messages":[
            {"role":"user","content":"a"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x"}]},
            {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t1","content":"1"},
                {"type":"tool_result","tool_use_id":"t1","content":"1"}]}
        ]});
        c.on_emit(&row(3, "k1", "provider.request", dup));
        assert_eq!(c.violations.len(), 2);
    }

    #[test]
    fn gapless_commit() {
        let mut c = Checker::default();
        assert!(c.on_commit_event(&row(1, "k", "session.open", json!({}))));
        assert!(!c.on_commit_event(&row(1, "k", "session.open", json!({}))));
        assert_eq!(c.violations[0].invariant, INV_STORE_SEQ_GAPLESS);
        assert_eq!(c.next_in_session("ses_a", 0), Some(1));
        assert_eq!(c.next_in_session("ses_a", 1), None);
    }
}
