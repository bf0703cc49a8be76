//! Rebuilding a session's runtime state from the log after a start: the
//! provider-facing history and, when the log ends on a paused assistant
//! message, the parked pause with its owner and server results. The owner
//! gets a fresh `BAE_TURN_TIMEOUT` from the moment of recovery.

use serde_json::{json, Value};

use super::{Pause, Waiter};
use crate::conn::PendingRead;
use crate::history_load::HistoryLoad;
use crate::store::{ReadResult, StoreRead};
use crate::Engine;
use proto::jsonrpc::codes;

/// Events read after a paused message (its tool rounds are bounded by the
/// number of tool_use blocks; this is generous).
const PAUSE_SCAN: usize = 4096;

impl Engine {
    pub(crate) fn on_recover(&mut self, session_id: &str, result: Result<HistoryLoad, String>) {
        let load = match result {
            Ok(load) => load,
            Err(e) => {
                tracing::error!(error = %e, session_id, "history recovery read failed");
                return self.recovery_failed(session_id);
            }
        };
        let n = load.messages.len();
        let paused_seq = load.messages.last().and_then(|(seq, et, p)| {
            let assistant =
                p.get("role").and_then(Value::as_str).unwrap_or("assistant") == "assistant";
            let tagged = p["content"].as_array().is_some_and(|c| {
                c.iter().any(|b| {
                    b.get("type").and_then(Value::as_str) == Some("tool_use")
                        && b.get("dispatch").is_some()
                })
            });
            (et == "server.message.send" && assistant && tagged).then_some(*seq)
        });
        let history = crate::history_load::history_text(&load);
        let live = self.live_mut(session_id);
        live.history = Some(history);
        live.newest_usage = load.newest_usage.flatten();
        self.sessions.history_built(session_id);
        match paused_seq {
            Some(paused_seq) => {
                // Server results were logged between the preceding message
                // and the paused one.
                let after_seq = (n.checked_sub(2))
                    .and_then(|i| load.messages.get(i))
                    .map_or(0, |m| m.0);
                self.svc.read(
                    StoreRead::Events {
                        session_id: session_id.to_string(),
                        after_seq,
                        limit: PAUSE_SCAN,
                    },
                    PendingRead::RecoverPause {
                        session_id: session_id.to_string(),
                        paused_seq,
                    },
                )
            }
            None => self.recovered(session_id, None),
        }
    }

    pub(crate) fn on_recover_pause(
        &mut self,
        session_id: &str,
        paused_seq: u64,
        result: Result<ReadResult, String>,
    ) {
        let rows = match result {
            Ok(ReadResult::Events(rows)) => rows,
            _ => return self.recovery_failed(session_id),
        };
        let Some(at) = rows.iter().position(|r| r.seq == paused_seq) else {
            return self.recovery_failed(session_id);
        };
        let Some(paused) = rows.get(at) else {
            return self.recovery_failed(session_id);
        };
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
        // A pause cancelled before the restart stays cancelled (its
        // abandonment is in the log after the paused message).
        let cancelled = rows.iter().skip(at + 1).any(|r| {
            r.event_type == "session.error" && r.payload.contains("\"driver_turn_abandoned\"")
        });
        let pause = Pause {
            owner: self
                .catalog
                .key_id(paused.client_key_id.as_deref().unwrap_or_default()),
            deadline: if cancelled {
                crate::MonoMs(0)
            } else {
                self.svc.now.mono + self.svc.config.turn_timeout_ms
            },
            expected,
            server_results,
            auto_trigger: None,
            cancelled,
        };
        tracing::info!(session_id, owner = %pause.owner, "restored a paused turn from the log");
        self.recovered(session_id, Some(pause));
    }

    /// Recovery done: queued arrivals go through the arrival rules in order.
    fn recovered(&mut self, session_id: &str, pause: Option<Pause>) {
        let waiters: Vec<Waiter> = self.live_mut(session_id).gate.recovered(pause);
        for w in waiters {
            if self.svc.conns.contains_key(&w.conn) {
                self.arrive(w.conn, session_id, &w.key_id, w.op);
            }
        }
        self.note_gate_idle(session_id);
    }

    fn recovery_failed(&mut self, session_id: &str) {
        self.sessions.history_forget(session_id);
        let live = self.live_mut(session_id);
        live.history = None;
        let waiters: Vec<Waiter> = live.gate.recovery_failed();
        // Idempotent retries attached to a waiter are answered too (found
        // by sim seed 2732: one waited until the server shut down).
        for w in waiters {
            for conn in w.streams() {
                self.svc
                    .terminal_error(conn, codes::APPLICATION_ERROR, "session loop failed");
            }
        }
    }
}
