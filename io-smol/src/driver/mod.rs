//! The runtime around the sans-IO engine.
//!
//! Threads:
//!
//! * the **driver thread** (`smol::block_on`) owns the [`Engine`] and runs
//!   the only loop that ever touches it: wait for the next [`Event`], feed
//!   it as an [`Input`] (or fire due timers), drain [`Engine::poll_output`]
//!   completely and dispatch every output. While it has nothing to do it
//!   waits in async-io's reactor itself (the `async-io` thread only takes
//!   the reactor over while this one is busy);
//! * the driver thread's own executor (`LOCAL`) also runs the
//!   per-connection reader and writer tasks and the provider-call tasks:
//!   bytes and replies reach the engine, and its answers reach the
//!   sockets, without waking another thread. They only move bytes and
//!   report back through one bounded channel. smol's global executor runs
//!   the acceptors, the signal listener and the MCP and sandbox tasks;
//! * one dedicated **store thread** owns the SQLite connection and runs
//!   store jobs FIFO (group commit, see [`pipeline`]);
//! * provider calls to plain-HTTP endpoints run as tasks on the driver
//!   thread (`provider_http`); HTTPS ones run on the `blocking` thread pool
//!   (ureq, `provider`).
//!
//! The driver contains no protocol logic: it never looks inside bytes,
//! writes or reads.
//!
//! Commit failures are fatal (crash-only): the store thread logs the error
//! and exits the process with code 1 before any output held behind the
//! failed batch is released, so nothing unacknowledged was ever revealed and
//! a restart rebuilds the state from the database.

mod calls;
mod deadlines;
mod entropy;
mod forward;
pub mod mcp;
pub mod provider;
pub mod provider_http;
pub mod provider_stream;
pub mod reports;
pub mod sandbox;
mod store_jobs;

pub use entropy::OsEntropy;
pub use store_jobs::{serve_store_jobs, StoreDone};

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::heap_trim::HeapTrim;
use engine::bytes::Bytes;
use engine::metrics::EngineSteps;
use engine::store::{ReadId, ReadResult};
use engine::{CallId, ConnId, Engine, Input, Listener, MonoMs, Now, ProviderReply, UnixMs};
use futures_lite::{future, AsyncWriteExt, StreamExt};
use smol::channel::{self, Receiver, Sender};
use smol::net::{TcpListener, TcpStream};
use smol::Timer;

use crate::store::Backend;
use engine::pipeline::{Delivery, Job, Pipeline, Routed};

/// Capacity of the event channel: readers wait (back-pressure) when the
/// engine falls this far behind.
const EVENT_CAPACITY: usize = 4096;
/// A connection's first read buffer: most requests fit, and an idle
/// keep-alive connection holds no more than this.
const READ_FIRST: usize = 4 * 1024;
/// The largest read buffer a connection grows to while reads fill it.
const READ_CHUNK: usize = 16 * 1024;
/// Bytes after which a writer stops gathering queued buffers into one write.
const MAX_WRITE: usize = 256 * 1024;
/// Most buffers in one vectored write (well under `IOV_MAX`).
const MAX_SLICES: usize = 64;
/// Events handled per wake-up before the store gets a chance to commit.
const BURST: usize = 512;
/// Period of the activity summary log line (spec 04 §5 step 12).
const ACTIVITY_PERIOD: Duration = Duration::from_secs(3600);

/// Monotonic + wall clock in the engine's [`Now`] representation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    pub fn now(&self) -> Now {
        Now {
            mono: MonoMs(self.origin.elapsed().as_millis() as u64),
            unix: UnixMs(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
            ),
        }
    }

    /// The [`Instant`] of a monotonic engine deadline.
    pub fn instant_at(&self, at: MonoMs) -> Instant {
        self.origin + Duration::from_millis(at.0)
    }
}

/// Bound listeners, in the order they were bound (client, then admin), and
/// the shutdown signals.
pub struct Listeners {
    pub client: std::net::TcpListener,
    pub admin: std::net::TcpListener,
    /// SIGTERM and SIGINT, caught from before the first socket is bound: a
    /// signal sent as soon as the server accepts connections starts the
    /// graceful shutdown instead of killing the process.
    pub signals: async_signal::Signals,
}

/// Catches the shutdown signals, then binds the client listener and the
/// admin listener (spec 04 §5 step 13). The error names what failed.
pub fn bind_listeners(client: SocketAddr, admin: SocketAddr) -> Result<Listeners, String> {
    use async_signal::{Signal, Signals};
    let signals = Signals::new([Signal::Term, Signal::Int])
        .map_err(|e| format!("cannot catch SIGTERM/SIGINT: {e}"))?;
    let client =
        listen(client).map_err(|e| format!("cannot bind client listener on {client}: {e}"))?;
    let admin = listen(admin).map_err(|e| format!("cannot bind admin listener on {admin}: {e}"))?;
    Ok(Listeners {
        client,
        admin,
        signals,
    })
}

/// Accept-queue length. std's default of 128 makes connection bursts
/// overflow the queue: the kernel drops SYNs and clients stall ~1 s.
const LISTEN_BACKLOG: i32 = 1024;

fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Runtime settings of the driver.
#[derive(Debug, Clone)]
pub struct DriverSettings {
    /// `BAE_SHUTDOWN_TIMEOUT`: budget for the graceful drain.
    pub shutdown_timeout: Duration,
    /// `BAE_MAX_CONNECTIONS`: connections beyond it are closed on accept.
    pub max_connections: usize,
    /// `BAE_SANDBOX_DRIVER`: the container engine CLI for remote sandboxes.
    pub sandbox_driver: crate::config::SandboxDriver,
    /// Resource-limit flags for sandbox containers (`run` arguments).
    pub sandbox_run_args: Vec<String>,
    /// `BAE_FORWARD_TIMEOUT_MS`: how long a relayed request waits for the
    /// owner's response head (replica mode).
    pub forward_timeout: Duration,
}

/// Everything the driver loop reacts to.
enum Event {
    Accepted(Listener, TcpStream),
    /// `Received`, `Flushed` or `Closed` from a connection task.
    Net(Input),
    Provider(CallId, ProviderReply),
    /// Body bytes of a streamed call's 2xx response.
    ProviderChunk(CallId, Vec<u8>),
    Mcp(engine::mcp::McpConnId, engine::mcp::McpEvent),
    Sandbox(engine::sandbox::OpId, engine::sandbox::SandboxReply),
    Committed(u64),
    ReadDone(ReadId, Result<ReadResult, String>),
    /// Replica mode: catalogue rows other replicas committed.
    Catalog(Box<engine::store::CatalogUpdate>),
    Signal,
}

impl Event {
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

enum WriterMsg {
    Data(Bytes),
    Close,
}

struct Conn {
    writer: Sender<WriterMsg>,
    /// Replica mode: the connection was handed to its session's owner;
    /// dropping this ends the relay.
    forwarding: Option<Sender<()>>,
}

/// Everything a runtime is started with: the engine restored from the
/// store, its clock, the store, the bound listeners and the settings.
pub struct Boot {
    pub engine: Engine,
    pub clock: Clock,
    pub store: Backend,
    pub listeners: Listeners,
    pub settings: DriverSettings,
    /// The OpenTelemetry exporter, when `[telemetry]` is enabled.
    pub telemetry: Option<crate::otel::Exporter>,
    /// Replica mode: the database whose catalogue notices to follow.
    pub replica_notices: Option<crate::config::DatabaseUrl>,
    /// Replica mode: when the leases were last renewed; nothing is
    /// revealed once that is 3/4 of the lease ago (docs/scaling.md).
    pub lease_watch: Option<crate::store::pg::renewer::LeaseWatch>,
}

/// Runs the server on smol until a graceful shutdown completes. Blocks the
/// calling thread, which becomes the engine thread.
pub fn run(boot: Boot) -> io::Result<()> {
    let Boot {
        engine,
        clock,
        store,
        listeners,
        settings,
        telemetry,
        replica_notices,
        lease_watch,
    } = boot;
    let (events_tx, events_rx) = channel::bounded(EVENT_CAPACITY);
    if let Some(url) = replica_notices {
        let tx = events_tx.clone();
        let deliver = move |u| tx.send_blocking(Event::Catalog(Box::new(u))).is_ok();
        crate::store::pg::listener::start_listener(url, deliver)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let (jobs_tx, jobs_rx) = channel::unbounded();
    let store_events = events_tx.clone();
    let store_thread = std::thread::Builder::new()
        .name("bae-store".into())
        .spawn(move || store_worker(store, jobs_rx, store_events))?;

    let driver = Driver {
        mcp: mcp::McpTransports::new(events_tx.clone()),
        sandboxes: sandbox::Sandboxes::new(
            settings.sandbox_driver,
            settings.sandbox_run_args.clone(),
            events_tx.clone(),
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
        http_providers: std::rc::Rc::new(provider_http::Pool::new(provider::idle_per_host())),
        deadlines: std::rc::Rc::default(),
        events_tx,
        jobs_tx,
        shutdown_deadline: None,
        next_activity: Instant::now() + ACTIVITY_PERIOD,
        heap_trim: HeapTrim::default(),
        steps: EngineSteps::default(),
        settings,
        otel: telemetry,
    };
    // async-io's block_on: when the loop has nothing to do, this thread
    // waits in the reactor itself, so a socket becoming ready wakes it
    // directly instead of waking the reactor thread, which then wakes it.
    let result = LOCAL.with(|ex| smol::block_on(ex.run(driver.run(events_rx, listeners))));
    // The store thread ends once the job channel is dropped (with the
    // driver) and every submitted job has finished.
    let _ = store_thread.join();
    result
}

struct Driver {
    engine: Engine,
    mcp: mcp::McpTransports<Sender<Event>>,
    sandboxes: sandbox::Sandboxes<Sender<Event>>,
    clock: Clock,
    pipe: Pipeline,
    lease_watch: Option<crate::store::pg::renewer::LeaseWatch>,
    conns: HashMap<ConnId, Conn>,
    next_conn: ConnId,
    provider_inflight: usize,
    /// Streamed provider calls in flight, to close at once when the engine
    /// gives up on them (a cancel, a stream fault).
    streaming: HashMap<CallId, calls::StreamingCall>,
    /// Keep-alive connections of plain-HTTP provider calls.
    http_providers: std::rc::Rc<provider_http::Pool>,
    /// Timeouts of the driver thread's provider-call tasks.
    deadlines: std::rc::Rc<deadlines::Deadlines>,
    events_tx: Sender<Event>,
    jobs_tx: Sender<Vec<Job>>,
    shutdown_deadline: Option<Instant>,
    next_activity: Instant,
    heap_trim: HeapTrim,
    /// Time per engine step (`bae_engine_step_microseconds`).
    steps: EngineSteps,
    settings: DriverSettings,
    otel: Option<crate::otel::Exporter>,
}

impl Driver {
    async fn run(mut self, events: Receiver<Event>, listeners: Listeners) -> io::Result<()> {
        let client = TcpListener::try_from(listeners.client)?;
        let admin = TcpListener::try_from(listeners.admin)?;
        let mut acceptors = vec![
            smol::spawn(accept_loop(
                client,
                Listener::Client,
                self.events_tx.clone(),
            )),
            smol::spawn(accept_loop(admin, Listener::Admin, self.events_tx.clone())),
        ];
        let mut signals = listeners.signals;
        let signal_tx = self.events_tx.clone();
        smol::spawn(async move {
            while signals.next().await.is_some() {
                if signal_tx.send(Event::Signal).await.is_err() {
                    break;
                }
            }
        })
        .detach();

        let mut timer = Timer::never();
        let mut armed: Option<Instant> = None;
        loop {
            self.drain_outputs();
            self.submit_store();
            if let Some(deadline) = self.shutdown_deadline {
                if self.conns.is_empty() && self.provider_inflight == 0 && self.pipe.is_quiet() {
                    tracing::info!("all connections finished");
                    break;
                }
                if Instant::now() >= deadline {
                    tracing::warn!(
                        connections = self.conns.len(),
                        "shutdown timeout elapsed with work in flight; stopping anyway"
                    );
                    break;
                }
            }

            let wake = self.next_wake();
            // One timer for the whole loop, moved only to an earlier instant
            // (or once it has passed): async-io wakes its reactor thread for
            // every timer set, and the next wake mostly moves later (each
            // event pushes the heap trim back). Waking early costs one idle
            // turn of the loop.
            let now = Instant::now();
            if armed.is_none_or(|a| wake < a || a <= now) {
                timer.set_at(wake);
                armed = Some(wake);
            }
            let first = future::or(async { events.recv().await.ok() }, async {
                (&mut timer).await;
                None
            })
            .await;
            if let Some(ev) = first {
                self.heap_trim.activity(Instant::now());
                let mut burst = vec![ev];
                while burst.len() < BURST {
                    match events.try_recv() {
                        Ok(ev) => burst.push(ev),
                        Err(_) => break,
                    }
                }
                // A liveness probe is not answered behind the whole burst.
                engine::burst::probes_first(&mut burst, Event::seen);
                for ev in burst {
                    self.handle_event(ev, &mut acceptors);
                }
            }
            self.fire_timers();
        }

        drop(acceptors);
        self.finish(&events).await;
        Ok(())
    }

    /// Earliest of the engine's next timer, the shutdown deadline, the
    /// next activity summary and a due heap trim.
    fn next_wake(&self) -> Instant {
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
            self.deadlines.next(),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_activity, Instant::min)
    }

    fn fire_timers(&mut self) {
        self.deadlines.fire(Instant::now());
        self.heap_trim.fire(Instant::now());
        if Instant::now() >= self.next_activity {
            self.next_activity += ACTIVITY_PERIOD;
            // Runs after the jobs already queued; reports nothing back.
            let _ = self.jobs_tx.try_send(vec![Job::Activity]);
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

    fn handle_event(&mut self, ev: Event, acceptors: &mut Vec<smol::Task<()>>) {
        match ev {
            Event::Accepted(listener, stream) => {
                if self.shutdown_deadline.is_some() {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                if self.conns.len() >= self.settings.max_connections {
                    tracing::warn!(
                        max = self.settings.max_connections,
                        "connection limit reached; refusing"
                    );
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                self.accept(listener, stream);
            }
            Event::Net(input) => {
                let conn = match &input {
                    Input::Received { conn, .. }
                    | Input::Flushed { conn, .. }
                    | Input::Closed { conn } => *conn,
                    _ => unreachable!("connection tasks only report connection inputs"),
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
            Event::Committed(batch) => {
                for d in self.pipe.committed(batch) {
                    self.dispatch(d);
                }
            }
            Event::ReadDone(id, mut result) => {
                self.pipe.read_done();
                // The store thread measured the rest; engine steps are ours.
                if let Ok(ReadResult::Runtime(stats)) = &mut result {
                    stats.engine_steps = self.steps.clone();
                }
                self.input(Input::ReadDone { id, result });
            }
            Event::Signal => {
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
                // Stop accepting: cancelling the acceptors drops (closes)
                // both listening sockets.
                acceptors.clear();
                self.input(Input::Shutdown);
            }
        }
    }

    fn accept(&mut self, listener: Listener, stream: TcpStream) {
        let conn = self.next_conn;
        self.next_conn += 1;
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(conn = conn.0, error = %e, "TCP_NODELAY failed");
        }
        let (writer_tx, writer_rx) = channel::unbounded();
        let c = Conn {
            writer: writer_tx,
            forwarding: None,
        };
        self.conns.insert(conn, c);
        self.input(Input::Accepted { conn, listener });
        spawn_local(read_loop(conn, stream.clone(), self.events_tx.clone()));
        spawn_local(write_loop(conn, stream, writer_rx, self.events_tx.clone()));
    }

    /// Drains every engine output and dispatches it.
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
            // Unbounded: never fails while the writer task is alive; a dead
            // writer means the connection is already going away.
            let _ = c.writer.try_send(msg);
        }
    }

    /// Hands queued store work to the worker when it is idle.
    fn submit_store(&mut self) {
        if let Some(jobs) = self.pipe.take_submission() {
            if self.jobs_tx.try_send(jobs).is_err() {
                // The store thread is gone: it only stops by exiting the
                // process, so this is unreachable in practice.
                tracing::error!("store worker unavailable; exiting");
                std::process::exit(1);
            }
        }
    }

    /// After the drain: commit everything still pending, then return.
    async fn finish(mut self, events: &Receiver<Event>) {
        // MCP children are killed and reaped before the process exits.
        self.mcp.shutdown(Duration::from_secs(2)).await;
        loop {
            self.submit_store();
            if self.pipe.is_quiet() {
                break;
            }
            match events.recv().await {
                Ok(Event::Committed(batch)) => {
                    for d in self.pipe.committed(batch) {
                        self.dispatch(d);
                    }
                }
                Ok(Event::ReadDone(..)) => self.pipe.read_done(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // Spec 04 §5.1: telemetry is flushed within what remains of the
        // shutdown budget.
        if let Some(o) = self.otel.take() {
            let left = (self.shutdown_deadline).map_or(Duration::ZERO, |d| {
                d.saturating_duration_since(Instant::now())
            });
            o.shutdown(&mut self.engine, left);
        }
        tracing::info!("pending writes committed; shutdown complete");
    }
}

async fn accept_loop(listener: TcpListener, which: Listener, tx: Sender<Event>) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                if tx.send(Event::Accepted(which, stream)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(listener = ?which, error = %e, "accept failed");
                Timer::after(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn read_loop(conn: ConnId, stream: TcpStream, tx: Sender<Event>) {
    use std::io::Read;
    // The socket itself, so the loop can wait for readiness without a read.
    let socket: std::sync::Arc<async_io::Async<std::net::TcpStream>> = stream.into();
    let mut buf = vec![0u8; READ_FIRST];
    // A read that did not fill the buffer emptied the kernel's queue: reading
    // again at once would only return EAGAIN (a wasted system call per
    // request of request/response traffic), so wait for the reactor first.
    let mut drained = false;
    loop {
        if drained && socket.readable().await.is_err() {
            break;
        }
        match socket.get_ref().read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                drained = n < buf.len();
                let input = Input::Received {
                    conn,
                    bytes: buf[..n].to_vec(),
                };
                if n == buf.len() && buf.len() < READ_CHUNK {
                    buf.resize(buf.len() * 2, 0);
                }
                if tx.send(Event::Net(input)).await.is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => drained = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = tx.send(Event::Net(Input::Closed { conn })).await;
}

async fn write_loop(
    conn: ConnId,
    mut stream: TcpStream,
    rx: Receiver<WriterMsg>,
    tx: Sender<Event>,
) {
    'outer: while let Ok(msg) = rx.recv().await {
        let first = match msg {
            WriterMsg::Data(bytes) => bytes,
            WriterMsg::Close => break,
        };
        // Whatever else is already queued goes out in the same (vectored)
        // write, none of it copied: a page's head and its body, a burst of
        // frames, a live event shared by many streams.
        let mut close_after = false;
        let mut total = first.len();
        let mut batch = vec![first];
        while total < MAX_WRITE && batch.len() < MAX_SLICES {
            match rx.try_recv() {
                Ok(WriterMsg::Data(more)) => {
                    total += more.len();
                    batch.push(more);
                }
                Ok(WriterMsg::Close) => {
                    close_after = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if write_all_vectored(&mut stream, &batch).await.is_err() {
            break 'outer;
        }
        let flushed = Input::Flushed { conn, bytes: total };
        if tx.send(Event::Net(flushed)).await.is_err() || close_after {
            break;
        }
    }
    let _ = stream.flush().await;
    // Also wakes the reader, which then reports `Closed`.
    let _ = stream.shutdown(Shutdown::Both);
}

/// Writes every buffer of `bufs`, in order, with as few `writev` calls as
/// the socket takes.
async fn write_all_vectored(stream: &mut TcpStream, bufs: &[Bytes]) -> io::Result<()> {
    let mut slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        io::IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

thread_local! {
    /// The driver thread's own executor: connection readers and writers and
    /// provider-call tasks run here, on the thread that owns the engine, so
    /// that handing bytes between them and the engine wakes no other thread.
    static LOCAL: smol::LocalExecutor<'static> = const { smol::LocalExecutor::new() };
}

/// Runs `task` on the driver thread's executor (call from that thread).
fn spawn_local(task: impl std::future::Future<Output = ()> + 'static) {
    LOCAL.with(|ex| ex.spawn(task).detach());
}

fn store_worker(store: Backend, jobs: Receiver<Vec<Job>>, events: Sender<Event>) {
    serve_store_jobs(
        store,
        || jobs.recv_blocking().ok(),
        |done| {
            let ev = match done {
                StoreDone::Committed(batch) => Event::Committed(batch),
                StoreDone::Read(id, result) => Event::ReadDone(id, result),
            };
            events.send_blocking(ev).is_ok()
        },
    )
}
