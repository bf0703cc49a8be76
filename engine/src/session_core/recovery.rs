//! What a session's log says about its state after a start (the reference
//! loses pauses on restart; spec 01 §10 note 3): whether the log ends on a
//! paused assistant message, and the pause that message parked: its
//! `tool_use` ids, the server results produced before it, its owner, and
//! whether it was cancelled before the restart. Pure functions of the rows
//! read; the engine issues the reads and hands the pause to the gate.

use serde_json::{json, Value};

use crate::history_load::HistoryLoad;
use crate::store::EventRow;

/// The seq of the last message when it is an assistant message that
/// paused for client tools (a `tool_use` block tagged with its dispatch).
pub fn paused_seq(load: &HistoryLoad) -> Option<u64> {
    let (seq, et, p) = load.messages.last()?;
    let assistant = p.get("role").and_then(Value::as_str).unwrap_or("assistant") == "assistant";
    let tagged = p["content"].as_array().is_some_and(|c| {
        c.iter().any(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool_use") && b.get("dispatch").is_some()
        })
    });
    (et == "server.message.send" && assistant && tagged).then_some(*seq)
}

/// The seq after which the rows of [`restore_pause`] start: server results
/// were logged between the message before the paused one and it.
pub fn scan_from(load: &HistoryLoad) -> u64 {
    (load.messages.len().checked_sub(2))
        .and_then(|i| load.messages.get(i))
        .map_or(0, |m| m.0)
}

/// A pause as the log recorded it (the gate adds its deadline).
#[derive(Debug, PartialEq)]
pub struct LoggedPause {
    /// The client key that owned the paused turn.
    pub owner: String,
    /// `tool_use` ids of the paused message, in order.
    pub expected: Vec<String>,
    /// Server-dispatched results for those ids, logged before the pause.
    pub server_results: Vec<Value>,
    /// Its abandonment is in the log after it (cancelled before the restart).
    pub cancelled: bool,
}

/// The pause parked by the message at `paused_seq`, from the rows read
/// from [`scan_from`]; `None` when the rows do not hold that message.
pub fn restore_pause(rows: &[EventRow], paused_seq: u64) -> Option<LoggedPause> {
    let at = rows.iter().position(|r| r.seq == paused_seq)?;
    let paused = rows.get(at)?;
    let message: Value = serde_json::from_str(&paused.payload).unwrap_or(Value::Null);
    let field = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let expected: Vec<String> = (message.get("content"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|b| {
            b.get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let server_results = (rows.iter().take(at))
        .filter(|r| r.event_type == "tool.result")
        .filter_map(|r| serde_json::from_str::<Value>(&r.payload).ok())
        .filter(|p| {
            let id = field(p, "tool_use_id");
            field(p, "dispatch") != "client" && expected.iter().any(|e| id == e.as_str())
        })
        .map(|p| {
            json!({
                "type": "tool_result",
                "tool_use_id": field(&p, "tool_use_id"),
                "content": field(&p, "content"),
                "is_error": field(&p, "is_error").as_bool().unwrap_or(false),
            })
        })
        .collect();
    let cancelled = rows.iter().skip(at + 1).any(|r| {
        r.event_type == "session.error" && r.payload.contains("\"driver_turn_abandoned\"")
    });
    Some(LoggedPause {
        owner: paused.client_key_id.clone().unwrap_or_default(),
        expected,
        server_results,
        cancelled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: u64, event_type: &str, key: Option<&str>, payload: Value) -> EventRow {
        EventRow {
            seq,
            id: format!("evt_{seq}"),
            session_id: "ses_1".into(),
            client_key_id: key.map(str::to_string),
            event_type: event_type.into(),
            payload: payload.to_string(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    fn paused_message() -> Value {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "tu_server", "name": "search", "input": {}, "dispatch": "server"},
            {"type": "tool_use", "id": "tu_client", "name": "ls", "input": {}, "dispatch": "client"},
        ]})
    }

    fn load(messages: Vec<(u64, &str, Value)>) -> HistoryLoad {
        HistoryLoad {
            messages: (messages.into_iter())
                .map(|(s, e, p)| (s, e.to_string(), p))
                .collect(),
            newest_usage: None,
        }
    }

    // C-restart: a log ending on a tagged assistant message is a pause.
    #[test]
    fn a_log_ending_on_a_tagged_assistant_message_is_paused() {
        let user = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        let l = load(vec![
            (3, "client.message.send", user.clone()),
            (7, "server.message.send", paused_message()),
        ]);
        assert_eq!(paused_seq(&l), Some(7));
        assert_eq!(scan_from(&l), 3);
        let done = json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]});
        let l = load(vec![
            (3, "client.message.send", user.clone()),
            (7, "server.message.send", done),
        ]);
        assert_eq!(paused_seq(&l), None, "an untagged reply ended the turn");
        let l = load(vec![(3, "client.message.send", user)]);
        assert_eq!(
            paused_seq(&l),
            None,
            "a log ending on the user's message is not paused"
        );
        assert_eq!(scan_from(&l), 0);
    }

    #[test]
    fn the_pause_keeps_its_owner_ids_and_only_its_server_results() {
        let rows = vec![
            row(
                4,
                "tool.result",
                None,
                json!({"tool_use_id": "tu_server", "dispatch": "server", "content": "found", "is_error": false}),
            ),
            row(
                5,
                "tool.result",
                None,
                json!({"tool_use_id": "tu_other", "dispatch": "server", "content": "x"}),
            ),
            row(
                6,
                "tool.result",
                None,
                json!({"tool_use_id": "tu_client", "dispatch": "client", "content": "y"}),
            ),
            row(
                7,
                "server.message.send",
                Some("key_owner"),
                paused_message(),
            ),
        ];
        let p = restore_pause(&rows, 7).expect("the paused row was read");
        assert_eq!(p.owner, "key_owner");
        assert_eq!(p.expected, vec!["tu_server", "tu_client"]);
        assert_eq!(
            p.server_results,
            vec![
                json!({"type": "tool_result", "tool_use_id": "tu_server", "content": "found", "is_error": false})
            ]
        );
        assert!(!p.cancelled);
        assert_eq!(
            restore_pause(&rows, 8),
            None,
            "rows without the paused message"
        );
    }

    #[test]
    fn an_abandonment_logged_after_the_pause_keeps_it_cancelled() {
        let rows = vec![
            row(
                7,
                "server.message.send",
                Some("key_owner"),
                paused_message(),
            ),
            row(
                8,
                "session.error",
                None,
                json!({"code": "driver_turn_abandoned"}),
            ),
        ];
        assert!(restore_pause(&rows, 7).expect("read").cancelled);
    }
}
