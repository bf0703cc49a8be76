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
use crate::ids::{KeyId, SessionId};
use crate::services::Services;
use crate::session_core::SessionCore;
use crate::session_core::{TurnLoop, UserMessage};
use crate::store::{IdempotencyRow, ReadError, ReadResult, StoreRead, StoreWrite};
use crate::streams::StreamKind;
use crate::ConnId;
use proto::jsonrpc::codes;

/// One key's record.
#[derive(Debug)]
pub(crate) struct Entry {
    digest: String,
    created_ms: u64,
    /// The request took the gate (its key is in the store).
    started: bool,
    /// The terminal answer, once given (see [`IdempotencyRow::outcome`]).
    outcome: Option<String>,
}

impl Entry {
    /// A stored key (restored at start, or adopted with a claimed session).
    pub(crate) fn stored(r: &IdempotencyRow) -> Self {
        Entry {
            digest: r.digest.clone(),
            created_ms: r.created_ms,
            started: true,
            outcome: r.outcome.clone(),
        }
    }
}

/// One session's idempotency keys, by client key then key: a part of its
/// `Session`. Expiry is the endpoint's ([`KeyExpiry`]).
#[derive(Default)]
pub(crate) struct SessionKeys {
    by_key: BTreeMap<KeyId, BTreeMap<String, Entry>>,
}

/// What [`SessionKeys::send`] did with a request.
#[derive(Debug, PartialEq)]
pub(crate) enum Sent {
    /// Answered (replayed, attached or refused): nothing more to do.
    Answered,
    /// Runs, its key on the message: the key was known but never ran.
    Run,
    /// Runs, its key on the message: a first use, recorded now (the
    /// caller indexes it for expiry).
    First { created_ms: u64 },
}

impl SessionKeys {
    pub(crate) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    fn get(&self, key_id: &KeyId, key: &str) -> Option<&Entry> {
        self.by_key.get(key_id)?.get(key)
    }

    /// Records a key; `false` (nothing changed) when it is already held.
    pub(crate) fn insert(&mut self, key_id: &KeyId, key: &str, entry: Entry) -> bool {
        let keys = self.by_key.entry(key_id.clone()).or_default();
        if keys.contains_key(key) {
            return false;
        }
        keys.insert(key.to_string(), entry);
        true
    }

    /// Forgets a key created at `created_ms` (a later key of the same name
    /// stays); whether it did.
    pub(crate) fn expire(&mut self, key_id: &KeyId, key: &str, created_ms: u64) -> bool {
        let Some(keys) = self.by_key.get_mut(key_id) else {
            return false;
        };
        if keys.get(key).is_none_or(|e| e.created_ms != created_ms) {
            return false;
        }
        keys.remove(key);
        if keys.is_empty() {
            self.by_key.remove(key_id);
        }
        true
    }
}

/// The endpoint's index over every session's keys: creation order, so
/// the oldest expire first without a look at every session.
#[derive(Default)]
pub(crate) struct KeyExpiry {
    order: VecDeque<(u64, SessionId, KeyId, String)>,
}

impl KeyExpiry {
    pub(crate) fn push(&mut self, created_ms: u64, session: SessionId, key_id: KeyId, key: String) {
        self.order.push_back((created_ms, session, key_id, key));
    }

    /// Takes the keys created before `before_ms`, oldest first.
    pub(crate) fn due(&mut self, before_ms: u64) -> Vec<(u64, SessionId, KeyId, String)> {
        let n = (self.order.iter())
            .take_while(|(created, ..)| *created < before_ms)
            .count();
        self.order.drain(..n).collect()
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
/// [`Services`] and see only the session whose request it is (its keys
/// and its `core`), so they stay a component of the session.
impl SessionKeys {
    /// Runs the key's checks (the caller expired old keys first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &mut self,
        svc: &mut Services,
        core: Option<&mut SessionCore>,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        key: String,
        message: &mut UserMessage,
    ) -> Sent {
        let digest = digest(message);
        let (started, outcome) = match self.get(key_id, &key) {
            None => {
                let created_ms = svc.now.unix.0;
                let entry = Entry {
                    digest,
                    created_ms,
                    started: false,
                    outcome: None,
                };
                self.insert(key_id, &key, entry);
                message.idem = Some(Idem {
                    key,
                    watchers: Vec::new(),
                });
                return Sent::First { created_ms };
            }
            Some(e) if e.digest != digest => {
                svc.terminal_error(
                    conn,
                    IDEMPOTENCY_KEY_REUSED,
                    "idempotency_key_reused: this key was used with a different message",
                );
                return Sent::Answered;
            }
            Some(e) => (e.started, e.outcome.clone()),
        };
        if let Some(outcome) = outcome {
            svc.replay_outcome(conn, session_id, &outcome);
            return Sent::Answered;
        }
        if SessionKeys::attach_retry(svc, core, conn, key_id, &key) {
            return Sent::Answered;
        }
        if started {
            svc.terminal_error(
                conn,
                IDEMPOTENT_TURN_INTERRUPTED,
                "idempotent_turn_interrupted: the server restarted while this key's turn was running; its events are in the session log",
            );
            return Sent::Answered;
        }
        // Its first request left the queue without running: run now.
        message.idem = Some(Idem {
            key,
            watchers: Vec::new(),
        });
        Sent::Run
    }

    /// Replays the answer of a finished key whose message matches; `false`
    /// (nothing written) otherwise.
    pub(crate) fn replay_finished(
        &self,
        svc: &mut Services,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
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
        let outcome = match self.get(key_id, key) {
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
        key_id: &KeyId,
        key: &str,
    ) -> bool {
        let mine =
            |t: &TurnLoop| t.key_id == *key_id && t.idem.as_ref().is_some_and(|i| i.key == key);
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

    /// Changes a held key and writes it (a key not held is left alone).
    pub(crate) fn put(
        &mut self,
        svc: &mut Services,
        session_id: &SessionId,
        key_id: &KeyId,
        key: &str,
        f: impl FnOnce(&mut Entry),
    ) {
        let Some(e) = self
            .by_key
            .get_mut(key_id.as_str())
            .and_then(|k| k.get_mut(key))
        else {
            return;
        };
        f(e);
        let row = IdempotencyRow {
            session_id: session_id.to_string(),
            client_key_id: key_id.to_string(),
            key: key.to_string(),
            digest: e.digest.clone(),
            created_ms: e.created_ms,
            outcome: e.outcome.clone(),
        };
        svc.write(StoreWrite::PutIdempotency(row));
    }
}

/// What [`SessionKeys::put`] records when a key's request takes the gate
/// or answers.
pub(crate) fn mark_started(e: &mut Entry) {
    e.started = true;
}

pub(crate) fn set_outcome(text: String) -> impl FnOnce(&mut Entry) {
    move |e| e.outcome = Some(text)
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
}
