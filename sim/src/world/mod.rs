//! The simulated world around one real [`engine::Engine`] driven by the
//! driver core every runtime uses (`engine::driver`, `world/driver.rs`): a
//! virtual clock and event queue, a store worker, connections that speak
//! HTTP/1.1 bytes, a provider, crash/restart, and the invariant checks.
//!
//! Everything is ordered by `BTreeMap`/`Vec` and drawn from seeded
//! generators, so a seed determines the run byte for byte.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};

use engine::mem_store::MemStore;
use engine::pipeline::Job;
use engine::store::StoreWrite;
use engine::{
    CallId, Config, ConnId, Engine, Input, Listener, Now, Output, ProviderCall, ProviderEntry,
    ProviderReply,
};

mod actors;
mod driver;
mod ext;
mod ext_checks;
mod plumbing;
mod responses;
mod run;
mod transfer;
use serde_json::{json, Value};
pub use transfer::TransferStats;

use crate::check::{self, Checker, Violation};
use crate::driver::now_of;
use crate::hash::Fnv;
use crate::http::{self, Parsed, ResponseReader};
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
    /// Provider calls the engine closed before their reply (cancels, stream faults).
    pub provider_aborts: u64,
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
    /// What the extension workload did (`sim/src/ext.rs`).
    pub ext: crate::ext::ExtStats,
    /// Forks made and refused, exports, imports (`world/transfer.rs`).
    pub transfer: transfer::TransferStats,
    pub stream: crate::stream::StreamStats,
    pub traffic: crate::traffic::oracle::TrafficStats,
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
    /// Body bytes of a streamed call (`sim/src/stream.rs`).
    ProviderChunk {
        call: CallId,
        bytes: Vec<u8>,
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
    /// The operator forks or exports a session (`world/transfer.rs`).
    Transfer,
    /// An actor sends an extension request beside its own (`world/ext.rs`).
    Side {
        actor: usize,
        session: String,
        what: ext::Side,
    },
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
    /// Framing-only reader over everything the engine emitted on it.
    shadow: ResponseReader,
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
    reader: ResponseReader,
    slow: bool,
    /// The client does not read before this virtual time (a stall).
    stalled_until: u64,
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
    /// `session.cancelTurn` (extension `turn.cancel`).
    Cancel,
    /// `session.steerTurn` (extension `turn.steer`); `invalid`: params the
    /// engine must refuse with -32602.
    Steer {
        nonce: String,
        invalid: bool,
    },
    /// Admin: revoke the client key of this actor.
    Revoke(usize),
    /// Admin: replace the profile (primary provider `main` or a missing one).
    PutProfile {
        broken: bool,
    },
    /// Admin: fork with this body (`world/transfer.rs`).
    Fork(Value),
    /// Admin: export the session.
    Export,
    /// Admin: import a document holding these event lines.
    Import(Vec<Value>),
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
    /// Its last byte came while the engine was still on an earlier request
    /// of its connection (pipelined): it arrives when the engine gets to it.
    arrive_later: bool,
    /// Opt-in extension state (`world/ext.rs`).
    ext: ext::ReqExt,
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
    /// Opt-in extension state (`world/ext.rs`).
    ext: ext::ActorExt,
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
    /// The engine inside the driver core every runtime uses.
    core: driver::SimCore,
    /// The core's runtime and host: what it asked for, the virtual clock.
    side: crate::driver::Side,
    config: Config,
    epoch: u32,
    store: MemStore,
    /// The store worker's current submission (front = in progress).
    running: VecDeque<Job>,
    /// A `JobDone` for the front job is in the queue.
    job_scheduled: bool,
    /// The pipeline bug planted in every process (none unless planted).
    faults: engine::faults::Faults,
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
    timer_at: Option<engine::MonoMs>,
    dead_engine: bool,
    profile_id: String,
    profile_broken: bool,
    /// When set, the next request is pipelined on this connection.
    pipeline_on: Option<ConnId>,
    /// The next request is sent keep-alive.
    force_keep_alive: bool,
    /// A graceful shutdown in progress since this virtual time.
    shutdown_since: Option<u64>,
    /// Draws of the extension workload (a stream of its own, so seeds with
    /// the extensions off keep their schedule).
    xrng: Rng,
    ext: crate::ext::ExtOracle,
    /// Streamed provider calls, with draws of their own.
    stream: crate::stream::StreamSim,
    /// The input being fed delivers this `session.cancelTurn` request.
    cancel_probe: Option<usize>,
    /// The request whose last bytes the input being fed delivers.
    feeding: Option<usize>,
    /// Requests the engine set aside until their session is loaded (by the
    /// read that loads it): the engine handles them when it is answered.
    deferred: BTreeMap<engine::ReadId, usize>,
    /// Forks, exports and imports (`world/transfer.rs`).
    transfer: transfer::TransferSim,
    /// Retries and provider limits (`sim/src/traffic/`), with draws of
    /// their own.
    traffic: crate::traffic::oracle::TrafficSim,
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
        let xrng = root.fork();
        let stream = crate::stream::StreamSim::new(root.fork());
        let trng = root.fork();
        let traffic_rng = root.fork();
        let mut config = Config {
            providers: vec![ProviderEntry {
                name: "main".into(),
                kind: proto::provider::Kind::Anthropic,
                base_url: "http://main.provider.sim".into(),
                model: "sim-model".into(),
                auth_template: "${SIM_TOKEN}".into(),
                max_tokens: 512,
                retry: swarm.traffic.entries[0].retry.clone(),
                limits: swarm.traffic.entries[0].limits,
                cache: None,
                prices: None,
                stream: swarm.stream.settings.filter(|_| swarm.stream.primary),
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
            history_cache: engine::history_cache::Limits {
                budget_bytes: swarm.history_cache.0,
                idle_ms: swarm.history_cache.1,
            },
            resident_sessions: swarm.resident_sessions,
            ..Config::default()
        };
        if swarm.ext.window_bytes > 0 {
            config.subscriber_window_bytes = swarm.ext.window_bytes;
        }
        if swarm.has_fallback {
            config.providers.push(ProviderEntry {
                name: "backup".into(),
                kind: proto::provider::Kind::Anthropic,
                base_url: "http://backup.provider.sim".into(),
                model: "sim-backup".into(),
                auth_template: "${SIM_TOKEN}".into(),
                max_tokens: 256,
                retry: swarm.traffic.entries[1].retry.clone(),
                limits: swarm.traffic.entries[1].limits,
                cache: None,
                prices: None,
                stream: swarm.stream.settings.filter(|_| swarm.stream.fallback),
            });
        }
        #[cfg(feature = "planted-bugs")]
        {
            config.planted = opts.bug;
        }
        // What io-smol's bootstrap does before the engine starts.
        let store = MemStore::with_admin_key("key_bootstrap_admin", ADMIN_TOKEN);
        let unix0 = 1_780_000_000_000 + (seed % 1_000_000) * 1_000;
        let now_ms = 1_000;
        #[cfg(feature = "planted-bugs")]
        let faults = engine::faults::Faults::planted(opts.bug);
        #[cfg(not(feature = "planted-bugs"))]
        let faults = engine::faults::Faults::default();
        let engine = Engine::new(
            config.clone(),
            Box::new(SimEntropy(entropy_rng)),
            store.snapshot_of(scope_of(&config)),
            now_of(now_ms, unix0),
        );
        let side = crate::driver::Side::new(now_ms, unix0);
        let core = crate::driver::new_core(engine, &side, SHUTDOWN_TIMEOUT_MS, false, faults);
        let traffic =
            crate::traffic::oracle::TrafficSim::new(traffic_rng, &swarm.traffic, unix0, now_ms);
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
            core,
            side,
            config,
            epoch: 0,
            store,
            running: VecDeque::new(),
            job_scheduled: false,
            faults,
            conns: BTreeMap::new(),
            next_conn: engine::ConnId(1),
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
            xrng,
            ext: crate::ext::ExtOracle::default(),
            stream,
            cancel_probe: None,
            feeding: None,
            deferred: BTreeMap::new(),
            transfer: transfer::TransferSim::new(trng),
            traffic,
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

/// The snapshot a start restores from, as `baesrv` picks it: sessions are
/// left in the store unless every one is kept in memory.
pub(crate) fn scope_of(config: &Config) -> engine::store::SnapshotScope {
    match config.resident_sessions {
        Some(_) => engine::store::SnapshotScope::Lazy,
        None => engine::store::SnapshotScope::Full,
    }
}
