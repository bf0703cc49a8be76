//! The driver core both runtimes share: everything between the engine and
//! the outside world that does not depend on how a runtime waits, spawns
//! or moves bytes.
//!
//! [`Core`] owns the [`Engine`], its [`Pipeline`], the MCP and sandbox
//! transports, the connection table and the in-flight bookkeeping. A
//! runtime hands it typed [`Event`]s (a burst at a time), asks it when to
//! wake ([`Core::next_wake`]) and whether the graceful shutdown is over
//! ([`Core::stopped`]); the core feeds the engine, routes every output and
//! calls back into the runtime through [`Runtime`] for what needs its
//! sockets, tasks or threads. Rules that used to be written twice live
//! here once: stale connection reports, the abort rule of streamed
//! provider calls, the shutdown-idle test, the lease watch before an
//! answer is revealed, engine step timing, the activity summary and the
//! heap trim.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use engine::bytes::Bytes;
use engine::metrics::EngineSteps;
use engine::pipeline::{Delivery, Job, Pipeline, Routed};
use engine::replicas::Forward;
use engine::store::ReadResult;
use engine::{CallId, ConnId, Engine, Input, Listener, ProviderCall, ProviderReply};

use super::mcp::McpTransports;
use super::reports::Reports;
use super::sandbox::Sandboxes;
use super::{Clock, DriverSettings, StoreDone};
use crate::heap_trim::HeapTrim;
use crate::store::pg::renewer::LeaseWatch;

/// Events handled per wake-up before the store gets a chance to commit.
const BURST: usize = 512;
/// Period of the activity summary log line (spec 04 §5 step 12).
const ACTIVITY_PERIOD: Duration = Duration::from_secs(3600);
/// How long a shutdown waits for MCP children to be reaped.
const MCP_REAP_BUDGET: Duration = Duration::from_secs(2);

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
    Mcp(engine::mcp::McpConnId, engine::mcp::McpEvent),
    Sandbox(engine::sandbox::OpId, engine::sandbox::SandboxReply),
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

/// What a runtime performs for the core.
pub trait Runtime {
    /// An accepted socket the core has not admitted yet.
    type Stream;
    /// A connection's writer.
    type Writer: Writer;
    /// A streamed provider call's abort handle.
    type Call: CallHandle;
    /// Replica mode: a relay in progress; dropping it ends the relay.
    type Relay;

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
    /// Hands jobs to the store thread; `false` when it is gone.
    fn submit_store(&mut self, jobs: Vec<Job>) -> bool;
    /// Replica mode: relays the connection to its session's owner through
    /// `writer`. `None` when this runtime cannot (it refuses replica mode
    /// at start, so the engine never asks it).
    fn forward(&mut self, f: Forward, writer: &Self::Writer) -> Option<Self::Relay>;
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

/// What the core is started with besides its runtime.
pub struct CoreBoot {
    pub engine: Engine,
    pub clock: Clock,
    pub settings: DriverSettings,
    pub telemetry: Option<crate::otel::Exporter>,
    pub lease_watch: Option<LeaseWatch>,
}

/// The engine and everything around it that is the same in every runtime.
pub struct Core<R: Runtime, Q: Reports> {
    engine: Engine,
    clock: Clock,
    pipe: Pipeline,
    mcp: McpTransports<Q>,
    sandboxes: Sandboxes<Q>,
    /// Replica mode: when the leases were last renewed (docs/scaling.md).
    lease_watch: Option<LeaseWatch>,
    conns: HashMap<ConnId, Conn<R::Writer, R::Relay>>,
    next_conn: ConnId,
    provider_inflight: usize,
    /// Streamed provider calls in flight, to close at once when the engine
    /// gives up on them (a cancel, a stream fault).
    streaming: HashMap<CallId, Streaming<R::Call>>,
    shutdown_deadline: Option<Instant>,
    next_activity: Instant,
    heap_trim: HeapTrim,
    /// Time per engine step (`bae_engine_step_microseconds`).
    steps: EngineSteps,
    settings: DriverSettings,
    otel: Option<crate::otel::Exporter>,
    /// The runtime, for what the core cannot do itself.
    pub rt: R,
}

impl<R: Runtime, Q: Reports> Core<R, Q> {
    /// `reports` is where the MCP and sandbox transports' tasks report.
    pub fn new(boot: CoreBoot, rt: R, reports: Q) -> Self {
        let CoreBoot {
            engine,
            clock,
            settings,
            telemetry,
            lease_watch,
        } = boot;
        Core {
            mcp: McpTransports::new(reports.clone()),
            sandboxes: Sandboxes::new(
                settings.sandbox_driver,
                settings.sandbox_run_args.clone(),
                reports,
            ),
            engine,
            clock,
            // Replica mode: every commit checks its lane and leases.
            pipe: match lease_watch {
                Some(_) => Pipeline::fenced(),
                None => Pipeline::new(),
            },
            lease_watch,
            conns: HashMap::new(),
            next_conn: ConnId(1),
            provider_inflight: 0,
            streaming: HashMap::new(),
            shutdown_deadline: None,
            next_activity: Instant::now() + ACTIVITY_PERIOD,
            heap_trim: HeapTrim::default(),
            steps: EngineSteps::default(),
            settings,
            otel: telemetry,
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
        if Instant::now() >= deadline {
            tracing::warn!(
                connections = self.conns.len(),
                "shutdown timeout elapsed with work in flight; stopping anyway"
            );
            return true;
        }
        false
    }

    /// Earliest of the engine's next timer, the shutdown deadline, the
    /// next activity summary, a due heap trim and a telemetry export.
    pub fn next_wake(&self) -> Instant {
        let timer = self
            .engine
            .poll_timeout()
            .map(|ms| self.clock.instant_at(ms));
        let otel = self.otel.as_ref().and_then(|o| o.next_due());
        [
            timer,
            self.shutdown_deadline,
            self.heap_trim.deadline(),
            otel,
        ]
        .into_iter()
        .flatten()
        .fold(self.next_activity, Instant::min)
    }

    /// Handles `first` and what else has arrived (`more`, up to [`BURST`])
    /// as one burst, liveness probes first (each connection's inputs keep
    /// their order).
    pub fn handle_burst(
        &mut self,
        first: Event<R::Stream>,
        mut more: impl FnMut() -> Option<Event<R::Stream>>,
    ) {
        self.heap_trim.activity(Instant::now());
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

    /// Fires whatever is due: the heap trim, the activity summary, a
    /// telemetry export and the engine's timers.
    pub fn fire_timers(&mut self) {
        let now = Instant::now();
        self.heap_trim.fire(now);
        if now >= self.next_activity {
            self.next_activity += ACTIVITY_PERIOD;
            // Runs after the jobs already queued; reports nothing back.
            let _ = self.rt.submit_store(vec![Job::Activity]);
        }
        if let Some(o) = &mut self.otel {
            o.pump(&mut self.engine);
        }
        let now = self.clock.now();
        if self.engine.poll_timeout().is_some_and(|t| t <= now.mono) {
            let started = Instant::now();
            self.engine.handle_timeout(now);
            self.steps.observe(started.elapsed().as_micros() as u64);
            self.drain_outputs();
        }
    }

    fn input(&mut self, input: Input) {
        let now = self.clock.now();
        let started = Instant::now();
        self.engine.note_store_backlog(self.pipe.backlog());
        self.engine.handle_input(now, input);
        self.steps.observe(started.elapsed().as_micros() as u64);
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
                self.sandboxes.finished(op);
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
        if self.shutdown_deadline.is_some() {
            tracing::warn!("second shutdown signal; finishing now");
            self.shutdown_deadline = Some(Instant::now());
            return;
        }
        tracing::info!(
            timeout_secs = self.settings.shutdown_timeout.as_secs(),
            "shutdown signal received; draining"
        );
        self.shutdown_deadline = Some(Instant::now() + self.settings.shutdown_timeout);
        self.rt.stop_accepting();
        self.input(Input::Shutdown);
    }

    fn accept(&mut self, listener: Listener, stream: R::Stream) {
        if self.shutdown_deadline.is_some() {
            return self.rt.refuse(stream);
        }
        if self.conns.len() >= self.settings.max_connections {
            tracing::warn!(
                max = self.settings.max_connections,
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
                Some(Routed::Mcp(cmd)) => self.mcp.perform(cmd),
                Some(Routed::Sandbox(cmd)) => self.sandboxes.perform(cmd),
                Some(Routed::Abort(call)) => self.abort_provider(call),
                None => {}
            }
        }
        // Span facts leave with the outputs of the same input.
        if let Some(o) = &mut self.otel {
            o.pump(&mut self.engine);
        }
    }

    fn dispatch(&mut self, d: Delivery) {
        // A replica that was frozen past its lease reveals nothing more.
        if let Some(w) = &self.lease_watch {
            w.exit_if_stale("revealing an answer");
        }
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
                // The store thread is gone: it only stops by exiting the
                // process, so this is unreachable in practice.
                tracing::error!("store worker unavailable; exiting");
                std::process::exit(1);
            }
        }
    }

    /// After the loop: MCP children are killed and reaped; everything
    /// still pending is committed, `next` giving the runtime's events until
    /// then (only commits matter now: they release what they held); spans
    /// are flushed within what remains of the shutdown budget (spec 04
    /// §5.1). Dropping the core then drops the runtime's job channel, which
    /// ends the store thread.
    pub async fn shutdown<F>(mut self, mut next: impl FnMut() -> F)
    where
        F: std::future::Future<Output = Option<Event<R::Stream>>>,
    {
        self.mcp.shutdown(MCP_REAP_BUDGET).await;
        loop {
            self.submit_store();
            if self.pipe.is_quiet() {
                break;
            }
            match next().await {
                Some(Event::Store(StoreDone::Committed(batch))) => {
                    for d in self.pipe.committed(batch) {
                        self.dispatch(d);
                    }
                }
                Some(Event::Store(StoreDone::Read(..))) => self.pipe.read_done(),
                Some(_) => {}
                None => break,
            }
        }
        if let Some(o) = self.otel.take() {
            let left = (self.shutdown_deadline).map_or(Duration::ZERO, |d| {
                d.saturating_duration_since(Instant::now())
            });
            o.shutdown(&mut self.engine, left);
        }
        tracing::info!("pending writes committed; shutdown complete");
    }
}

/// Forwards SIGTERM and SIGINT to a runtime's queue (a task on smol's
/// global executor, in every runtime).
pub fn listen_signals(mut signals: async_signal::Signals, events: impl Reports) {
    use futures_lite::StreamExt;
    smol::spawn(async move {
        while signals.next().await.is_some() {
            if !events.signal().await {
                break;
            }
        }
    })
    .detach();
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
