//! Setting the world up and running it.

use super::driver::SimEvent;
use super::*;

impl World {
    // ---- setup ------------------------------------------------------------------

    /// Runs one request to completion with nothing else happening.
    pub(super) fn blocking(
        &mut self,
        listener: Listener,
        method: &str,
        path: &str,
        token: &str,
        body: &Value,
    ) -> (u16, Value) {
        let bytes = http::request(method, path, Some(token), Some(body.to_string().as_bytes()));
        let phase = std::mem::replace(&mut self.phase, Phase::Setup);
        let rid = self.start_req(usize::MAX, 0, "", Kind::Setup, listener, bytes);
        self.phase = phase;
        for _ in 0..100_000 {
            if self.reqs[rid].done || self.reqs[rid].lost || self.dead_engine {
                break;
            }
            if !self.step_event() {
                break;
            }
        }
        let r = &self.reqs[rid];
        let v = r
            .body
            .as_deref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        (r.status.unwrap_or(0), v)
    }

    pub(super) fn setup(&mut self) {
        let mut profile = json!({
            "name": "sim",
            "primary_provider": "main",
            "allowed_tools": CLIENT_TOOLS,
        });
        if self.swarm.has_fallback {
            profile["fallback_providers"] = json!(["backup"]);
        }
        crate::mcp::profile_fields(&self.swarm.mcp, &mut profile);
        crate::sandbox::profile_fields(&self.swarm.sandbox, &mut profile);
        let (st, p) = self.blocking(
            Listener::Admin,
            "POST",
            "/admin/v1/profiles",
            ADMIN_TOKEN,
            &profile,
        );
        if st != 201 {
            self.checker.fail(
                check::INV_LIVENESS,
                format!("setup: profile create answered {st} {p}"),
            );
            return;
        }
        let profile_id = p["id"].as_str().unwrap_or("").to_string();
        self.profile_id = profile_id.clone();
        for slot in 0..self.swarm.sessions {
            let compaction = if self.rng.chance(self.swarm.auto_compaction) {
                json!({"mode": "auto", "size": self.rng.range(1_000, 20_000)})
            } else {
                json!({"mode": "client"})
            };
            self.slots.push(Slot {
                current: None,
                dead: true,
                creating: false,
                generations: 0,
                failed_creates: 0,
                compaction,
            });
            let roles = std::iter::repeat_n(Role::Driver, self.swarm.drivers[slot]).chain(
                std::iter::repeat_n(Role::Observer, self.swarm.observers[slot]),
            );
            for (i, role) in roles.enumerate() {
                let name = format!(
                    "{}{}.{}",
                    if role == Role::Driver { "d" } else { "o" },
                    slot,
                    i
                );
                let body = json!({"name": name, "profile_id": profile_id});
                let (st, k) = self.blocking(
                    Listener::Admin,
                    "POST",
                    "/admin/v1/keys",
                    ADMIN_TOKEN,
                    &body,
                );
                if st != 201 {
                    self.checker.fail(
                        check::INV_LIVENESS,
                        format!("setup: key create answered {st} {k}"),
                    );
                    return;
                }
                let tools: Vec<&'static str> = if role == Role::Driver && self.rng.chance(0.8) {
                    CLIENT_TOOLS
                        .iter()
                        .copied()
                        .filter(|_| self.rng.chance(0.6))
                        .collect()
                } else {
                    Vec::new()
                };
                let slow = role == Role::Observer && self.rng.chance(self.swarm.slow_reader);
                self.actors.push(Actor {
                    name,
                    role,
                    slot,
                    client_key: k["key"].as_str().unwrap_or("").to_string(),
                    key_id: k["id"].as_str().unwrap_or("").to_string(),
                    tools,
                    joined: None,
                    session_key: None,
                    registered: false,
                    busy: None,
                    sub: None,
                    act_scheduled: false,
                    gone: false,
                    slow,
                    paused: None,
                    late_armed: false,
                    sends: 0,
                    last_seen: None,
                    final_send: false,
                    idle_conn: None,
                    ext: Default::default(),
                });
            }
        }
        self.t(format!("setup done: {} actors", self.actors.len()));
    }

    // ---- the run ---------------------------------------------------------------

    pub(super) fn run_all(&mut self, opts: &RunOpts) {
        self.t(format!("seed {} swarm {}", self.seed, self.swarm));
        self.setup();
        if !self.checker.violations.is_empty() {
            return;
        }
        self.phase = Phase::Main;
        for a in 0..self.actors.len() {
            let d = self.rng.range(0, 50);
            self.schedule_act(a, d);
        }
        if self.swarm.revoke > 0.0 || self.swarm.break_profile > 0.0 {
            self.after(1_000, Ev::Admin);
        }
        if self.swarm.transfer.any() {
            self.after(1_500, Ev::Transfer);
        }
        let steps = opts
            .max_steps
            .unwrap_or(self.swarm.steps)
            .min(self.swarm.steps);
        for _ in 0..steps {
            if self.dead_engine {
                break;
            }
            if self.rng.chance(self.swarm.crash) {
                self.crash();
            } else if self.shutdown_since.is_none() && self.rng.chance(self.swarm.shutdown) {
                self.begin_shutdown();
            }
            self.shutdown_progress();
            if !self.step_event() {
                break;
            }
            self.stats.main_steps += 1;
        }
        if opts.no_liveness || self.dead_engine {
            return;
        }
        self.liveness();
    }

    /// Processes the next scheduled event; false when nothing is left.
    pub(super) fn step_event(&mut self) -> bool {
        let Some((&(at, n), _)) = self.queue.iter().next() else {
            return false;
        };
        let ev = self.queue.remove(&(at, n)).expect("present");
        self.now_ms = self.now_ms.max(at);
        self.stats.steps += 1;
        self.checker.step = self.stats.steps;
        self.checker.now_ms = self.now_ms;
        match ev {
            Ev::Act(a) => {
                self.actors[a].act_scheduled = false;
                self.act(a);
            }
            Ev::Admin => self.admin_act(),
            Ev::Transfer => self.transfer_act(),
            Ev::Deliver(c) => self.on_deliver(c),
            Ev::ClientClose(c) => self.client_close(c),
            Ev::EngineClosed(c) => self.engine_closed(c),
            Ev::JobDone => self.job_done(),
            // What the engine closed reaches the core, which drops it.
            Ev::Provider { call, reply } if self.stream.aborted(call) => {
                self.t(format!("provider reply call={call} after its close"));
                self.event(SimEvent::Provider(call, reply));
            }
            Ev::Provider { call, reply } => {
                self.t(format!("in provider reply call={call}"));
                self.traffic.on_reply(call, &reply, self.now_ms);
                self.event(SimEvent::Provider(call, reply));
            }
            Ev::ProviderChunk { call, bytes } => {
                if !self.stream.aborted(call) {
                    self.t(format!(
                        "in provider chunk call={call} {} bytes",
                        bytes.len()
                    ));
                }
                self.event(SimEvent::ProviderChunk(call, bytes));
            }
            Ev::Flush(c) => self.on_flush(c),
            Ev::Flushed { conn, bytes } => {
                let known = self.conns.get(&conn).is_some_and(|c| !c.engine_told_closed);
                if let Some(conn) = self.core_conn(conn).filter(|_| known) {
                    self.input(Input::Flushed { conn, bytes });
                }
            }
            Ev::ClientRead(c) => self.on_client_read(c),
            Ev::Mcp { conn, event } => {
                if self.mcp.deliver(conn, &event, self.now_ms) {
                    self.t(format!(
                        "in mcp conn={conn} {}",
                        crate::mcp::describe_event(&event)
                    ));
                    self.event(SimEvent::Mcp(conn, event));
                }
            }
            Ev::Side {
                actor,
                session,
                what,
            } => self.on_side(actor, session, what),
            Ev::Sandbox { op, reply } => {
                if self.sandbox.deliver(op, &reply) {
                    self.t(format!("in sandbox op={op} {reply:?}"));
                    self.event(SimEvent::Sandbox(op, reply));
                }
            }
            Ev::Timer => self.on_timer(),
        }
        true
    }

    /// Process crash: everything not committed is gone; the engine restarts
    /// from the store exactly like io-smol does at startup.
    pub(super) fn crash(&mut self) {
        self.stats.crashes += 1;
        self.t("CRASH".into());
        // A commit in flight either made it or not (it is atomic).
        if let Some(Job::Commit { .. }) = self.running.front() {
            if self.rng.chance(0.5) {
                if let Some(Job::Commit { batch, writes, .. }) = self.running.pop_front() {
                    self.commit(batch, writes);
                }
            }
        }
        self.restart(false);
    }

    /// A stop signal reaches the core (`Input::Shutdown` to the engine);
    /// the restart follows once the core says the shutdown is over.
    pub(super) fn begin_shutdown(&mut self) {
        self.t("SHUTDOWN begins".into());
        self.shutdown_since = Some(self.now_ms);
        self.checker.shutting_down = true;
        self.event(SimEvent::Signal);
    }

    /// Completes a graceful shutdown once the core says it is over: no
    /// connection, no provider call, a quiet pipeline, or its budget
    /// (`SHUTDOWN_TIMEOUT_MS`) spent; the drain commits what is pending.
    pub(super) fn shutdown_progress(&mut self) {
        if self.shutdown_since.is_some() && !self.dead_engine {
            self.drain_and_restart();
        }
    }

    /// Rebuilds the engine from the store exactly like io-smol starts.
    /// After a graceful shutdown, connections the server already closed keep
    /// their unread bytes for the client.
    pub(super) fn restart(&mut self, graceful: bool) {
        self.stream.restart();
        self.traffic.restart(self.now_ms);
        self.shutdown_since = None;
        self.checker.shutting_down = false;
        self.running.clear();
        self.job_scheduled = false;
        let keep: BTreeSet<ConnId> = if graceful {
            self.conns
                .iter()
                .filter(|(_, c)| c.engine_told_closed)
                .map(|(id, _)| *id)
                .collect()
        } else {
            BTreeSet::new()
        };
        self.queue.retain(|_, ev| match ev {
            Ev::Act(_) | Ev::Admin | Ev::Transfer => true,
            Ev::ClientRead(c) => keep.contains(c),
            _ => false,
        });
        self.timer_at = None;
        self.checker.on_restart();
        self.ext.on_restart(&self.checker.by_session);
        let committed = self.checker.max_seq;
        self.transfer.copied_seqs.retain(|s| *s <= committed);
        self.epoch += 1;
        let lost: Vec<usize> = self
            .conns
            .iter()
            .filter(|(id, _)| !keep.contains(id))
            .flat_map(|(_, c)| c.all.iter().copied())
            .filter(|r| !self.reqs[*r].done && !self.reqs[*r].lost)
            .collect();
        self.conns.retain(|id, _| keep.contains(id));
        for r in self.reqs.iter_mut() {
            r.waiting = false;
        }
        let entropy = SimEntropy(self.rng.fork());
        let snapshot = self.store.snapshot();
        let sessions: BTreeSet<String> = snapshot.sessions.iter().map(|s| s.id.clone()).collect();
        self.checker.states = snapshot
            .sessions
            .iter()
            .map(|s| (s.id.clone(), s.state))
            .collect();
        self.mcp.on_restart(&self.checker.states);
        self.sandbox.on_restart();
        let config = self.config.clone();
        let now = self.now();
        let snapshot = self.store.snapshot_of(super::scope_of(&config));
        match catch_unwind(AssertUnwindSafe(|| {
            Engine::new(config, Box::new(entropy), snapshot, now)
        })) {
            Ok(e) => {
                self.core = crate::driver::new_core(
                    e,
                    &self.side,
                    super::SHUTDOWN_TIMEOUT_MS,
                    false,
                    self.faults,
                )
            }
            Err(p) => {
                self.engine_panicked(p);
                return;
            }
        }
        self.checker.check_acks(&sessions);
        self.t(format!(
            "RESTART epoch={} max_seq={}",
            self.epoch, self.checker.max_seq
        ));
        self.arm_timer();
        for rid in lost {
            self.t(format!("req #{rid} connection reset by the restart"));
            self.reqs[rid].lost = true;
            if self.reqs[rid].actor != usize::MAX {
                self.actor_req_finished(rid, false);
            }
        }
    }

    pub(super) fn liveness(&mut self) {
        if self.swarm.break_profile > 0.0 {
            // Whatever admin request may still be in flight, end repaired.
            let mut body =
                json!({"name": "sim", "primary_provider": "main", "allowed_tools": CLIENT_TOOLS});
            crate::mcp::profile_fields(&self.swarm.mcp, &mut body);
            crate::sandbox::profile_fields(&self.swarm.sandbox, &mut body);
            let path = format!("/admin/v1/profiles/{}", self.profile_id);
            let (st, _) = self.blocking(Listener::Admin, "PUT", &path, ADMIN_TOKEN, &body);
            self.profile_broken = st != 200;
        }
        self.phase = Phase::Liveness;
        self.swarm.calm();
        self.t("LIVENESS phase: faults off".into());
        self.queue.retain(|_, ev| !matches!(ev, Ev::ClientClose(_)));
        let mut stalled = Vec::new();
        for (id, c) in self.conns.iter_mut() {
            c.slow = false;
            if c.stalled_until > self.now_ms {
                c.stalled_until = 0;
                stalled.push(*id);
            }
        }
        for conn in stalled {
            self.after(0, Ev::ClientRead(conn));
        }
        for a in self.actors.iter_mut() {
            a.slow = false;
            a.ext.retry = None;
        }
        for a in 0..self.actors.len() {
            if self.actors[a].role == Role::Driver && !self.actors[a].gone {
                self.actors[a].final_send = true;
                self.actors[a].late_armed = true;
                if self.actors[a].busy.is_none() {
                    self.schedule_act(a, 0);
                }
            }
        }
        let start = self.now_ms;
        let horizon = start
            + self
                .swarm
                .provider_timeout_ms
                .max(self.config.provider_timeout_ms)
            + 3 * self.swarm.turn_timeout_ms
            + 120_000;
        let mut steps = 0;
        loop {
            if self.dead_engine || steps >= LIVENESS_MAX_STEPS {
                break;
            }
            self.shutdown_progress();
            if self.quiescent() {
                break;
            }
            match self.queue.keys().next() {
                Some(&(at, _)) if at <= horizon => {}
                _ => break,
            }
            if !self.step_event() {
                break;
            }
            steps += 1;
        }
        self.check_gapless_end();
        for rid in 0..self.reqs.len() {
            let r = &self.reqs[rid];
            if r.done || r.lost || matches!(r.kind, Kind::Subscribe { .. }) {
                continue;
            }
            let detail = format!(
                "req #{rid} ({} {:?} on {}) started at {} ms has neither a terminal frame nor a closed connection at {} ms (arrival {:?}, waiting {})",
                self.actor_name(r.actor),
                r.kind,
                r.session,
                r.started_ms,
                self.now_ms,
                r.arrival,
                r.waiting
            );
            self.checker.fail(check::INV_LIVENESS, detail);
        }
    }

    pub(super) fn quiescent(&self) -> bool {
        let open = self
            .reqs
            .iter()
            .any(|r| !r.done && !r.lost && !matches!(r.kind, Kind::Subscribe { .. }));
        let pending = self.actors.iter().any(|a| {
            !a.gone
                && a.role == Role::Driver
                && (a.final_send || a.paused.is_some())
                && !self.slot_hopeless(a.slot)
        });
        // A turn whose consumer left runs on: let it finish (seed 7350
        // ended with an MCP block of such a turn still unanswered).
        let running = self.checker.gates.values().any(|g| {
            matches!(
                g,
                check::Gate::Running { .. } | check::Gate::Compacting { .. }
            )
        });
        !open && !pending && !running && self.gapless_caught_up()
    }

    pub(super) fn slot_hopeless(&self, slot: usize) -> bool {
        let s = &self.slots[slot];
        s.dead && (s.generations >= MAX_GENERATIONS || s.failed_creates >= MAX_FAILED_CREATES)
    }

    pub(super) fn finish(mut self) -> Report {
        if !self.dead_engine {
            self.mcp.finish(self.now_ms, &mut self.checker);
            let closed: BTreeSet<String> = self
                .store
                .sessions
                .iter()
                .filter(|s| s.state == engine::store::SessionState::Closed)
                .map(|s| s.id.clone())
                .collect();
            let timeout = self.config.subagent_timeout_ms;
            self.sandbox
                .finish(self.now_ms, timeout, &closed, &mut self.checker);
        }
        let sb = self.sandbox.stats.clone();
        self.stats.sandbox_starts = sb.starts;
        self.stats.sandbox_execs = sb.execs;
        self.stats.sandbox_kills = sb.kills;
        self.stats.subagents = sb.subagents;
        self.t(format!("sandbox summary {sb:?}"));
        let m = self.mcp.stats.clone();
        self.stats.mcp_transports = m.transports;
        self.stats.mcp_calls = m.calls;
        self.stats.mcp_timeouts = m.timeouts;
        self.t(format!("mcp summary {m:?}"));
        self.stats.ext = self.ext.stats.clone();
        self.check_fork_parents();
        self.stats.transfer = self.transfer.stats.clone();
        self.stats.stream = self.stream.stats.clone();
        self.stats.traffic = self.traffic.stats.clone();
        self.t(format!("ext summary {:?}", self.ext.stats));
        // Fingerprint of the committed event log.
        let mut h = Fnv::default();
        for e in self.store.events.values() {
            h.write_field(&e.seq.to_le_bytes());
            h.write_field(e.id.as_bytes());
            h.write_field(e.session_id.as_bytes());
            h.write_field(e.client_key_id.as_deref().unwrap_or("").as_bytes());
            h.write_field(e.event_type.as_bytes());
            h.write_field(e.payload.as_bytes());
            h.write_field(e.created_at.as_bytes());
        }
        self.stats.events = self.store.events.len() as u64;
        self.stats.virtual_ms = self.now_ms;
        self.stats.sessions = self.slots.iter().map(|s| s.generations as u64).sum();
        Report {
            seed: self.seed,
            swarm: self.swarm.to_string(),
            violations: std::mem::take(&mut self.checker.violations),
            trace_hash: self.trace.hash.finish(),
            log_hash: h.finish(),
            stats: self.stats.clone(),
            trace: self.trace.lines.take().unwrap_or_default(),
        }
    }
}
