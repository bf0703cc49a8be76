//! The workload: drivers, observers and the operator.

use super::*;

impl World {
    // ---- actors -------------------------------------------------------------------

    pub(super) fn schedule_act(&mut self, a: usize, delay: u64) {
        if self.actors[a].act_scheduled || self.actors[a].gone {
            return;
        }
        self.actors[a].act_scheduled = true;
        self.after(delay, Ev::Act(a));
    }

    pub(super) fn think(&mut self) -> u64 {
        let t = self.swarm.think_ms;
        self.draw(t)
    }

    pub(super) fn rpc(
        &mut self,
        a: usize,
        kind: Kind,
        method: &str,
        params: Option<Value>,
        notification: bool,
    ) -> Option<usize> {
        let actor = &self.actors[a];
        let (Some(sid), Some(key)) = (actor.joined.clone(), actor.session_key.clone()) else {
            return None;
        };
        let mut call = json!({"jsonrpc": "2.0", "method": method});
        if !notification {
            call["id"] = json!(self.stats.requests + 1);
        }
        if let Some(p) = params {
            call["params"] = p;
        }
        let path = format!("/api/v1/sessions/{sid}/rpc");
        let bytes = http::request("POST", &path, Some(&key), Some(call.to_string().as_bytes()));
        let slot = actor.slot;
        let rid = self.start_req(a, slot, &sid, kind, Listener::Client, bytes);
        self.ext_tag(a, rid);
        Some(rid)
    }

    pub(super) fn act(&mut self, a: usize) {
        if self.actors[a].gone || self.dead_engine {
            return;
        }
        if self.phase == Phase::Liveness && self.actors[a].role == Role::Observer {
            return;
        }
        if self.actors[a].busy.is_some() {
            return;
        }
        let slot = self.actors[a].slot;
        // Session lifecycle: replace a dead session, join the current one.
        if self.slots[slot].dead {
            if self.slots[slot].creating || self.slot_hopeless(slot) {
                if self.phase == Phase::Liveness {
                    self.actors[a].final_send = false;
                    self.actors[a].paused = None;
                    return;
                }
                let d = 200 + self.think();
                return self.schedule_act(a, d);
            }
            if self.actors[a].role == Role::Driver {
                return self.create_session(a);
            }
            let d = 200 + self.think();
            return self.schedule_act(a, d);
        }
        let current = self.slots[slot].current.clone();
        if self.actors[a].joined != current {
            return self.join_session(a);
        }
        match self.actors[a].role {
            Role::Driver => self.driver_act(a),
            Role::Observer => self.observer_act(a),
        }
    }

    pub(super) fn tool_defs(tools: &[&str]) -> Value {
        Value::Array(
            tools
                .iter()
                .map(|t| json!({"name": t, "description": format!("sim tool {t}"), "input_schema": {"type": "object"}}))
                .collect(),
        )
    }

    pub(super) fn create_session(&mut self, a: usize) {
        let slot = self.actors[a].slot;
        self.slots[slot].creating = true;
        let mut body =
            json!({"tools": Self::tool_defs(&self.actors[a].tools), "client_version": "sim/1"});
        body["compaction"] = self.slots[slot].compaction.clone();
        crate::sandbox::declare(&self.swarm.sandbox, &mut body);
        let key = self.actors[a].client_key.clone();
        let bytes = http::request(
            "POST",
            "/api/v1/sessions",
            Some(&key),
            Some(body.to_string().as_bytes()),
        );
        let rid = self.start_req(a, slot, "", Kind::Create, Listener::Client, bytes);
        self.actors[a].busy = Some(rid);
    }

    pub(super) fn join_session(&mut self, a: usize) {
        let slot = self.actors[a].slot;
        let Some(sid) = self.slots[slot].current.clone() else {
            return;
        };
        let mut body = json!({"tools": Self::tool_defs(&self.actors[a].tools)});
        crate::sandbox::declare(&self.swarm.sandbox, &mut body);
        let key = self.actors[a].client_key.clone();
        let path = format!("/api/v1/sessions/{sid}/join");
        let bytes = http::request("POST", &path, Some(&key), Some(body.to_string().as_bytes()));
        let rid = self.start_req(a, slot, &sid, Kind::Join, Listener::Client, bytes);
        self.actors[a].busy = Some(rid);
    }

    pub(super) fn next_nonce(&mut self, a: usize) -> String {
        self.actors[a].sends += 1;
        format!("nonce:a{}.{};", a, self.actors[a].sends)
    }

    pub(super) fn driver_act(&mut self, a: usize) {
        let liveness = self.phase == Phase::Liveness;
        if !liveness && self.rng.chance(self.swarm.never_return / 10.0) {
            self.t(format!(
                "{} leaves and never comes back",
                self.actors[a].name
            ));
            self.actors[a].gone = true;
            return;
        }
        if !self.actors[a].registered
            || self.ext_needs_register(a)
            || (!liveness && self.rng.chance(0.02))
        {
            let pipeline = !liveness
                && self.actors[a].paused.is_none()
                && self.rng.chance(self.swarm.pipeline);
            self.force_keep_alive = pipeline;
            let params = self.ext_register_params(a);
            let rid = self.rpc(a, Kind::Register, "session.registerDriver", params, false);
            self.force_keep_alive = false;
            self.actors[a].busy = rid;
            if let (true, Some(rid)) = (pipeline, rid) {
                // registerDriver and sendMessage back to back on one
                // connection: the engine answers them in order.
                self.pipeline_on = Some(self.reqs[rid].conn);
                self.send_text(a);
                self.pipeline_on = None;
            }
            return;
        }
        if let Some((client_ids, server_ids)) = self.actors[a].paused.clone() {
            if self.ext_cancel_pause(a) {
                return;
            }
            return self.answer_pause(a, client_ids, server_ids);
        }
        if self.ext_driver_act(a) {
            return;
        }
        if liveness {
            if !self.actors[a].final_send {
                return;
            }
            self.actors[a].final_send = false;
            return self.send_text(a);
        }
        let r = self.rng.unit();
        let sw = &self.swarm;
        if r < sw.compact {
            let nonce = self.next_nonce(a);
            let params = if self.rng.chance(0.5) {
                Some(json!({"prompt": format!("summarise {nonce}")}))
            } else {
                None
            };
            let rid = self.rpc(a, Kind::Compact, "session.compact", params, false);
            self.actors[a].busy = rid;
        } else if r < sw.compact + sw.malformed_body {
            self.send_garbage(a);
        } else if r < sw.compact + sw.malformed_body + sw.update_tools {
            let tools: Vec<&'static str> = CLIENT_TOOLS
                .iter()
                .copied()
                .filter(|_| self.rng.chance(0.5))
                .collect();
            let params = json!({"tools": Self::tool_defs(&tools)});
            let rid = self.rpc(
                a,
                Kind::UpdateTools(tools),
                "session.updateClientTools",
                Some(params),
                false,
            );
            self.actors[a].busy = rid;
        } else if r < sw.compact + sw.malformed_body + sw.update_tools + sw.sandbox.rpc {
            self.sandbox_rpc(a);
        } else if r < sw.compact + sw.malformed_body + sw.update_tools + sw.sandbox.rpc + 0.004 {
            let sid = self.actors[a].joined.clone().unwrap_or_default();
            let key = self.actors[a].session_key.clone().unwrap_or_default();
            let path = format!("/api/v1/sessions/{sid}");
            let bytes = http::request("DELETE", &path, Some(&key), None);
            let slot = self.actors[a].slot;
            let rid = self.start_req(a, slot, &sid, Kind::Close, Listener::Client, bytes);
            self.actors[a].busy = Some(rid);
        } else {
            self.send_text(a);
        }
    }

    /// A remote sandbox RPC: mostly start/exec/stop, sometimes a bogus
    /// image or a subagent cancel.
    pub(super) fn sandbox_rpc(&mut self, a: usize) {
        let sw = &self.swarm.sandbox;
        let r = self.rng.unit();
        let (method, params) = if r < 0.3 {
            let image = if self.rng.chance(0.1) {
                "not-listed:1".to_string()
            } else {
                self.rng.pick(&sw.images).clone()
            };
            ("session.startRemoteSandbox", json!({"image": image}))
        } else if r < 0.7 {
            let n = self.stats.requests;
            (
                "session.execRemoteSandbox",
                json!({"command": format!("echo m{n}")}),
            )
        } else if r < 0.85 {
            ("session.stopRemoteSandbox", json!({}))
        } else {
            let sid = self.actors[a].joined.clone().unwrap_or_default();
            let id = self.sandbox.pick_subagent(&sid);
            ("session.cancelSubagent", json!({"subagent_id": id}))
        };
        let rid = self.rpc(a, Kind::Sandbox, method, Some(params), false);
        self.actors[a].busy = rid;
    }

    pub(super) fn send_text(&mut self, a: usize) {
        let nonce = self.next_nonce(a);
        let content = if self.rng.chance(0.5) {
            json!(format!("hello {nonce} from {}", self.actors[a].name))
        } else {
            json!([{"type": "text", "text": format!("blocks {nonce}")}])
        };
        self.send_message(a, nonce, content, false);
    }

    pub(super) fn send_message(
        &mut self,
        a: usize,
        nonce: String,
        content: Value,
        continuation: bool,
    ) {
        let idem = self.ext_key(a, &nonce, &content, continuation);
        let mut params = json!({"message": {"role": "user", "content": content}});
        if let Some(i) = &idem {
            params["idempotency_key"] = json!(i.id.2);
        }
        let notification = self.phase == Phase::Main && self.rng.chance(0.03);
        let rid = self.rpc(
            a,
            Kind::Send {
                nonce,
                continuation,
            },
            "session.sendMessage",
            Some(params),
            notification,
        );
        self.actors[a].busy = rid;
        let Some(rid) = rid else {
            return;
        };
        self.ext_sent(a, rid, idem);
        let conn = self.reqs[rid].conn;
        if self.rng.chance(self.swarm.disconnect_queued) {
            let d = self.rng.range(1, 40);
            self.after(d, Ev::ClientClose(conn));
        } else if self.rng.chance(self.swarm.disconnect_streaming) {
            let hi = self.swarm.provider_latency_ms.1 * 2 + 50;
            let d = self.rng.range(1, hi);
            self.after(d, Ev::ClientClose(conn));
        }
    }

    pub(super) fn send_garbage(&mut self, a: usize) {
        let sid = self.actors[a].joined.clone().unwrap_or_default();
        let key = self.actors[a].session_key.clone().unwrap_or_default();
        let path = format!("/api/v1/sessions/{sid}/rpc");
        let nonce = self.next_nonce(a);
        let bodies: [Vec<u8>; 7] = [
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":".to_vec(),
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.subscribe\"}]".to_vec(),
            b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"session.sendMessage\"}".to_vec(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.teleport\"}".to_vec(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.sendMessage\",\"params\":{}}".to_vec(),
            json!({"jsonrpc":"2.0","id":1,"method":"session.sendMessage","params":{"message":{"content":[{"type":"tool_result","tool_use_id":"toolu_nope","content":nonce}]}}}).to_string().into_bytes(),
            json!({"jsonrpc":"2.0","id":1,"method":"session.sendMessage","params":{"message":{"role":7,"content":"x"}}}).to_string().into_bytes(),
        ];
        let i = self.rng.index(bodies.len());
        let mut bytes = http::request("POST", &path, Some(&key), Some(&bodies[i]));
        if self.rng.chance(0.1) {
            bytes = b"BREW /coffee HTCPCP/1.0\r\n\r\n".to_vec();
        }
        let slot = self.actors[a].slot;
        let rid = self.start_req(a, slot, &sid, Kind::Garbage, Listener::Client, bytes);
        self.ext_tag(a, rid);
        self.actors[a].busy = Some(rid);
    }

    pub(super) fn answer_pause(
        &mut self,
        a: usize,
        client_ids: Vec<String>,
        server_ids: Vec<String>,
    ) {
        let liveness = self.phase == Phase::Liveness;
        if !liveness && !self.actors[a].late_armed && self.rng.chance(self.swarm.answer_late) {
            self.actors[a].late_armed = true;
            let t = self.swarm.turn_timeout_ms;
            let d = t + self.rng.range(0, t);
            self.t(format!(
                "{} will answer its pause late (+{d} ms)",
                self.actors[a].name
            ));
            return self.schedule_act(a, d);
        }
        self.actors[a].late_armed = false;
        let nonce = self.next_nonce(a);
        let result = |id: &str, n: &str| json!({"type": "tool_result", "tool_use_id": id, "content": format!("result for {id} {n}")});
        let sw = self.swarm.clone();
        let r = if liveness { 1.0 } else { self.rng.unit() };
        let mut blocks: Vec<Value> = client_ids.iter().map(|id| result(id, &nonce)).collect();
        let content = if r < sw.answer_plain {
            json!(format!("never mind {nonce}"))
        } else if r < sw.answer_plain + sw.answer_missing && !blocks.is_empty() {
            let i = self.rng.index(blocks.len());
            blocks.remove(i);
            blocks.push(json!({"type": "text", "text": format!("partial {nonce}")}));
            Value::Array(blocks)
        } else if r < sw.answer_plain + sw.answer_missing + sw.answer_duplicate
            && !blocks.is_empty()
        {
            let dup = blocks[0].clone();
            blocks.push(dup);
            blocks.push(json!({"type": "text", "text": format!("dup {nonce}")}));
            Value::Array(blocks)
        } else if r < sw.answer_plain + sw.answer_missing + sw.answer_duplicate + sw.answer_wrong_id
        {
            blocks.push(result("toolu_bogus", &nonce));
            blocks.push(json!({"type": "text", "text": format!("wrong {nonce}")}));
            Value::Array(blocks)
        } else {
            // Correct; sometimes also answering server-dispatched ids
            // (those copies are dropped by the merge).
            if !liveness && self.rng.chance(0.2) {
                for id in &server_ids {
                    blocks.push(result(id, &nonce));
                }
            }
            blocks.push(json!({"type": "text", "text": format!("done {nonce}")}));
            Value::Array(blocks)
        };
        self.actors[a].paused = None;
        self.send_message(a, nonce, content, true);
    }

    pub(super) fn observer_act(&mut self, a: usize) {
        if self.actors[a].sub.is_none() {
            let since = match self.actors[a].last_seen.clone() {
                _ if self.rng.chance(self.swarm.since_bogus) => {
                    Some("evt_00000000000000000000000000000000".to_string())
                }
                Some((id, _)) if self.rng.chance(0.8) => Some(id),
                _ => None,
            };
            let expect_after = match &since {
                Some(id) => Some(self.checker.ids.get(id).copied().unwrap_or(0)),
                None => None,
            };
            let mut params = since.as_ref().map(|s| json!({"since_event_id": s}));
            let (ext, gapless, marker) = self.ext_subscribe();
            let deltas = ext
                .as_ref()
                .is_some_and(|n| n.to_string().contains("turn.deltas"));
            if let Some(names) = ext {
                params.get_or_insert_with(|| json!({}))["extensions"] = names;
            }
            let rid = self.rpc(
                a,
                Kind::Subscribe { since },
                "session.subscribe",
                params,
                false,
            );
            if let Some(rid) = rid {
                self.reqs[rid].ext.gapless = gapless;
                if deltas {
                    let e = &mut self.reqs[rid].ext;
                    e.may = e.may.with(proto::jsonrpc::Extension::TurnDeltas);
                }
                self.reqs[rid].ext.marker_asked = marker;
                self.ext.stats.gapless_subs += gapless as u64;
                // An id from a previous session generation replays from the
                // first event of this one.
                let sid = self.reqs[rid].session.clone();
                let foreign = expect_after.is_some_and(|s| {
                    s != 0
                        && self
                            .checker
                            .by_session
                            .get(&sid)
                            .is_none_or(|v| v.binary_search(&s).is_err())
                });
                self.reqs[rid].expect_after = if foreign { Some(0) } else { expect_after };
                self.actors[a].sub = Some(rid);
                if self.rng.chance(self.swarm.disconnect_streaming) {
                    let conn = self.reqs[rid].conn;
                    let d = self.rng.range(10, 5_000);
                    self.after(d, Ev::ClientClose(conn));
                }
            }
            let d = self.think() + 50;
            return self.schedule_act(a, d);
        }
        if self.ext_stall(a) {
            let d = self.think() + 100;
            return self.schedule_act(a, d);
        }
        let r = self.rng.unit();
        if r < self.swarm.unsubscribe {
            let notification = self.rng.chance(0.3);
            let rid = self.rpc(
                a,
                Kind::Unsubscribe,
                "session.unsubscribe",
                None,
                notification,
            );
            self.actors[a].busy = rid;
        } else if r < self.swarm.unsubscribe + self.swarm.events_page {
            let sid = self.actors[a].joined.clone().unwrap_or_default();
            let key = self.actors[a].session_key.clone().unwrap_or_default();
            let seqs = self
                .checker
                .by_session
                .get(&sid)
                .cloned()
                .unwrap_or_default();
            let after = if seqs.is_empty() || self.rng.chance(0.3) {
                0
            } else {
                seqs[self.rng.index(seqs.len())]
            };
            let limit = self.rng.range(1, 60) as usize;
            let path = if after == 0 {
                format!("/api/v1/sessions/{sid}/events?limit={limit}")
            } else {
                format!("/api/v1/sessions/{sid}/events?limit={limit}&cursor={after}")
            };
            let bytes = http::request("GET", &path, Some(&key), None);
            let slot = self.actors[a].slot;
            let rid = self.start_req(
                a,
                slot,
                &sid,
                Kind::EventsPage { after, limit },
                Listener::Client,
                bytes,
            );
            self.actors[a].busy = Some(rid);
        } else {
            let d = self.think() + 100;
            self.schedule_act(a, d);
        }
    }

    /// The operator: revokes a participant's client key (which may close
    /// sessions), or breaks / repairs the profile's primary provider.
    pub(super) fn admin_act(&mut self) {
        if self.phase != Phase::Main || self.dead_engine {
            return;
        }
        if self.profile_broken || self.rng.chance(self.swarm.break_profile) {
            let broken = !self.profile_broken;
            let mut body = json!({
                "name": "sim",
                "primary_provider": if broken { "ghost" } else { "main" },
                "allowed_tools": CLIENT_TOOLS,
            });
            if self.swarm.has_fallback {
                body["fallback_providers"] = json!(["backup"]);
            }
            crate::mcp::profile_fields(&self.swarm.mcp, &mut body);
            crate::sandbox::profile_fields(&self.swarm.sandbox, &mut body);
            let path = format!("/admin/v1/profiles/{}", self.profile_id);
            let bytes = http::request(
                "PUT",
                &path,
                Some(ADMIN_TOKEN),
                Some(body.to_string().as_bytes()),
            );
            self.start_req(
                usize::MAX,
                0,
                "",
                Kind::PutProfile { broken },
                Listener::Admin,
                bytes,
            );
        } else if self.rng.chance(self.swarm.revoke) {
            let live: Vec<usize> = (0..self.actors.len())
                .filter(|a| !self.actors[*a].gone)
                .collect();
            if !live.is_empty() {
                let a = live[self.rng.index(live.len())];
                let path = format!("/admin/v1/keys/{}", self.actors[a].key_id);
                let bytes = http::request("DELETE", &path, Some(ADMIN_TOKEN), None);
                self.start_req(usize::MAX, 0, "", Kind::Revoke(a), Listener::Admin, bytes);
            }
        }
        let d = self.rng.range(200, 3_000);
        self.after(d, Ev::Admin);
    }

    pub(super) fn admin_req_finished(&mut self, rid: usize, complete: bool) {
        let status = self.reqs[rid].status;
        match self.reqs[rid].kind {
            Kind::Revoke(a) if complete && status == Some(204) => {
                self.t(format!("{} was revoked", self.actors[a].name));
                self.actors[a].gone = true;
            }
            Kind::PutProfile { broken } if complete && status == Some(200) => {
                self.profile_broken = broken;
            }
            Kind::Fork(_) | Kind::Export | Kind::Import(_) => self.transfer_finished(rid, complete),
            _ => {}
        }
    }

    /// A 401 for a key the actor was given: only legitimate once the client
    /// key is revoked (committed before the 401 could be released). The
    /// actor then stops for good (the operator's answer may have been lost
    /// in a crash).
    pub(super) fn on_unauthorized(&mut self, a: usize, rid: usize) {
        let key_id = &self.actors[a].key_id;
        let revoked = self
            .store
            .keys
            .iter()
            .any(|k| &k.id == key_id && k.deleted_at.is_some());
        if !revoked {
            self.checker.fail(
                check::INV_AUTH_CONSISTENT,
                format!(
                    "req #{rid} ({}) answered 401 but its client key {key_id} is not revoked",
                    self.actors[a].name
                ),
            );
        }
        self.t(format!("{} is unauthorized and stops", self.actors[a].name));
        self.actors[a].gone = true;
    }

    pub(super) fn mark_dead(&mut self, slot: usize, sid: &str) {
        if self.slots[slot].current.as_deref() == Some(sid) && !self.slots[slot].dead {
            self.t(format!("slot {slot}: session {sid} is no longer open"));
            self.slots[slot].dead = true;
        }
    }

    pub(super) fn actor_req_finished(&mut self, rid: usize, complete: bool) {
        let a = self.reqs[rid].actor;
        let slot = self.reqs[rid].slot;
        let sid = self.reqs[rid].session.clone();
        let kind = self.reqs[rid].kind.clone();
        let status = self.reqs[rid].status;
        let terminal = self.reqs[rid].terminal.clone();
        let body: Value = self.reqs[rid]
            .body
            .as_deref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let err = terminal
            .as_ref()
            .and_then(|t| t["error"]["message"].as_str())
            .unwrap_or("")
            .to_string();
        if err.contains("not open") || err.contains("no longer exists") {
            self.mark_dead(slot, &sid);
        }
        if complete && status == Some(401) && kind != Kind::Garbage {
            self.on_unauthorized(a, rid);
        }
        if self.actors[a].sub == Some(rid) {
            self.actors[a].sub = None;
        }
        if self.actors[a].busy == Some(rid) {
            self.actors[a].busy = None;
        }
        if self.ext_req_finished(rid, complete) {
            return; // a side request: the actor's own flow goes on
        }
        match kind {
            Kind::Create => {
                self.slots[slot].creating = false;
                if status != Some(201) {
                    self.slots[slot].failed_creates += 1;
                }
                if complete && status == Some(201) {
                    let new_sid = body["session_id"].as_str().unwrap_or("").to_string();
                    self.checker.acked_sessions.insert(new_sid.clone());
                    let s = &mut self.slots[slot];
                    s.current = Some(new_sid.clone());
                    s.dead = false;
                    s.generations += 1;
                    let actor = &mut self.actors[a];
                    actor.joined = Some(new_sid);
                    actor.session_key = body["session_key"].as_str().map(str::to_string);
                    actor.registered = false;
                    actor.paused = None;
                }
            }
            Kind::Join => {
                if complete && status == Some(201) {
                    let actor = &mut self.actors[a];
                    actor.joined = Some(sid.clone());
                    actor.session_key = body["session_key"].as_str().map(str::to_string);
                    actor.registered = false;
                    actor.paused = None;
                    actor.last_seen = None;
                } else if matches!(status, Some(404) | Some(409)) {
                    self.mark_dead(slot, &sid);
                }
            }
            Kind::Register
                if terminal
                    .as_ref()
                    .is_some_and(|t| t["result"]["registered"] == true) =>
            {
                self.actors[a].registered = true;
            }
            Kind::Send { continuation, .. } => {
                if err.contains("registerDriver") {
                    self.actors[a].registered = false;
                }
                if let Some(t) = &terminal {
                    let msg = &t["result"]["message"];
                    if msg.is_object() {
                        let content = &msg["content"];
                        let client_ids = check::client_tool_ids(content);
                        let server_ids: Vec<String> = content
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter(|b| {
                                        b["type"] == "tool_use" && b["dispatch"] != "client"
                                    })
                                    .filter_map(|b| b["id"].as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                        if client_ids.is_empty() {
                            self.stats.turns_completed += 1;
                            self.actors[a].paused = None;
                            if content.to_string().contains(engine_unavailable()) {
                                self.mark_dead(slot, &sid);
                            }
                        } else {
                            self.stats.pauses += 1;
                            self.actors[a].paused = Some((client_ids, server_ids));
                        }
                    } else if continuation && err.contains("no paused turn") {
                        self.actors[a].paused = None;
                    } else if err.contains("merge invalid") {
                        self.mark_dead(slot, &sid);
                    }
                } else if !complete {
                    // Outcome unknown (connection lost): forget any pause.
                    self.actors[a].paused = None;
                }
                if self.phase == Phase::Liveness && !complete && !self.actors[a].gone {
                    // Only possible through a server-side close: retry once.
                    self.actors[a].final_send = self.actors[a].paused.is_none();
                }
            }
            Kind::UpdateTools(tools)
                if terminal.as_ref().is_some_and(|t| t.get("result").is_some()) =>
            {
                self.actors[a].tools = tools;
            }
            Kind::Close if complete && status == Some(200) => {
                self.mark_dead(slot, &sid);
            }
            _ => {}
        }
        let mut d = self.think();
        if !complete && self.shutdown_since.is_some() {
            // The server refuses connections while it drains (which an MCP
            // connect may make last): back off instead of spinning.
            d += 100;
        }
        self.schedule_act(a, d);
    }
}
