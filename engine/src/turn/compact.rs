//! Compaction (spec 07): the shared procedure, the automatic trigger with
//! its backoff, and `session.compact` on the turn gate.

use proto::provider::ProviderResponse;
use serde_json::{json, Value};

use super::{merge, Mode, Op, Outcome, Pause, TurnId};
use crate::{ConnId, Engine};
use proto::jsonrpc::codes;
use proto::wire::EventType;

/// Compaction calls get at least this output budget (spec 07 §2 step 2).
pub const MIN_MAX_TOKENS: u32 = 4096;

/// The built-in instruction (spec 07 §5): fixed text, sent as user content.
pub const DEFAULT_INSTRUCTION: &str =
    "Summarize this conversation so far into a single, self-contained compacted summary \
that replaces it. Keep every key fact, decision, constraint, completed piece of work, open task, \
and any state needed to continue the work exactly where it left off. Output only the summary, \
with no commentary before or after it.";

/// A failed automatic attempt suppresses later triggers until a completed
/// turn reports a higher count (spec 07 §3.3).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub token_count: u64,
    pub completed_turns_since: u64,
}

/// A compaction in progress.
#[derive(Debug, Default)]
pub struct Run {
    /// Inline after a Completed turn: the turn's own answer, still to be
    /// returned, and the count that triggered.
    pub auto: Option<(Value, u64)>,
    pub instruction: String,
    /// The `session.compaction.started` payload.
    pub trigger: Value,
    /// Messages replayed into the summary request (`compacted_message_count`).
    pub count: usize,
    /// The request messages: history plus instruction.
    pub messages: Vec<Value>,
}

impl Engine {
    /// `session.compact` (spec 07 §4.2).
    pub(crate) fn compact(&mut self, conn: ConnId, session_id: &str, key_id: &str, params: &Value) {
        if !self.require_open_driver(conn, session_id, key_id, "session.compact") {
            return;
        }
        let prompt = match proto::jsonrpc::CompactParams::parse(params) {
            Ok(p) => p.prompt,
            Err(msg) => return self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        self.arrive(conn, session_id, key_id, Op::Compact(prompt));
    }

    /// The compaction holds the gate (steps 5–8), optionally retiring an
    /// expired pause first.
    pub(crate) fn acquire_compaction(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        prompt: Option<String>,
        reclaimed: Option<Pause>,
    ) {
        let turn_id = self.hold_gate(conn, session_id, key_id, Mode::Compaction(Box::default()));
        if let Some(p) = &reclaimed {
            // Logged after the caller attached: it is streamed to it. A
            // cancelled pause logged its abandonment at the cancel (found
            // by sim seed 514: a compaction logged a second one).
            if !p.cancelled {
                self.log_abandoned(session_id, &p.owner);
            }
        }
        if let Some(msg) = self.open_state_error(session_id) {
            return self.fail_turn(turn_id, codes::APPLICATION_ERROR, &msg);
        }
        if let Some(p) = &reclaimed {
            let paused = merge::PausedTurn {
                expected: &p.expected,
                server_results: &p.server_results,
            };
            let merged = match merge::merge_abandonment(&paused, None, true) {
                Ok(m) => m,
                Err(reason) => {
                    return self.fail_turn(
                        turn_id,
                        codes::APPLICATION_ERROR,
                        &format!("tool result merge invalid: {reason}"),
                    )
                }
            };
            let payload = json!({"role": "user", "content": merged.content, "synthetic": "abandoned_tool_results"});
            self.turn_event(turn_id, EventType::ServerMessageSend, payload);
            for b in merged.content.as_array().into_iter().flatten() {
                let id = b["tool_use_id"].as_str().unwrap_or("");
                if merged.server_ids.iter().any(|s| s == id) {
                    continue;
                }
                let payload = json!({
                    "tool_use_id": id,
                    "dispatch": "client",
                    "server_name": null,
                    "is_error": b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    "content": b.get("content").cloned().unwrap_or(Value::Null),
                });
                self.turn_event(turn_id, EventType::ToolResult, payload);
            }
        }
        let profile_id = self.profile_of(session_id);
        if self.catalog.live_profile(&profile_id).is_none() {
            return self.fail_turn(
                turn_id,
                codes::APPLICATION_ERROR,
                "profile_unavailable: the profile bound to this session is no longer available",
            );
        }
        let stored = (self.catalog.sessions.get(session_id))
            .and_then(|s| s.compaction.client_prompt())
            .map(str::to_string);
        let instruction = prompt
            .or(stored)
            .unwrap_or_else(|| DEFAULT_INSTRUCTION.to_string());
        if let Some(t) = self.turns.get_mut(&turn_id) {
            if let Mode::Compaction(run) = &mut t.mode {
                run.instruction = instruction;
            }
        }
        self.once_history_loaded(turn_id);
    }

    /// Manual compaction with history loaded: compute the trigger and go.
    pub(crate) fn compaction_history_ready(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let token_count = self
            .live
            .get(&t.session_id)
            .and_then(|l| l.newest_usage)
            .map(|(i, o)| i + o);
        let trigger = json!({"trigger": "client", "reason": "manual", "token_count": token_count, "threshold_tokens": null});
        self.begin_compaction(turn_id, trigger);
    }

    /// The shared procedure (spec 07 §2) from provider resolution on.
    fn begin_compaction(&mut self, turn_id: TurnId, trigger: Value) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let session_id = t.session_id.clone();
        let profile_id = self.profile_of(&session_id);
        let Some(profile) = self
            .catalog
            .live_profile(&profile_id)
            .map(|p| p.row.clone())
        else {
            return self.compaction_failed(
                turn_id,
                "provider_config: the profile bound to this session is no longer available",
            );
        };
        let Some(primary) = self.provider(&profile.primary_provider).cloned() else {
            let detail = format!(
                "provider_config: primary provider \"{}\" is not configured in bae-config.toml",
                profile.primary_provider
            );
            return self.compaction_failed(turn_id, &detail);
        };
        let mut chain = vec![primary];
        chain.extend(
            profile
                .fallback_providers
                .iter()
                .filter_map(|n| self.provider(n).cloned()),
        );
        let history = self
            .live
            .get(&session_id)
            .and_then(|l| l.history.clone())
            .unwrap_or_default();
        self.turn_event(
            turn_id,
            EventType::SessionCompactionStarted,
            trigger.clone(),
        );
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        let Mode::Compaction(run) = &mut t.mode else {
            return;
        };
        run.trigger = trigger;
        run.count = history.len();
        run.messages = with_instruction(history, &run.instruction);
        t.chain = chain;
        t.attempt = 0;
        self.send_attempt(turn_id);
    }

    /// A successful summary call: validate, then write the atomic trio.
    pub(crate) fn on_summary(
        &mut self,
        turn_id: TurnId,
        resp: ProviderResponse,
        usage: Option<(u64, u64)>,
    ) {
        if let Some(why) = resp.truncated {
            return self.compaction_failed(turn_id, &format!("summary truncated: {why}"));
        }
        let has_text = resp.content.iter().any(|b| {
            b.get("type").and_then(Value::as_str) == Some("text")
                && b.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.trim().is_empty())
        });
        if !has_text {
            return self.compaction_failed(turn_id, "empty summary");
        }
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let session_id = t.session_id.clone();
        let count = match &t.mode {
            Mode::Compaction(run) => run.count,
            Mode::Chat => 0,
        };
        // Emitted back to back from one input: the driver commits the three
        // rows in one transaction before any of them is published.
        let preamble = json!({
            "role": "user",
            "content": [{"type": "text", "text": proto::provider::PREAMBLE_TEXT}],
            "synthetic": "compaction_preamble",
        });
        let preamble_id = self
            .turn_event(turn_id, EventType::ServerMessageSend, preamble.clone())
            .map(|e| e.id);
        let summary = json!({"role": "assistant", "content": resp.content});
        let summary_id = self
            .turn_event(turn_id, EventType::ServerMessageSend, summary.clone())
            .map(|e| e.id);
        let completed = json!({
            "preamble_event_id": preamble_id,
            "summary_event_id": summary_id,
            "compacted_message_count": count,
            "input_tokens": usage.map(|u| u.0),
            "summary_tokens": usage.map(|u| u.1),
        });
        let done = self.turn_event(turn_id, EventType::SessionCompactionCompleted, completed);
        if let Some(live) = self.live.get_mut(&session_id) {
            live.history = Some(vec![
                proto::provider::history_message("server.message.send", &preamble),
                proto::provider::history_message("server.message.send", &summary),
            ]);
            live.backoff = None;
            self.history_built(&session_id);
        }
        self.finish_compaction(turn_id, done.map(|e| e.json));
    }

    /// A logical compaction failure: history untouched, session open.
    pub(crate) fn compaction_failed(&mut self, turn_id: TurnId, detail: &str) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let session_id = t.session_id.clone();
        let auto_count = match &t.mode {
            Mode::Compaction(run) => run.auto.as_ref().map(|(_, c)| *c),
            Mode::Chat => None,
        };
        if let Some(count) = auto_count {
            if let Some(live) = self.live.get_mut(&session_id) {
                live.backoff = Some(Backoff {
                    token_count: count,
                    completed_turns_since: 0,
                });
            }
            return self.finish_compaction(turn_id, None);
        }
        self.fail_turn(
            turn_id,
            codes::APPLICATION_ERROR,
            &format!("compaction failed: {detail}"),
        );
    }

    /// Manual: the completed EventView is the result. Auto: the turn's own
    /// `{message, events}` result, compaction events included.
    fn finish_compaction(&mut self, turn_id: TurnId, completed: Option<std::sync::Arc<str>>) {
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        let mode = std::mem::replace(&mut t.mode, Mode::Chat);
        let auto_message = match mode {
            Mode::Compaction(run) => run.auto.map(|(m, _)| m),
            Mode::Chat => None,
        };
        match auto_message {
            Some(message) => self.end_turn(turn_id, Outcome::Completed(message)),
            None => {
                let Some(t) = self.turns.remove(&turn_id) else {
                    return;
                };
                if let Some(conn) = t.conn {
                    match completed {
                        Some(json) => self.terminal_result(conn, &json),
                        None => {
                            self.terminal_error(conn, codes::APPLICATION_ERROR, "compaction failed")
                        }
                    }
                }
                self.release_gate(&t.session_id);
            }
        }
    }

    /// The auto threshold crossed by this request's last successful call,
    /// or the trigger it carried over from a pause.
    pub(crate) fn auto_crossing(&self, turn_id: TurnId) -> Option<u64> {
        let t = self.turns.get(&turn_id)?;
        let size = self
            .catalog
            .sessions
            .get(t.session_id.as_str())?
            .compaction
            .auto_size()?;
        let crossed = t.last_usage.map(|(i, o)| i + o).filter(|c| *c > size);
        crossed.or(t.carried_trigger)
    }

    /// At a Completed boundary (spec 07 §3.1): start an inline compaction
    /// when the threshold was crossed and the backoff allows. Returns
    /// whether the turn continues as a compaction.
    pub(crate) fn maybe_auto_compact(&mut self, turn_id: TurnId, message: &Value) -> bool {
        let Some(t) = self.turns.get(&turn_id) else {
            return false;
        };
        let session_id = t.session_id.clone();
        let Some(size) =
            (self.catalog.sessions.get(session_id.as_str())).and_then(|s| s.compaction.auto_size())
        else {
            return false;
        };
        let backoff = self
            .live
            .get_mut(&session_id)
            .and_then(|l| l.backoff.as_mut())
            .map(|b| {
                b.completed_turns_since += 1;
                *b
            });
        let crossing = self.auto_crossing(turn_id);
        if crossing.is_none() {
            tracing::debug!(
                session_id = %session_id,
                "no usable usage or below threshold; no auto compaction"
            );
        }
        let Some((count, reason)) = auto_trigger(crossing, backoff) else {
            return false;
        };
        let steers = match self.turns.get_mut(&turn_id) {
            Some(t) => std::mem::take(&mut t.steers),
            None => Vec::new(),
        };
        self.retire_steers(steers, "the turn ended before its next provider call");
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.mode = Mode::Compaction(Box::new(Run {
                auto: Some((message.clone(), count)),
                instruction: DEFAULT_INSTRUCTION.to_string(),
                ..Run::default()
            }));
        }
        let trigger = json!({"trigger": "auto", "reason": reason, "token_count": count, "threshold_tokens": size});
        self.begin_compaction(turn_id, trigger);
        true
    }
}

/// Whether a Completed turn starts an automatic compaction (spec 07 §3):
/// the count that crossed the threshold (`None`: no crossing), checked
/// against a backoff a failed attempt left, gives the count and the
/// trigger's `reason`.
pub fn auto_trigger(
    crossing: Option<u64>,
    backoff: Option<Backoff>,
) -> Option<(u64, &'static str)> {
    let count = crossing?;
    match backoff {
        None => Some((count, "token_threshold")),
        // Only once a later turn completed with a higher count (§3.3).
        Some(b) if b.completed_turns_since >= 1 && count > b.token_count => {
            Some((count, "retry_after_failure"))
        }
        Some(_) => None,
    }
}

/// History plus the instruction: appended to a trailing user message, else
/// as a new user message (spec 07 §2 step 5).
fn with_instruction(mut history: Vec<Value>, instruction: &str) -> Vec<Value> {
    let text = json!({"type": "text", "text": instruction});
    match history.last_mut() {
        Some(last) if last.get("role").and_then(Value::as_str) == Some("user") => {
            let content = match last.get_mut("content").map(Value::take) {
                Some(Value::String(s)) => vec![json!({"type": "text", "text": s}), text],
                Some(Value::Array(mut blocks)) => {
                    blocks.push(text);
                    blocks
                }
                _ => vec![text],
            };
            last["content"] = Value::Array(content);
        }
        _ => history.push(json!({"role": "user", "content": instruction})),
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec 07 §3.1/§3.3: a crossing triggers; after a failure only a
    /// later completed turn with a higher count retries.
    #[test]
    fn the_auto_trigger_and_its_backoff() {
        assert_eq!(auto_trigger(None, None), None);
        assert_eq!(
            auto_trigger(Some(900), None),
            Some((900, "token_threshold"))
        );
        let failed = |since| Backoff {
            token_count: 900,
            completed_turns_since: since,
        };
        assert_eq!(auto_trigger(Some(950), Some(failed(0))), None);
        assert_eq!(auto_trigger(Some(900), Some(failed(1))), None);
        assert_eq!(
            auto_trigger(Some(950), Some(failed(1))),
            Some((950, "retry_after_failure"))
        );
        assert_eq!(auto_trigger(None, Some(failed(3))), None);
    }

    /// The instruction joins a trailing user message, else is its own.
    #[test]
    fn the_instruction_joins_a_trailing_user_message() {
        let h = with_instruction(vec![json!({"role": "user", "content": "q"})], "sum");
        assert_eq!(h.len(), 1);
        assert_eq!(h[0]["content"][1], json!({"type": "text", "text": "sum"}));
        let h = with_instruction(vec![json!({"role": "assistant", "content": "a"})], "sum");
        assert_eq!(h[1], json!({"role": "user", "content": "sum"}));
    }
}
