//! One provider round trip of a turn or compaction: the `provider.request`
//! event and the call (spec 05 §5), then the reply, whose meaning
//! ([`super::walk`]) is routed here: a parsed assistant message goes on to
//! the tool round, a failure to the next entry of the chain or to the end of
//! the turn.

use proto::jsonrpc::codes;
use proto::provider;
use proto::wire::EventType;
use serde_json::Value;

use super::walk::{self, Next};
use super::{compact, Mode, Outcome, TurnId};
use crate::store::SessionState;
use crate::{AuthPlacement, CallId, Engine, Output, ProviderCall, ProviderReply};

impl Engine {
    /// Logs `provider.request` for the current attempt and emits the call.
    pub(crate) fn send_attempt(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let Some(entry) = t.chain.get(t.attempt).cloned() else {
            return self.fail_turn(turn_id, codes::INTERNAL_ERROR, "Internal error");
        };
        let kind = entry.kind;
        let compaction = matches!(t.mode, Mode::Compaction(_));
        // Compaction never advertises tools and gets at least 4096 tokens.
        // A chat round sends the session's cached history plus this turn's
        // in-memory tool rounds, borrowed rather than copied.
        let cached: &[Value] = match &t.mode {
            Mode::Chat => self
                .live
                .get(&t.session_id)
                .and_then(|l| l.history.as_deref())
                .map(|h| {
                    h.get(..h.len().saturating_sub(t.steers_in_cache))
                        .unwrap_or(h)
                })
                .unwrap_or(&[]),
            Mode::Compaction(run) => &run.messages,
        };
        let tail: &[Value] = match &t.mode {
            Mode::Chat => &t.tail,
            Mode::Compaction(_) => &[],
        };
        let (tools, max_tokens) = match &t.mode {
            Mode::Chat => (t.tools.clone(), entry.max_tokens),
            Mode::Compaction(_) => (Vec::new(), entry.max_tokens.max(compact::MIN_MAX_TOKENS)),
        };
        let prepared = provider::prepare_request(
            kind,
            &entry.base_url,
            &entry.model,
            max_tokens,
            cached.iter().chain(tail),
            &tools,
        );
        let payload = RequestPayload {
            attempt: t.attempt,
            kind: entry.kind,
            base_url: &entry.base_url,
            model: &entry.model,
            max_tokens,
            messages_json: &prepared.logged_messages_json,
            tools: &tools,
            normalized: prepared.normalized.as_ref(),
            compaction,
        }
        .render();
        self.turn_event_text(turn_id, EventType::ProviderRequest, payload);
        let call_id = self.next_call;
        self.next_call += 1;
        self.calls.insert(call_id, turn_id);
        let now = self.now.mono;
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.call = Some(call_id);
            t.call_started = now;
        }
        if let Some(t) = self
            .turns
            .get(&turn_id)
            .filter(|_| self.telemetry.enabled())
        {
            let (conn, attempt) = (t.conn, t.attempt);
            (self.telemetry).attempt_begin(call_id, turn_id, conn, &entry, attempt);
        }
        let auth = match prepared.auth {
            provider::AuthHeader::XApiKey => AuthPlacement::XApiKey,
            provider::AuthHeader::Bearer => AuthPlacement::Bearer,
        };
        self.outputs.push_back(Output::CallProvider(ProviderCall {
            id: call_id,
            url: prepared.url,
            headers: prepared.headers,
            auth_template: entry.auth_template.clone(),
            auth,
            body: prepared.body,
            timeout_ms: self.config.provider_timeout_ms,
        }));
    }

    /// A provider reply: [`walk::on_reply`] says what it means; this logs
    /// its events and takes the step it names.
    pub(crate) fn on_provider_done(&mut self, call: CallId, reply: ProviderReply) {
        let Some(turn_id) = self.calls.remove(&call) else {
            return;
        };
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return self.telemetry.attempt_end(call, false);
        };
        t.call = None;
        let Some(kind) = t.chain.get(t.attempt).map(|e| e.kind) else {
            return self.fail_turn(turn_id, codes::INTERNAL_ERROR, "Internal error");
        };
        let attempt = walk::Attempt {
            index: t.attempt,
            chain_len: t.chain.len(),
            kind,
            compaction: matches!(t.mode, Mode::Compaction(_)),
        };
        let latency_ms = self.now.mono - t.call_started;
        let walked = walk::on_reply(attempt, reply);
        self.metrics.provider_returned(kind, walked.ok, latency_ms);
        self.telemetry.attempt_end(call, walked.ok);
        for (event_type, payload) in walked.events {
            self.turn_event(turn_id, event_type, payload);
        }
        if walked.session_error {
            if let Some(session_id) = self.turns.get(&turn_id).map(|t| t.session_id.clone()) {
                self.set_state(&session_id, SessionState::Error);
            }
        }
        match walked.next {
            Next::Answer(resp) => {
                let usage = (resp.usage.as_ref()).map(|u| (u.input_tokens, u.output_tokens));
                if attempt.compaction {
                    return self.on_summary(turn_id, resp, usage);
                }
                let Some(t) = self.turns.get_mut(&turn_id) else {
                    return;
                };
                t.last_usage = usage;
                let session_id = t.session_id.clone();
                self.live_mut(&session_id).newest_usage = usage;
                self.on_assistant(turn_id, resp.content)
            }
            Next::Fallback => {
                if let Some(t) = self.turns.get_mut(&turn_id) {
                    t.attempt += 1;
                }
                self.send_attempt(turn_id)
            }
            Next::Exhausted if attempt.compaction => {
                let why = format!("all {} providers failed", attempt.chain_len);
                self.compaction_failed(turn_id, &why)
            }
            Next::Exhausted => self.end_turn(turn_id, Outcome::ProvidersFailed),
        }
    }
}

/// The parts of a `provider.request` payload (spec 05 §5.1).
struct RequestPayload<'a> {
    attempt: usize,
    kind: provider::Kind,
    base_url: &'a str,
    model: &'a str,
    max_tokens: u32,
    /// The attempt's logged messages, already JSON text.
    messages_json: &'a str,
    tools: &'a [Value],
    normalized: Option<&'a Value>,
    compaction: bool,
}

impl RequestPayload<'_> {
    /// Compact JSON text, member for member what serialising the payload
    /// as a `Value` object gives, with the history spliced in as text
    /// instead of being copied into a value tree and serialised again.
    fn render(&self) -> String {
        fn text<T: serde::Serialize + ?Sized>(v: &T) -> String {
            // JSON values and strings always serialise.
            serde_json::to_string(v).unwrap_or_default()
        }
        let tools = text(self.tools);
        let mut p = String::with_capacity(self.messages_json.len() + tools.len() + 256);
        p.push_str("{\"attempt\":");
        p.push_str(&self.attempt.to_string());
        p.push_str(",\"kind\":");
        p.push_str(if self.attempt == 0 {
            "\"primary\""
        } else {
            "\"fallback\""
        });
        p.push_str(",\"provider\":");
        p.push_str(&text(self.kind.as_str()));
        p.push_str(",\"base_url\":");
        p.push_str(&text(self.base_url));
        p.push_str(",\"model\":");
        p.push_str(&text(self.model));
        p.push_str(",\"max_tokens\":");
        p.push_str(&self.max_tokens.to_string());
        p.push_str(",\"messages\":");
        p.push_str(self.messages_json);
        p.push_str(",\"tools\":");
        p.push_str(&tools);
        if let Some(n) = self.normalized {
            p.push_str(",\"normalized\":");
            p.push_str(&text(n));
        }
        if self.compaction {
            p.push_str(",\"purpose\":\"compaction\"");
        }
        p.push('}');
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The text rendering equals the `Value` object it replaced, byte for
    /// byte, over the members' variants (spec 05 §5.1 payload).
    #[test]
    fn request_payload_text_equals_the_value_rendering() {
        let messages = json!([
            {"role": "user", "content": "h\u{2028}i \"q\" \\ \u{1}"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
        ]);
        let tools = [json!({"name": "t", "description": "d", "input_schema": {"type": "object"}})];
        let normalized = json!({"prepended_user": true, "merged": [[1, 2]]});
        for (attempt, kind, norm, compaction, tools) in [
            (0, provider::Kind::Anthropic, None, false, &tools[..]),
            (1, provider::Kind::Openai, Some(&normalized), false, &[][..]),
            (
                2,
                provider::Kind::Anthropic,
                Some(&normalized),
                true,
                &tools[..],
            ),
        ] {
            let p = RequestPayload {
                attempt,
                kind,
                base_url: "http://h\"x/",
                model: "m\u{7f}é",
                max_tokens: 4096,
                messages_json: &messages.to_string(),
                tools,
                normalized: norm,
                compaction,
            };
            let mut v = serde_json::Map::new();
            v.insert("attempt".into(), json!(attempt));
            v.insert(
                "kind".into(),
                json!(if attempt == 0 { "primary" } else { "fallback" }),
            );
            v.insert("provider".into(), json!(kind.as_str()));
            v.insert("base_url".into(), json!(p.base_url));
            v.insert("model".into(), json!(p.model));
            v.insert("max_tokens".into(), json!(4096));
            v.insert("messages".into(), messages.clone());
            v.insert("tools".into(), Value::Array(tools.to_vec()));
            if let Some(n) = norm {
                v.insert("normalized".into(), n.clone());
            }
            if compaction {
                v.insert("purpose".into(), json!("compaction"));
            }
            assert_eq!(p.render(), Value::Object(v).to_string());
        }
    }
}
