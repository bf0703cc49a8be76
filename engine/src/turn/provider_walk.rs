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
        // Built by moving values in: `json!` would copy the history again.
        let mut payload = serde_json::Map::with_capacity(10);
        payload.insert("attempt".into(), json!(t.attempt));
        payload.insert(
            "kind".into(),
            json!(if t.attempt == 0 {
                "primary"
            } else {
                "fallback"
            }),
        );
        payload.insert("provider".into(), json!(entry.kind.as_str()));
        payload.insert("base_url".into(), Value::String(entry.base_url.clone()));
        payload.insert("model".into(), Value::String(entry.model.clone()));
        payload.insert("max_tokens".into(), json!(max_tokens));
        payload.insert("messages".into(), Value::Array(prepared.logged_messages));
        payload.insert("tools".into(), Value::Array(tools));
        if let Some(n) = prepared.normalized {
            payload.insert("normalized".into(), n);
        }
        if compaction {
            payload.insert("purpose".into(), json!("compaction"));
        }
        let payload = Value::Object(payload);
        self.turn_event(turn_id, EventType::ProviderRequest, payload);
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
