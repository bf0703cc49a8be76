//! Synthetic session export documents (the format of
//! `proto::wire::export`): a session of many events built in memory, to be
//! imported by tests and benches that need a large session quickly.

use proto::wire::export::{self, Header, ServerMeta, SessionMeta};
use serde_json::{json, Value};

/// The shape of a synthetic session.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Text turns (four events each: user message, provider request and
    /// response, answer).
    pub turns: usize,
    /// Bytes of each user message and answer text.
    pub text: usize,
    /// Messages each `provider.request` carries (the newest ones; a real
    /// session carries them all, which a large session cannot import).
    pub window: usize,
}

const T: &str = "2026-01-01T00:00:00.000Z";
const CREATOR: &str = "key_00000000000000000000000000000abc";

fn id(kind: &str, n: usize) -> String {
    format!("{kind}_{n:032x}")
}

/// The document of a session of `shape`: `session.open`, a driver's
/// registration, then the turns; `2 + 4 × turns` events.
pub fn session(shape: Shape) -> String {
    let header = Header {
        format: export::FORMAT.into(),
        format_version: export::FORMAT_VERSION,
        server: ServerMeta {
            name: "testkit".into(),
            version: "0".into(),
        },
        exported_at: T.into(),
        session: SessionMeta {
            id: id("ses", 1),
            client_key_id: CREATOR.into(),
            profile_id: None,
            state: Some("open".into()),
            client_version: None,
            created_at: Some(T.into()),
            closed_at: None,
            compaction: Value::Null,
            client_tools: json!({}),
            sandbox_tools: json!({}),
            subagent_tools: json!({}),
            origin: None,
        },
        profile: Value::Null,
    };
    let mut out = header.to_line();
    out.push('\n');
    let mut n = 0;
    let mut push = |out: &mut String, event_type: &str, payload: &Value| {
        n += 1;
        let payload = payload.to_string();
        export::push_event_line(
            out,
            &id("evt", n),
            &id("ses", 1),
            Some(CREATOR),
            event_type,
            &payload,
            T,
        );
        out.push('\n');
    };
    push(
        &mut out,
        "session.open",
        &json!({"client_version": null, "tools": []}),
    );
    push(&mut out, "session.driver.register", &json!({}));
    let mut history: Vec<Value> = Vec::new();
    for turn in 0..shape.turns {
        let filler = |tag: &str| format!("{tag} {turn} {}", "x".repeat(shape.text));
        let user = json!({"role": "user", "content": filler("question")});
        push(&mut out, "client.message.send", &user);
        history.push(user);
        let from = history.len().saturating_sub(shape.window.max(1));
        let request = json!({
            "attempt": 0, "kind": "primary", "provider": "anthropic",
            "base_url": "http://127.0.0.1:9", "model": "m", "max_tokens": 1024,
            "messages": history[from..], "tools": [],
        });
        push(&mut out, "provider.request", &request);
        let answer =
            json!({"role": "assistant", "content": [{"type": "text", "text": filler("answer")}]});
        let response = json!({
            "attempt": 0, "kind": "primary", "provider": "anthropic", "ok": true, "status": 200,
            "body": {"role": "assistant", "stop_reason": "end_turn", "content": answer["content"]},
            "usage": {"input_tokens": 10, "output_tokens": 5},
        });
        push(&mut out, "provider.response", &response);
        push(&mut out, "server.message.send", &answer);
        history.push(answer);
    }
    out.push_str(&export::end_line(n as u64));
    out.push('\n');
    out
}
