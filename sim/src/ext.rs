//! The opt-in extensions (docs/extensions.md) seen by the simulator:
//! idempotency keys, steers, cancels, gapless subscriptions. The world's
//! actors (`world/ext.rs`) issue the requests; this module keeps what the
//! checks need and the checks that do not need the world:
//!
//! - `inv_idempotency_one_turn`: per (session, client key, key), at most
//!   one `client.message.send` of the key's messages in the committed log
//!   (each message carries a nonce; retries repeat it, a different message
//!   with the same key has its own);
//! - `inv_no_orphan_tool_use`: the provider request bodies the simulated
//!   provider receives answer every assistant `tool_use` later on;
//! - `inv_steer_delivered`: an applied steer's `client.message.send` is
//!   followed by its session's next `provider.request`, which carries it;
//! - the shapes of the extension answers (`inv_extension_answers`).

use std::collections::BTreeMap;

use engine::store::EventRow;
use serde_json::Value;

use crate::check::{self, Checker};

/// (session id, client key id, idempotency key).
pub type IdemId = (String, String, String);

/// One keyed `sendMessage` request of a group.
#[derive(Debug, Clone)]
pub struct Member {
    pub rid: usize,
    pub nonce: String,
}

#[derive(Debug, Default)]
pub struct IdemGroup {
    pub members: Vec<Member>,
    /// Committed `client.message.send` seqs of the group's messages.
    pub turns: Vec<u64>,
    /// Per nonce: the first answer that a retry must repeat
    /// (`(request, signature)`).
    pub answers: BTreeMap<String, (usize, String)>,
}

#[derive(Debug, Default, Clone)]
pub struct SteerTrack {
    pub rid: usize,
    pub session: String,
    /// `client.message.send` events emitted for it, and the last one's id.
    pub emitted: u32,
    pub event_id: Option<String>,
}

#[derive(Debug, Default, Clone)]
pub struct ExtStats {
    pub opted_registrations: u64,
    pub cancels: BTreeMap<String, u64>,
    pub steers_applied: u64,
    pub steers_rejected: u64,
    pub keyed_sends: u64,
    pub retries: u64,
    pub replays_equal: u64,
    pub reused_refused: u64,
    pub interrupted: u64,
    pub gapless_subs: u64,
    pub stalls: u64,
    pub queue_frames: u64,
    pub markers: u64,
}

impl ExtStats {
    /// Sums another run's counts in (the CLI's totals).
    pub fn add(&mut self, o: &ExtStats) {
        self.opted_registrations += o.opted_registrations;
        for (k, v) in &o.cancels {
            *self.cancels.entry(k.clone()).or_default() += v;
        }
        self.steers_applied += o.steers_applied;
        self.steers_rejected += o.steers_rejected;
        self.keyed_sends += o.keyed_sends;
        self.retries += o.retries;
        self.replays_equal += o.replays_equal;
        self.reused_refused += o.reused_refused;
        self.interrupted += o.interrupted;
        self.gapless_subs += o.gapless_subs;
        self.stalls += o.stalls;
        self.queue_frames += o.queue_frames;
        self.markers += o.markers;
    }
}

impl std::fmt::Display for ExtStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "opted_registrations={} cancels={:?} steers(applied={} rejected={}) keyed_sends={} retries={} same_answer={} reused_refused={} interrupted={} gapless_subs={} stalls={} queue_frames={} markers={}",
            self.opted_registrations, self.cancels, self.steers_applied, self.steers_rejected,
            self.keyed_sends, self.retries, self.replays_equal, self.reused_refused,
            self.interrupted, self.gapless_subs, self.stalls, self.queue_frames, self.markers,
        )
    }
}

#[derive(Default)]
pub struct ExtOracle {
    pub groups: BTreeMap<IdemId, IdemGroup>,
    /// Nonce of a keyed message → its group.
    pub nonce_group: BTreeMap<String, IdemId>,
    pub steers: BTreeMap<String, SteerTrack>,
    /// Per session: applied steers not yet seen in a `provider.request`.
    steer_pending: BTreeMap<String, Vec<String>>,
    /// Last emitted event seq per session (reset to the committed log at a
    /// restart: what was not committed is gone).
    pub last_emitted: BTreeMap<String, u64>,
    /// Sessions whose `session.close` was emitted by the current drain.
    pub closes_in_drain: Vec<String>,
    /// Committed seq of each session's `session.close`.
    pub close_seq: BTreeMap<String, u64>,
    pub stats: ExtStats,
}

/// The `nonce:…;` a sim message carries (the first one in `text`), as
/// `World::next_nonce` made it (with its `;`).
pub fn nonce_in(text: &str) -> Option<&str> {
    let i = text.find("nonce:")?;
    let rest = &text[i..];
    let j = rest.find(';')?;
    Some(&rest[..=j])
}

impl ExtOracle {
    // ---- the emitted log -------------------------------------------------

    pub fn on_emit(&mut self, row: &EventRow, checker: &mut Checker) {
        self.last_emitted.insert(row.session_id.clone(), row.seq);
        match row.event_type.as_str() {
            "session.close" => self.closes_in_drain.push(row.session_id.clone()),
            "client.message.send" => {
                let Some(n) = nonce_in(&row.payload) else {
                    return;
                };
                if let Some(st) = self.steers.get_mut(n) {
                    st.emitted += 1;
                    st.event_id = Some(row.id.clone());
                    if st.emitted > 1 || st.session != row.session_id {
                        checker.fail(
                            check::INV_EXTENSION_ANSWERS,
                            format!(
                                "steer {n} (req #{}) logged {} times / in session {} (sent to {})",
                                st.rid, st.emitted, row.session_id, st.session
                            ),
                        );
                    }
                    self.steer_pending
                        .entry(row.session_id.clone())
                        .or_default()
                        .push(n.to_string());
                }
            }
            "provider.request" => {
                let Some(pending) = self.steer_pending.remove(&row.session_id) else {
                    return;
                };
                let missing: Vec<&String> = pending
                    .iter()
                    .filter(|n| !row.payload.contains(n.as_str()))
                    .collect();
                if !missing.is_empty() {
                    checker.fail(
                        check::INV_STEER_DELIVERED,
                        format!(
                            "session {}: provider.request {} after steer(s) {missing:?} does not carry them",
                            row.session_id, row.id
                        ),
                    );
                }
            }
            // A turn that ends another way drops its unapplied steers; an
            // applied one must have reached the very next request.
            "server.message.send" | "session.error" | "session.compaction.started" => {
                if let Some(p) = self.steer_pending.remove(&row.session_id) {
                    checker.fail(
                        check::INV_STEER_DELIVERED,
                        format!(
                            "session {}: {} {} while applied steer(s) {p:?} never reached a provider.request",
                            row.session_id, row.event_type, row.id
                        ),
                    );
                }
            }
            _ => {}
        }
    }

    /// A running turn was cancelled: its applied steers may never reach a
    /// provider (the turn made no further call).
    pub fn on_turn_cancelled(&mut self, sid: &str) {
        self.steer_pending.remove(sid);
    }

    /// A restart: the emitted-but-uncommitted tail is gone.
    pub fn on_restart(&mut self, committed: &BTreeMap<String, Vec<u64>>) {
        self.steer_pending.clear();
        self.last_emitted = committed
            .iter()
            .filter_map(|(s, v)| v.last().map(|l| (s.clone(), *l)))
            .collect();
    }

    // ---- the committed log -------------------------------------------------

    /// `inv_idempotency_one_turn`, as each event commits.
    pub fn on_commit(&mut self, row: &EventRow, checker: &mut Checker) {
        if row.event_type == "session.close" {
            self.close_seq.insert(row.session_id.clone(), row.seq);
        }
        if row.event_type != "client.message.send" || self.nonce_group.is_empty() {
            return;
        }
        let Some(n) = nonce_in(&row.payload) else {
            return;
        };
        let Some(id) = self.nonce_group.get(n) else {
            return;
        };
        let Some(g) = self.groups.get_mut(id) else {
            return;
        };
        g.turns.push(row.seq);
        if g.turns.len() > 1 {
            checker.fail(
                check::INV_IDEMPOTENCY_ONE_TURN,
                format!(
                    "session {} key {} of {}: {} turns started (client.message.send seqs {:?}; requests {:?})",
                    id.0,
                    id.2,
                    id.1,
                    g.turns.len(),
                    g.turns,
                    g.members.iter().map(|m| (m.rid, m.nonce.as_str())).collect::<Vec<_>>()
                ),
            );
        }
    }
}

// ---- provider request bodies --------------------------------------------

/// `inv_no_orphan_tool_use` on the body of one provider call: every
/// assistant `tool_use` id has a `tool_result` in a later user message.
pub fn check_provider_body(call: u64, body: &[u8], checker: &mut Checker) {
    const NEEDLE: &[u8] = b"\"tool_use\"";
    if !body.windows(NEEDLE.len()).any(|w| w == NEEDLE) {
        return;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        checker.fail(
            check::INV_NO_ORPHAN_TOOL_USE,
            format!("provider call {call}: body is not JSON"),
        );
        return;
    };
    let Some(msgs) = v.get("messages").and_then(Value::as_array) else {
        return;
    };
    // Walk backwards, collecting the results answered later on.
    let mut later: Vec<String> = Vec::new();
    let mut orphans = Vec::new();
    for (i, m) in msgs.iter().enumerate().rev() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        for b in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ty = b.get("type").and_then(Value::as_str).unwrap_or("");
            let id = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            match (role, ty) {
                ("user", "tool_result") => later.push(id("tool_use_id")),
                ("assistant", "tool_use") if !later.contains(&id("id")) => {
                    orphans.push(format!("message {i} tool_use {}", id("id")))
                }
                _ => {}
            }
        }
    }
    if !orphans.is_empty() {
        checker.fail(
            check::INV_NO_ORPHAN_TOOL_USE,
            format!(
                "provider call {call}: no later tool_result for {}",
                orphans.join(", ")
            ),
        );
    }
}

// ---- answer shapes ----------------------------------------------------------

/// A `session.cancelTurn` result: its `state` (`""` for `{"cancelled":
/// false}`), or what is wrong with it.
pub fn cancel_result_state(r: &Value) -> Result<String, String> {
    let Some(o) = r.as_object() else {
        return Err(format!("cancel answered {r}"));
    };
    match (o.get("cancelled"), o.get("state").and_then(Value::as_str)) {
        (Some(Value::Bool(false)), None) if o.len() == 1 => Ok(String::new()),
        (Some(Value::Bool(true)), Some(s @ ("running" | "paused"))) if o.len() == 2 => {
            Ok(s.to_string())
        }
        (Some(Value::Bool(true)), Some("queued"))
            if o.len() == 3 && o.get("requests").and_then(Value::as_u64).unwrap_or(0) >= 1 =>
        {
            Ok("queued".to_string())
        }
        _ => Err(format!("cancel answered an undocumented shape {r}")),
    }
}

/// The texts a steer may be refused with (docs/extensions.md).
pub fn steer_rejection_ok(msg: &str) -> bool {
    const WHY: [&str; 5] = [
        "no turn is running",
        "the turn is paused for client tool results; send them with session.sendMessage",
        "a compaction is running",
        "only the driver whose turn is running may steer it",
        "too many steers are waiting for this turn's next provider call",
    ];
    const NOT_APPLIED: [&str; 7] = [
        "the turn ended before its next provider call",
        "the turn paused for client tools before its next provider call",
        "the turn was cancelled",
        "all providers failed",
        "the turn reached its loop limit",
        "the turn failed",
        "the session closed",
    ];
    let Some(rest) = msg.strip_prefix("steer_rejected: ") else {
        return false;
    };
    match rest.strip_prefix("not applied: ") {
        Some(why) => NOT_APPLIED.contains(&why),
        None => WHY.contains(&rest),
    }
}

/// What a retry must get again: a turn's `message` and event ids, or the
/// error. `None` for answers given before the request took the gate (they
/// are not the key's answer: a retry may run it) and for answers that
/// depend on the moment (`-32024`, not open).
pub fn answer_signature(t: &Value) -> Option<String> {
    if let Some(e) = t.get("error") {
        let code = e["code"].as_i64().unwrap_or(0);
        let msg = e["message"].as_str().unwrap_or("");
        // -32603: the replay's store read failed (transient).
        let pre_gate = matches!(code, -32001 | -32601 | -32602 | -32603 | -32023 | -32024)
            || msg.contains("while queued")
            || msg.contains("shutting down")
            || msg.contains("queue full")
            || msg.contains("not open")
            // Also a failed history read at recovery, before the gate.
            || msg == "session loop failed"
            || msg.contains("no longer exists");
        return (!pre_gate).then(|| format!("error {code} {msg}"));
    }
    let r = &t["result"];
    let ids: Vec<&str> = r["events"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["id"].as_str()).collect())
        .unwrap_or_default();
    Some(format!("result {} {ids:?}", r["message"]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn orphan_tool_use_in_a_body_is_flagged() {
        let mut c = Checker::default();
        let ok = json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ]});
        check_provider_body(1, ok.to_string().as_bytes(), &mut c);
        assert!(c.violations.is_empty());
        let orphan = json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
        ]});
        check_provider_body(2, orphan.to_string().as_bytes(), &mut c);
        assert_eq!(c.violations[0].invariant, check::INV_NO_ORPHAN_TOOL_USE);
    }

    #[test]
    fn answer_shapes() {
        assert_eq!(
            cancel_result_state(&json!({"cancelled": false})),
            Ok(String::new())
        );
        assert!(cancel_result_state(&json!({"cancelled": true, "state": "queued"})).is_err());
        assert!(
            cancel_result_state(&json!({"cancelled": true, "state": "queued", "requests": 2}))
                .is_ok()
        );
        assert!(steer_rejection_ok("steer_rejected: no turn is running"));
        assert!(steer_rejection_ok(
            "steer_rejected: not applied: the turn was cancelled"
        ));
        assert!(!steer_rejection_ok("steer_rejected: because"));
        assert_eq!(nonce_in("x nonce:a1.2; y"), Some("nonce:a1.2;"));
        let queued = json!({"error": {"code": -32021, "message": "turn_cancelled: the request was cancelled while queued"}});
        assert_eq!(answer_signature(&queued), None);
    }
}
