//! Extension `send.idempotent` (docs/extensions.md): `session.sendMessage`
//! with an `idempotency_key` runs at most one turn per (session, client
//! key, key). A retry gets the first request's answer: replayed from the
//! log once it ended, or the rest of its frames while it runs or waits.
//!
//! Durability: a key is written when its request takes the gate, in the
//! same batch as the turn's first event, and again with the terminal answer
//! before that answer is released. So a key the client saw answered is
//! never run twice, and a key whose turn a crash interrupted is reported as
//! such instead of running again. A request that never took the gate (it
//! was queued, refused or cancelled) wrote nothing and may run on retry.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use proto::jsonrpc::codes::{IDEMPOTENCY_KEY_REUSED, IDEMPOTENT_TURN_INTERRUPTED};
use proto::jsonrpc::SendMessageCall;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::conn::{AnswerRead, PendingRead};
use crate::ids::SessionId;
use crate::services::Services;
use crate::session_core::SessionCore;
use crate::session_core::{TurnLoop, UserMessage};
use crate::store::{IdempotencyRow, ReadError, ReadResult, StoreRead, StoreWrite};
use crate::streams::StreamKind;
use crate::ConnId;
use proto::jsonrpc::codes;

/// (session id, client key id, idempotency key).
type KeyId = (String, String, String);

struct Entry {
    digest: String,
    created_ms: u64,
    /// The request took the gate (its key is in the store).
    started: bool,
    /// The terminal answer, once given (see [`IdempotencyRow::outcome`]).
    outcome: Option<String>,
}

/// Every live idempotency key, with insertion order for expiry.
#[derive(Default)]
pub struct Keys {
    entries: BTreeMap<KeyId, Entry>,
    order: VecDeque<(u64, KeyId)>,
}

impl Keys {
    /// Restored from the store; keys past the retention are dropped later.
    pub fn restore(rows: &[IdempotencyRow]) -> Self {
        let mut rows: Vec<&IdempotencyRow> = rows.iter().collect();
        rows.sort_by_key(|r| r.created_ms);
        let mut keys = Keys::default();
        for r in rows {
            let id = (r.session_id.clone(), r.client_key_id.clone(), r.key.clone());
            keys.order.push_back((r.created_ms, id.clone()));
            let entry = Entry {
                digest: r.digest.clone(),
                created_ms: r.created_ms,
                started: true,
                outcome: r.outcome.clone(),
            };
            keys.entries.insert(id, entry);
        }
        keys
    }

    /// Replica mode: a claimed session's stored keys (those already held
    /// stay as they are).
    pub fn adopt(&mut self, rows: &[IdempotencyRow]) {
        for r in rows {
            let id = (r.session_id.clone(), r.client_key_id.clone(), r.key.clone());
            if self.entries.contains_key(&id) {
                continue;
            }
            self.order.push_back((r.created_ms, id.clone()));
            let entry = Entry {
                digest: r.digest.clone(),
                created_ms: r.created_ms,
                started: true,
                outcome: r.outcome.clone(),
            };
            self.entries.insert(id, entry);
        }
    }

    /// Forgets keys created before `before_ms`; whether any were.
    fn expire(&mut self, before_ms: u64) -> bool {
        let mut any = false;
        while let Some((created, _)) = self.order.front() {
            if *created >= before_ms {
                break;
            }
            let Some((created, id)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&id)
                .is_some_and(|e| e.created_ms == created)
            {
                self.entries.remove(&id);
                any = true;
            }
        }
        any
    }
}

pub use crate::session_core::Idem;

/// SHA-256 hex of `{"content","role"}` in canonical JSON (object keys
/// sorted), so a retry matches whatever key order its client serialises.
/// A chat turn's stored outcome, `{"result": {"message", "event_seqs"}}`,
/// around the message's JSON as logged (the bytes `json!` would give).
pub(crate) fn result_outcome(message_json: &str, event_seqs: &[u64]) -> String {
    let mut out = String::with_capacity(message_json.len() + 40 + 8 * event_seqs.len());
    out.push_str("{\"result\":{\"message\":");
    out.push_str(message_json);
    out.push_str(",\"event_seqs\":[");
    for (i, seq) in event_seqs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{seq}");
    }
    out.push_str("]}}");
    out
}

fn digest(message: &UserMessage) -> String {
    let mut text = String::new();
    canonical(
        &json!({"role": message.role, "content": message.content}),
        &mut text,
    );
    proto::wire::hex::encode(&Sha256::digest(text.as_bytes()))
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(k) {
                    canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The key's checks and records. They speak to the wire through
/// [`Services`] and see only the session whose request it is (`core`), so
/// the table stays a component of its own.
impl Keys {
    /// Runs the key's checks. `true`: answered (replayed, attached or
    /// refused). `false`: a first use, now recorded in memory and carried
    /// on `message`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &mut self,
        svc: &mut Services,
        core: Option<&mut SessionCore>,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &str,
        key: String,
        message: &mut UserMessage,
    ) -> bool {
        self.expire_due(svc);
        let digest = digest(message);
        let id: KeyId = (session_id.to_string(), key_id.to_string(), key.clone());
        let (started, outcome) = match self.entries.get(&id) {
            None => {
                let created_ms = svc.now.unix.0;
                self.order.push_back((created_ms, id.clone()));
                let entry = Entry {
                    digest,
                    created_ms,
                    started: false,
                    outcome: None,
                };
                self.entries.insert(id, entry);
                message.idem = Some(Idem {
                    key,
                    watchers: Vec::new(),
                });
                return false;
            }
            Some(e) if e.digest != digest => {
                svc.terminal_error(
                    conn,
                    IDEMPOTENCY_KEY_REUSED,
                    "idempotency_key_reused: this key was used with a different message",
                );
                return true;
            }
            Some(e) => (e.started, e.outcome.clone()),
        };
        if let Some(outcome) = outcome {
            svc.replay_outcome(conn, session_id, &outcome);
            return true;
        }
        if Keys::attach_retry(svc, core, conn, key_id, &key) {
            return true;
        }
        if started {
            svc.terminal_error(
                conn,
                IDEMPOTENT_TURN_INTERRUPTED,
                "idempotent_turn_interrupted: the server restarted while this key's turn was running; its events are in the session log",
            );
            return true;
        }
        // Its first request left the queue without running: run now.
        message.idem = Some(Idem {
            key,
            watchers: Vec::new(),
        });
        false
    }

    /// Replays the answer of a finished key whose message matches; `false`
    /// (nothing written) otherwise.
    pub(crate) fn replay_finished(
        &self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &str,
        params: &SendMessageCall,
    ) -> bool {
        let (Ok(m), Ok(Some(key))) = (&params.message, &params.idempotency_key) else {
            return false;
        };
        let message = UserMessage {
            role: m.role.clone(),
            content: m.content.clone(),
            idem: None,
        };
        let key = key.clone();
        let id: KeyId = (session_id.to_string(), key_id.to_string(), key);
        let outcome = match self.entries.get(&id) {
            Some(e) if e.digest == digest(&message) => e.outcome.clone(),
            _ => None,
        };
        let Some(outcome) = outcome else {
            return false;
        };
        svc.replay_outcome(conn, session_id, &outcome);
        true
    }

    /// A retry of a request still waiting or running joins its stream.
    fn attach_retry(
        svc: &mut Services,
        core: Option<&mut SessionCore>,
        conn: ConnId,
        key_id: &str,
        key: &str,
    ) -> bool {
        let mine =
            |t: &TurnLoop| &*t.key_id == key_id && t.idem.as_ref().is_some_and(|i| i.key == key);
        let Some(core) = core else {
            return false;
        };
        let running = core.turn_mut().filter(|t| mine(t));
        if let Some(t) = running {
            if let Some(i) = t.idem.as_mut() {
                i.watchers.push(conn);
            }
            if let Some(s) = svc.stream_mut(conn) {
                s.kind = StreamKind::Turn;
            }
            return true;
        }
        if svc.faults.idem_queued_retry_runs() {
            return false;
        }
        let Some(idem) = core.gate.queued_idem(key_id, key) else {
            return false;
        };
        idem.watchers.push(conn);
        if let Some(s) = svc.stream_mut(conn) {
            s.kind = StreamKind::Queued;
        }
        true
    }

    /// The key's request took the gate: durable from the next commit.
    pub(crate) fn started(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        key_id: &str,
        key: &str,
    ) {
        self.put(svc, session_id, key_id, key, |e| e.started = true);
    }

    /// The key's request answered: `outcome` renders what a retry gets
    /// (called only for a request that has a key).
    pub(crate) fn finished(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        t: &TurnLoop,
        outcome: impl FnOnce() -> String,
    ) {
        let Some(idem) = &t.idem else {
            return;
        };
        let text = outcome();
        self.put(svc, session_id, &t.key_id, &idem.key, |e| {
            e.outcome = Some(text)
        });
    }

    fn put(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        key_id: &str,
        key: &str,
        f: impl FnOnce(&mut Entry),
    ) {
        let id: KeyId = (session_id.to_string(), key_id.to_string(), key.to_string());
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        f(e);
        let row = IdempotencyRow {
            session_id: id.0,
            client_key_id: id.1,
            key: id.2,
            digest: e.digest.clone(),
            created_ms: e.created_ms,
            outcome: e.outcome.clone(),
        };
        svc.write(StoreWrite::PutIdempotency(row));
    }

    /// Drops keys past the retention, in memory and in the store.
    fn expire_due(&mut self, svc: &mut Services) {
        let before_ms = (svc.now.unix.0).saturating_sub(svc.config.idempotency_retention_ms);
        if self.expire(before_ms) {
            svc.write(StoreWrite::ExpireIdempotency { before_ms });
        }
    }
}

impl Services {
    pub(crate) fn replay_outcome(&mut self, conn: ConnId, session_id: &SessionId, outcome: &str) {
        let parsed: Value = serde_json::from_str(outcome).unwrap_or(Value::Null);
        if let Some(err) = parsed.get("error") {
            let code = err
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(codes::APPLICATION_ERROR);
            let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
            return self.terminal_error(conn, code, msg);
        }
        // A stored answer this server did not write (a damaged row) is an
        // internal error, not an empty result.
        let Some(result) = parsed.get("result") else {
            return self.terminal_error(conn, codes::INTERNAL_ERROR, "Internal error");
        };
        let seqs: Vec<u64> = result
            .get("event_seqs")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let message = result.get("message").cloned().unwrap_or(Value::Null);
        let read = StoreRead::EventsAt {
            session_id: session_id.to_string(),
            seqs,
        };
        self.read(
            read,
            PendingRead::Answer(AnswerRead::IdemReplay { conn, message }),
        );
    }

    pub(crate) fn on_idem_replay(
        &mut self,
        conn: ConnId,
        message: Value,
        result: Result<ReadResult, ReadError>,
    ) {
        match result {
            Ok(ReadResult::Events(rows)) => {
                let events: Vec<crate::streams::EventJson> = (rows.iter())
                    .map(|r| crate::respond::escaped(crate::respond::event_json(r)))
                    .collect();
                let message = proto::wire::json::text(&message);
                let parts = crate::respond::turn_result_parts(&message, &events);
                self.terminal_result_parts(conn, &parts);
            }
            _ => self.terminal_error(conn, codes::INTERNAL_ERROR, "Internal error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcome written around the logged text is the one `json!`
    /// builds from the message value.
    #[test]
    fn result_outcome_is_the_json_of_the_result() {
        let message =
            json!({"role": "assistant", "content": [{"type": "text", "text": "a\"\u{2028}b"}]});
        for seqs in [vec![], vec![7], vec![1, 2, u64::MAX]] {
            let text = result_outcome(&proto::wire::json::text(&message), &seqs);
            let want = json!({"result": {"message": message, "event_seqs": seqs}}).to_string();
            assert_eq!(text, want);
        }
    }

    #[test]
    fn digest_ignores_key_order_but_not_content() {
        let m = |content: Value| UserMessage {
            role: "user".into(),
            content,
            idem: None,
        };
        let a = digest(&m(json!([{"type": "text", "text": "hi"}])));
        let b = digest(&m(
            serde_json::from_str(r#"[{"text":"hi","type":"text"}]"#).unwrap()
        ));
        let c = digest(&m(json!([{"type": "text", "text": "hi!"}])));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn expiry_forgets_old_keys_only() {
        let row = |key: &str, created_ms| IdempotencyRow {
            session_id: "s".into(),
            client_key_id: "k".into(),
            key: key.into(),
            digest: "d".into(),
            created_ms,
            outcome: None,
        };
        let mut keys = Keys::restore(&[row("new", 200), row("old", 100)]);
        assert!(keys.expire(150));
        assert!(!keys.expire(150));
        assert_eq!(keys.entries.len(), 1);
        assert!(keys
            .entries
            .contains_key(&("s".into(), "k".into(), "new".into())));
    }
}
