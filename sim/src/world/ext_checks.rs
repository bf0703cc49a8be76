//! Checks of what the extension workload gets back (docs/extensions.md):
//! the answers of `registerDriver`, `cancelTurn`, `steerTurn` and keyed
//! `sendMessage` (`inv_extension_answers`), the `session.queue` and
//! `session.replay_complete` frames, gapless subscriptions
//! (`inv_gapless_complete`), and cancels as the engine emits them (what a
//! cancel did is only in its answer, so the gate model learns it there).

use proto::jsonrpc::Extension;

use super::ext::Side;
use super::*;
use crate::ext;

impl World {
    // ---- answers ------------------------------------------------------------------

    fn ext_fail(&mut self, rid: usize, detail: String) {
        let who = format!("req #{rid} ({})", self.actor_name(self.reqs[rid].actor));
        self.checker
            .fail(check::INV_EXTENSION_ANSWERS, format!("{who}: {detail}"));
    }

    /// The session is (as far as the log tells) no longer open.
    fn session_gone(&self, sid: &str) -> bool {
        self.checker.states.get(sid) != Some(&engine::store::SessionState::Open)
    }

    /// Checks of a finished actor request that used an extension. Returns
    /// `true` for side requests (nothing else to do for them).
    pub(super) fn ext_req_finished(&mut self, rid: usize, complete: bool) -> bool {
        if !self.ext_on() {
            return false;
        }
        let side = self.reqs[rid].ext.side;
        let terminal = if complete {
            self.reqs[rid].terminal.clone()
        } else {
            None
        };
        match self.reqs[rid].kind.clone() {
            Kind::Register => self.ext_register_done(rid, terminal.as_ref()),
            Kind::Cancel => {
                if let Some(t) = &terminal {
                    self.ext_cancel_done(rid, t);
                }
            }
            Kind::Steer { nonce, invalid } => {
                if let Some(t) = &terminal {
                    self.ext_steer_done(rid, &nonce, invalid, t);
                }
            }
            Kind::Send { .. } if self.reqs[rid].ext.idem.is_some() => {
                self.ext_keyed_done(rid, terminal.as_ref());
            }
            _ => {}
        }
        side
    }

    fn ext_register_done(&mut self, rid: usize, t: Option<&Value>) {
        let a = self.reqs[rid].actor;
        let Some(t) = t else {
            return;
        };
        if t["result"]["registered"] != true {
            return;
        }
        let plan = self.plan_of(a);
        let got = &t["result"]["extensions"];
        if plan.is_empty() {
            if !got.is_null() {
                self.ext_fail(
                    rid,
                    format!("a registration without extensions answered {t}"),
                );
            }
            return;
        }
        let want: Vec<&str> = plan.names();
        if *got != json!(want) {
            self.ext_fail(
                rid,
                format!("registered with {want:?} but the answer lists {got}"),
            );
        }
        self.ext.stats.opted_registrations += 1;
        let sid = self.reqs[rid].session.clone();
        self.actors[a].ext.live = Some((self.reqs[rid].epoch, sid));
    }

    /// Errors any extension method may answer when the stream is not (or
    /// no longer) opted in: `-32601` (the reference), `-32001`.
    fn reference_refusal_ok(&self, rid: usize, code: i64, e: Extension) -> bool {
        let r = &self.reqs[rid];
        let opted = r.ext.sure.has(e) && r.epoch == self.epoch;
        matches!(code, -32601 | -32001) && (!opted || self.session_gone(&r.session))
    }

    fn ext_cancel_done(&mut self, rid: usize, t: &Value) {
        if let Some(e) = t.get("error") {
            let code = e["code"].as_i64().unwrap_or(0);
            let msg = e["message"].as_str().unwrap_or("");
            let compaction =
                code == -32000 && msg == "a compaction is running; it cannot be cancelled";
            if !compaction && !self.reference_refusal_ok(rid, code, Extension::TurnCancel) {
                self.ext_fail(rid, format!("cancelTurn answered {e}"));
            }
            return;
        }
        match ext::cancel_result_state(&t["result"]) {
            Ok(state) => {
                let key = if state.is_empty() {
                    "none"
                } else {
                    state.as_str()
                };
                *self.ext.stats.cancels.entry(key.to_string()).or_default() += 1;
                let a = self.reqs[rid].actor;
                if self.reqs[rid].ext.pause_cancel && state == "paused" {
                    self.t(format!("{} cancelled its paused turn", self.actors[a].name));
                    self.actors[a].paused = None;
                }
            }
            Err(e) => self.ext_fail(rid, e),
        }
    }

    fn ext_steer_done(&mut self, rid: usize, nonce: &str, invalid: bool, t: &Value) {
        let track = self.ext.steers.get(nonce).cloned().unwrap_or_default();
        if let Some(e) = t.get("error") {
            let code = e["code"].as_i64().unwrap_or(0);
            let msg = e["message"].as_str().unwrap_or("");
            let ok = match code {
                -32602 => invalid,
                -32022 => !invalid && ext::steer_rejection_ok(msg) && track.emitted == 0,
                -32000 => msg.ends_with(", not open") || msg == "session no longer exists",
                _ => self.reference_refusal_ok(rid, code, Extension::TurnSteer),
            };
            if !ok {
                self.ext_fail(
                    rid,
                    format!(
                        "steerTurn (invalid={invalid}, logged {} times) answered {e}",
                        track.emitted
                    ),
                );
            }
            self.ext.stats.steers_rejected += 1;
            return;
        }
        let r = &t["result"];
        let id = r["event_id"].as_str().unwrap_or("");
        let shape = r["steered"] == true && r.as_object().is_some_and(|o| o.len() == 2);
        if !shape || invalid || track.emitted != 1 || track.event_id.as_deref() != Some(id) {
            self.ext_fail(
                rid,
                format!(
                    "steerTurn (invalid={invalid}) answered {r}; its client.message.send was logged {} times (last {:?})",
                    track.emitted, track.event_id
                ),
            );
        }
        let who = format!("req #{rid}");
        let view = json!({"id": id, "event_type": "client.message.send"});
        self.checker.on_wire_event(&who, &view);
        self.ext.stats.steers_applied += 1;
    }

    /// A keyed send (first use, retry or reuse) finished.
    fn ext_keyed_done(&mut self, rid: usize, t: Option<&Value>) {
        let Some(i) = self.reqs[rid].ext.idem.clone() else {
            return;
        };
        let a = self.reqs[rid].actor;
        let Some(t) = t else {
            // Lost before its answer (reset, closed, crash): a client sends
            // it again with the same key.
            let side = self.reqs[rid].ext.side;
            if !side && i.attempts < 3 && self.xrng.chance(self.swarm.ext.retry.max(0.3)) {
                let mut again = i;
                again.attempts += 1;
                self.actors[a].ext.retry = Some(again);
            }
            return;
        };
        let code = t["error"]["code"].as_i64();
        let g = self.ext.groups.get(&i.id);
        let turns = g.map_or(0, |g| g.turns.len());
        match code {
            Some(-32023) => {
                self.ext.stats.reused_refused += 1;
                // Some other message of the key was seen first (this
                // incarnation), or its turn is in the log.
                let mine = self.reqs[rid].arrival.unwrap_or(u64::MAX);
                // The incarnation that answered: a restart may come between
                // the answer and this check (found by seed 803).
                let epoch = self.reqs[rid].epoch;
                let earlier = g.is_some_and(|g| {
                    g.members.iter().any(|m| {
                        let r = &self.reqs[m.rid];
                        m.nonce != i.nonce
                            && r.epoch == epoch
                            && r.arrival.is_some_and(|x| x < mine)
                    })
                });
                if !earlier && turns == 0 {
                    self.ext_fail(
                        rid,
                        format!(
                            "key {} answered -32023 but no other message used it before",
                            i.id.2
                        ),
                    );
                }
            }
            Some(-32024) => {
                self.ext.stats.interrupted += 1;
                if turns == 0 {
                    self.ext_fail(
                        rid,
                        format!(
                            "key {} answered -32024 but none of its turns is in the log",
                            i.id.2
                        ),
                    );
                }
            }
            Some(-32001) if !self.reqs[rid].ext.side && i.attempts < 3 => {
                // Registered again first, then sent again.
                let mut again = i.clone();
                again.attempts += 1;
                self.actors[a].ext.retry = Some(again);
            }
            _ => {}
        }
        let Some(sig) = ext::answer_signature(t) else {
            return;
        };
        let Some(g) = self.ext.groups.get_mut(&i.id) else {
            return;
        };
        match g.answers.get(&i.nonce) {
            None => {
                g.answers.insert(i.nonce.clone(), (rid, sig));
            }
            Some((_, s)) if *s == sig => {
                self.ext.stats.replays_equal += 1;
            }
            Some((first, s)) => {
                let detail = format!("retry of key {} got {sig} but req #{first} got {s}", i.id.2);
                self.ext_fail(rid, detail);
            }
        }
    }

    /// Keyed requests repeating this one's message (retries, or the one it
    /// retries).
    pub(super) fn ext_has_siblings(&self, rid: usize) -> bool {
        let Some(i) = &self.reqs[rid].ext.idem else {
            return false;
        };
        self.ext
            .groups
            .get(&i.id)
            .is_some_and(|g| g.members.iter().any(|m| m.rid != rid && m.nonce == i.nonce))
    }

    /// The requests carrying `nonce` in this incarnation (a keyed message
    /// and its retries; otherwise just the one).
    pub(super) fn same_message(&self, nonce: &str, first: usize) -> Vec<usize> {
        let Some(g) = self
            .ext
            .nonce_group
            .get(nonce)
            .and_then(|id| self.ext.groups.get(id))
        else {
            return vec![first];
        };
        g.members
            .iter()
            .filter(|m| m.nonce == nonce && self.reqs[m.rid].epoch == self.epoch)
            .map(|m| m.rid)
            .collect()
    }

    /// A keyed request arriving once a request of its key was admitted (in
    /// any incarnation) never waits in the queue: it joins that turn, gets
    /// its answer replayed, or is refused.
    pub(super) fn ext_already_admitted(&self, rid: usize) -> bool {
        let Some(i) = &self.reqs[rid].ext.idem else {
            return false;
        };
        self.ext.groups.get(&i.id).is_some_and(|g| {
            g.members
                .iter()
                .any(|m| m.rid != rid && self.reqs[m.rid].admitted)
        })
    }

    // ---- extension frames -------------------------------------------------------

    /// `session.queue` and `session.replay_complete` notifications: only on
    /// streams that opted in, well-formed and in place. `true` if `v` was
    /// one.
    pub(super) fn ext_frame(&mut self, rid: usize, v: &Value) -> bool {
        let method = v.get("method").and_then(Value::as_str).unwrap_or("");
        let p = &v["params"];
        match method {
            "session.delta" | "session.delta_discard" => {
                let r = &self.reqs[rid];
                let fine = r.ext.may.has(Extension::TurnDeltas)
                    && matches!(r.kind, Kind::Send { .. } | Kind::Subscribe { .. })
                    && r.terminal.is_none();
                if !fine {
                    let detail = format!(
                        "{method} {p} on a {:?} stream (opted in: {:?}, terminal: {})",
                        r.kind,
                        r.ext.may.names(),
                        r.terminal.is_some()
                    );
                    self.checker.fail(check::INV_DELTAS, detail);
                }
                if method == "session.delta" {
                    if let Err(e) = self.stream.on_delta(rid, p) {
                        self.checker
                            .fail(check::INV_DELTAS, format!("req #{rid}: {e}"));
                    }
                } else {
                    self.stream.stats.discards += 1;
                }
                true
            }
            "session.queue" => {
                self.ext.stats.queue_frames += 1;
                let r = &self.reqs[rid];
                // Some malformed requests are gated sends too.
                let gated = matches!(r.kind, Kind::Send { .. } | Kind::Compact | Kind::Garbage);
                let position = p["position"].as_u64().unwrap_or(0);
                let shape = position >= 1 && p["ahead"].as_u64() == Some(position - 1);
                if !gated || !r.ext.may.has(Extension::TurnQueue) || !shape || r.ext.saw_event {
                    let detail = format!(
                        "session.queue {p} on a {:?} stream (opted in: {:?}, events before it: {})",
                        r.kind,
                        r.ext.may.names(),
                        r.ext.saw_event
                    );
                    self.ext_fail(rid, detail);
                }
                self.retry_while_queued(rid);
                true
            }
            "session.replay_complete" => {
                self.ext.stats.markers += 1;
                let r = &self.reqs[rid];
                let since_none = matches!(&r.kind, Kind::Subscribe { since: None });
                let want = r.ext.last_event_id.clone();
                let got = p["last_event_id"].as_str().map(str::to_string);
                let fine = r.ext.marker_asked
                    && r.ext.markers == 0
                    && got == want
                    && !(since_none && r.ext.saw_event);
                if !fine {
                    let detail = format!(
                        "session.replay_complete {p} (asked: {}, markers before: {}, last event before it: {want:?})",
                        r.ext.marker_asked, r.ext.markers
                    );
                    self.ext_fail(rid, detail);
                }
                self.reqs[rid].ext.markers += 1;
                true
            }
            _ => false,
        }
    }

    /// A keyed send told it waits in the queue: its client may retry it
    /// right then (the retry must join it, not run the key again).
    fn retry_while_queued(&mut self, rid: usize) {
        let r = &self.reqs[rid];
        if r.ext.idem.is_none() || r.ext.side || r.ext.queue_retried || self.phase != Phase::Main {
            return;
        }
        if !self.xrng.chance(self.swarm.ext.retry) {
            return;
        }
        self.reqs[rid].ext.queue_retried = true;
        let (a, sid) = (self.reqs[rid].actor, self.reqs[rid].session.clone());
        let d = self.xrng.range(0, 10);
        self.after_side(d, a, &sid, Side::Retry(rid));
    }

    // ---- gapless subscribers --------------------------------------------------------

    /// Extensions of an observer's `session.subscribe`: `(params member,
    /// gapless, marker)`.
    pub(super) fn ext_subscribe(&mut self) -> (Option<Value>, bool, bool) {
        if !self.ext_on() {
            return (None, false, false);
        }
        let gapless = self.xrng.chance(self.swarm.ext.gapless);
        let marker = self.xrng.chance(if gapless { 0.7 } else { 0.3 });
        let mut names = Vec::new();
        if gapless {
            names.push("subscribe.gapless");
        }
        if marker {
            names.push("subscribe.replay_complete");
        }
        if self.stream.opt_in(&self.swarm.stream) {
            names.push("turn.deltas");
        }
        let member = (!names.is_empty()).then(|| json!(names));
        (member, gapless, marker)
    }

    /// An observer's subscription stops reading for a while (its socket
    /// buffer fills, flushes stop, a gapless stream stalls).
    pub(super) fn ext_stall(&mut self, a: usize) -> bool {
        if !self.ext_on() || self.phase != Phase::Main || !self.xrng.chance(self.swarm.ext.stall) {
            return false;
        }
        let Some(rid) = self.actors[a].sub else {
            return false;
        };
        let conn = self.reqs[rid].conn;
        let d = self
            .xrng
            .range(self.swarm.ext.stall_ms.0, self.swarm.ext.stall_ms.1);
        let until = self.now_ms + d;
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        c.stalled_until = until;
        self.ext.stats.stalls += 1;
        self.t(format!(
            "{} stops reading conn={conn} for {d} ms",
            self.actors[a].name
        ));
        true
    }

    /// Where a gapless `since`-less subscription starts: after the last
    /// event emitted before the engine handles it.
    pub(super) fn ext_before_subscribe(&mut self, rid: usize) {
        let r = &self.reqs[rid];
        if r.ext.gapless && matches!(r.kind, Kind::Subscribe { since: None }) {
            let start = self.ext.last_emitted.get(&r.session).copied().unwrap_or(0);
            self.reqs[rid].expect_after = Some(start);
        }
    }

    /// An error frame without an id on a stream: a gapless subscription is
    /// never dropped for lagging (a failed replay read may end it).
    pub(super) fn ext_stream_error(&mut self, rid: usize, e: &Value) {
        if !self.reqs[rid].ext.gapless {
            return;
        }
        let msg = e["message"].as_str().unwrap_or("");
        if msg == "replay failed" {
            self.reqs[rid].ext.replay_failed = true;
        } else {
            let detail = format!("req #{rid}: the gapless subscription got the stream error {e}");
            self.checker.fail(check::INV_GAPLESS_COMPLETE, detail);
        }
    }

    /// `inv_gapless_complete` when a gapless stream ends.
    pub(super) fn ext_stream_ended(&mut self, rid: usize, complete: bool) {
        let r = &self.reqs[rid];
        if !r.ext.gapless || !complete || r.ext.replay_failed || !r.ext.ended_by_close {
            return;
        }
        let Some(close) = self.ext.close_seq.get(&r.session).copied() else {
            return;
        };
        let got = r.last_seq.unwrap_or(0);
        if got < close {
            let detail = format!(
                "req #{rid}: the gapless subscription of session {} ended at its close (seq {close}) having delivered up to seq {got}",
                r.session
            );
            self.checker.fail(check::INV_GAPLESS_COMPLETE, detail);
        }
    }

    /// Open gapless subscriptions that have not delivered everything
    /// committed in their session: `(request, delivered up to, last)`.
    fn gapless_behind(&self) -> Vec<(usize, u64, u64)> {
        if !self.ext_on() {
            return Vec::new();
        }
        self.reqs
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.ext.gapless && !r.done && !r.lost && r.epoch == self.epoch && !r.ext.replay_failed
            })
            .filter_map(|(i, r)| {
                let last = *self.checker.by_session.get(&r.session)?.last()?;
                let got = r.last_seq.or(r.expect_after).unwrap_or(0);
                (got < last).then_some((i, got, last))
            })
            .collect()
    }

    pub(super) fn gapless_caught_up(&self) -> bool {
        self.gapless_behind().is_empty()
    }

    /// End of the run: every open gapless subscription caught up.
    pub(super) fn check_gapless_end(&mut self) {
        for (rid, got, last) in self.gapless_behind() {
            let detail = format!(
                "req #{rid}: the gapless subscription of session {} delivered up to seq {got} of {last} by the end of the run",
                self.reqs[rid].session
            );
            self.checker.fail(check::INV_GAPLESS_COMPLETE, detail);
        }
    }

    // ---- cancels, seen at emission ------------------------------------------------

    /// Before the outputs of the input that delivered `session.cancelTurn`
    /// request `rid` are processed: its answer tells whether a running
    /// turn was cancelled (nothing is logged for that) or a pause (its
    /// abandonment, logged now, is no timeout).
    pub(super) fn ext_probe_cancel(&mut self, rid: usize, outputs: &[Output]) {
        let conn = self.reqs[rid].conn;
        let mut text = Vec::new();
        for o in outputs {
            if let Output::Send { conn: c, bytes } = o {
                if *c == conn {
                    text.extend_from_slice(bytes);
                }
            }
        }
        let text = String::from_utf8_lossy(&text);
        let sid = self.reqs[rid].session.clone();
        let key = self.actors[self.reqs[rid].actor].key_id.clone();
        if text.contains(r#""cancelled":true,"state":"running""#) {
            let after = self.ext.last_emitted.get(&sid).copied().unwrap_or(0);
            if let Err(why) = self.checker.on_cancel_running(&sid, &key, after) {
                self.ext_fail(rid, format!("cancelTurn answered running, but {why}"));
            }
            self.mcp.on_turn_cancelled(&sid);
            self.ext.on_turn_cancelled(&sid);
            self.traffic.on_turn_cancelled(&sid);
            if let Err(e) = self.stream.on_cancel(&sid, outputs) {
                self.checker.fail(check::INV_STREAM_CLOSED_AFTER_CANCEL, e);
            }
            self.t(format!(
                "req #{rid}: the running turn of {key} is cancelled"
            ));
        } else if text.contains(r#""cancelled":true,"state":"paused""#) {
            self.checker.cancel_pause = Some((sid, key));
            self.checker.cancel_pause_seen = false;
        }
    }

    /// After those outputs: a `paused` answer logged its abandonment.
    pub(super) fn ext_probe_done(&mut self, rid: usize) {
        if self.checker.cancel_pause.take().is_some() && !self.checker.cancel_pause_seen {
            self.ext_fail(
                rid,
                "cancelTurn answered paused but no driver_turn_abandoned was logged".to_string(),
            );
        }
    }
}
