//! Compaction (spec 07) as the session core runs it: `session.compact` on
//! the gate, the automatic trigger with its backoff at a completed turn,
//! and the shared procedure from the summary call to the atomic trio of
//! preamble, summary and `session.compaction.completed`.

use proto::jsonrpc::codes;
use proto::provider::{HistoryText, Message, ProviderResponse};
use proto::wire::EventType;
use serde_json::{json, Value};

use super::effect::{ChainError, Effect, Ending, LogTag, World};
use super::turn::Mode;
use super::{merge, Pause, SessionCore};

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
    /// returned (its JSON), and the count that triggered.
    pub auto: Option<(String, u64)>,
    pub instruction: String,
    /// Messages replayed into the summary request (`compacted_message_count`).
    pub count: usize,
    /// The request sends the history's first `upto` messages, then `tail`:
    /// the instruction, or the history's last (user) message with it.
    pub upto: usize,
    pub tail: Vec<Message>,
    /// The summary's usage, kept for the completion event.
    usage: Option<(u64, u64)>,
    /// The preamble and summary messages, kept until the trio is logged.
    trio: Option<(Value, Value)>,
}

impl SessionCore {
    /// `session.compact` took the gate (spec 07 §4.2 steps 5–8), after
    /// retiring the expired pause `reclaimed` if any.
    pub fn start_compaction(
        &mut self,
        prompt: Option<String>,
        reclaimed: Option<&Pause>,
        world: &dyn World,
    ) {
        self.step(|c| c.start_compaction_inner(prompt, reclaimed, world));
    }

    fn start_compaction_inner(
        &mut self,
        prompt: Option<String>,
        reclaimed: Option<&Pause>,
        world: &dyn World,
    ) {
        if let Some(msg) = world.open_error() {
            return self.fail(codes::APPLICATION_ERROR, msg);
        }
        if let Some(p) = reclaimed {
            let paused = merge::PausedTurn {
                expected: &p.expected,
                server_results: &p.server_results,
            };
            let merged = match merge::merge_abandonment(&paused, None, true) {
                Ok(m) => m,
                Err(reason) => {
                    return self.fail(
                        codes::APPLICATION_ERROR,
                        format!("tool result merge invalid: {reason}"),
                    )
                }
            };
            let payload = json!({"role": "user", "content": merged.content, "synthetic": "abandoned_tool_results"});
            self.log(EventType::ServerMessageSend, payload);
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
                self.log(EventType::ToolResult, payload);
            }
        }
        if !world.profile_live() {
            return self.fail(
                codes::APPLICATION_ERROR,
                "profile_unavailable: the profile bound to this session is no longer available",
            );
        }
        let instruction = prompt
            .or_else(|| world.compaction_prompt())
            .unwrap_or_else(|| DEFAULT_INSTRUCTION.to_string());
        if let Some(Mode::Compaction(run)) = self.turn_mut().map(|t| &mut t.mode) {
            run.instruction = instruction;
        }
        self.once_history_loaded(world);
    }

    /// Manual compaction with history loaded: compute the trigger and go.
    pub(super) fn compaction_history_ready(&mut self, world: &dyn World) {
        let token_count = self.newest_usage.map(|(i, o)| i + o);
        let trigger = json!({"trigger": "client", "reason": "manual", "token_count": token_count, "threshold_tokens": null});
        self.begin_compaction(trigger, world);
    }

    /// The shared procedure (spec 07 §2) from provider resolution on.
    fn begin_compaction(&mut self, trigger: Value, world: &dyn World) {
        let chain = match world.chain() {
            Ok(chain) => chain,
            Err(ChainError::ProfileUnavailable { .. }) => {
                return self.compaction_failed(
                    "provider_config: the profile bound to this session is no longer available",
                );
            }
            Err(ChainError::PrimaryMissing { name }) => {
                return self.compaction_failed(&format!(
                    "provider_config: primary provider \"{name}\" is not configured in bae-config.toml"
                ));
            }
        };
        self.log(EventType::SessionCompactionStarted, trigger);
        let empty = HistoryText::new();
        let history = self.history.as_ref().unwrap_or(&empty);
        let Some(t) = self.turn.as_deref_mut() else {
            return;
        };
        // The chat's tools: a compaction sends them (unusable) only when
        // caching is on, to reuse the prefix the chat calls cached.
        t.tools = world.tools(&t.key_id);
        t.tools_json = serde_json::to_string(&t.tools).unwrap_or_default();
        let Mode::Compaction(run) = &mut t.mode else {
            return;
        };
        run.count = history.len();
        (run.upto, run.tail) = with_instruction(history, &run.instruction);
        t.chain = chain;
        t.attempt = 0;
        self.send_attempt(world, None);
    }

    /// A successful summary call: validate, then log the atomic trio (the
    /// completion names the other two's ids, so it follows their
    /// [`SessionCore::logged`]).
    pub(super) fn on_summary(&mut self, resp: ProviderResponse, usage: Option<(u64, u64)>) {
        if let Some(why) = resp.truncated {
            return self.compaction_failed(&format!("summary truncated: {why}"));
        }
        let has_text = resp.content.iter().any(|b| {
            b.get("type").and_then(Value::as_str) == Some("text")
                && b.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.trim().is_empty())
        });
        if !has_text {
            return self.compaction_failed("empty summary");
        }
        let preamble = json!({
            "role": "user",
            "content": [{"type": "text", "text": proto::provider::PREAMBLE_TEXT}],
            "synthetic": "compaction_preamble",
        });
        let summary = json!({"role": "assistant", "content": resp.content});
        if let Some(Mode::Compaction(run)) = self.turn_mut().map(|t| &mut t.mode) {
            run.usage = usage;
            run.trio = Some((preamble.clone(), summary.clone()));
        }
        // Emitted back to back from one input: the driver commits the three
        // rows in one transaction before any of them is published.
        self.log_tagged(
            EventType::ServerMessageSend,
            preamble,
            LogTag::CompactionPart,
            false,
        );
        self.log_tagged(
            EventType::ServerMessageSend,
            summary,
            LogTag::CompactionPart,
            false,
        );
    }

    /// The preamble or the summary was logged as `id`.
    pub(super) fn compaction_part_logged(&mut self, id: &str) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        t.compaction_ids.push(id.to_string());
        let [preamble_id, summary_id] = t.compaction_ids.as_slice() else {
            return;
        };
        let Mode::Compaction(run) = &t.mode else {
            return;
        };
        let completed = json!({
            "preamble_event_id": preamble_id,
            "summary_event_id": summary_id,
            "compacted_message_count": run.count,
            "input_tokens": run.usage.map(|u| u.0),
            "summary_tokens": run.usage.map(|u| u.1),
        });
        self.log_tagged(
            EventType::SessionCompactionCompleted,
            completed,
            LogTag::CompactionDone,
            false,
        );
    }

    /// `session.compaction.completed` was logged (its EventView is `json`):
    /// the history becomes the preamble and the summary.
    pub(super) fn compaction_logged(&mut self, json: crate::streams::EventJson) {
        let trio = match self.turn_mut().map(|t| &mut t.mode) {
            Some(Mode::Compaction(run)) => run.trio.take(),
            _ => None,
        };
        if let Some((preamble, summary)) = trio {
            let message = |p| proto::provider::history_message("server.message.send", p);
            let messages = [message(&preamble), message(&summary)];
            self.history = Some(HistoryText::from_messages(&messages));
            self.backoff = None;
            self.emit(Effect::HistoryRebuilt);
        }
        self.finish_compaction(Some(json));
    }

    /// A logical compaction failure: history untouched, session open.
    pub(super) fn compaction_failed(&mut self, detail: &str) {
        let auto_count = match self.turn().map(|t| &t.mode) {
            Some(Mode::Compaction(run)) => run.auto.as_ref().map(|(_, c)| *c),
            _ => None,
        };
        if let Some(count) = auto_count {
            self.backoff = Some(Backoff {
                token_count: count,
                completed_turns_since: 0,
            });
            return self.finish_compaction(None);
        }
        self.fail(
            codes::APPLICATION_ERROR,
            format!("compaction failed: {detail}"),
        );
    }

    /// Manual: the completed EventView is the result. Auto: the turn's own
    /// `{message, events}` result, compaction events included.
    fn finish_compaction(&mut self, completed: Option<crate::streams::EventJson>) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        let mode = std::mem::replace(&mut t.mode, Mode::Chat);
        let auto_message = match mode {
            Mode::Compaction(run) => run.auto.map(|(m, _)| m),
            Mode::Chat => None,
        };
        match auto_message {
            Some(message) => self.end(Ending::Completed(message)),
            None => self.end(Ending::Compacted(completed)),
        }
    }

    /// The auto threshold crossed by this request's last successful call,
    /// or the trigger it carried over from a pause.
    pub(super) fn auto_crossing(&self, world: &dyn World) -> Option<u64> {
        let t = self.turn()?;
        let size = world.auto_compaction_size()?;
        let crossed = t.last_usage.map(|(i, o)| i + o).filter(|c| *c > size);
        crossed.or(t.carried_trigger)
    }

    /// At a Completed boundary (spec 07 §3.1): start an inline compaction
    /// when the threshold was crossed and the backoff allows. Returns
    /// whether the turn continues as a compaction.
    pub(super) fn maybe_auto_compact(&mut self, message: &str, world: &dyn World) -> bool {
        let Some(size) = world.auto_compaction_size() else {
            return false;
        };
        let backoff = self.backoff.as_mut().map(|b| {
            b.completed_turns_since += 1;
            *b
        });
        let crossing = self.auto_crossing(world);
        if crossing.is_none() {
            tracing::debug!("no usable usage or below threshold; no auto compaction");
        }
        let Some((count, reason)) = auto_trigger(crossing, backoff) else {
            return false;
        };
        self.retire_steers("the turn ended before its next provider call");
        if let Some(t) = self.turn_mut() {
            t.mode = Mode::Compaction(Box::new(Run {
                auto: Some((message.to_string(), count)),
                instruction: DEFAULT_INSTRUCTION.to_string(),
                ..Run::default()
            }));
        }
        let trigger = json!({"trigger": "auto", "reason": reason, "token_count": count, "threshold_tokens": size});
        self.begin_compaction(trigger, world);
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
/// as a new user message (spec 07 §2 step 5). Returns how many of the
/// history's messages are sent as they are, and what follows them.
fn with_instruction(history: &HistoryText, instruction: &str) -> (usize, Vec<Message>) {
    let text = json!({"type": "text", "text": instruction});
    let n = history.len();
    let last = n.checked_sub(1).and_then(|i| history.value(i));
    let trailing_user = last
        .as_ref()
        .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    match last.filter(|_| trailing_user) {
        Some(mut last) => {
            let content = match last.get_mut("content").map(Value::take) {
                Some(Value::String(s)) => vec![json!({"type": "text", "text": s}), text],
                Some(Value::Array(mut blocks)) => {
                    blocks.push(text);
                    blocks
                }
                _ => vec![text],
            };
            if let Some(obj) = last.as_object_mut() {
                obj.insert("content".into(), Value::Array(content));
            }
            (n - 1, vec![Message::new(last)])
        }
        None => (
            n,
            vec![Message::new(
                json!({"role": "user", "content": instruction}),
            )],
        ),
    }
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
        let one = |v: Value| HistoryText::from_messages([&v]);
        let (upto, tail) = with_instruction(&one(json!({"role": "user", "content": "q"})), "sum");
        assert_eq!((upto, tail.len()), (0, 1));
        assert_eq!(
            tail[0]["content"][1],
            json!({"type": "text", "text": "sum"})
        );
        let (upto, tail) =
            with_instruction(&one(json!({"role": "assistant", "content": "a"})), "sum");
        assert_eq!(upto, 1);
        assert_eq!(*tail[0], json!({"role": "user", "content": "sum"}));
    }
}
