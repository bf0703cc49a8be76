//! The simulated world around one real [`engine::Engine`]: a virtual clock
//! and event queue, the I/O driver (group commit and output gating exactly
//! like `io-smol/src/driver/pipeline.rs`), connections that speak HTTP/1.1
//! bytes, a provider, crash/restart, and the invariant checks.
//!
//! Everything is ordered by `BTreeMap`/`Vec` and drawn from seeded
//! generators, so a seed determines the run byte for byte.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};

use engine::mem_store::MemStore;
use engine::store::{KeyRole, KeyRow, ReadId, StoreRead, StoreWrite};
use engine::{
    CallId, Config, ConnId, Engine, Input, Listener, Now, Output, ProviderCall, ProviderEntry,
    ProviderReply,
};
use serde_json::{json, Value};

use crate::check::{self, Checker, Violation};
use crate::hash::Fnv;
use crate::http::{self, Parsed, ResponseParser};
use crate::mcp::McpSim;
use crate::provider::Provider;
use crate::rng::{Rng, SimEntropy};
use crate::sandbox::SandboxSim;
use crate::swarm::Swarm;

/// Client tool names every profile allows; drivers declare subsets.
pub const CLIENT_TOOLS: [&str; 3] = ["get_time", "read_file", "run_query"];
const ADMIN_TOKEN: &str = "bae_admin_5151515151515151515151515151515151515151515151";
/// Sessions a slot may go through (a dead session is replaced by a new one).
const MAX_GENERATIONS: u32 = 4;
/// Failed creations after which a slot gives up.
const MAX_FAILED_CREATES: u32 = 25;
/// How long a graceful shutdown may take before the process just exits.
const SHUTDOWN_TIMEOUT_MS: u64 = 30_000;
/// Safety cap on the liveness phase.
const LIVENESS_MAX_STEPS: u64 = 200_000;

/// Which engine bug (if any) to plant; only with the `planted-bugs` feature.
#[cfg(feature = "planted-bugs")]
pub type Bug = engine::planted::Bug;

#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    /// Caps the main phase (for shrinking); `None` = the swarm's step count.
    pub max_steps: Option<u64>,
    /// Print the trace while running.
    pub verbose: bool,
    /// Keep the trace lines in the report.
    pub keep_trace: bool,
    /// Skip the liveness phase.
    pub no_liveness: bool,
    #[cfg(feature = "planted-bugs")]
    pub bug: Option<Bug>,
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub steps: u64,
    /// Iterations of the main (faulty) phase.
    pub main_steps: u64,
    pub events: u64,
    pub crashes: u32,
    pub graceful_restarts: u32,
    pub requests: u64,
    pub turns_completed: u64,
    pub pauses: u64,
    pub retirements: u64,
    pub lagged: u64,
    pub provider_calls: u64,
    pub sessions: u64,
    pub mcp_transports: u64,
    pub mcp_calls: u64,
    pub mcp_timeouts: u64,
    /// Containers started, execs sent, execs killed, remote subagents.
    pub sandbox_starts: u64,
    pub sandbox_execs: u64,
    pub sandbox_kills: u64,
    pub subagents: u64,
    pub virtual_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub swarm: String,
    pub violations: Vec<Violation>,
    pub trace_hash: u64,
    pub log_hash: u64,
    pub stats: Stats,
    pub trace: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

// ---- world state ----------------------------------------------------------

#[derive(Debug, Clone)]
enum Ev {
    /// An actor decides what to do next (survives crashes).
    Act(usize),
    /// The next piece of a request reaches the engine.
    Deliver(ConnId),
    /// The client closes its socket.
    ClientClose(ConnId),
    /// The driver reports a closed connection to the engine.
    EngineClosed(ConnId),
    /// The store worker finished the job at the head of its submission.
    JobDone,
    Provider {
        call: CallId,
        reply: ProviderReply,
    },
    /// The driver writes outbound bytes into the socket buffer.
    Flush(ConnId),
    /// The driver reports written bytes to the engine.
    Flushed {
        conn: ConnId,
        bytes: usize,
    },
    /// The client reads from its socket.
    ClientRead(ConnId),
    /// The engine's own timer.
    Timer,
    /// The operator acts through the admin listener (survives crashes).
    Admin,
    /// A simulated MCP transport reports to the engine (`sim/src/mcp.rs`).
    Mcp {
        conn: engine::mcp::McpConnId,
        event: engine::mcp::McpEvent,
    },
    /// The simulated container engine answers (`sim/src/sandbox.rs`).
    Sandbox {
        op: engine::sandbox::OpId,
        reply: engine::sandbox::SandboxReply,
    },
}

enum Held {
    Send { conn: ConnId, bytes: Vec<u8> },
    Close { conn: ConnId },
}

enum Job {
    Commit { batch: u64, writes: Vec<StoreWrite> },
    Read { id: ReadId, read: StoreRead },
}

/// The simulated driver's store side (mirrors io-smol's `Pipeline`).
#[derive(Default)]
struct Io {
    pending: Vec<StoreWrite>,
    last_gating: u64,
    next_batch: u64,
    committed: u64,
    held: VecDeque<(u64, Held)>,
    queued: VecDeque<Job>,
    /// The submission the worker is running (front = in progress).
    running: VecDeque<Job>,
}

impl Io {
    fn new() -> Self {
        Io {
            next_batch: 1,
            ..Default::default()
        }
    }

    fn seal(&mut self) {
        if !self.pending.is_empty() {
            let batch = self.next_batch;
            self.next_batch += 1;
            self.queued.push_back(Job::Commit {
                batch,
                writes: std::mem::take(&mut self.pending),
            });
        }
    }
}

#[derive(Default)]
struct SimConn {
    /// The request whose response the client is reading.
    req: usize,
    /// Pipelined requests behind it, in order.
    pending: VecDeque<usize>,
    /// Every request sent on this connection, in order, and the index of
    /// the one the engine is answering (for end-of-response bookkeeping).
    all: Vec<usize>,
    engine_pos: usize,
    /// Keep-alive connection with no request in flight.
    idle: bool,
    /// Framing-only parser over everything the engine emitted on it.
    shadow: ResponseParser,
    /// The engine emitted `Close`: it ignores anything sent after.
    close_emitted: bool,
    /// Request bytes not yet delivered; `Some(rid)` marks the piece that
    /// completes request `rid`.
    to_send: VecDeque<(Vec<u8>, Option<usize>)>,
    outbound: VecDeque<u8>,
    wire: VecDeque<u8>,
    flush_scheduled: bool,
    read_scheduled: bool,
    server_closing: bool,
    server_closed: bool,
    client_closed: bool,
    engine_told_closed: bool,
    parser: ResponseParser,
    slow: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Setup,
    Create,
    Join,
    Register,
    Send {
        nonce: String,
        /// The actor expected to continue a pause with this message.
        continuation: bool,
    },
    Compact,
    Subscribe {
        since: Option<String>,
    },
    Unsubscribe,
    Close,
    EventsPage {
        after: u64,
        limit: usize,
    },
    Garbage,
    /// `session.updateClientTools` with this declaration.
    UpdateTools(Vec<&'static str>),
    /// start/stop/execRemoteSandbox or cancelSubagent (`sim/src/sandbox.rs`).
    Sandbox,
    /// Admin: revoke the client key of this actor.
    Revoke(usize),
    /// Admin: replace the profile (primary provider `main` or a missing one).
    PutProfile {
        broken: bool,
    },
}

struct Req {
    actor: usize,
    slot: usize,
    /// Session id the request addresses (empty for create/setup).
    session: String,
    conn: ConnId,
    epoch: u32,
    kind: Kind,
    status: Option<u16>,
    terminal: Option<Value>,
    body: Option<Vec<u8>>,
    done: bool,
    lost: bool,
    /// Arrival order (last byte delivered) for gated requests.
    arrival: Option<u64>,
    /// At arrival the caller owned the parked pause (may bypass the queue).
    bypass_ok: bool,
    waiting: bool,
    admitted: bool,
    /// Highest seq delivered on this stream.
    last_seq: Option<u64>,
    /// Subscribe: seq the next event must follow (contiguity check).
    expect_after: Option<u64>,
    frames: u64,
    started_ms: u64,
    /// Seqs of the event notifications a `sendMessage` stream received.
    notified: Vec<u64>,
    /// The engine emitted the end of this request's response.
    end_emitted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Driver,
    Observer,
}

struct Actor {
    name: String,
    role: Role,
    slot: usize,
    client_key: String,
    key_id: String,
    tools: Vec<&'static str>,
    joined: Option<String>,
    session_key: Option<String>,
    registered: bool,
    busy: Option<usize>,
    sub: Option<usize>,
    act_scheduled: bool,
    gone: bool,
    slow: bool,
    /// Client tool ids (to answer) and server ids of the parked pause.
    paused: Option<(Vec<String>, Vec<String>)>,
    late_armed: bool,
    sends: u64,
    last_seen: Option<(String, u64)>,
    /// Liveness phase: one more message to send.
    final_send: bool,
    /// An idle keep-alive connection to reuse.
    idle_conn: Option<ConnId>,
}

struct Slot {
    current: Option<String>,
    dead: bool,
    creating: bool,
    generations: u32,
    failed_creates: u32,
    compaction: Value,
}

struct Trace {
    hash: Fnv,
    lines: Option<Vec<String>>,
    verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Setup,
    Main,
    Liveness,
}

pub struct World {
    seed: u64,
    swarm: Swarm,
    rng: Rng,
    now_ms: u64,
    unix0: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    next_ev: u64,
    engine: Engine,
    config: Config,
    epoch: u32,
    store: MemStore,
    io: Io,
    conns: BTreeMap<ConnId, SimConn>,
    next_conn: ConnId,
    reqs: Vec<Req>,
    nonces: BTreeMap<String, usize>,
    arrivals: u64,
    actors: Vec<Actor>,
    slots: Vec<Slot>,
    provider: Provider,
    mcp: McpSim,
    sandbox: SandboxSim,
    pub checker: Checker,
    trace: Trace,
    phase: Phase,
    stats: Stats,
    timer_at: Option<u64>,
    dead_engine: bool,
    profile_id: String,
    profile_broken: bool,
    /// When set, the next request is pipelined on this connection.
    pipeline_on: Option<ConnId>,
    /// The next request is sent keep-alive.
    force_keep_alive: bool,
    /// A graceful shutdown in progress since this virtual time.
    shutdown_since: Option<u64>,
}

fn now_of(mono: u64, unix0: u64) -> Now {
    Now {
        mono_ms: mono,
        unix_ms: unix0 + mono,
    }
}

fn sha_hex(s: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(64);
    for b in d {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_string()
    }
}

pub fn run(seed: u64, opts: &RunOpts) -> Report {
    let mut w = World::new(seed, opts);
    w.run_all(opts);
    w.finish()
}

impl World {
    fn new(seed: u64, opts: &RunOpts) -> World {
        let mut root = Rng::new(seed);
        let swarm = Swarm::draw(&mut root.fork());
        let rng = root.fork();
        let entropy_rng = root.fork();
        let provider = Provider::new(root.fork(), seed);
        let mcp = McpSim::new(root.fork(), &swarm.mcp);
        let sandbox = SandboxSim::new(root.fork());
        let mut config = Config {
            providers: vec![ProviderEntry {
                name: "main".into(),
                kind: "anthropic".into(),
                base_url: "http://main.provider.sim".into(),
                model: "sim-model".into(),
                auth_template: "${SIM_TOKEN}".into(),
                max_tokens: 512,
            }],
            turn_timeout_ms: swarm.turn_timeout_ms,
            provider_timeout_ms: swarm.provider_timeout_ms,
            subscriber_lag_limit: swarm.lag_limit,
            ndjson_keepalive_ms: swarm.keepalive_ms,
            request_timeout_ms: swarm.request_timeout_ms,
            idle_timeout_ms: swarm.idle_timeout_ms,
            mcp_servers: crate::mcp::registry(&swarm.mcp),
            mcp_timeout_ms: swarm.mcp.timeout_ms,
            sandbox_exec_timeout_ms: swarm.sandbox.exec_timeout_ms,
            subagent_timeout_ms: swarm.sandbox.subagent_timeout_ms,
            max_subagents_per_session: swarm.sandbox.max_subagents,
            ..Config::default()
        };
        if swarm.has_fallback {
            config.providers.push(ProviderEntry {
                name: "backup".into(),
                kind: "anthropic".into(),
                base_url: "http://backup.provider.sim".into(),
                model: "sim-backup".into(),
                auth_template: "${SIM_TOKEN}".into(),
                max_tokens: 256,
            });
        }
        #[cfg(feature = "planted-bugs")]
        {
            config.planted = opts.bug;
        }
        let mut store = MemStore::default();
        // What io-smol's bootstrap does before the engine starts.
        store.apply(&StoreWrite::InsertKey(KeyRow {
            id: "key_bootstrap_admin".into(),
            name: "bootstrap-admin".into(),
            key_hash: sha_hex(ADMIN_TOKEN),
            key_prefix: ADMIN_TOKEN[..8].into(),
            role: KeyRole::Admin,
            profile_id: None,
            client_id: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            last_used_at: None,
            deleted_at: None,
        }));
        let unix0 = 1_780_000_000_000 + (seed % 1_000_000) * 1_000;
        let now_ms = 1_000;
        let engine = Engine::new(
            config.clone(),
            Box::new(SimEntropy(entropy_rng)),
            store.snapshot(),
            now_of(now_ms, unix0),
        );
        let checker = Checker {
            turn_timeout_ms: swarm.turn_timeout_ms,
            ..Checker::default()
        };
        World {
            seed,
            swarm,
            rng,
            now_ms,
            unix0,
            queue: BTreeMap::new(),
            next_ev: 0,
            engine,
            config,
            epoch: 0,
            store,
            io: Io::new(),
            conns: BTreeMap::new(),
            next_conn: 1,
            reqs: Vec::new(),
            nonces: BTreeMap::new(),
            arrivals: 0,
            actors: Vec::new(),
            slots: Vec::new(),
            provider,
            mcp,
            sandbox,
            checker,
            trace: Trace {
                hash: Fnv::default(),
                lines: (opts.keep_trace || opts.verbose).then(Vec::new),
                verbose: opts.verbose,
            },
            phase: Phase::Setup,
            stats: Stats::default(),
            timer_at: None,
            dead_engine: false,
            profile_id: String::new(),
            profile_broken: false,
            pipeline_on: None,
            force_keep_alive: false,
            shutdown_since: None,
        }
    }

    // ---- trace --------------------------------------------------------------

    fn t(&mut self, line: String) {
        let line = format!("{:>9} {line}", self.now_ms);
        self.trace.hash.write_field(line.as_bytes());
        if self.trace.verbose {
            println!("{line}");
        }
        if let Some(l) = self.trace.lines.as_mut() {
            l.push(line);
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        let at = at.max(self.now_ms);
        self.queue.insert((at, self.next_ev), ev);
        self.next_ev += 1;
    }

    fn after(&mut self, delay: u64, ev: Ev) {
        self.schedule(self.now_ms + delay, ev);
    }

    fn draw(&mut self, r: (u64, u64)) -> u64 {
        self.rng.range(r.0, r.1)
    }

    fn now(&self) -> Now {
        now_of(self.now_ms, self.unix0)
    }

    // ---- engine plumbing ----------------------------------------------------

    fn input(&mut self, input: Input) {
        if self.dead_engine {
            return;
        }
        let now = self.now();
        let r = catch_unwind(AssertUnwindSafe(|| self.engine.handle_input(now, input)));
        if let Err(p) = r {
            self.engine_panicked(p);
            return;
        }
        self.drain();
    }

    fn engine_panicked(&mut self, p: Box<dyn std::any::Any + Send>) {
        let text = panic_text(p);
        self.t(format!("ENGINE PANIC {text}"));
        self.checker
            .fail(check::INV_ENGINE_PANIC, format!("engine panicked: {text}"));
        self.dead_engine = true;
    }

    fn drain(&mut self) {
        loop {
            let o = match catch_unwind(AssertUnwindSafe(|| self.engine.poll_output())) {
                Ok(Some(o)) => o,
                Ok(None) => break,
                Err(p) => return self.engine_panicked(p),
            };
            match o {
                Output::Write(w) => self.on_write(w),
                Output::Send { conn, bytes } => {
                    self.trace.hash.write_field(&bytes);
                    self.t(format!("out send conn={conn} len={}", bytes.len()));
                    self.track_response_ends(conn, &bytes);
                    self.deliver(Held::Send { conn, bytes });
                }
                Output::Close { conn } => {
                    self.t(format!("out close conn={conn}"));
                    self.stream_end_emitted(conn, true);
                    self.deliver(Held::Close { conn });
                }
                Output::Read { id, read } => {
                    self.t(format!("out read id={id} {read:?}"));
                    self.io.seal();
                    self.io.queued.push_back(Job::Read { id, read });
                }
                Output::CallProvider(call) => self.call_provider(call),
                Output::Sandbox(cmd) => {
                    self.t(format!("out sandbox {cmd:?}"));
                    let now = self.now_ms;
                    let timeouts = (
                        self.config.sandbox_exec_timeout_ms,
                        self.config.subagent_timeout_ms,
                    );
                    let replies = self.sandbox.on_command(
                        cmd,
                        now,
                        &self.swarm.sandbox,
                        timeouts,
                        &mut self.checker,
                    );
                    for (at, op, reply) in replies {
                        self.schedule(at, Ev::Sandbox { op, reply });
                    }
                }
                Output::Mcp(cmd) => {
                    self.t(format!("out mcp {}", crate::mcp::describe_command(&cmd)));
                    let now = self.now_ms;
                    let events = self
                        .mcp
                        .on_command(cmd, now, &self.swarm.mcp, &mut self.checker);
                    for (at, conn, event) in events {
                        self.schedule(at, Ev::Mcp { conn, event });
                    }
                }
            }
        }
        self.mcp.after_drain(&mut self.checker);
        self.sandbox.check_execs(self.now_ms, &mut self.checker);
        self.pump_worker();
        self.arm_timer();
    }

    fn arm_timer(&mut self) {
        let t = match catch_unwind(AssertUnwindSafe(|| self.engine.poll_timeout())) {
            Ok(t) => t,
            Err(p) => return self.engine_panicked(p),
        };
        if t.is_some() && t != self.timer_at {
            self.timer_at = t;
            let at = t.unwrap_or(0);
            self.schedule(at, Ev::Timer);
        }
        if t.is_none() {
            self.timer_at = None;
        }
    }

    fn on_write(&mut self, w: StoreWrite) {
        if w.gates_output() {
            self.io.last_gating = self.io.next_batch;
        }
        if let StoreWrite::InsertEvent(row) = &w {
            self.t(format!(
                "out event seq={} {} {} key={} {}",
                row.seq,
                row.session_id,
                row.event_type,
                row.client_key_id.as_deref().unwrap_or("-"),
                row.payload
            ));
            self.checker.now_ms = self.now_ms;
            self.checker.on_emit(row);
            self.mcp.on_event(row, self.now_ms, &mut self.checker);
            self.sandbox.on_event(row, self.now_ms, &mut self.checker);
            let row = row.clone();
            self.on_emit_fifo(&row);
        } else {
            self.t(format!("out write {}", write_name(&w)));
            self.checker.on_emit_write(&w);
        }
        self.io.pending.push(w);
    }

    fn deliver(&mut self, d: Held) {
        if self.io.last_gating <= self.io.committed {
            self.release(d);
        } else {
            let need = self.io.last_gating;
            self.io.held.push_back((need, d));
        }
    }

    fn release(&mut self, d: Held) {
        match d {
            Held::Send { conn, bytes } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                if c.client_closed || c.server_closed {
                    return;
                }
                c.outbound.extend(bytes);
                if !c.flush_scheduled {
                    c.flush_scheduled = true;
                    self.after(0, Ev::Flush(conn));
                }
            }
            Held::Close { conn } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.server_closing = true;
                if !c.flush_scheduled {
                    c.flush_scheduled = true;
                    self.after(0, Ev::Flush(conn));
                }
            }
        }
    }

    fn pump_worker(&mut self) {
        if !self.io.running.is_empty() {
            return;
        }
        self.io.seal();
        if self.io.queued.is_empty() {
            return;
        }
        self.io.running = std::mem::take(&mut self.io.queued);
        self.start_job();
    }

    fn start_job(&mut self) {
        let lat = match self.io.running.front() {
            Some(Job::Commit { .. }) => self.swarm.commit_ms,
            Some(Job::Read { .. }) => self.swarm.read_ms,
            None => return,
        };
        let d = self.draw(lat);
        self.after(d, Ev::JobDone);
    }

    fn job_done(&mut self) {
        let Some(job) = self.io.running.pop_front() else {
            return;
        };
        match job {
            Job::Commit { batch, writes } => {
                self.commit(batch, writes);
                while let Some((need, _)) = self.io.held.front() {
                    if *need > self.io.committed {
                        break;
                    }
                    let (_, d) = self.io.held.pop_front().expect("front");
                    self.release(d);
                }
            }
            Job::Read { id, read } => {
                // Read failures are not fatal in the driver: they reach the
                // engine as `Err` (commit failures are crashes instead).
                let result = if self.rng.chance(self.swarm.read_error) {
                    self.t(format!("store read id={id} FAILED"));
                    Err("simulated read failure".to_string())
                } else {
                    self.t(format!("store read id={id} answered"));
                    Ok(self.store.read(&read))
                };
                self.mcp.set_context(crate::mcp::read_session(&read));
                self.input(Input::ReadDone { id, result });
            }
        }
        if self.io.running.is_empty() {
            self.pump_worker();
        } else {
            self.start_job();
        }
    }

    fn commit(&mut self, batch: u64, writes: Vec<StoreWrite>) {
        self.t(format!(
            "store commit batch={batch} writes={}",
            writes.len()
        ));
        for w in &writes {
            if let StoreWrite::InsertEvent(row) = w {
                if !self.checker.on_commit_event(row) {
                    continue;
                }
            }
            self.store.apply(w);
        }
        self.io.committed = self.io.committed.max(batch);
    }

    fn call_provider(&mut self, call: ProviderCall) {
        self.stats.provider_calls += 1;
        let (delay, reply) = self.provider.answer(&call, &self.swarm);
        self.t(format!(
            "out call id={} {} -> in {delay}ms {}",
            call.id,
            call.url,
            crate::provider::describe(&reply)
        ));
        self.after(
            delay,
            Ev::Provider {
                call: call.id,
                reply,
            },
        );
    }

    // ---- connections ----------------------------------------------------------

    /// Opens a connection and queues the request bytes (possibly split).
    fn start_req(
        &mut self,
        actor: usize,
        slot: usize,
        session: &str,
        kind: Kind,
        listener: Listener,
        bytes: Vec<u8>,
    ) -> usize {
        let conn = self.next_conn;
        self.next_conn += 1;
        let rid = self.reqs.len();
        self.stats.requests += 1;
        let slow = actor != usize::MAX && self.actors[actor].slow;
        self.t(format!(
            "req #{rid} conn={conn} actor={} {kind:?} {}",
            self.actor_name(actor),
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                .split("\r\n")
                .next()
                .unwrap_or("")
        ));
        if let Kind::Send { nonce, .. } = &kind {
            self.nonces.insert(nonce.clone(), rid);
        }
        self.reqs.push(Req {
            actor,
            slot,
            session: session.to_string(),
            conn,
            epoch: self.epoch,
            kind,
            status: None,
            terminal: None,
            body: None,
            done: false,
            lost: false,
            arrival: None,
            bypass_ok: false,
            waiting: false,
            admitted: false,
            last_seq: None,
            expect_after: None,
            frames: 0,
            started_ms: self.now_ms,
            notified: Vec::new(),
            end_emitted: false,
        });
        let calm = self.phase == Phase::Setup;
        let keep_alive = std::mem::take(&mut self.force_keep_alive)
            || (!calm
                && actor != usize::MAX
                && listener == Listener::Client
                && self.rng.chance(self.swarm.keep_alive));
        let bytes = if keep_alive {
            strip_close(bytes)
        } else {
            bytes
        };
        let mut pieces: VecDeque<(Vec<u8>, Option<usize>)> = VecDeque::new();
        if !calm && bytes.len() > 1 && self.rng.chance(self.swarm.split_bytes) {
            let mut cuts: Vec<usize> = (0..self.rng.range(1, 3))
                .map(|_| self.rng.range(1, bytes.len() as u64 - 1) as usize)
                .collect();
            cuts.sort();
            cuts.dedup();
            let mut prev = 0;
            for c in cuts {
                pieces.push_back((bytes[prev..c].to_vec(), None));
                prev = c;
            }
            pieces.push_back((bytes[prev..].to_vec(), Some(rid)));
        } else {
            pieces.push_back((bytes, Some(rid)));
        }
        // Reuse the actor's idle keep-alive connection, or pipeline behind
        // the one given by `pipeline_on`.
        let reuse = if let Some(c) = self.pipeline_on.take() {
            Some(c)
        } else if keep_alive {
            self.actors[actor].idle_conn.take().filter(|c| {
                self.conns.get(c).is_some_and(|c| {
                    c.idle && !c.client_closed && !c.server_closing && !c.server_closed
                })
            })
        } else {
            None
        };
        if let Some(conn) = reuse {
            self.reqs[rid].conn = conn;
            self.t(format!("req #{rid} reuses conn={conn}"));
            let c = self.conns.get_mut(&conn).expect("checked");
            let deliver_chain_idle = c.to_send.is_empty();
            if c.idle {
                c.idle = false;
                c.req = rid;
                c.engine_pos = c.all.len();
            } else {
                c.pending.push_back(rid);
            }
            c.all.push(rid);
            c.to_send.extend(pieces);
            if deliver_chain_idle {
                let d = self.draw(self.swarm.net_delay_ms);
                self.after(d, Ev::Deliver(conn));
            }
            return rid;
        }
        self.conns.insert(
            conn,
            SimConn {
                req: rid,
                all: vec![rid],
                to_send: pieces,
                slow,
                shadow: ResponseParser::framing_only(),
                ..Default::default()
            },
        );
        self.input(Input::Accepted { conn, listener });
        let d = if calm {
            0
        } else {
            self.draw(self.swarm.net_delay_ms)
        };
        self.after(d, Ev::Deliver(conn));
        rid
    }

    fn on_deliver(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.client_closed || c.server_closed {
            return;
        }
        let Some((piece, completes)) = c.to_send.pop_front() else {
            return;
        };
        let more = !c.to_send.is_empty();
        if let Some(rid) = completes {
            self.before_arrival(rid);
        }
        self.t(format!(
            "in recv conn={conn} len={} completes={completes:?}",
            piece.len()
        ));
        self.input(Input::Received { conn, bytes: piece });
        if let Some(rid) = completes {
            self.after_arrival(rid);
        }
        if more {
            let d = self.draw(self.swarm.net_delay_ms);
            self.after(d, Ev::Deliver(conn));
        }
    }

    fn on_flush(&mut self, conn: ConnId) {
        let sockbuf = self.swarm.sockbuf;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.flush_scheduled = false;
        if c.client_closed {
            return;
        }
        let room = sockbuf.saturating_sub(c.wire.len());
        let n = room.min(c.outbound.len());
        let moved = take_front(&mut c.outbound, n);
        c.wire.extend(moved.iter());
        let finish_close = c.outbound.is_empty() && c.server_closing && !c.server_closed;
        if finish_close {
            c.server_closed = true;
        }
        let need_read = (!c.wire.is_empty() || c.server_closed) && !c.read_scheduled;
        if need_read {
            c.read_scheduled = true;
        }
        if n > 0 {
            let d = self.draw(self.swarm.flush_delay_ms);
            self.after(d, Ev::Flushed { conn, bytes: n });
        }
        if need_read {
            let d = self.draw(self.swarm.net_delay_ms);
            self.after(d, Ev::ClientRead(conn));
        }
        if finish_close {
            self.after(0, Ev::EngineClosed(conn));
        }
    }

    fn on_client_read(&mut self, conn: ConnId) {
        let split = self.swarm.split_bytes;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.read_scheduled = false;
        if c.client_closed {
            return;
        }
        let avail = c.wire.len();
        let slow = c.slow;
        let n = if avail == 0 {
            0
        } else if slow {
            self.rng.range(1, 1_500).min(avail as u64) as usize
        } else if self.rng.chance(split) {
            self.rng.range(1, avail as u64) as usize
        } else {
            avail
        };
        let c = self.conns.get_mut(&conn).expect("conn");
        let mut bytes = take_front(&mut c.wire, n);
        let more = !c.wire.is_empty();
        let eof = c.wire.is_empty() && c.server_closed;
        let refill = !c.outbound.is_empty() && !c.flush_scheduled;
        if refill {
            c.flush_scheduled = true;
        }
        while let Some(c) = self.conns.get_mut(&conn) {
            let mut parsed = Vec::new();
            c.parser.feed(&bytes, &mut parsed);
            let rid = c.req;
            for p in parsed {
                self.on_parsed(rid, p);
            }
            // A complete response: the next pipelined one starts with
            // whatever bytes are left.
            let Some(c) = self.conns.get_mut(&conn) else {
                break;
            };
            if !c.parser.is_done() {
                break;
            }
            bytes = c.parser.take_rest();
            match c.pending.pop_front() {
                Some(next) => {
                    c.req = next;
                    c.parser = ResponseParser::default();
                }
                None => {
                    c.idle = true;
                    let owner = self.reqs[rid].actor;
                    if !bytes.is_empty() {
                        self.checker.fail(
                            check::INV_WIRE_WELL_FORMED,
                            format!("conn {conn}: {} bytes after the last response", bytes.len()),
                        );
                    } else if owner != usize::MAX && !c.server_closing {
                        c.parser = ResponseParser::default();
                        self.actors[owner].idle_conn = Some(conn);
                    }
                    break;
                }
            }
        }
        let rid = self.conns.get(&conn).map(|c| c.req).unwrap_or(0);
        if refill {
            self.after(0, Ev::Flush(conn));
        }
        if more {
            let d = if slow {
                self.rng.range(20, 400)
            } else {
                self.rng.range(0, 2)
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                if !c.read_scheduled {
                    c.read_scheduled = true;
                    self.after(d, Ev::ClientRead(conn));
                }
            }
        } else if eof {
            self.finish_req(rid, false);
            let pending: Vec<usize> = self
                .conns
                .get_mut(&conn)
                .map(|c| c.pending.drain(..).collect())
                .unwrap_or_default();
            for r in pending {
                self.finish_req(r, false);
            }
        }
    }

    fn client_close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.client_closed || c.server_closed {
            return;
        }
        c.client_closed = true;
        c.outbound.clear();
        c.wire.clear();
        c.to_send.clear();
        let rid = c.req;
        let pending: Vec<usize> = c.pending.drain(..).collect();
        self.t(format!("client closes conn={conn} (req #{rid})"));
        self.finish_req(rid, true);
        for r in pending {
            self.finish_req(r, true);
        }
        let d = self.draw(self.swarm.net_delay_ms);
        self.after(d, Ev::EngineClosed(conn));
    }

    fn engine_closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.engine_told_closed {
            return;
        }
        c.engine_told_closed = true;
        let all = c.all.clone();
        for r in &all {
            self.reqs[*r].waiting = false;
        }
        self.t(format!("in closed conn={conn}"));
        self.input(Input::Closed { conn });
        // Forget fully finished connections.
        let finished = all.iter().all(|r| self.reqs[*r].done || self.reqs[*r].lost);
        if let Some(c) = self.conns.get(&conn) {
            if c.wire.is_empty() && (c.client_closed || finished) {
                self.conns.remove(&conn);
            }
        }
    }

    /// Follows the engine's output on `conn` with a framing-only parser to
    /// learn exactly when each response ends (whatever its framing).
    fn track_response_ends(&mut self, conn: ConnId, bytes: &[u8]) {
        let mut ends = 0;
        if let Some(c) = self.conns.get_mut(&conn) {
            let mut input = bytes.to_vec();
            loop {
                let mut out = Vec::new();
                c.shadow.feed(&input, &mut out);
                if !c.shadow.is_done() {
                    break;
                }
                ends += 1;
                input = c.shadow.take_rest();
                c.shadow = ResponseParser::framing_only();
                if input.is_empty() {
                    break;
                }
            }
        }
        for _ in 0..ends {
            self.stream_end_emitted(conn, false);
        }
    }

    /// The engine finished answering the request it is on (`close`: and
    /// will answer none after it).
    fn stream_end_emitted(&mut self, conn: ConnId, close: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let ended: Vec<usize> = if close {
            c.close_emitted = true;
            c.all[c.engine_pos.min(c.all.len())..].to_vec()
        } else {
            let r = c.all.get(c.engine_pos).copied();
            c.engine_pos += 1;
            r.into_iter().collect()
        };
        for r in ended {
            self.reqs[r].end_emitted = true;
            self.reqs[r].waiting = false;
        }
    }

    // ---- FIFO bookkeeping -----------------------------------------------------

    fn before_arrival(&mut self, rid: usize) {
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

    fn after_arrival(&mut self, rid: usize) {
        let r = &self.reqs[rid];
        if r.arrival.is_none() {
            return;
        }
        let ignored = self.conns.get(&r.conn).is_none_or(|c| c.close_emitted);
        if !r.admitted && !r.end_emitted && !ignored {
            self.reqs[rid].waiting = true;
        }
    }

    fn on_emit_fifo(&mut self, row: &engine::store::EventRow) {
        let admitted = match row.event_type.as_str() {
            "client.message.send" => {
                let Some(i) = row.payload.find("nonce:") else {
                    return;
                };
                let rest = &row.payload[i..];
                let Some(j) = rest.find(';') else {
                    return;
                };
                match self.nonces.get(&rest[..j]) {
                    Some(r) => *r,
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
                    *i != admitted
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
        let r = &mut self.reqs[admitted];
        r.waiting = false;
        r.admitted = true;
    }

    // ---- responses ---------------------------------------------------------------

    fn on_parsed(&mut self, rid: usize, p: Parsed) {
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

    fn on_terminal(&mut self, rid: usize, who: &str, v: Value) {
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
    fn check_turn_result(&mut self, rid: usize, who: &str, events: &[Value]) {
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
            .filter(|(_, e)| {
                e.session_id == session
                    && e.client_key_id.as_deref() == Some(key.as_str())
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
        let missed: Vec<u64> = seqs[own_input..]
            .iter()
            .filter(|s| !notified.contains(s))
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

    fn on_event_frame(&mut self, rid: usize, who: &str, ev: &Value) {
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
    fn finish_req(&mut self, rid: usize, aborted: bool) {
        if self.reqs[rid].done || self.reqs[rid].lost {
            return;
        }
        let complete = !aborted
            && self
                .conns
                .get(&self.reqs[rid].conn)
                .is_some_and(|c| c.parser.is_done());
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
        self.admin_req_finished(rid, complete);
        if actor != usize::MAX {
            self.actor_req_finished(rid, complete);
        }
    }

    fn check_events_page(&mut self, rid: usize) {
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

    fn actor_name(&self, a: usize) -> String {
        if a == usize::MAX {
            "admin".into()
        } else {
            self.actors[a].name.clone()
        }
    }

    // ---- setup ------------------------------------------------------------------

    /// Runs one request to completion with nothing else happening.
    fn blocking(
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

    fn setup(&mut self) {
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
                });
            }
        }
        self.t(format!("setup done: {} actors", self.actors.len()));
    }

    // ---- the run ---------------------------------------------------------------

    fn run_all(&mut self, opts: &RunOpts) {
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
    fn step_event(&mut self) -> bool {
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
            Ev::Deliver(c) => self.on_deliver(c),
            Ev::ClientClose(c) => self.client_close(c),
            Ev::EngineClosed(c) => self.engine_closed(c),
            Ev::JobDone => self.job_done(),
            Ev::Provider { call, reply } => {
                self.t(format!("in provider reply call={call}"));
                self.input(Input::ProviderDone { call, reply });
            }
            Ev::Flush(c) => self.on_flush(c),
            Ev::Flushed { conn, bytes } => {
                let known = self.conns.get(&conn).is_some_and(|c| !c.engine_told_closed);
                if known {
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
                    self.input(Input::Mcp { conn, event });
                }
            }
            Ev::Sandbox { op, reply } => {
                if self.sandbox.deliver(op, &reply) {
                    self.t(format!("in sandbox op={op} {reply:?}"));
                    self.input(Input::Sandbox { op, reply });
                }
            }
            Ev::Timer => {
                if self.timer_at.is_some_and(|t| t <= self.now_ms) {
                    self.timer_at = None;
                    self.t("in timeout".into());
                    let now = self.now();
                    let r = catch_unwind(AssertUnwindSafe(|| self.engine.handle_timeout(now)));
                    if let Err(p) = r {
                        self.engine_panicked(p);
                    } else {
                        self.drain();
                    }
                }
            }
        }
        true
    }

    /// Process crash: everything not committed is gone; the engine restarts
    /// from the store exactly like io-smol does at startup.
    fn crash(&mut self) {
        self.stats.crashes += 1;
        self.t("CRASH".into());
        // A commit in flight either made it or not (it is atomic).
        if let Some(Job::Commit { .. }) = self.io.running.front() {
            if self.rng.chance(0.5) {
                if let Some(Job::Commit { batch, writes }) = self.io.running.pop_front() {
                    self.commit(batch, writes);
                }
            }
        }
        self.restart(false);
    }

    /// Starts a graceful shutdown (`Input::Shutdown`); the restart follows
    /// once the engine has no connections and the store pipeline is quiet.
    fn begin_shutdown(&mut self) {
        self.t("SHUTDOWN begins".into());
        self.shutdown_since = Some(self.now_ms);
        self.checker.shutting_down = true;
        self.input(Input::Shutdown);
    }

    /// Completes a graceful shutdown when the server has drained (or forces
    /// it, as a crash, after the shutdown timeout).
    fn shutdown_progress(&mut self) {
        let Some(since) = self.shutdown_since else {
            return;
        };
        let io_quiet = self.io.pending.is_empty()
            && self.io.queued.is_empty()
            && self.io.running.is_empty()
            && self.io.held.is_empty();
        if self.engine.connection_count() == 0 && io_quiet {
            self.stats.graceful_restarts += 1;
            self.t("SHUTDOWN complete: graceful restart".into());
            self.restart(true);
        } else if self.now_ms >= since + SHUTDOWN_TIMEOUT_MS {
            self.t("SHUTDOWN timed out: process exits".into());
            self.crash();
        }
    }

    /// Rebuilds the engine from the store exactly like io-smol starts.
    /// After a graceful shutdown, connections the server already closed keep
    /// their unread bytes for the client.
    fn restart(&mut self, graceful: bool) {
        self.shutdown_since = None;
        self.checker.shutting_down = false;
        self.io = Io::new();
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
            Ev::Act(_) | Ev::Admin => true,
            Ev::ClientRead(c) => keep.contains(c),
            _ => false,
        });
        self.timer_at = None;
        self.checker.on_restart();
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
        match catch_unwind(AssertUnwindSafe(|| {
            Engine::new(config, Box::new(entropy), snapshot, now)
        })) {
            Ok(e) => self.engine = e,
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
        for rid in lost {
            self.t(format!("req #{rid} connection reset by the restart"));
            self.reqs[rid].lost = true;
            if self.reqs[rid].actor != usize::MAX {
                self.actor_req_finished(rid, false);
            }
        }
    }

    fn liveness(&mut self) {
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
        for c in self.conns.values_mut() {
            c.slow = false;
        }
        for a in self.actors.iter_mut() {
            a.slow = false;
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

    fn quiescent(&self) -> bool {
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
        !open && !pending
    }

    fn slot_hopeless(&self, slot: usize) -> bool {
        let s = &self.slots[slot];
        s.dead && (s.generations >= MAX_GENERATIONS || s.failed_creates >= MAX_FAILED_CREATES)
    }

    fn finish(mut self) -> Report {
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

    // ---- actors -------------------------------------------------------------------

    fn schedule_act(&mut self, a: usize, delay: u64) {
        if self.actors[a].act_scheduled || self.actors[a].gone {
            return;
        }
        self.actors[a].act_scheduled = true;
        self.after(delay, Ev::Act(a));
    }

    fn think(&mut self) -> u64 {
        let t = self.swarm.think_ms;
        self.draw(t)
    }

    fn rpc(
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
        Some(self.start_req(a, slot, &sid, kind, Listener::Client, bytes))
    }

    fn act(&mut self, a: usize) {
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

    fn tool_defs(tools: &[&str]) -> Value {
        Value::Array(
            tools
                .iter()
                .map(|t| json!({"name": t, "description": format!("sim tool {t}"), "input_schema": {"type": "object"}}))
                .collect(),
        )
    }

    fn create_session(&mut self, a: usize) {
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

    fn join_session(&mut self, a: usize) {
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

    fn next_nonce(&mut self, a: usize) -> String {
        self.actors[a].sends += 1;
        format!("nonce:a{}.{};", a, self.actors[a].sends)
    }

    fn driver_act(&mut self, a: usize) {
        let liveness = self.phase == Phase::Liveness;
        if !liveness && self.rng.chance(self.swarm.never_return / 10.0) {
            self.t(format!(
                "{} leaves and never comes back",
                self.actors[a].name
            ));
            self.actors[a].gone = true;
            return;
        }
        if !self.actors[a].registered || (!liveness && self.rng.chance(0.02)) {
            let pipeline = !liveness
                && self.actors[a].paused.is_none()
                && self.rng.chance(self.swarm.pipeline);
            self.force_keep_alive = pipeline;
            let rid = self.rpc(a, Kind::Register, "session.registerDriver", None, false);
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
            return self.answer_pause(a, client_ids, server_ids);
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
    fn sandbox_rpc(&mut self, a: usize) {
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

    fn send_text(&mut self, a: usize) {
        let nonce = self.next_nonce(a);
        let content = if self.rng.chance(0.5) {
            json!(format!("hello {nonce} from {}", self.actors[a].name))
        } else {
            json!([{"type": "text", "text": format!("blocks {nonce}")}])
        };
        self.send_message(a, nonce, content, false);
    }

    fn send_message(&mut self, a: usize, nonce: String, content: Value, continuation: bool) {
        let params = json!({"message": {"role": "user", "content": content}});
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

    fn send_garbage(&mut self, a: usize) {
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
        self.actors[a].busy = Some(rid);
    }

    fn answer_pause(&mut self, a: usize, client_ids: Vec<String>, server_ids: Vec<String>) {
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

    fn observer_act(&mut self, a: usize) {
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
            let params = since.as_ref().map(|s| json!({"since_event_id": s}));
            let rid = self.rpc(
                a,
                Kind::Subscribe { since },
                "session.subscribe",
                params,
                false,
            );
            if let Some(rid) = rid {
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
    fn admin_act(&mut self) {
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

    fn admin_req_finished(&mut self, rid: usize, complete: bool) {
        let status = self.reqs[rid].status;
        match self.reqs[rid].kind {
            Kind::Revoke(a) if complete && status == Some(204) => {
                self.t(format!("{} was revoked", self.actors[a].name));
                self.actors[a].gone = true;
            }
            Kind::PutProfile { broken } if complete && status == Some(200) => {
                self.profile_broken = broken;
            }
            _ => {}
        }
    }

    /// A 401 for a key the actor was given: only legitimate once the client
    /// key is revoked (committed before the 401 could be released). The
    /// actor then stops for good (the operator's answer may have been lost
    /// in a crash).
    fn on_unauthorized(&mut self, a: usize, rid: usize) {
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

    fn mark_dead(&mut self, slot: usize, sid: &str) {
        if self.slots[slot].current.as_deref() == Some(sid) && !self.slots[slot].dead {
            self.t(format!("slot {slot}: session {sid} is no longer open"));
            self.slots[slot].dead = true;
        }
    }

    fn actor_req_finished(&mut self, rid: usize, complete: bool) {
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

fn engine_unavailable() -> &'static str {
    "The provider is currently unavailable."
}

/// The same request without `Connection: close` (keep-alive).
fn strip_close(bytes: Vec<u8>) -> Vec<u8> {
    const HDR: &[u8] = b"Connection: close\r\n";
    match bytes.windows(HDR.len()).position(|w| w == HDR) {
        Some(i) => [&bytes[..i], &bytes[i + HDR.len()..]].concat(),
        None => bytes,
    }
}

/// A short trace rendering of a terminal frame.
fn summarize(t: &Value) -> String {
    if let Some(e) = t.get("error") {
        return format!("error {} {}", e["code"], e["message"]);
    }
    let r = &t["result"];
    if let Some(ev) = r["events"].as_array() {
        let blocks: Vec<&str> = r["message"]["content"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| b["type"].as_str().unwrap_or("?"))
                    .collect()
            })
            .unwrap_or_default();
        return format!("result message {blocks:?} events={}", ev.len());
    }
    if r.get("event_type").is_some() {
        return format!("result event {}", r["event_type"]);
    }
    let s = r.to_string();
    let cut = s.char_indices().nth(120).map(|(i, _)| i).unwrap_or(s.len());
    format!("result {}", &s[..cut])
}

/// The first `n` bytes of `q`, removed (slice copies, not per-byte).
fn take_front(q: &mut VecDeque<u8>, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let (a, b) = q.as_slices();
    let na = n.min(a.len());
    v.extend_from_slice(&a[..na]);
    v.extend_from_slice(&b[..n - na]);
    q.drain(..n);
    v
}

fn write_name(w: &StoreWrite) -> String {
    let d = format!("{w:?}");
    let cut = d.char_indices().nth(90).map(|(i, _)| i).unwrap_or(d.len());
    d[..cut].to_string()
}
