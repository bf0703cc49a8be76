//! FIFO bookkeeping of gated requests, and reading responses.

use super::*;

impl World {
    // ---- FIFO bookkeeping -----------------------------------------------------

    pub(super) fn before_arrival(&mut self, rid: usize) {
        let gated = matches!(self.reqs[rid].kind, Kind::Send { .. } | Kind::Compact);
        if !gated {
            return;
        }
        self.arrivals += 1;
        let key = self.actors[self.reqs[rid].actor].key_id.clone();
        let paused_by_me = matches!(
            self.checker.gates.get(&self.reqs[rid].session),
            Some(check::Gate::Paused { key: k, .. }) if *k == key
        );
        let r = &mut self.reqs[rid];
        r.arrival = Some(self.arrivals);
        r.bypass_ok = paused_by_me;
    }

    pub(super) fn after_arrival(&mut self, rid: usize) {
        let r = &self.reqs[rid];
        if r.arrival.is_none() {
            return;
        }
        let ignored = self.conns.get(&r.conn).is_none_or(|c| c.close_emitted);
        if !r.admitted && !r.end_emitted && !ignored && !self.ext_already_admitted(rid) {
            self.reqs[rid].waiting = true;
        }
    }

    pub(super) fn on_emit_fifo(&mut self, row: &engine::store::EventRow) {
        let mut group = Vec::new();
        let admitted = match row.event_type.as_str() {
            "client.message.send" => {
                let Some(nonce) = crate::ext::nonce_in(&row.payload) else {
                    return;
                };
                match self.nonces.get(nonce) {
                    Some(r) => {
                        // A keyed message and its retries share one place
                        // in the queue: the earliest of their arrivals.
                        group = self.same_message(nonce, *r);
                        *r
                    }
                    None => return,
                }
            }
            "session.compaction.started" if row.payload.contains("\"client\"") => {
                let key = row.client_key_id.clone().unwrap_or_default();
                let found = self
                    .reqs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| {
                        r.waiting
                            && r.kind == Kind::Compact
                            && r.session == row.session_id
                            && self.actors[r.actor].key_id == key
                    })
                    .min_by_key(|(_, r)| r.arrival)
                    .map(|(i, _)| i);
                match found {
                    Some(i) => i,
                    None => return,
                }
            }
            _ => return,
        };
        if group.len() > 1 {
            let first = group
                .iter()
                .copied()
                .filter(|r| self.reqs[*r].arrival.is_some())
                .min_by_key(|r| self.reqs[*r].arrival);
            let bypass = group.iter().any(|r| self.reqs[*r].bypass_ok);
            for r in &group {
                self.reqs[*r].waiting = false;
            }
            match first {
                Some(f) => {
                    self.reqs[f].bypass_ok |= bypass;
                    return self.admit_checked(f, row, &group);
                }
                None => return,
            }
        }
        let group = vec![admitted];
        self.admit_checked(admitted, row, &group)
    }

    /// `inv_fifo_admission` for the admission of `admitted` (and the other
    /// requests of its message, `group`).
    fn admit_checked(&mut self, admitted: usize, row: &engine::store::EventRow, group: &[usize]) {
        let Some(arr) = self.reqs[admitted].arrival else {
            return;
        };
        if self.reqs[admitted].epoch != self.epoch {
            return;
        }
        let bypass = self.reqs[admitted].bypass_ok;
        if !bypass {
            let overtaken: Vec<usize> = self
                .reqs
                .iter()
                .enumerate()
                .filter(|(i, r)| {
                    !group.contains(i)
                        && r.waiting
                        && r.epoch == self.epoch
                        && r.session == row.session_id
                        && r.arrival.is_some_and(|a| a < arr)
                })
                .map(|(i, _)| i)
                .collect();
            for o in overtaken {
                self.checker.fail(
                    check::INV_FIFO_ADMISSION,
                    format!(
                        "session {}: request #{admitted} (arrival {arr}) admitted while #{o} (arrival {:?}, still waiting) arrived earlier",
                        row.session_id, self.reqs[o].arrival
                    ),
                );
            }
        }
        for r in group {
            let r = &mut self.reqs[*r];
            r.waiting = false;
            r.admitted = true;
        }
    }

    // ---- responses ---------------------------------------------------------------

    pub(super) fn on_parsed(&mut self, rid: usize, p: Parsed) {
        if self.transfer_frame(rid, &p) {
            return;
        }
        let who = format!("req #{rid} ({})", self.actor_name(self.reqs[rid].actor));
        match p {
            Parsed::Head { status } => {
                self.reqs[rid].status = Some(status);
            }
            Parsed::Frame(v) => {
                self.reqs[rid].frames += 1;
                if v == Value::String(String::new()) {
                    return; // keepalive blank line
                }
                if v.get("id").is_some() {
                    self.on_terminal(rid, &who, v);
                } else if v.get("method").and_then(Value::as_str) == Some("session.event") {
                    self.on_event_frame(rid, &who, &v["params"]);
                } else if v.get("error").is_some() {
                    self.stats.lagged += 1;
                    self.t(format!("{who} stream error {}", v["error"]));
                    self.ext_stream_error(rid, &v["error"]);
                } else if self.ext_frame(rid, &v) {
                } else {
                    self.checker.fail(
                        check::INV_WIRE_WELL_FORMED,
                        format!("{who}: unexpected frame {v}"),
                    );
                }
            }
            Parsed::Body(b) => self.reqs[rid].body = Some(b),
            Parsed::End => {
                self.finish_req(rid, false);
            }
            Parsed::Garbage(g) => self.checker.fail(
                check::INV_WIRE_WELL_FORMED,
                format!("{who}: malformed response: {g}"),
            ),
        }
    }

    pub(super) fn on_terminal(&mut self, rid: usize, who: &str, v: Value) {
        if self.reqs[rid].terminal.is_some() {
            self.checker.fail(
                check::INV_WIRE_WELL_FORMED,
                format!("{who}: second terminal frame {v}"),
            );
        }
        if let Some(events) = v["result"]["events"].as_array() {
            let mut prev = 0;
            for (i, ev) in events.iter().enumerate() {
                let Some(seq) = self.checker.on_wire_event(who, ev) else {
                    continue;
                };
                if seq <= prev {
                    self.checker.fail(
                        check::INV_TURN_STREAM,
                        format!("{who}: result.events out of order at {i}"),
                    );
                }
                prev = seq;
            }
            if let (Kind::Send { nonce, .. }, Some(first)) = (&self.reqs[rid].kind, events.first())
            {
                let is_own = first["event_type"] == "client.message.send"
                    && first["payload"].to_string().contains(nonce.as_str());
                if !is_own {
                    self.checker.fail(
                        check::INV_TURN_STREAM,
                        format!("{who}: result.events does not start with its own client.message.send: {}", first["event_type"]),
                    );
                } else {
                    let events = events.clone();
                    self.check_turn_result(rid, who, &events);
                }
            }
        } else if v["result"].get("event_type").is_some() {
            // session.compact answers with the completed event itself.
            self.checker.on_wire_event(who, &v["result"]);
        }
        self.reqs[rid].terminal = Some(v);
    }

    /// `inv_turn_stream` for a finished `sendMessage`: `result.events` holds
    /// every event the turn appended under its key (and only those), and the
    /// stream was notified of each of them except the request's own input
    /// (its `client.message.send` and the client `tool.result`s right after
    /// it), and of nothing from before it held the gate.
    pub(super) fn check_turn_result(&mut self, rid: usize, who: &str, events: &[Value]) {
        let seqs: Vec<u64> = events
            .iter()
            .filter_map(|e| {
                e["id"]
                    .as_str()
                    .and_then(|id| self.checker.ids.get(id).copied())
            })
            .collect();
        if seqs.len() != events.len() || seqs.is_empty() {
            return; // already reported by inv_committed_before_wire
        }
        let first = seqs[0];
        let last = *seqs.last().expect("non-empty");
        let mut own_input = 1;
        while own_input < events.len()
            && events[own_input]["event_type"] == "tool.result"
            && events[own_input]["payload"]["dispatch"] == "client"
        {
            own_input += 1;
        }
        let key = self.actors[self.reqs[rid].actor].key_id.clone();
        let session = self.reqs[rid].session.clone();
        let in_window: Vec<u64> = self
            .store
            .events
            .range(first..=last)
            .filter(|(s, e)| {
                e.session_id == session
                    && e.client_key_id.as_deref() == Some(key.as_str())
                    // A sandbox error is the turn's own when an Auto tool
                    // failed to start one, else the outcome of the key's
                    // concurrent `startRemoteSandbox` (found by seed 983).
                    && (e.event_type != "session.sandbox.error" || seqs.contains(s))
                    && !matches!(
                        e.event_type.as_str(),
                        "session.driver.register"
                            | "session.join"
                            | "session.sandbox.available"
                            // Not produced by the request: background
                            // subagent ends (attributed to the launching
                            // key) and outcomes of the key's earlier
                            // sandbox RPCs.
                            | "session.subagent.completed"
                            | "session.subagent.failed"
                            | "session.subagent.cancelled"
                            | "session.sandbox.start"
                            | "session.sandbox.running"
                            | "session.sandbox.stop"
                            | "session.sandbox.stopped"
                    )
                    && !e.payload.contains("driver_turn_abandoned")
            })
            .map(|(s, _)| *s)
            .collect();
        if in_window != seqs {
            self.checker.fail(
                check::INV_TURN_STREAM,
                format!(
                    "{who}: result.events seqs {seqs:?} but the key's events in that window are {in_window:?}"
                ),
            );
        }
        let notified = self.reqs[rid].notified.clone();
        if let Some(n) = notified.iter().find(|n| **n < first) {
            self.checker.fail(
                check::INV_TURN_STREAM,
                format!(
                    "{who}: notified of seq {n}, before its own client.message.send (seq {first})"
                ),
            );
        }
        // An idempotent retry attached to the turn late, or had its answer
        // replayed: it was never streamed all of it.
        let partial = self.ext_has_siblings(rid);
        let missed: Vec<u64> = seqs[own_input..]
            .iter()
            .filter(|s| !partial && !notified.contains(s))
            .copied()
            .collect();
        if !missed.is_empty() {
            self.checker.fail(
                check::INV_TURN_STREAM,
                format!(
                    "{who}: turn events {missed:?} are in result.events but were never streamed"
                ),
            );
        }
        if let Some(n) = seqs[..own_input].iter().find(|s| notified.contains(s)) {
            self.checker.fail(
                check::INV_TURN_STREAM,
                format!("{who}: its own input event seq {n} was echoed on its stream"),
            );
        }
    }

    pub(super) fn on_event_frame(&mut self, rid: usize, who: &str, ev: &Value) {
        let Some(seq) = self.checker.on_wire_event(who, ev) else {
            return;
        };
        let session = self.reqs[rid].session.clone();
        if ev["session_id"].as_str() != Some(session.as_str()) {
            self.checker.fail(
                check::INV_STREAM_EXACTLY_ONCE,
                format!("{who}: event {} of another session", ev["id"]),
            );
        }
        let prev = self.reqs[rid].last_seq;
        if prev.is_some_and(|p| seq <= p) {
            self.checker.fail(
                check::INV_STREAM_EXACTLY_ONCE,
                format!("{who}: event seq {seq} after {prev:?} (duplicate or reordered)"),
            );
        }
        if matches!(self.reqs[rid].kind, Kind::Send { .. }) {
            self.reqs[rid].notified.push(seq);
        }
        let e = &mut self.reqs[rid].ext;
        e.saw_event = true;
        e.last_event_id = ev["id"].as_str().map(str::to_string);
        match self.reqs[rid].kind.clone() {
            Kind::Subscribe { .. } => {
                let expect_from = self.reqs[rid].expect_after.or(prev);
                if let Some(after) = expect_from {
                    let want = self.checker.next_in_session(&session, after);
                    if want != Some(seq) {
                        self.checker.fail(
                            check::INV_STREAM_EXACTLY_ONCE,
                            format!(
                                "{who}: got event seq {seq} ({}) but the next committed event after seq {after} is {want:?}",
                                ev["event_type"]
                            ),
                        );
                    }
                }
                self.reqs[rid].expect_after = None;
                let a = self.reqs[rid].actor;
                let id = ev["id"].as_str().unwrap_or("").to_string();
                self.actors[a].last_seen = Some((id, seq));
            }
            Kind::Send { nonce, .. }
                if ev["event_type"] == "client.message.send"
                    && ev["payload"].to_string().contains(nonce.as_str()) =>
            {
                self.checker.fail(
                    check::INV_TURN_STREAM,
                    format!("{who}: its own client.message.send was echoed on its stream"),
                );
            }
            _ => {}
        }
        self.reqs[rid].last_seq = Some(seq);
    }

    /// A request ended: response complete, connection lost, or abandoned by
    /// the client.
    pub(super) fn finish_req(&mut self, rid: usize, aborted: bool) {
        if self.reqs[rid].done || self.reqs[rid].lost {
            return;
        }
        let complete = !aborted
            && self
                .conns
                .get(&self.reqs[rid].conn)
                .is_some_and(|c| c.reader.is_done());
        if complete {
            self.reqs[rid].done = true;
        } else {
            self.reqs[rid].lost = true;
            self.reqs[rid].waiting = false;
        }
        let r = &self.reqs[rid];
        let line = format!(
            "req #{rid} {} status={:?} terminal={}",
            if complete { "done" } else { "lost" },
            r.status,
            r.terminal.as_ref().map(summarize).unwrap_or_default()
        );
        let actor = r.actor;
        self.t(line);
        if complete {
            self.check_events_page(rid);
        }
        self.ext_stream_ended(rid, complete);
        self.admin_req_finished(rid, complete);
        if actor != usize::MAX {
            self.actor_req_finished(rid, complete);
        }
    }

    pub(super) fn check_events_page(&mut self, rid: usize) {
        let Kind::EventsPage { after, limit } = self.reqs[rid].kind else {
            return;
        };
        if self.reqs[rid].status != Some(200) {
            return;
        }
        let who = format!("req #{rid} ({})", self.actor_name(self.reqs[rid].actor));
        let session = self.reqs[rid].session.clone();
        let body: Value = self.reqs[rid]
            .body
            .as_deref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let Some(items) = body["items"].as_array() else {
            self.checker.fail(
                check::INV_EVENTS_PAGE,
                format!("{who}: page without items: {body}"),
            );
            return;
        };
        if items.len() > limit {
            self.checker.fail(
                check::INV_EVENTS_PAGE,
                format!("{who}: {} items for limit {limit}", items.len()),
            );
        }
        let mut prev = after;
        for ev in items {
            let Some(seq) = self.checker.on_wire_event(&who, ev) else {
                return;
            };
            let want = self.checker.next_in_session(&session, prev);
            if want != Some(seq) {
                self.checker.fail(
                    check::INV_EVENTS_PAGE,
                    format!("{who}: page item seq {seq} but the next committed event after {prev} is {want:?}"),
                );
                return;
            }
            prev = seq;
        }
    }

    pub(super) fn actor_name(&self, a: usize) -> String {
        if a == usize::MAX {
            "admin".into()
        } else {
            self.actors[a].name.clone()
        }
    }
}
