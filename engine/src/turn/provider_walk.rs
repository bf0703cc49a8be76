//! One provider round trip of a turn or compaction: the `provider.request`
//! event and the call (spec 05 §5), then the reply: a parsed assistant
//! message goes on to the tool round, a failure walks the fallback chain
//! (`provider_call_failed` on the primary, `all_providers_failed` at the end).

use proto::jsonrpc::codes;
use proto::provider;
use proto::wire::EventType;
use serde_json::{json, Value};

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

    pub(crate) fn on_provider_done(&mut self, call: CallId, reply: ProviderReply) {
        let Some(turn_id) = self.calls.remove(&call) else {
            return;
        };
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return self.telemetry.attempt_end(call, false);
        };
        t.call = None;
        let Some(entry) = t.chain.get(t.attempt).cloned() else {
            return self.fail_turn(turn_id, codes::INTERNAL_ERROR, "Internal error");
        };
        let attempt = t.attempt;
        let kind = entry.kind;
        let latency_ms = self.now.mono - t.call_started;
        let attempt_kind = if attempt == 0 { "primary" } else { "fallback" };
        let compaction = matches!(t.mode, Mode::Compaction(_));
        let failure = match reply {
            ProviderReply::Credential(msg) | ProviderReply::Transport(msg) => {
                (Value::Null, msg, Value::Null)
            }
            ProviderReply::Http { status, body } if !(200..300).contains(&status) => (
                json!(status),
                provider::http_error_text(status),
                Value::String(String::from_utf8_lossy(&body).into_owned()),
            ),
            ProviderReply::Http { body, .. } => match provider::parse_response(kind, &body) {
                Ok(resp) => {
                    let mut payload = json!({
                        "attempt": attempt,
                        "kind": attempt_kind,
                        "provider": kind.as_str(),
                        "ok": true,
                        "status": 200,
                        "body": resp.raw,
                        "usage": resp.usage.as_ref().map(|u| u.to_json()),
                    });
                    self.metrics.provider_returned(kind, true, latency_ms);
                    self.telemetry.attempt_end(call, true);
                    let usage = resp
                        .usage
                        .as_ref()
                        .map(|u| (u.input_tokens, u.output_tokens));
                    if compaction {
                        mark_compaction(&mut payload);
                        self.turn_event(turn_id, EventType::ProviderResponse, payload);
                        return self.on_summary(turn_id, resp, usage);
                    }
                    self.turn_event(turn_id, EventType::ProviderResponse, payload);
                    let session_id = (self.turns.get(&turn_id))
                        .map(|t| t.session_id.clone())
                        .unwrap_or_default();
                    self.live_mut(&session_id).newest_usage = usage;
                    if let Some(t) = self.turns.get_mut(&turn_id) {
                        t.last_usage = usage;
                    }
                    return self.on_assistant(turn_id, resp.content);
                }
                Err(e) => (Value::Null, e.to_string(), Value::Null),
            },
        };
        self.metrics.provider_returned(kind, false, latency_ms);
        self.telemetry.attempt_end(call, false);
        let (status, error, body) = failure;
        let mut payload = json!({
            "attempt": attempt,
            "kind": attempt_kind,
            "provider": kind.as_str(),
            "ok": false,
            "status": status,
            "error": error,
            "body": body,
        });
        if compaction {
            mark_compaction(&mut payload);
        }
        self.turn_event(turn_id, EventType::ProviderResponse, payload);
        if attempt == 0 && !compaction {
            let payload = json!({"reason": "provider_call_failed", "provider": kind.as_str(), "detail": error});
            self.turn_event(turn_id, EventType::SessionError, payload);
        }
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        if t.attempt + 1 < t.chain.len() {
            t.attempt += 1;
            return self.send_attempt(turn_id);
        }
        let attempts = t.chain.len();
        let session_id = t.session_id.clone();
        if compaction {
            return self.compaction_failed(turn_id, &format!("all {attempts} providers failed"));
        }
        let payload = json!({"reason": "all_providers_failed", "attempts": attempts});
        self.turn_event(turn_id, EventType::SessionError, payload);
        self.set_state(&session_id, SessionState::Error);
        self.end_turn(turn_id, Outcome::ProvidersFailed)
    }
}

/// `"purpose": "compaction"` on a provider event payload (an object).
fn mark_compaction(payload: &mut Value) {
    if let Some(o) = payload.as_object_mut() {
        o.insert("purpose".into(), json!("compaction"));
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
