//! A replica process of the replica simulation, as io-smol drives one:
//! start (a fencing token, a lane, the engine restored from the
//! database), its inputs, its outputs through the production pipeline, its
//! store jobs against the simulated database, the lease watch and the
//! renewer, forwarding to another replica, and its exit.

use engine::pipeline::{Delivery, Job, Pipeline, Routed};
use engine::replicas::ReplicaSettings;
use engine::store::SnapshotScope;
use engine::{Engine, Input, Listener, MonoMs, Now, ProviderReply, UnixMs};

use super::clients::provider_text;
use super::db::Refused;
use super::{Ev, Proc, ProcEv, Relay, ReplicaWorld, Route, LANES};
use crate::rng::SimEntropy;

impl ReplicaWorld {
    fn now_of(&self) -> Now {
        Now {
            mono: MonoMs(self.now),
            unix: UnixMs(self.unix0 + self.now),
        }
    }

    fn proc_at(&mut self, r: usize, t: u64, ev: ProcEv) {
        let token = self.procs[r].token;
        self.at(t, Ev::Proc { r, token, ev });
    }

    /// A new process for replica `r`: a fresh token, the lowest free lane
    /// (else a retry later), the engine restored from the database.
    pub(super) fn start_process(&mut self, r: usize) {
        if self.procs[r].token != 0 {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        let lease = self.sw.lease_ms;
        let Some(lane) = self.db.claim_lane(token, r, lease, self.now) else {
            let t = self.now + self.rng.range(100, 1_000);
            self.at(t, Ev::Restart(r));
            return;
        };
        let mut config = self.config.clone();
        config.replica = Some(ReplicaSettings {
            slot: lane,
            lanes: LANES,
        });
        #[allow(unused_mut)]
        let mut pipe = Pipeline::fenced();
        #[cfg(feature = "planted-bugs")]
        {
            config.planted = self.bug;
            pipe.faults = engine::faults::Faults::planted(self.bug);
        }
        let snapshot = self.db.store.snapshot_of(SnapshotScope::Full);
        let entropy = Box::new(SimEntropy(self.entropy.fork()));
        let engine = Engine::new(config, entropy, snapshot, self.now_of());
        self.procs[r] = Proc {
            token,
            engine: Some(engine),
            pipe,
            lane,
            last_ok: self.now,
            ..Proc::dead()
        };
        self.t(format!("START r{r} process {token} lane {lane}"));
        self.proc_at(r, self.now + lease / 3, ProcEv::Renew);
        self.arm_timer(r);
    }

    /// The process of replica `r` exits (killed, fenced, or its lease
    /// watch fired): its connections close, the relays it runs end, a
    /// commit in flight may or may not have reached the database.
    pub(super) fn exit(&mut self, r: usize, why: &str) {
        let token = self.procs[r].token;
        if token == 0 {
            return;
        }
        self.t(format!("EXIT r{r} process {token}: {why}"));
        if why == "killed" && self.rng.chance(0.5) {
            if let Some(Job::Commit { writes, fence, .. }) = self.procs[r].running.front() {
                let (writes, fence) = (writes.clone(), fence.clone());
                let who = (token, r, self.procs[r].lane);
                let lease = self.sw.lease_ms;
                let _ = self
                    .db
                    .commit(&writes, fence.as_ref(), who, lease, self.now);
            }
        }
        let routes = std::mem::take(&mut self.procs[r].routes);
        self.procs[r] = Proc::dead();
        for route in routes.into_values() {
            match route {
                Route::Client(gid) => self.client_closed(gid),
                Route::Relay(id) => self.relay_owner_closed(id),
            }
        }
        let ids: Vec<u64> = (self.relays.iter())
            .filter(|(_, x)| x.via == r && !x.done)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(x) = self.relays.get_mut(&id) {
                x.done = true;
                let (gid, owner, owner_token, conn) =
                    (x.client_conn, x.owner, x.owner_token, x.owner_conn);
                self.client_closed(gid);
                if self.procs[owner].token == owner_token {
                    self.proc_at(owner, self.now + 1, ProcEv::Closed { conn });
                }
            }
        }
        let t = self.now + self.rng.range(50, 3_000);
        self.at(t, Ev::Restart(r));
    }

    /// The lease watch: `true` (after exiting) when the last renewal is
    /// 3/4 of the lease ago.
    fn stale_exit(&mut self, r: usize, before: &str) -> bool {
        let since = self.now.saturating_sub(self.procs[r].last_ok);
        if since * 4 >= self.sw.lease_ms * 3 {
            self.exit(
                r,
                &format!("lease watch ({since} ms since renewal) before {before}"),
            );
            return true;
        }
        false
    }

    pub(super) fn proc_event(&mut self, r: usize, ev: ProcEv) {
        match ev {
            ProcEv::Thaw => {
                self.t(format!("THAW r{r}"));
                self.procs[r].frozen = false;
                let token = self.procs[r].token;
                for ev in std::mem::take(&mut self.procs[r].deferred) {
                    if self.procs[r].token != token {
                        break;
                    }
                    self.proc_event(r, ev);
                }
            }
            ProcEv::Renew => {
                if self.stale_exit(r, "renewing") {
                    return;
                }
                let p = &self.procs[r];
                let lease = self.sw.lease_ms;
                if self.db.renew(p.token, p.lane, lease, self.now) {
                    self.procs[r].last_ok = self.now;
                    self.proc_at(r, self.now + lease / 3, ProcEv::Renew);
                } else {
                    self.exit(r, "lane taken over");
                }
            }
            ProcEv::Arrive { conn, bytes } => {
                let listener = Listener::Client;
                self.input(r, Input::Accepted { conn, listener });
                self.input(r, Input::Received { conn, bytes });
            }
            ProcEv::Flushed { conn, bytes } => {
                if self.procs[r].routes.contains_key(&conn) {
                    self.input(r, Input::Flushed { conn, bytes });
                }
            }
            ProcEv::Closed { conn } => {
                if self.procs[r].routes.remove(&conn).is_some() {
                    self.input(r, Input::Closed { conn });
                }
            }
            ProcEv::Provider { call, reply } => self.input(r, Input::ProviderDone { call, reply }),
            ProcEv::Timer => {
                self.procs[r].timer_at = None;
                let now = self.now_of();
                if let Some(e) = self.procs[r].engine.as_mut() {
                    if e.poll_timeout().is_some_and(|t| t <= now.mono) {
                        e.handle_timeout(now);
                    }
                }
                self.drain(r);
            }
            ProcEv::JobDone => self.job_done(r),
        }
    }

    fn input(&mut self, r: usize, input: Input) {
        let now = self.now_of();
        let Some(e) = self.procs[r].engine.as_mut() else {
            return;
        };
        e.handle_input(now, input);
        self.drain(r);
    }

    /// Every output of the engine through the pipeline, then the store.
    fn drain(&mut self, r: usize) {
        loop {
            let token = self.procs[r].token;
            let Some(out) = self.procs[r].engine.as_mut().and_then(|e| e.poll_output()) else {
                break;
            };
            if let Some(Routed::Dispatch(d)) = self.procs[r].pipe.route(out) {
                self.dispatch(r, d);
            }
            if self.procs[r].token != token {
                return;
            }
        }
        self.submit(r);
        self.arm_timer(r);
    }

    fn arm_timer(&mut self, r: usize) {
        let Some(t) = self.procs[r].engine.as_ref().and_then(|e| e.poll_timeout()) else {
            return;
        };
        if self.procs[r].timer_at.is_none_or(|at| t.0 < at) {
            self.procs[r].timer_at = Some(t.0);
            self.proc_at(r, t.0, ProcEv::Timer);
        }
    }

    /// The store worker takes the next submission when idle; the store
    /// thread's lease watch runs before a commit or a claim is sent.
    fn submit(&mut self, r: usize) {
        if !self.procs[r].running.is_empty() {
            return;
        }
        let Some(jobs) = self.procs[r].pipe.take_submission() else {
            return;
        };
        let writes = jobs.iter().any(|j| {
            matches!(
                j,
                Job::Commit { .. }
                    | Job::Read {
                        read: engine::StoreRead::ClaimLease { .. },
                        ..
                    }
            )
        });
        if writes && self.stale_exit(r, "a store job") {
            return;
        }
        self.procs[r].running = jobs.into();
        self.next_job(r);
    }

    fn next_job(&mut self, r: usize) {
        if self.procs[r].running.is_empty() {
            return;
        }
        let (lo, hi) = self.sw.db_latency_ms;
        let t = self.now + self.rng.range(lo, hi);
        self.proc_at(r, t, ProcEv::JobDone);
    }

    /// The database executes the job at the head of the submission now.
    fn job_done(&mut self, r: usize) {
        let Some(job) = self.procs[r].running.pop_front() else {
            return;
        };
        let token = self.procs[r].token;
        let who = (token, r, self.procs[r].lane);
        let lease = self.sw.lease_ms;
        match job {
            Job::Commit {
                batch,
                writes,
                fence,
            } => match self
                .db
                .commit(&writes, fence.as_ref(), who, lease, self.now)
            {
                Ok(()) => {
                    let released = self.procs[r].pipe.committed(batch);
                    for d in released {
                        self.dispatch(r, d);
                        if self.procs[r].token != token {
                            return;
                        }
                    }
                }
                Err(Refused::Fenced(what)) => return self.exit(r, &format!("fenced: {what}")),
                Err(Refused::Duplicate(seq)) => {
                    return self.exit(r, &format!("duplicate key: seq {seq}"))
                }
            },
            Job::Read { id, read } => {
                self.procs[r].pipe.read_done();
                match self.db.read(&read, who, lease, self.now) {
                    Ok(result) => {
                        let result = Ok(result);
                        self.input(r, Input::ReadDone { id, result });
                        if self.procs[r].token != token {
                            return;
                        }
                    }
                    Err(Refused::Fenced(what)) => return self.exit(r, &format!("fenced: {what}")),
                    Err(Refused::Duplicate(_)) => return self.exit(r, "claim failed"),
                }
            }
            Job::Activity => {}
        }
        if self.procs[r].running.is_empty() {
            self.drain(r);
        } else {
            self.next_job(r);
        }
    }

    /// A delivery leaves the process: the driver's lease watch first.
    fn dispatch(&mut self, r: usize, d: Delivery) {
        if self.stale_exit(r, "revealing") {
            return;
        }
        match d {
            Delivery::Send { conn, bytes } => {
                let n = bytes.len();
                match self.procs[r].routes.get(&conn).copied() {
                    Some(Route::Client(gid)) => self.client_bytes(gid, &bytes),
                    Some(Route::Relay(id)) => self.relay_bytes(id, &bytes),
                    None => return,
                }
                self.proc_at(r, self.now + 1, ProcEv::Flushed { conn, bytes: n });
            }
            Delivery::Close { conn } => {
                match self.procs[r].routes.get(&conn).copied() {
                    Some(Route::Client(gid)) => self.client_closed(gid),
                    Some(Route::Relay(id)) => self.relay_owner_closed(id),
                    None => return,
                }
                self.proc_at(r, self.now + 1, ProcEv::Closed { conn });
            }
            Delivery::Call(call) => {
                self.provider_calls += 1;
                let (lo, hi) = self.sw.provider_latency_ms;
                let t = self.now + self.rng.range(lo, hi);
                let reply = ProviderReply::Http {
                    status: 200,
                    body: provider_text(self.provider_calls),
                    advice: Default::default(),
                };
                let ev = ProcEv::Provider {
                    call: call.id,
                    reply,
                };
                self.proc_at(r, t, ev);
            }
            Delivery::Forward(f) => {
                let Some(Route::Client(gid)) = self.procs[r].routes.remove(&f.conn) else {
                    return;
                };
                self.forward(r, gid, f);
            }
        }
    }

    /// Relays client connection `gid` to the owner `f.to` names.
    fn forward(&mut self, via: usize, gid: u64, f: engine::replicas::Forward) {
        let owner = (f.to.strip_prefix('r'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|o| *o < self.procs.len());
        let Some(owner) = owner.filter(|o| self.procs[*o].token != 0) else {
            self.client_bytes(gid, &f.unreachable);
            self.client_closed(gid);
            return;
        };
        let id = self.next_relay;
        self.next_relay += 1;
        let owner_conn = self.new_proc_conn(owner, Route::Relay(id));
        let owner_token = self.procs[owner].token;
        self.t(format!("relay {id}: r{via} -> r{owner} (conn {gid})"));
        self.relays.insert(
            id,
            Relay {
                client_conn: gid,
                via,
                owner,
                owner_token,
                owner_conn,
                got_bytes: false,
                unreachable: f.unreachable,
                done: false,
            },
        );
        let t = self.now + 1;
        let ev = ProcEv::Arrive {
            conn: owner_conn,
            bytes: f.request,
        };
        self.proc_at(owner, t, ev);
        let timeout = self.now + self.sw.forward_timeout_ms;
        self.at(timeout, Ev::RelayTimeout(id));
    }

    fn relay_bytes(&mut self, id: u64, bytes: &[u8]) {
        let Some(x) = self.relays.get_mut(&id).filter(|x| !x.done) else {
            return;
        };
        x.got_bytes = true;
        let gid = x.client_conn;
        self.client_bytes(gid, bytes);
    }

    /// The owner closed (or died): the client's connection closes too;
    /// with nothing relayed yet it gets the `503` first.
    pub(super) fn relay_owner_closed(&mut self, id: u64) {
        let Some(x) = self.relays.get_mut(&id).filter(|x| !x.done) else {
            return;
        };
        x.done = true;
        let (gid, got, unreachable) = (x.client_conn, x.got_bytes, x.unreachable.clone());
        if !got {
            self.client_bytes(gid, &unreachable);
        }
        self.client_closed(gid);
    }

    /// No response head in time: the `503`, and the owner's side closes.
    pub(super) fn relay_timeout(&mut self, id: u64) {
        let Some(x) = self.relays.get(&id).filter(|x| !x.done && !x.got_bytes) else {
            return;
        };
        let (owner, owner_token, conn) = (x.owner, x.owner_token, x.owner_conn);
        self.t(format!("relay {id}: no response head in time"));
        self.relay_owner_closed(id);
        if self.procs[owner].token == owner_token {
            self.proc_at(owner, self.now + 1, ProcEv::Closed { conn });
        }
    }
}
