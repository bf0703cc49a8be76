//! The driver core every runtime shares: everything between the engine and
//! the outside world that does not depend on how a runtime waits, spawns,
//! moves bytes or reads a clock.
//!
//! [`Core`] owns the [`Engine`], its [`Pipeline`], the connection table and
//! the in-flight bookkeeping. A runtime hands it typed [`Event`]s (a burst
//! at a time), asks it when to wake ([`Core::next_wake`]) and whether the
//! graceful shutdown is over ([`Core::stopped`]), then drains the store
//! ([`Core::drain`]); the core feeds the engine, routes every output and
//! calls back through [`Runtime`] (sockets, provider calls, the store
//! worker, the clock) and [`Host`] (MCP and sandbox transports, upkeep that
//! never changes what the engine does). It reads no clock and performs no
//! I/O itself. Rules that used to be written twice live here once: stale
//! connection reports, the abort rule of streamed provider calls, the
//! shutdown-idle test, the lease check before an answer is revealed, engine
//! step timing and the activity summary.

use std::collections::HashMap;
use std::time::Duration;

use engine::bytes::Bytes;
use engine::mcp::{McpCommand, McpConnId, McpEvent};
use engine::metrics::EngineSteps;
use engine::pipeline::{Delivery, Job, Pipeline, Routed};
use engine::replicas::Forward;
use engine::sandbox::{OpId, SandboxCommand, SandboxReply};
use engine::store::{ReadId, ReadResult};
use engine::{CallId, ConnId, Engine, Input, Listener, MonoMs, Now, ProviderCall, ProviderReply};

/// Events handled per wake-up before the store gets a chance to commit.
const BURST: usize = 512;
/// Period of the activity summary log line (spec 04 §5 step 12).
const ACTIVITY_PERIOD_MS: u64 = 3_600_000;
/// How long a shutdown waits for MCP children to be reaped.
const MCP_REAP_BUDGET_MS: u64 = 2_000;
/// How often the shutdown looks again while MCP children are being reaped.
const MCP_REAP_POLL_MS: u64 = 10;

/// What the store worker reports back.
pub enum StoreDone {
    Committed(u64),
    Read(ReadId, Result<ReadResult, String>),
}

/// Everything a driver loop reacts to; `S` is the runtime's accepted
/// socket.
pub enum Event<S> {
    Accepted(Listener, S),
    /// `Received`, `Flushed` or `Closed` from a connection's reader or
    /// writer.
    Net(Input),
    Provider(CallId, ProviderReply),
    /// Body bytes of a streamed call's 2xx response.
    ProviderChunk(CallId, Vec<u8>),
    Mcp(McpConnId, McpEvent),
    Sandbox(OpId, SandboxReply),
    Store(StoreDone),
    /// Replica mode: catalogue rows other replicas committed.
    Catalog(Box<engine::store::CatalogUpdate>),
    /// SIGTERM or SIGINT.
    Signal,
}

impl<S> Event<S> {
    /// What [`engine::burst::probes_first`] needs to know.
    fn seen(&self) -> engine::burst::Seen<'_> {
        use engine::burst::Seen;
        match self {
            Event::Net(Input::Received { conn, bytes }) => Seen::Received(*conn, bytes),
            Event::Net(input) => input.conn().map_or(Seen::Other, Seen::Conn),
            _ => Seen::Other,
        }
    }
}

/// What a connection's writer is told, in order.
pub enum WriterMsg {
    Data(Bytes),
    /// Write what is queued, then shut the socket down.
    Close,
}

/// A connection's writer as the core sees it: a queue that never blocks.
pub trait Writer {
    /// Queues `msg`; a writer that is gone drops it (its connection is
    /// already going away).
    fn put(&self, msg: WriterMsg);
}

/// The handle of a streamed provider call in flight.
pub trait CallHandle {
    /// Closes the call's connection now (the engine gave up on it).
    fn abort(&mut self);
}

/// What a runtime performs for the core: its sockets, tasks, store worker
/// and clock.
pub trait Runtime {
    /// An accepted socket the core has not admitted yet.
    type Stream;
    /// A connection's writer.
    type Writer: Writer;
    /// A streamed provider call's abort handle.
    type Call: CallHandle;
    /// Replica mode: a relay in progress; dropping it ends the relay.
    type Relay;

    /// The engine's time now (monotonic and wall clock).
    fn now(&self) -> Now;
    /// A monotonic microsecond count, only to time engine steps
    /// (`bae_engine_step_microseconds`); a virtual clock may return 0.
    fn micros(&self) -> u64;
    /// Starts the connection's reader and writer. `None`: the socket
    /// could not be set up (it is dropped, and the engine never hears of
    /// it).
    fn open(&mut self, conn: ConnId, stream: Self::Stream) -> Option<Self::Writer>;
    /// Closes a socket the core refused (shutting down, or over
    /// `BAE_MAX_CONNECTIONS`).
    fn refuse(&mut self, stream: Self::Stream);
    /// Stops accepting (the graceful shutdown began).
    fn stop_accepting(&mut self);
    /// Starts a provider call off the engine thread; its reply comes back
    /// as [`Event::Provider`] (and [`Event::ProviderChunk`]s first when it
    /// streams). A streamed call returns its abort handle.
    fn call_provider(&mut self, call: ProviderCall) -> Option<Self::Call>;
    /// Hands jobs to the store worker; `false` when it is gone.
    fn submit_store(&mut self, jobs: Vec<Job>) -> bool;
    /// The store worker is gone. It only stops by exiting the process, so
    /// this is unreachable in practice; a runtime exits (crash-only).
    fn store_lost(&mut self) -> !;
    /// Replica mode: relays the connection to its session's owner through
    /// `writer`. `None` when this runtime cannot (it refuses replica mode
    /// at start, so the engine never asks it).
    fn forward(&mut self, f: Forward, writer: &Self::Writer) -> Option<Self::Relay>;
}

/// What the process around the engine provides besides the runtime: the
/// MCP and sandbox transports, and upkeep that never changes what the
/// engine does (heap trim, telemetry export, the replica lease watch).
/// Every upkeep method defaults to doing nothing.
pub trait Host {
    /// Performs an MCP transport command; what it does comes back as
    /// [`Event::Mcp`].
    fn mcp(&mut self, cmd: McpCommand);
    /// Runs a container engine command; its reply comes back as
    /// [`Event::Sandbox`].
    fn sandbox(&mut self, cmd: SandboxCommand);
    /// The reply of `op` reached the core: its kill switch is not needed.
    fn sandbox_done(&mut self, _op: OpId) {}
    /// A burst of events begins (the heap trim waits for a quiet spell).
    fn busy(&mut self) {}
    /// The engine's outputs were drained: what it recorded for telemetry
    /// leaves with them (only its telemetry may be drained here).
    fn drained(&mut self, _engine: &mut Engine) {}
    /// When the upkeep next needs the loop to wake.
    fn next_due(&self) -> Option<MonoMs> {
        None
    }
    /// Does the upkeep that is due (heap trim, telemetry export).
    fn fire(&mut self, _engine: &mut Engine) {}
    /// An answer is about to be revealed (replica mode: a replica frozen
    /// past its lease reveals nothing more).
    fn before_reveal(&mut self) {}
    /// The shutdown began draining: close every MCP transport (children
    /// are killed, then reaped).
    fn close_mcp(&mut self) {}
    /// MCP children not reaped yet.
    fn mcp_children(&self) -> usize {
        0
    }
    /// The last step of a shutdown: flush telemetry within `budget`.
    fn finish(&mut self, _engine: &mut Engine, _budget: Duration) {}
}

/// What the runtime does next while the shutdown drains the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Wait for the next event (at the latest until this instant, when
    /// set), hand it to [`Core::drain_event`], then ask again.
    Wait(Option<MonoMs>),
    /// Everything is committed: call [`Core::finish`].
    Done,
}

struct Conn<W, F> {
    writer: W,
    /// Replica mode: the connection was handed to its session's owner;
    /// dropping this ends the relay.
    forwarding: Option<F>,
}

/// A streamed provider call in flight.
struct Streaming<C> {
    handle: C,
    /// The engine gave up on it: nothing more of it reaches the engine.
    aborted: bool,
}

/// Limits the core enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `BAE_SHUTDOWN_TIMEOUT`: budget for the graceful drain.
    pub shutdown_timeout: Duration,
    /// `BAE_MAX_CONNECTIONS`: connections beyond it are refused on accept.
    pub max_connections: usize,
}

/// What the core is started with besides its runtime and host.
pub struct CoreBoot {
    pub engine: Engine,
    pub limits: Limits,
    /// Replica mode: every commit checks its lane and leases.
    pub fenced: bool,
}

/// The engine and everything around it that is the same in every runtime.
pub struct Core<R: Runtime, H: Host> {
    engine: Engine,
    pipe: Pipeline,
    conns: HashMap<ConnId, Conn<R::Writer, R::Relay>>,
    next_conn: ConnId,
    provider_inflight: usize,
    /// Streamed provider calls in flight, to close at once when the engine
    /// gives up on them (a cancel, a stream fault).
    streaming: HashMap<CallId, Streaming<R::Call>>,
    shutdown_deadline: Option<MonoMs>,
    /// Shutdown: until when MCP children are waited for (`None`: not yet
    /// draining, or done waiting).
    reap_until: Option<MonoMs>,
    next_activity: MonoMs,
    /// Time per engine step (`bae_engine_step_microseconds`).
    steps: EngineSteps,
    limits: Limits,
    /// The transports and upkeep of the process around the engine.
    pub host: H,
    /// The runtime, for what the core cannot do itself.
    pub rt: R,
}

impl<R: Runtime, H: Host> Core<R, H> {
    pub fn new(boot: CoreBoot, rt: R, host: H) -> Self {
        let CoreBoot {
            engine,
            limits,
            fenced,
        } = boot;
        Core {
            engine,
            pipe: match fenced {
                true => Pipeline::fenced(),
                false => Pipeline::new(),
            },
            conns: HashMap::new(),
            next_conn: ConnId(1),
            provider_inflight: 0,
            streaming: HashMap::new(),
            shutdown_deadline: None,
            reap_until: None,
            next_activity: rt.now().mono + ACTIVITY_PERIOD_MS,
            steps: EngineSteps::default(),
            limits,
            host,
            rt,
        }
    }

    /// The top of every loop turn: drains every engine output, then hands
    /// queued store work to the worker when it is idle.
    pub fn flush(&mut self) {
        self.drain_outputs();
        self.submit_store();
    }

    /// Whether the graceful shutdown is over: nothing left in flight, or
    /// its budget spent.
    pub fn stopped(&self) -> bool {
        let Some(deadline) = self.shutdown_deadline else {
            return false;
        };
        if self.conns.is_empty() && self.provider_inflight == 0 && self.pipe.is_quiet() {
            tracing::info!("all connections finished");
            return true;
        }
        if self.rt.now().mono >= deadline {
            tracing::warn!(
                connections = self.conns.len(),
                "shutdown timeout elapsed with work in flight; stopping anyway"
            );
            return true;
        }
        false
    }

    /// Earliest of the engine's next timer, the shutdown deadline, the
    /// next activity summary and the host's upkeep.
    pub fn next_wake(&self) -> MonoMs {
        [
            self.engine.poll_timeout(),
            self.shutdown_deadline,
            self.host.next_due(),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_activity, MonoMs::min)
    }

    /// Handles `first` and what else has arrived (`more`, up to [`BURST`])
    /// as one burst, liveness probes first (each connection's inputs keep
    /// their order).
    pub fn handle_burst(
        &mut self,
        first: Event<R::Stream>,
        mut more: impl FnMut() -> Option<Event<R::Stream>>,
    ) {
        self.host.busy();
        let mut burst = vec![first];
        while burst.len() < BURST {
            let Some(ev) = more() else { break };
            burst.push(ev);
        }
        engine::burst::probes_first(&mut burst, Event::seen);
        for ev in burst {
            self.handle(ev);
        }
    }

    /// Fires whatever is due: the host's upkeep, the activity summary and
    /// the engine's timers.
    pub fn fire_timers(&mut self) {
        self.host.fire(&mut self.engine);
        let now = self.rt.now();
        if now.mono >= self.next_activity {
            self.next_activity += ACTIVITY_PERIOD_MS;
            // Runs after the jobs already queued; reports nothing back.
            let _ = self.rt.submit_store(vec![Job::Activity]);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now.mono) {
            let started = self.rt.micros();
            self.engine.handle_timeout(now);
            self.steps.observe(self.rt.micros().saturating_sub(started));
            self.drain_outputs();
        }
    }

    fn input(&mut self, input: Input) {
        let now = self.rt.now();
        let started = self.rt.micros();
        self.engine.note_store_backlog(self.pipe.backlog());
        self.engine.handle_input(now, input);
        self.steps.observe(self.rt.micros().saturating_sub(started));
        self.drain_outputs();
    }

    fn handle(&mut self, ev: Event<R::Stream>) {
        match ev {
            Event::Accepted(listener, stream) => self.accept(listener, stream),
            Event::Net(input) => {
                let Some(conn) = input.conn() else {
                    return;
                };
                if matches!(input, Input::Closed { .. }) {
                    // Forget the writer: it drains what is queued, then
                    // shuts the socket down. Later reports are stale.
                    if self.conns.remove(&conn).is_none() {
                        return;
                    }
                } else if self.conns.get(&conn).is_none_or(|c| c.forwarding.is_some()) {
                    // Stale, or relayed to another replica: the engine has
                    // forgotten the connection.
                    return;
                }
                self.input(input);
            }
            Event::Provider(call, reply) => {
                log_reply(call, &reply);
                self.provider_inflight = self.provider_inflight.saturating_sub(1);
                if self.streaming.remove(&call).is_some_and(|s| s.aborted) {
                    return;
                }
                self.input(Input::ProviderDone { call, reply });
            }
            Event::ProviderChunk(call, bytes) => {
                if self.streaming.get(&call).is_some_and(|s| !s.aborted) {
                    self.input(Input::ProviderChunk { call, bytes });
                }
            }
            Event::Mcp(conn, event) => self.input(Input::Mcp { conn, event }),
            Event::Catalog(update) => self.input(Input::Catalog(update)),
            Event::Sandbox(op, reply) => {
                self.host.sandbox_done(op);
                self.input(Input::Sandbox { op, reply });
            }
            Event::Store(StoreDone::Committed(batch)) => {
                for d in self.pipe.committed(batch) {
                    self.dispatch(d);
                }
            }
            Event::Store(StoreDone::Read(id, mut result)) => {
                self.pipe.read_done();
                // The store thread measured the rest; engine steps are ours.
                if let Ok(ReadResult::Runtime(stats)) = &mut result {
                    stats.engine_steps = self.steps.clone();
                }
                self.input(Input::ReadDone { id, result });
            }
            Event::Signal => self.signal(),
        }
    }

    fn signal(&mut self) {
        let now = self.rt.now().mono;
        if self.shutdown_deadline.is_some() {
            tracing::warn!("second shutdown signal; finishing now");
            self.shutdown_deadline = Some(now);
            return;
        }
        tracing::info!(
            timeout_secs = self.limits.shutdown_timeout.as_secs(),
            "shutdown signal received; draining"
        );
        let budget = self.limits.shutdown_timeout.as_millis() as u64;
        self.shutdown_deadline = Some(now + budget);
        self.rt.stop_accepting();
        self.input(Input::Shutdown);
    }

    fn accept(&mut self, listener: Listener, stream: R::Stream) {
        if self.shutdown_deadline.is_some() {
            return self.rt.refuse(stream);
        }
        if self.conns.len() >= self.limits.max_connections {
            tracing::warn!(
                max = self.limits.max_connections,
                "connection limit reached; refusing"
            );
            return self.rt.refuse(stream);
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let Some(writer) = self.rt.open(conn, stream) else {
            return;
        };
        let forwarding = None;
        self.conns.insert(conn, Conn { writer, forwarding });
        self.input(Input::Accepted { conn, listener });
    }

    /// Drains every engine output and routes it.
    fn drain_outputs(&mut self) {
        while let Some(out) = self.engine.poll_output() {
            match self.pipe.route(out) {
                Some(Routed::Dispatch(d)) => self.dispatch(d),
                Some(Routed::Mcp(cmd)) => self.host.mcp(cmd),
                Some(Routed::Sandbox(cmd)) => self.host.sandbox(cmd),
                Some(Routed::Abort(call)) => self.abort_provider(call),
                None => {}
            }
        }
        // Span facts leave with the outputs of the same input.
        self.host.drained(&mut self.engine);
    }

    fn dispatch(&mut self, d: Delivery) {
        self.host.before_reveal();
        let (conn, msg) = match d {
            Delivery::Send { conn, bytes } => (conn, WriterMsg::Data(bytes)),
            Delivery::Close { conn } => (conn, WriterMsg::Close),
            Delivery::Call(call) => return self.call_provider(call),
            Delivery::Forward(f) => return self.forward(f),
        };
        if let Some(c) = self.conns.get(&conn) {
            c.writer.put(msg);
        }
    }

    fn call_provider(&mut self, call: ProviderCall) {
        self.provider_inflight += 1;
        let id = call.id;
        tracing::debug!(call = id.0, stream = call.stream, "provider call started");
        if let Some(handle) = self.rt.call_provider(call) {
            let aborted = false;
            self.streaming.insert(id, Streaming { handle, aborted });
        }
    }

    /// The engine closed a provider call (a cancel, a stream fault): a
    /// streamed one's connection closes now. An unstreamed one is left to
    /// finish, as before streaming existed (a close handle would cost every
    /// call); the engine ignores its reply.
    fn abort_provider(&mut self, call: CallId) {
        tracing::debug!(call = call.0, "provider call aborted");
        if let Some(s) = self.streaming.get_mut(&call) {
            s.aborted = true;
            s.handle.abort();
        }
    }

    /// Hands the connection to the runtime's relay; later reports of its
    /// reader are not fed to the engine, which has forgotten it.
    fn forward(&mut self, f: Forward) {
        let Some(c) = self.conns.get_mut(&f.conn) else {
            return;
        };
        c.forwarding = self.rt.forward(f, &c.writer);
    }

    /// Hands queued store work to the worker when it is idle.
    fn submit_store(&mut self) {
        if let Some(jobs) = self.pipe.take_submission() {
            if !self.rt.submit_store(jobs) {
                tracing::error!("store worker unavailable; exiting");
                self.rt.store_lost();
            }
        }
    }

    /// After the loop: MCP transports are closed and their children
    /// waited for (up to 2 s); then everything pending is committed (see
    /// [`Core::drain`]).
    pub fn begin_drain(&mut self) {
        self.host.close_mcp();
        self.reap_until = Some(self.rt.now().mono + MCP_REAP_BUDGET_MS);
    }

    /// What the shutdown waits for next: MCP children being reaped, then
    /// the store committing what is pending. Only commits matter now: they
    /// release what they held.
    pub fn drain(&mut self) -> Drain {
        if let Some(until) = self.reap_until {
            let now = self.rt.now().mono;
            if self.host.mcp_children() > 0 && now < until {
                return Drain::Wait(Some(until.min(now + MCP_REAP_POLL_MS)));
            }
            self.reap_until = None;
        }
        self.submit_store();
        match self.pipe.is_quiet() {
            true => Drain::Done,
            false => Drain::Wait(None),
        }
    }

    /// An event that arrived while the shutdown drains.
    pub fn drain_event(&mut self, ev: Event<R::Stream>) {
        match ev {
            Event::Store(StoreDone::Committed(batch)) => {
                for d in self.pipe.committed(batch) {
                    self.dispatch(d);
                }
            }
            Event::Store(StoreDone::Read(..)) => self.pipe.read_done(),
            _ => {}
        }
    }

    /// The end of a shutdown: spans are flushed within what remains of its
    /// budget (spec 04 §5.1). Dropping the core then drops the runtime's
    /// job channel, which ends the store worker.
    pub fn finish(mut self) {
        let now = self.rt.now().mono;
        let left = self.shutdown_deadline.map_or(0, |d| d - now);
        self.host
            .finish(&mut self.engine, Duration::from_millis(left));
        tracing::info!("pending writes committed; shutdown complete");
    }
}

fn log_reply(id: CallId, reply: &ProviderReply) {
    match reply {
        ProviderReply::Http { status, body, .. } => {
            tracing::debug!(
                call = id.0,
                status,
                bytes = body.len(),
                "provider call done"
            )
        }
        ProviderReply::Transport(e) => {
            tracing::debug!(call = id.0, error = %e, "provider call failed")
        }
        ProviderReply::Credential(e) => {
            tracing::debug!(call = id.0, error = %e, "provider credential unresolved")
        }
        ProviderReply::Streamed => tracing::debug!(call = id.0, "provider stream done"),
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
