//! [`Core`]: the engine, its pipeline, the connection table and the
//! in-flight bookkeeping, and every rule of routing between them (see the
//! module above for what a runtime and a host provide).

use std::collections::HashMap;
use std::time::Duration;

use super::{
    CallHandle, CoreBoot, Drain, Event, Host, Limits, Runtime, StoreDone, Writer, WriterMsg,
};
use crate::metrics::EngineSteps;
use crate::pipeline::{Delivery, Job, Pipeline, Routed};
use crate::replicas::Forward;
use crate::store::ReadResult;
use crate::{CallId, ConnId, Engine, Input, Listener, MonoMs, ProviderCall, ProviderReply};

/// Events handled per wake-up before the store gets a chance to commit.
const BURST: usize = 512;
/// Period of the activity summary log line (spec 04 §5 step 12).
const ACTIVITY_PERIOD_MS: u64 = 3_600_000;
/// How long a shutdown waits for MCP children to be reaped.
const MCP_REAP_BUDGET_MS: u64 = 2_000;
/// How often the shutdown looks again while MCP children are being reaped.
const MCP_REAP_POLL_MS: u64 = 10;

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
            faults,
        } = boot;
        let mut pipe = match fenced {
            true => Pipeline::fenced(),
            false => Pipeline::new(),
        };
        pipe.faults = faults;
        Core {
            engine,
            pipe,
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

    /// The engine, to read (metrics, counts).
    pub fn engine(&self) -> &Engine {
        &self.engine
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
        crate::burst::probes_first(&mut burst, Event::seen);
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
            self.host.observe(&out);
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
