//! Forks, exports and imports in the workload (docs/extensions.md, "Forks,
//! exports and imports"): the operator forks live sessions at their last
//! event, at a random committed event or after a turn; exports them and
//! imports the documents back. Checked:
//!
//! - `inv_fork_complete_point`: a fork's copied log ends at a complete
//!   point (no turn running or paused, no compaction commit cut, the
//!   session not ended), by an oracle of its own; and a fork at a
//!   committed event is refused only when that point is incomplete;
//! - `inv_copy_faithful`: a fork holds its parent's events up to the fork
//!   point, an export the session's events in order, an import its
//!   document's events (compaction references renamed to their copies),
//!   and a document exported by the engine is never refused;
//! - `inv_fork_parent_unchanged`: at the end of the run every parent still
//!   holds, unchanged, the events its forks copied.
//!
//! Decisions come from a generator of their own, and nothing is scheduled
//! when the seed's `transfer` options are off, so such a seed draws what
//! it drew before transfers were simulated. While the engine creates a
//! copy, its copied events are replayed through the checker silently: they
//! are history, not live turns.

use std::collections::{BTreeMap, BTreeSet};

use engine::store::EventRow;

use super::*;
use crate::check::{INV_COPY_FAITHFUL, INV_FORK_COMPLETE_POINT, INV_FORK_PARENT_UNCHANGED};

/// The workload's transfer state.
pub(super) struct TransferSim {
    rng: Rng,
    /// Sessions whose copied events the input being handled emits.
    pub copying: BTreeSet<String>,
    /// Seqs of copied events (not live turns to the extension oracle).
    pub copied_seqs: BTreeSet<u64>,
    /// `(parent, its copied events)` of every fork made.
    forks: Vec<(String, Vec<Value>)>,
    /// The lines of export documents being received, by request.
    docs: BTreeMap<usize, Vec<Value>>,
    pub stats: TransferStats,
}

#[derive(Debug, Clone, Default)]
pub struct TransferStats {
    pub forks: u64,
    pub refused: u64,
    pub exports: u64,
    pub imports: u64,
}

impl TransferStats {
    /// Sums another run's counts in (the CLI's totals).
    pub fn add(&mut self, o: &TransferStats) {
        self.forks += o.forks;
        self.refused += o.refused;
        self.exports += o.exports;
        self.imports += o.imports;
    }
}

impl std::fmt::Display for TransferStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "forks={} refused={} exports={} imports={}",
            self.forks, self.refused, self.exports, self.imports
        )
    }
}

impl TransferSim {
    pub fn new(rng: Rng) -> Self {
        TransferSim {
            rng,
            copying: BTreeSet::new(),
            copied_seqs: BTreeSet::new(),
            forks: Vec::new(),
            docs: BTreeMap::new(),
            stats: TransferStats::default(),
        }
    }
}

/// What a copy keeps of an event (its id and session aside).
fn kept(e: &EventRow) -> Value {
    let payload: Value = serde_json::from_str(&e.payload).unwrap_or(Value::Null);
    json!([e.event_type, payload, e.client_key_id, e.created_at])
}

/// An export line's event as [`kept`] renders a stored one.
fn kept_line(l: &Value) -> Value {
    json!([
        l["event_type"],
        l["payload"],
        l["client_key_id"],
        l["created_at"]
    ])
}

/// [`kept`] without the ids a compaction completion names (a copy renames
/// them).
fn kept_renamed(v: &Value) -> Value {
    let mut v = v.clone();
    if v[0] == "session.compaction.completed" {
        if let Some(p) = v[1].as_object_mut() {
            p.remove("preamble_event_id");
            p.remove("summary_event_id");
        }
    }
    v
}

/// The oracle of `inv_fork_complete_point`: why `events` do not end at a
/// complete point (written apart from the engine's `transfer::rules`).
pub(crate) fn incomplete(events: &[EventRow]) -> Option<String> {
    let (mut turn, mut commit, mut ended) = (false, false, false);
    for e in events {
        let p: Value = serde_json::from_str(&e.payload).unwrap_or(Value::Null);
        match e.event_type.as_str() {
            "client.message.send" => turn = true,
            "server.message.send" => match p["synthetic"].as_str() {
                Some("compaction_preamble") => commit = true,
                Some(_) => turn = false,
                None if p["role"] == "user" || commit => {}
                None => {
                    let blocks = p["content"].as_array().cloned().unwrap_or_default();
                    turn = blocks
                        .iter()
                        .any(|b| b["type"] == "tool_use" && b.get("dispatch").is_some());
                }
            },
            // A compaction's history is its summary: complete, even when
            // it compacted a user message whose turn a restart cut short.
            "session.compaction.completed" => (commit, turn) = (false, false),
            "session.close" => ended = true,
            "session.error" => {
                let reason = p["reason"].as_str().unwrap_or("");
                ended |= [
                    "all_providers_failed",
                    "loop_limit",
                    "provider_config",
                    "profile_unavailable",
                    "tool_result_merge_invalid",
                ]
                .contains(&reason);
            }
            _ => {}
        }
    }
    match (ended, commit, turn) {
        (true, _, _) => Some("the session had ended".into()),
        (_, true, _) => Some("a compaction's commit is cut".into()),
        (_, _, true) => Some("a turn is running or paused".into()),
        _ => None,
    }
}

impl World {
    /// The committed events of `sid`, in order.
    fn stored(&self, sid: &str) -> Vec<EventRow> {
        (self.store.events.values())
            .filter(|e| e.session_id == sid)
            .cloned()
            .collect()
    }

    /// The events a fork or an import of `sid` copied in (not those its
    /// session logged since: an answer may be read after a revocation
    /// closed the copy).
    fn copied(&self, sid: &str) -> Vec<EventRow> {
        (self.stored(sid).into_iter())
            .filter(|e| self.transfer.copied_seqs.contains(&e.seq))
            .collect()
    }

    /// The operator forks or exports one of the slots' sessions.
    pub(super) fn transfer_act(&mut self) {
        if self.phase != Phase::Main || self.dead_engine {
            return;
        }
        let sessions: Vec<String> = (self.slots.iter())
            .filter_map(|s| s.current.clone())
            .filter(|s| self.store.sessions.iter().any(|r| r.id == *s))
            .collect();
        if !sessions.is_empty() {
            let sid = sessions[self.transfer.rng.index(sessions.len())].clone();
            let rates = self.swarm.transfer.clone();
            if self.transfer.rng.chance(rates.fork) {
                let ids: Vec<String> = self.stored(&sid).iter().map(|e| e.id.clone()).collect();
                let body = match self.transfer.rng.below(4) {
                    0 | 1 => json!({}),
                    2 => json!({"event_id": ids[self.transfer.rng.index(ids.len())]}),
                    _ => json!({"after_turn": self.transfer.rng.below(4)}),
                };
                let path = format!("/admin/v1/sessions/{sid}/fork");
                let bytes = http::request(
                    "POST",
                    &path,
                    Some(ADMIN_TOKEN),
                    Some(body.to_string().as_bytes()),
                );
                self.start_req(
                    usize::MAX,
                    0,
                    &sid,
                    Kind::Fork(body),
                    Listener::Admin,
                    bytes,
                );
            } else if self.transfer.rng.chance(rates.export) {
                let path = format!("/admin/v1/sessions/{sid}/export");
                let bytes = http::request("GET", &path, Some(ADMIN_TOKEN), None);
                self.start_req(usize::MAX, 0, &sid, Kind::Export, Listener::Admin, bytes);
            }
        }
        let d = self.transfer.rng.range(300, 3_000);
        self.after(d, Ev::Transfer);
    }

    /// An export's lines are the document, not JSON-RPC frames.
    pub(super) fn transfer_frame(&mut self, rid: usize, p: &Parsed) -> bool {
        if self.reqs[rid].kind != Kind::Export {
            return false;
        }
        if let Parsed::Frame(v) = p {
            self.transfer.docs.entry(rid).or_default().push(v.clone());
            return true;
        }
        false
    }

    pub(super) fn transfer_finished(&mut self, rid: usize, complete: bool) {
        let doc = self.transfer.docs.remove(&rid);
        if !complete {
            return;
        }
        let status = self.reqs[rid].status;
        let body: Value = (self.reqs[rid].body.as_deref())
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let sid = self.reqs[rid].session.clone();
        match self.reqs[rid].kind.clone() {
            Kind::Fork(asked) => self.fork_answered(&sid, &asked, status, &body),
            Kind::Export if status == Some(200) => self.exported(&sid, doc.unwrap_or_default()),
            Kind::Import(lines) => self.imported(&lines, status, &body),
            _ => {}
        }
    }

    fn fork_answered(&mut self, parent: &str, asked: &Value, status: Option<u16>, body: &Value) {
        if status == Some(409) {
            self.transfer.stats.refused += 1;
        }
        if let (Some(409 | 404), Some(at)) = (status, asked["event_id"].as_str()) {
            // A committed point: refused only when it is incomplete.
            let events = self.stored(parent);
            match events.iter().position(|e| e.id == at) {
                None => self.checker.fail(
                    INV_COPY_FAITHFUL,
                    format!("fork of {parent} at committed {at} answered {status:?}"),
                ),
                Some(i) if status == Some(409) && incomplete(&events[..=i]).is_none() => {
                    self.checker.fail(
                        INV_FORK_COMPLETE_POINT,
                        format!("fork of {parent} at the complete point {at} refused: {body}"),
                    );
                }
                Some(_) => {}
            }
            return;
        }
        if status != Some(201) {
            return;
        }
        self.transfer.stats.forks += 1;
        let fork = body["session_id"].as_str().unwrap_or("").to_string();
        let at = body["parent"]["event_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let copied = self.copied(&fork);
        if let Some(why) = incomplete(&copied) {
            self.checker.fail(
                INV_FORK_COMPLETE_POINT,
                format!("fork {fork} of {parent} made after {at}, where {why}"),
            );
        }
        let prefix: Vec<Value> = self
            .stored(parent)
            .iter()
            .take(copied.len())
            .map(kept)
            .collect();
        let copy: Vec<Value> = copied.iter().map(kept).collect();
        let ends_at = self
            .stored(parent)
            .get(copied.len().wrapping_sub(1))
            .map(|e| e.id.clone());
        let same = |a: &[Value], b: &[Value]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| kept_renamed(x) == kept_renamed(y))
        };
        if !same(&prefix, &copy) || ends_at.as_deref() != Some(at.as_str()) {
            self.checker.fail(
                INV_COPY_FAITHFUL,
                format!("fork {fork} does not hold {parent}'s events up to {at}"),
            );
        }
        self.t(format!(
            "fork {fork} of {parent} after {at}: {} events",
            copy.len()
        ));
        self.transfer.forks.push((parent.to_string(), prefix));
    }

    /// An export arrived: it holds the session's events in order; then it
    /// is imported (for the session's creator).
    fn exported(&mut self, sid: &str, lines: Vec<Value>) {
        self.transfer.stats.exports += 1;
        let events: Vec<Value> = (lines.iter())
            .filter(|l| l["kind"] == "event")
            .cloned()
            .collect();
        let stored: Vec<Value> = self.stored(sid).iter().map(kept).collect();
        let ids: Vec<String> = self.stored(sid).iter().map(|e| e.id.clone()).collect();
        let in_order =
            events.len() <= stored.len()
                && events.iter().zip(&stored).zip(&ids).all(|((l, s), id)| {
                    kept_line(l) == *s && l["id"].as_str() == Some(id.as_str())
                });
        let framed = lines.first().is_some_and(|h| h["kind"] == "header")
            && lines
                .last()
                .is_some_and(|e| e["kind"] == "end" && e["events"] == events.len());
        if !in_order || !framed {
            self.checker.fail(
                INV_COPY_FAITHFUL,
                format!("the export of {sid} is not its log ({} lines)", lines.len()),
            );
            return;
        }
        let Some(creator) = self
            .store
            .sessions
            .iter()
            .find(|s| s.id == sid)
            .map(|s| s.client_key_id.clone())
        else {
            return;
        };
        let mut doc: String = lines.iter().map(|l| format!("{l}\n")).collect();
        if doc.is_empty() {
            doc.push('\n');
        }
        let path = format!("/admin/v1/sessions/import?client_key_id={creator}");
        let bytes = http::request("POST", &path, Some(ADMIN_TOKEN), Some(doc.as_bytes()));
        self.start_req(
            usize::MAX,
            0,
            "",
            Kind::Import(events),
            Listener::Admin,
            bytes,
        );
    }

    fn imported(&mut self, lines: &[Value], status: Option<u16>, body: &Value) {
        match status {
            Some(201) => {}
            // Refused as a document: the engine's own log must always read
            // back.
            Some(422)
                if ["invalid_document", "unsupported_format_version"]
                    .contains(&body["type"].as_str().unwrap_or("")) =>
            {
                return self.checker.fail(
                    INV_COPY_FAITHFUL,
                    format!("an export of the engine's own log was refused: {body}"),
                )
            }
            // The creator's key revoked, the profile broken meanwhile (its
            // primary provider gone)…
            _ => return,
        }
        self.transfer.stats.imports += 1;
        let sid = body["session_id"].as_str().unwrap_or("");
        let copied = self.copied(sid);
        let same = copied.len() == lines.len()
            && (copied.iter().zip(lines))
                .all(|(e, l)| kept_renamed(&kept(e)) == kept_renamed(&kept_line(l)));
        // Renamed references name the copies of the events they named.
        let renamed = (copied.iter().zip(lines))
            .filter(|(e, _)| e.event_type == "session.compaction.completed")
            .all(|(e, l)| {
                let p: Value = serde_json::from_str(&e.payload).unwrap_or(Value::Null);
                ["preamble_event_id", "summary_event_id"].iter().all(|k| {
                    let old = l["payload"][k].as_str();
                    let at =
                        old.and_then(|o| lines.iter().position(|x| x["id"].as_str() == Some(o)));
                    match at {
                        Some(i) => p[k].as_str() == Some(copied[i].id.as_str()),
                        None => p[k] == l["payload"][k],
                    }
                })
            });
        if !same || !renamed {
            self.checker.fail(
                INV_COPY_FAITHFUL,
                format!("imported session {sid} does not hold its document's events"),
            );
        }
    }

    /// `inv_fork_parent_unchanged`, at the end of the run.
    pub(super) fn check_fork_parents(&mut self) {
        let forks = std::mem::take(&mut self.transfer.forks);
        for (parent, prefix) in &forks {
            let now: Vec<Value> = self
                .stored(parent)
                .iter()
                .take(prefix.len())
                .map(kept)
                .collect();
            if now != *prefix {
                self.checker.fail(
                    INV_FORK_PARENT_UNCHANGED,
                    format!("session {parent} changed under a fork of it"),
                );
            }
        }
    }
}
