//! A replica process of the replica simulation, driven as io-smol drives
//! one: its engine inside the driver core every runtime uses
//! (`crate::driver`, fenced pipeline), which routes every output, gates
//! deliveries on commits and asks the host's lease watch before every
//! reveal. Around it: start (a fencing token, a lane, the engine restored
//! from the database), the store worker against the simulated database,
//! the renewer, forwarding to another replica, and its exit.

use std::ops::ControlFlow;

use engine::driver::{Event, StoreDone, WriterMsg};
use engine::pipeline::Job;
use engine::replicas::ReplicaSettings;
use engine::store::SnapshotScope;
use engine::{ConnId, Engine, Input, Listener, ProviderReply};

use super::clients::provider_text;
use super::db::Refused;
use super::{Ev, Proc, ProcEv, Relay, ReplicaWorld, Route, LANES};
use crate::driver::{self, now_of, Effect, LeaseWatch, Side, SimCore, SimEvent};
use crate::rng::SimEntropy;

/// The drain budget of a replica's graceful stop (`BAE_SHUTDOWN_TIMEOUT`'s
/// default).
const SHUTDOWN_TIMEOUT_MS: u64 = 30_000;

impl ReplicaWorld {
    fn proc_at(&mut self, r: usize, t: u64, ev: ProcEv) {
        let token = self.procs[r].token;
        self.at(t, Ev::Proc { r, token, ev });
    }

    fn watch(&self, r: usize) -> LeaseWatch {
        LeaseWatch {
            last_ok: self.procs[r].last_ok.clone(),
            lease_ms: self.sw.lease_ms,
        }
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
        #[cfg(feature = "planted-bugs")]
        let faults = {
            config.planted = self.bug;
            engine::faults::Faults::planted(self.bug)
        };
        #[cfg(not(feature = "planted-bugs"))]
        let faults = engine::faults::Faults::default();
        let snapshot = self.db.store.snapshot_of(SnapshotScope::Full);
        let entropy = Box::new(SimEntropy(self.entropy.fork()));
        let engine = Engine::new(config, entropy, snapshot, now_of(self.now, self.unix0));
        self.procs[r] = Proc {
            token,
            lane,
            ..Proc::dead()
        };
        self.procs[r].last_ok.set(self.now);
        let side = Side::replica(self.now, self.unix0, self.watch(r));
        let core = driver::new_core(engine, &side, SHUTDOWN_TIMEOUT_MS, true, faults);
        self.procs[r].core = Some(core);
        self.procs[r].side = Some(side);
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

    /// The lease watch outside the core (the store thread before a commit
    /// or a claim, the renewer): `true` (after exiting) when the last
    /// renewal is 3/4 of the lease ago.
    fn stale_exit(&mut self, r: usize, before: &str) -> bool {
        match self.watch(r).stale(self.now, before) {
            Some(why) => {
                self.exit(r, &why);
                true
            }
            None => false,
        }
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
                    self.procs[r].last_ok.set(self.now);
                    self.proc_at(r, self.now + lease / 3, ProcEv::Renew);
                } else {
                    self.exit(r, "lane taken over");
                }
            }
            ProcEv::Arrive { conn, bytes } => {
                self.event(r, Event::Accepted(Listener::Client, conn));
                if let Some(conn) = self.core_conn(r, conn) {
                    self.event(r, Event::Net(Input::Received { conn, bytes }));
                }
            }
            ProcEv::Flushed { conn, bytes } => {
                if let Some(conn) = self.core_conn(r, conn) {
                    self.event(r, Event::Net(Input::Flushed { conn, bytes }));
                }
            }
            ProcEv::Closed { conn } => {
                self.procs[r].routes.remove(&conn);
                // The core decides whether the report is stale.
                if let Some(conn) = self.core_conn(r, conn) {
                    self.event(r, Event::Net(Input::Closed { conn }));
                }
            }
            ProcEv::Provider { call, reply } => self.event(r, Event::Provider(call, reply)),
            ProcEv::Timer => {
                if self.procs[r].timer_at.is_some_and(|t| t <= self.now) {
                    self.procs[r].timer_at = None;
                    self.with_core(r, |core| {
                        core.fire_timers();
                        core.flush();
                    });
                }
            }
            ProcEv::JobDone => self.job_done(r),
            ProcEv::Term => {
                self.procs[r].stopping = true;
                self.event(r, Event::Signal);
            }
        }
    }

    /// The core's id of the process's connection `conn` (`None`: the core
    /// never admitted it).
    fn core_conn(&self, r: usize, conn: ConnId) -> Option<ConnId> {
        let side = self.procs[r].side.as_ref()?;
        let out = side.out.borrow();
        out.to_core.get(&conn).copied()
    }

    /// One event, as a runtime's loop turn hands it over.
    fn event(&mut self, r: usize, ev: SimEvent) {
        self.with_core(r, |core| {
            core.handle_burst(ev, || None);
            core.flush();
        });
    }

    /// Runs `f` on the core of replica `r`, then performs what it asked
    /// for, in order; a lease watch that fired before a reveal ends the
    /// process there.
    fn with_core(&mut self, r: usize, f: impl FnOnce(&mut SimCore)) {
        let token = self.procs[r].token;
        let p = &mut self.procs[r];
        let (Some(core), Some(side)) = (&mut p.core, &p.side) else {
            return;
        };
        side.now_ms.set(self.now);
        f(core);
        let (effects, exited) = self.take_effects(r);
        for e in effects {
            self.perform(r, e);
            if self.procs[r].token != token {
                return;
            }
        }
        if let Some(why) = exited {
            return self.exit(r, &why);
        }
        if self.procs[r].stopping {
            return self.drain_if_stopped(r);
        }
        self.arm_timer(r);
    }

    /// The graceful shutdown's end once the core says it is over (idle, or
    /// its budget spent): the drain commits what is pending, as io-smol
    /// does after its loop, then the process exits. The database answers
    /// at once (the process is exiting, no new work comes in), but the
    /// store thread's lease watch and the fence still apply.
    fn drain_if_stopped(&mut self, r: usize) {
        let Some(core) = self.procs[r].core.as_mut() else {
            return;
        };
        if !core.stopped() {
            return self.arm_timer(r);
        }
        let token = self.procs[r].token;
        if !crate::driver::drain(&mut Drainer { w: self, r, token }) {
            return;
        }
        if let Some(core) = self.procs[r].core.take() {
            core.finish();
        }
        self.exit(r, "shutdown complete");
    }

    /// The database executes `job` of replica `r` now: what the core
    /// hears (`None` for the activity summary), or why the process exits.
    fn execute(&mut self, r: usize, job: Job) -> Result<Option<StoreDone>, String> {
        let who = (self.procs[r].token, r, self.procs[r].lane);
        let lease = self.sw.lease_ms;
        let refused = |e: Refused| match e {
            Refused::Fenced(what) => format!("fenced: {what}"),
            Refused::Duplicate(seq) => format!("duplicate key: seq {seq}"),
        };
        Ok(Some(match job {
            Job::Commit {
                batch,
                writes,
                fence,
            } => {
                let db = &mut self.db;
                db.commit(&writes, fence.as_ref(), who, lease, self.now)
                    .map_err(refused)?;
                StoreDone::Committed(batch)
            }
            Job::Read { id, read } => match self.db.read(&read, who, lease, self.now) {
                Ok(result) => StoreDone::Read(id, Ok(result)),
                Err(Refused::Duplicate(_)) => return Err("claim failed".into()),
                Err(e) => return Err(refused(e)),
            },
            Job::Activity => return Ok(None),
        }))
    }

    /// What the core asked for since the last look, and whether the lease
    /// watch ended the process before a reveal.
    fn take_effects(&mut self, r: usize) -> (Vec<Effect>, Option<String>) {
        let Some(side) = &self.procs[r].side else {
            return (Vec::new(), None);
        };
        let mut o = side.out.borrow_mut();
        o.outputs.clear();
        (std::mem::take(&mut o.effects), o.exited.take())
    }

    fn perform(&mut self, r: usize, e: Effect) {
        match e {
            Effect::Write(conn, WriterMsg::Data(bytes)) => {
                let n = bytes.len();
                match self.procs[r].routes.get(&conn).copied() {
                    Some(Route::Client(gid)) => self.client_bytes(gid, &bytes),
                    Some(Route::Relay(id)) => self.relay_bytes(id, &bytes),
                    None => return,
                }
                self.proc_at(r, self.now + 1, ProcEv::Flushed { conn, bytes: n });
            }
            Effect::Write(conn, WriterMsg::Close) | Effect::Refuse(conn) => {
                match self.procs[r].routes.get(&conn).copied() {
                    Some(Route::Client(gid)) => self.client_closed(gid),
                    Some(Route::Relay(id)) => self.relay_owner_closed(id),
                    None => return,
                }
                self.proc_at(r, self.now + 1, ProcEv::Closed { conn });
            }
            Effect::Call(call) => {
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
            // Calls are not streamed here: the reply arrives and the core
            // drops it.
            Effect::Abort(_) => {}
            Effect::Store(jobs) => self.submit(r, jobs),
            Effect::Forward(conn, f) => {
                let Some(Route::Client(gid)) = self.procs[r].routes.remove(&conn) else {
                    return;
                };
                self.forward(r, conn, gid, f);
            }
            // No MCP servers or sandboxes in the replica world.
            Effect::Mcp(_) | Effect::Sandbox(_) => {}
        }
    }

    /// The core's next wake as the process's timer event.
    fn arm_timer(&mut self, r: usize) {
        let Some(t) = self.procs[r].core.as_ref().map(|c| c.next_wake()) else {
            return;
        };
        if self.procs[r].timer_at != Some(t.0) {
            self.procs[r].timer_at = Some(t.0);
            self.proc_at(r, t.0, ProcEv::Timer);
        }
    }

    /// The store worker gets a submission; the store thread's lease watch
    /// runs before a commit or a claim is sent.
    fn submit(&mut self, r: usize, jobs: Vec<Job>) {
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
        let idle = self.procs[r].running.is_empty();
        self.procs[r].running.extend(jobs);
        if idle {
            self.next_job(r);
        }
    }

    fn next_job(&mut self, r: usize) {
        if self.procs[r].running.is_empty() {
            return;
        }
        let (lo, hi) = self.sw.db_latency_ms;
        let t = self.now + self.rng.range(lo, hi);
        self.proc_at(r, t, ProcEv::JobDone);
    }

    /// The database executes the job at the head of the store worker's
    /// queue now; the core hears how it went.
    fn job_done(&mut self, r: usize) {
        let Some(job) = self.procs[r].running.pop_front() else {
            return;
        };
        let token = self.procs[r].token;
        let done = match self.execute(r, job) {
            Ok(Some(done)) => done,
            Ok(None) => return self.next_job(r),
            Err(why) => return self.exit(r, &why),
        };
        // A submission the core hands over now finds the worker idle only
        // when nothing else was queued (then `submit` starts it).
        let more = !self.procs[r].running.is_empty();
        self.event(r, Event::Store(done));
        if more && self.procs[r].token == token {
            self.next_job(r);
        }
    }

    /// Relays client connection `gid` to the owner `f.to` names.
    /// `via_conn` is its id in the process `via`, whose core keeps it until
    /// the relay ends.
    fn forward(&mut self, via: usize, via_conn: ConnId, gid: u64, f: engine::replicas::Forward) {
        let owner = (f.to.strip_prefix('r'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|o| *o < self.procs.len());
        let via_token = self.procs[via].token;
        let Some(owner) = owner.filter(|o| self.procs[*o].token != 0) else {
            self.client_bytes(gid, &f.unreachable);
            self.client_closed(gid);
            self.relay_ended(via, via_token, via_conn);
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
                via_token,
                via_conn,
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
        let (via, via_token, via_conn) = (x.via, x.via_token, x.via_conn);
        if !got {
            self.client_bytes(gid, &unreachable);
        }
        self.client_closed(gid);
        self.relay_ended(via, via_token, via_conn);
    }

    /// A relay ended: the reader of the client's connection in the
    /// forwarding process reports it closed (io-smol's writer shuts the
    /// socket down), and its core forgets it.
    fn relay_ended(&mut self, via: usize, via_token: u64, via_conn: ConnId) {
        if self.procs[via].token == via_token {
            self.proc_at(via, self.now + 1, ProcEv::Closed { conn: via_conn });
        }
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

/// Replica `r`'s process `token` stopped, for [`crate::driver::drain`]:
/// the database executes its jobs; a fence, a stale lease or an effect
/// may end the process on the way.
struct Drainer<'a> {
    w: &'a mut ReplicaWorld,
    r: usize,
    token: u64,
}

impl crate::driver::Draining for Drainer<'_> {
    fn core(&mut self) -> Option<&mut SimCore> {
        self.w.procs[self.r].core.as_mut()
    }

    fn perform_drained(&mut self) -> ControlFlow<()> {
        let r = self.r;
        let (effects, exited) = self.w.take_effects(r);
        for e in effects {
            match e {
                Effect::Store(jobs) => self.w.submit(r, jobs),
                e => self.w.perform(r, e),
            }
            if self.w.procs[r].token != self.token {
                return ControlFlow::Break(());
            }
        }
        if let Some(why) = exited {
            self.w.exit(r, &why);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn next_job(&mut self) -> Option<Job> {
        self.w.procs[self.r].running.pop_front()
    }

    fn execute(&mut self, job: Job) -> ControlFlow<(), Option<StoreDone>> {
        match self.w.execute(self.r, job) {
            Ok(done) => ControlFlow::Continue(done),
            Err(why) => {
                self.w.exit(self.r, &why);
                ControlFlow::Break(())
            }
        }
    }
}
