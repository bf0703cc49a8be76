//! An in-memory store with the same semantics as the SQLite store: used by
//! the simulator and by engine tests. Pure data structure, no I/O.

// Not on a request path (the simulator, the fuzz target and tests use it),
// and serde_json's read indexing yields `Null` rather than panicking.
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeMap;

use serde_json::Value;

use crate::store::{
    EventRow, HistoryLoad, IdempotencyRow, KeyRow, ProfileRow, ReadResult, SessionRow,
    SessionState, Snapshot, StoreRead, StoreWrite,
};

#[derive(Debug, Clone, Default)]
pub struct MemStore {
    pub profiles: Vec<ProfileRow>,
    pub keys: Vec<KeyRow>,
    pub sessions: Vec<SessionRow>,
    /// Events by seq (rowid order).
    pub events: BTreeMap<u64, EventRow>,
    /// Event seqs per session, ascending.
    by_session: BTreeMap<String, Vec<u64>>,
    /// Idempotency keys by (session, client key, key).
    idempotency: BTreeMap<(String, String, String), IdempotencyRow>,
}

impl MemStore {
    /// Applies one batch atomically (all writes are infallible here).
    pub fn commit(&mut self, batch: &[StoreWrite]) {
        for w in batch {
            self.apply(w);
        }
    }

    pub fn apply(&mut self, w: &StoreWrite) {
        match w {
            StoreWrite::InsertProfile(p) => self.profiles.push(p.clone()),
            StoreWrite::UpdateProfile(p) => {
                if let Some(slot) = self.profiles.iter_mut().find(|x| x.id == p.id) {
                    *slot = p.clone();
                }
            }
            StoreWrite::InsertKey(k) => self.keys.push(k.clone()),
            StoreWrite::RevokeKey { id, at } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.deleted_at = Some(at.clone());
                }
            }
            StoreWrite::SetKeyHash { id, key_hash } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.key_hash = key_hash.clone();
                }
            }
            StoreWrite::TouchKey { id, at } => {
                if let Some(k) = self.keys.iter_mut().find(|k| &k.id == id) {
                    k.last_used_at = Some(at.clone());
                }
            }
            StoreWrite::InsertSession(s) => self.sessions.push(s.clone()),
            StoreWrite::SetSessionState {
                id,
                state,
                closed_at,
            } => {
                if let Some(s) = self.sessions.iter_mut().find(|s| &s.id == id) {
                    s.state = *state;
                    s.closed_at = closed_at.clone();
                }
            }
            StoreWrite::SetSessionTools {
                id,
                client_tools,
                sandbox_tools,
                subagent_tools,
            } => {
                if let Some(s) = self.sessions.iter_mut().find(|s| &s.id == id) {
                    s.client_tools = client_tools.clone();
                    s.sandbox_tools = sandbox_tools.clone();
                    s.subagent_tools = subagent_tools.clone();
                }
            }
            StoreWrite::InsertEvent(e) => {
                assert!(
                    !self.events.contains_key(&e.seq),
                    "duplicate event rowid {}",
                    e.seq
                );
                self.by_session
                    .entry(e.session_id.clone())
                    .or_default()
                    .push(e.seq);
                self.events.insert(e.seq, e.clone());
            }
            StoreWrite::PutIdempotency(row) => {
                let id = (
                    row.session_id.clone(),
                    row.client_key_id.clone(),
                    row.key.clone(),
                );
                self.idempotency.insert(id, row.clone());
            }
            StoreWrite::ExpireIdempotency { before_ms } => {
                self.idempotency.retain(|_, r| r.created_ms >= *before_ms);
            }
        }
    }

    fn session_events(&self, session_id: &str) -> impl DoubleEndedIterator<Item = &EventRow> {
        self.by_session
            .get(session_id)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
            .iter()
            .filter_map(|seq| self.events.get(seq))
    }

    pub fn read(&self, read: &StoreRead) -> ReadResult {
        match read {
            StoreRead::Events {
                session_id,
                after_seq,
                limit,
            } => ReadResult::Events(
                self.session_events(session_id)
                    .filter(|e| e.seq > *after_seq)
                    .take(*limit)
                    .cloned()
                    .collect(),
            ),
            StoreRead::EventSeq {
                session_id,
                event_id,
            } => ReadResult::EventSeq(
                self.session_events(session_id)
                    .find(|e| &e.id == event_id)
                    .map(|e| e.seq),
            ),
            StoreRead::History { session_id } => ReadResult::History(self.history(session_id)),
            StoreRead::EventsAt { session_id, seqs } => ReadResult::Events(
                seqs.iter()
                    .filter_map(|seq| self.events.get(seq))
                    .filter(|e| &e.session_id == session_id)
                    .cloned()
                    .collect(),
            ),
        }
    }

    fn history(&self, session_id: &str) -> HistoryLoad {
        let payload =
            |e: &EventRow| serde_json::from_str::<Value>(&e.payload).unwrap_or(Value::Null);
        let is_message = |t: &str| t == "client.message.send" || t == "server.message.send";
        let find = |id: &str| self.session_events(session_id).find(|e| e.id == id);
        let mut bound = 0;
        if let Some(done) = self
            .session_events(session_id)
            .rev()
            .find(|e| e.event_type == "session.compaction.completed")
        {
            let p = payload(done);
            let preamble = p["preamble_event_id"]
                .as_str()
                .and_then(find)
                .filter(|e| e.event_type == "server.message.send");
            let summary = p["summary_event_id"]
                .as_str()
                .and_then(find)
                .filter(|e| is_message(&e.event_type));
            bound = preamble.or(summary).map(|e| e.seq).unwrap_or(0);
        }
        let messages = self
            .session_events(session_id)
            .filter(|e| e.seq >= bound && is_message(&e.event_type))
            .map(|e| (e.seq, e.event_type.clone(), payload(e)))
            .collect();
        let newest_usage = self
            .session_events(session_id)
            .rev()
            .find(|e| {
                if e.event_type != "provider.response" {
                    return false;
                }
                let p = payload(e);
                p["ok"] == Value::Bool(true) && p.get("purpose").is_none()
            })
            .map(|e| {
                let u = &payload(e)["usage"];
                match (u["input_tokens"].as_u64(), u["output_tokens"].as_u64()) {
                    (Some(i), Some(o)) => Some((i, o)),
                    _ => None,
                }
            });
        HistoryLoad {
            messages,
            newest_usage,
        }
    }

    /// What a restart restores from (same rules as the SQLite store).
    pub fn snapshot(&self) -> Snapshot {
        let open: std::collections::HashSet<&str> = self
            .sessions
            .iter()
            .filter(|s| s.state == SessionState::Open)
            .map(|s| s.id.as_str())
            .collect();
        let mut drivers: Vec<(String, String)> = Vec::new();
        for e in self.events.values() {
            if e.event_type == "session.driver.register" && open.contains(e.session_id.as_str()) {
                let pair = (
                    e.session_id.clone(),
                    e.client_key_id.clone().unwrap_or_default(),
                );
                if !drivers.contains(&pair) {
                    drivers.push(pair);
                }
            }
        }
        Snapshot {
            profiles: self.profiles.clone(),
            keys: self
                .keys
                .iter()
                .filter(|k| k.deleted_at.is_none())
                .cloned()
                .collect(),
            sessions: self.sessions.clone(),
            max_event_seq: self.events.keys().next_back().copied().unwrap_or(0),
            drivers,
            event_counts: self
                .by_session
                .iter()
                .map(|(k, v)| (k.clone(), v.len() as u64))
                .collect(),
            idempotency: self.idempotency.values().cloned().collect(),
        }
    }
}
