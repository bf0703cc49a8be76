//! Replicas in the simulator (docs/simulation.md, "Replicas"): several real
//! [`engine::Engine`]s, each inside the driver core every runtime uses
//! ([`engine::driver::Core`] with the fenced pipeline), on one simulated PostgreSQL
//! ([`db::SimDb`]: shared rows, lease and lane tables with fencing tokens,
//! the database's clock), with clients going through a load balancer that
//! picks any replica, requests forwarded to a session's owner, and the
//! faults that matter for ownership: process freezes (shorter and longer
//! than the lease), kills, graceful stops (the core's shutdown drain) and
//! restarts (a restarted process takes the lowest free lane, often the
//! lane of one that is frozen).
//!
//! A replica process is modelled as io-smol runs it: its store jobs run
//! one submission at a time against the database, a commit's fence is
//! checked by the database when the commit executes, the lease watch is
//! checked before a submission with a commit or a claim, by the core's
//! host before every reveal (`Host::before_reveal`) and before every
//! renewal, and renewals run every lease/3. A
//! frozen process does nothing: every event addressed to it (a store job
//! finishing, a provider reply, bytes, its timers, its renewal) waits and
//! is replayed in order when it wakes. A store job in flight therefore
//! reaches the database only after the freeze: the case the fence exists
//! for.
//!
//! Invariants (judged by the database at every commit, see `db.rs`, and
//! at the end): never two writers of one session or one lane at once
//! (a batch writes only under its own unexpired lease and lane), seqs
//! unique and in order per session, nothing acknowledged lost. The
//! planted bug `FenceSkipped` (the pipeline seals jobs without their
//! fence) is caught by them.

mod clients;
pub mod db;
mod procs;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use engine::mem_store::MemStore;
use engine::pipeline::Job;
use engine::store::{KeyRole, KeyRow, ProfileRow, StoreWrite};
use engine::{CallId, Config, ConnId, ProviderEntry, ProviderReply};

use crate::check::Violation;
use crate::driver::{Side, SimCore};
use crate::hash::Fnv;
use crate::rng::Rng;
use crate::world::{Report, RunOpts, Stats};
use clients::{Client, Conn};
use db::SimDb;

/// Lanes of the simulated database (fewer than production's 64, so that
/// restarts reuse lanes).
const LANES: u64 = 8;
const T0: &str = "2026-01-01T00:00:00.000Z";

/// What one seed draws.
#[derive(Debug, Clone)]
struct Swarm {
    replicas: usize,
    clients: usize,
    lease_ms: u64,
    forward_timeout_ms: u64,
    durable_drivers: bool,
    /// Mean time between faults.
    fault_every_ms: u64,
    /// Share of faults that freeze (the rest kill).
    freeze_share: f64,
    /// Longest freeze, as a multiple of the lease (×10).
    freeze_max_tenths: u64,
    db_latency_ms: (u64, u64),
    provider_latency_ms: (u64, u64),
    /// Length of the faulty phase.
    main_ms: u64,
}

impl Swarm {
    fn draw(rng: &mut Rng) -> Swarm {
        let lease_ms = rng.range(500, 3_000);
        Swarm {
            replicas: rng.range(2, 5) as usize,
            clients: rng.range(2, 7) as usize,
            lease_ms,
            forward_timeout_ms: rng.range(100, lease_ms),
            durable_drivers: rng.chance(0.5),
            fault_every_ms: rng.range(300, 3_000),
            freeze_share: rng.unit(),
            freeze_max_tenths: rng.range(5, 40),
            db_latency_ms: (1, rng.range(2, 40)),
            provider_latency_ms: (5, rng.range(10, 400)),
            main_ms: rng.range(10_000, 40_000),
        }
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

/// Everything that happens, in time order.
#[derive(Debug, Clone)]
enum Ev {
    /// A client sends its next request.
    Act(usize),
    /// A fault strikes (freeze or kill of a random live replica).
    Fault,
    /// Replica `r`, process `token`: one of its own events.
    Proc {
        r: usize,
        token: u64,
        ev: ProcEv,
    },
    /// A relay's owner sent no response head in time.
    RelayTimeout(u64),
    Restart(usize),
}

/// What a replica process reacts to.
#[derive(Debug, Clone)]
enum ProcEv {
    /// A connection arrived with its request bytes.
    Arrive {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    Flushed {
        conn: ConnId,
        bytes: usize,
    },
    Closed {
        conn: ConnId,
    },
    Provider {
        call: CallId,
        reply: ProviderReply,
    },
    Timer,
    /// The database finished the job at the head of the submission.
    JobDone,
    Renew,
    Thaw,
    /// SIGTERM: the graceful shutdown begins.
    Term,
}

/// Where a replica's output for one of its connections goes.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// A client's connection (global id).
    Client(u64),
    /// The owner's side of a relay.
    Relay(u64),
}

/// One replica process (or the empty slot of a dead one: `token == 0`).
struct Proc {
    token: u64,
    /// Its engine inside the driver core every runtime uses.
    core: Option<SimCore>,
    /// The core's runtime and host: what it asked for, the virtual clock.
    side: Option<Side>,
    /// The store worker: the submission the database is executing, head
    /// first (plus any activity job queued behind it).
    running: VecDeque<Job>,
    lane: u64,
    /// Virtual time of the last successful renewal (the lease watch; the
    /// core's host reads it before every reveal).
    last_ok: Rc<Cell<u64>>,
    frozen: bool,
    /// The graceful shutdown began: the core drains, then the process
    /// exits.
    stopping: bool,
    deferred: Vec<ProcEv>,
    timer_at: Option<u64>,
    routes: BTreeMap<ConnId, Route>,
    next_conn: u64,
}

impl Proc {
    fn dead() -> Proc {
        Proc {
            token: 0,
            core: None,
            side: None,
            running: VecDeque::new(),
            lane: 0,
            last_ok: Rc::default(),
            frozen: false,
            stopping: false,
            deferred: Vec::new(),
            timer_at: None,
            routes: BTreeMap::new(),
            next_conn: 1,
        }
    }
}

/// A request relayed from the replica `via` to the session's owner.
struct Relay {
    client_conn: u64,
    via: usize,
    /// The process of `via` and its connection (its core keeps the
    /// connection until the relay ends).
    via_token: u64,
    via_conn: ConnId,
    owner: usize,
    owner_token: u64,
    owner_conn: ConnId,
    got_bytes: bool,
    unreachable: Vec<u8>,
    done: bool,
}

pub struct ReplicaWorld {
    seed: u64,
    sw: Swarm,
    rng: Rng,
    entropy: Rng,
    now: u64,
    unix0: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    next_ev: u64,
    db: SimDb,
    procs: Vec<Proc>,
    next_token: u64,
    config: Config,
    conns: BTreeMap<u64, Conn>,
    next_conn: u64,
    relays: BTreeMap<u64, Relay>,
    next_relay: u64,
    clients: Vec<Client>,
    /// Event ids of acknowledged turns, and their sessions.
    acked: BTreeMap<String, String>,
    provider_calls: u64,
    trace: Fnv,
    lines: Option<Vec<String>>,
    verbose: bool,
    stats: Stats,
    faults_on: bool,
    #[cfg(feature = "planted-bugs")]
    bug: Option<engine::planted::Bug>,
}

/// Runs one seed of the replica simulation.
pub fn run_replicas(seed: u64, opts: &RunOpts) -> Report {
    let mut w = ReplicaWorld::new(seed, opts);
    w.run(opts);
    w.finish()
}

impl ReplicaWorld {
    fn new(seed: u64, opts: &RunOpts) -> ReplicaWorld {
        let mut root = Rng::new(seed ^ 0x5265_706c_6963_6173);
        let sw = Swarm::draw(&mut root.fork());
        let rng = root.fork();
        let entropy = root.fork();
        let mut store = MemStore::default();
        store.apply(&StoreWrite::InsertProfile(ProfileRow {
            id: "pro_sim".into(),
            name: "sim".into(),
            primary_provider: "main".into(),
            fallback_providers: vec![],
            mcp_servers: vec![],
            allowed_tools: vec![],
            available_sandboxes: vec![],
            created_at: T0.into(),
            updated_at: T0.into(),
            deleted_at: None,
        }));
        let clients: Vec<Client> = (0..sw.clients).map(Client::new).collect();
        for (i, c) in clients.iter().enumerate() {
            store.apply(&StoreWrite::InsertKey(KeyRow {
                id: format!("key_client_{i}"),
                name: format!("client-{i}"),
                key_hash: engine::key_digest_hex(&c.token),
                key_prefix: c.token.chars().take(8).collect(),
                role: KeyRole::Client,
                profile_id: Some("pro_sim".into()),
                client_id: None,
                created_at: T0.into(),
                last_used_at: None,
                deleted_at: None,
            }));
        }
        let config = Config {
            providers: vec![ProviderEntry {
                name: "main".into(),
                kind: proto::provider::Kind::Anthropic,
                base_url: "http://main.provider.sim".into(),
                model: "sim-model".into(),
                auth_template: "${SIM_TOKEN}".into(),
                max_tokens: 512,
                retry: None,
                limits: None,
                stream: None,
                cache: None,
                prices: None,
            }],
            durable_drivers: sw.durable_drivers,
            ..Config::default()
        };
        let procs = (0..sw.replicas).map(|_| Proc::dead()).collect();
        ReplicaWorld {
            seed,
            db: SimDb::new(store, LANES),
            sw,
            rng,
            entropy,
            now: 1_000,
            unix0: 1_780_000_000_000 + (seed % 1_000_000) * 1_000,
            queue: BTreeMap::new(),
            next_ev: 0,
            procs,
            next_token: 1,
            config,
            conns: BTreeMap::new(),
            next_conn: 1,
            relays: BTreeMap::new(),
            next_relay: 1,
            clients,
            acked: BTreeMap::new(),
            provider_calls: 0,
            trace: Fnv::default(),
            lines: (opts.keep_trace || opts.verbose).then(Vec::new),
            verbose: opts.verbose,
            stats: Stats::default(),
            faults_on: true,
            #[cfg(feature = "planted-bugs")]
            bug: opts.bug,
        }
    }

    fn t(&mut self, line: String) {
        self.trace.write(line.as_bytes());
        self.trace.write(b"\n");
        if self.verbose {
            println!("{:>8} {line}", self.now);
        }
        if let Some(l) = &mut self.lines {
            l.push(format!("{:>8} {line}", self.now));
        }
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.queue.insert((t.max(self.now), self.next_ev), ev);
        self.next_ev += 1;
    }

    fn run(&mut self, opts: &RunOpts) {
        for r in 0..self.procs.len() {
            self.start_process(r);
        }
        for c in 0..self.clients.len() {
            let t = self.now + self.rng.range(1, 200);
            self.at(t, Ev::Act(c));
        }
        let first = self.now + self.rng.range(200, self.sw.fault_every_ms * 2);
        self.at(first, Ev::Fault);
        let end_of_faults = self.now + self.sw.main_ms;
        // After the faults, a quiet phase in which every process is awake
        // and alive long enough for the sessions to settle.
        let end = end_of_faults + 6 * self.sw.lease_ms + 5_000;
        let max_steps = opts.max_steps.unwrap_or(u64::MAX);
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            if t > end || self.stats.steps >= max_steps {
                break;
            }
            self.now = t;
            if self.faults_on && self.now >= end_of_faults {
                self.faults_on = false;
                self.t("faults end".into());
            }
            self.stats.steps += 1;
            let seen = self.db.violations.len();
            self.step(ev);
            let step = self.stats.steps;
            for v in self.db.violations.iter_mut().skip(seen) {
                v.step = step;
            }
        }
        self.stats.virtual_ms = self.now;
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Act(c) => self.act(c),
            Ev::Fault => self.fault(),
            Ev::Restart(r) => self.start_process(r),
            Ev::RelayTimeout(id) => self.relay_timeout(id),
            Ev::Proc { r, token, ev } => {
                let Some(p) = self.procs.get_mut(r) else {
                    return;
                };
                if p.token != token || p.token == 0 {
                    return;
                }
                if p.frozen && !matches!(ev, ProcEv::Thaw) {
                    p.deferred.push(ev);
                    return;
                }
                self.proc_event(r, ev);
            }
        }
    }

    /// A freeze or a kill of a random live replica; the next fault.
    fn fault(&mut self) {
        if !self.faults_on {
            return;
        }
        let next = self.now + self.rng.range(1, self.sw.fault_every_ms * 2);
        self.at(next, Ev::Fault);
        let live: Vec<usize> = (0..self.procs.len())
            .filter(|r| self.procs[*r].token != 0 && !self.procs[*r].frozen)
            .collect();
        if live.is_empty() {
            return;
        }
        let r = live[self.rng.index(live.len())];
        let token = self.procs[r].token;
        if self.rng.chance(self.sw.freeze_share) {
            let max = self.sw.lease_ms * self.sw.freeze_max_tenths / 10;
            let d = self.rng.range(10, max.max(11));
            self.t(format!("FREEZE r{r} (process {token}) for {d} ms"));
            self.stats.graceful_restarts += 1;
            self.procs[r].frozen = true;
            self.at(
                self.now + d,
                Ev::Proc {
                    r,
                    token,
                    ev: ProcEv::Thaw,
                },
            );
        } else if !self.procs[r].stopping && self.rng.chance(0.3) {
            self.t(format!("TERM r{r} (process {token})"));
            self.stats.graceful_restarts += 1;
            self.proc_event(r, ProcEv::Term);
        } else {
            self.t(format!("KILL r{r} (process {token})"));
            self.stats.crashes += 1;
            self.exit(r, "killed");
        }
    }

    /// A client's next request, through a replica the balancer picks.
    fn act(&mut self, c: usize) {
        if self.clients[c].busy.is_some() {
            return;
        }
        let r = self.rng.index(self.procs.len());
        let (bytes, kind) = self.clients[c].next_request();
        let gid = self.next_conn;
        self.next_conn += 1;
        self.stats.requests += 1;
        self.t(format!("client {c} -> r{r} {kind:?} (conn {gid})"));
        self.conns.insert(gid, Conn::new(c, kind));
        self.clients[c].busy = Some(gid);
        if self.procs[r].token == 0 {
            // Connection refused: a balancer skips it, the client retries.
            self.client_closed(gid);
            return;
        }
        let conn = self.new_proc_conn(r, Route::Client(gid));
        let token = self.procs[r].token;
        let t = self.now + self.rng.range(0, 5);
        self.at(
            t,
            Ev::Proc {
                r,
                token,
                ev: ProcEv::Arrive { conn, bytes },
            },
        );
    }

    fn new_proc_conn(&mut self, r: usize, route: Route) -> ConnId {
        let p = &mut self.procs[r];
        let conn = ConnId(p.next_conn);
        p.next_conn += 1;
        p.routes.insert(conn, route);
        conn
    }

    /// Response bytes for client connection `gid`.
    fn client_bytes(&mut self, gid: u64, bytes: &[u8]) {
        let Some(conn) = self.conns.get_mut(&gid) else {
            return;
        };
        if conn.feed(bytes) {
            self.client_closed(gid);
        }
    }

    /// Client connection `gid` ended (its response complete or cut).
    fn client_closed(&mut self, gid: u64) {
        let Some(conn) = self.conns.remove(&gid) else {
            return;
        };
        let c = conn.client;
        let outcome = conn.outcome();
        self.t(format!("client {c} conn {gid}: {outcome:?}"));
        if let clients::Outcome::Answered { events } = &outcome {
            self.stats.turns_completed += 1;
            let session = (self.clients[c].session.as_ref())
                .map(|(s, _)| s.clone())
                .unwrap_or_default();
            for id in events {
                self.acked.insert(id.clone(), session.clone());
            }
        }
        if let clients::Outcome::Created { .. } = &outcome {
            self.stats.sessions += 1;
        }
        self.clients[c].learn(&outcome);
        self.clients[c].busy = None;
        let think = self.rng.range(5, 300);
        self.at(self.now + think, Ev::Act(c));
    }

    /// The end checks: nothing acknowledged lost.
    fn finish(mut self) -> Report {
        let stored: BTreeSet<&str> = (self.db.store.events.values())
            .map(|e| e.id.as_str())
            .collect();
        let lost: Vec<(String, String)> = (self.acked.iter())
            .filter(|(id, _)| !stored.contains(id.as_str()))
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let now = self.now;
        for (id, session) in lost {
            self.db.violations.push(Violation {
                invariant: db::INV_ACKED_DURABLE,
                step: self.stats.steps,
                time_ms: now,
                detail: format!("acknowledged event {id} of {session} is not stored"),
            });
        }
        self.stats.events = self.db.committed_events;
        self.stats.provider_calls = self.provider_calls;
        let mut log = Fnv::default();
        for e in self.db.store.events.values() {
            log.write(e.id.as_bytes());
            log.write(&e.seq.to_le_bytes());
        }
        Report {
            seed: self.seed,
            swarm: self.sw.describe(),
            violations: self.db.violations,
            trace_hash: self.trace.finish(),
            log_hash: log.finish(),
            stats: self.stats,
            trace: self.lines.unwrap_or_default(),
        }
    }
}
