//! `baesrv-threads`: the same engine, pipeline and store on std threads
//! (blocking sockets; one engine, one store, a reader and a writer per
//! connection, one per provider call): proof that the engine is
//! runtime-agnostic (docs/porting.md). MCP servers, container sandboxes
//! and provider calls use the transports both runtimes share (`driver/`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use engine::mcp::{McpConnId, McpEvent};
use engine::pipeline::{Delivery, Job, Pipeline, Routed};
use engine::sandbox::{OpId, SandboxReply};
use engine::{ConnId, Engine, Input, Listener};

use crate::driver::mcp::McpTransports;
use crate::driver::provider_stream::{self, Abort};
use crate::driver::reports::Reports;
use crate::driver::sandbox::Sandboxes;
use crate::driver::{provider, serve_store_jobs, Boot, Clock, DriverSettings, StoreDone};

enum Ev {
    Accepted(Listener, TcpStream),
    Net(Input),
    Provider(engine::CallId, engine::ProviderReply),
    ProviderChunk(engine::CallId, Vec<u8>),
    Store(StoreDone),
    Mcp(McpConnId, McpEvent),
    Sandbox(OpId, SandboxReply),
    Signal,
}

/// The transports' tasks report on the engine thread's queue (unbounded:
/// a send never waits).
#[derive(Clone)]
struct Queue(mpsc::Sender<Ev>);

impl Reports for Queue {
    async fn mcp(&self, conn: McpConnId, event: McpEvent) -> bool {
        self.0.send(Ev::Mcp(conn, event)).is_ok()
    }

    async fn sandbox(&self, op: OpId, reply: SandboxReply) -> bool {
        self.0.send(Ev::Sandbox(op, reply)).is_ok()
    }
}

/// Runs the server until a graceful shutdown completes (see
/// [`crate::app::Runtime`]).
pub fn run(boot: Boot) -> io::Result<()> {
    tracing::info!("runtime: std threads");
    let (tx, rx) = mpsc::channel();
    let (jobs_tx, jobs_rx) = mpsc::channel::<Vec<Job>>();
    let store_tx = tx.clone();
    let store_thread = thread::spawn(move || {
        let next = || jobs_rx.recv().ok();
        serve_store_jobs(boot.store, next, |d| store_tx.send(Ev::Store(d)).is_ok())
    });
    // During a shutdown the engine thread closes what these accept.
    for (l, which) in [
        (boot.listeners.client, Listener::Client),
        (boot.listeners.admin, Listener::Admin),
    ] {
        let tx = tx.clone();
        thread::spawn(move || accept_loop(l, which, tx));
    }
    let signal_tx = tx.clone();
    let mut signals = boot.listeners.signals;
    thread::spawn(move || {
        use futures_lite::StreamExt;
        while futures_lite::future::block_on(signals.next()).is_some() {
            if signal_tx.send(Ev::Signal).is_err() {
                break;
            }
        }
    });
    let mut d = Threads {
        mcp: McpTransports::new(Queue(tx.clone())),
        sandboxes: Sandboxes::new(
            boot.settings.sandbox_driver,
            boot.settings.sandbox_run_args.clone(),
            Queue(tx.clone()),
        ),
        engine: boot.engine,
        clock: boot.clock,
        pipe: Pipeline::new(),
        conns: HashMap::new(),
        next_conn: engine::ConnId(1),
        inflight: 0,
        streaming: HashMap::new(),
        tx,
        jobs_tx,
        deadline: None,
        settings: boot.settings,
        otel: boot.telemetry,
    };
    d.serve(&rx);
    // Commit what is still pending, then let the store thread end.
    loop {
        d.drain();
        if d.pipe.is_quiet() {
            break;
        }
        match rx.recv() {
            Ok(Ev::Store(done)) => d.store_done(done),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // MCP children are killed and reaped before the process ends; spans
    // are flushed within what remains of the shutdown budget (spec 04 §5.1).
    futures_lite::future::block_on(d.mcp.shutdown(Duration::from_secs(2)));
    if let Some(o) = d.otel.take() {
        let left = d.deadline.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        });
        o.shutdown(&mut d.engine, left);
    }
    drop(d);
    let _ = store_thread.join();
    Ok(())
}

struct Threads {
    engine: Engine,
    mcp: McpTransports<Queue>,
    sandboxes: Sandboxes<Queue>,
    clock: Clock,
    pipe: Pipeline,
    /// Each connection's writer: bytes, or `None` to close.
    conns: HashMap<ConnId, mpsc::Sender<Option<engine::bytes::Bytes>>>,
    next_conn: ConnId,
    inflight: usize,
    /// Streamed calls in flight: their socket handle, and whether the
    /// engine gave up on them.
    streaming: HashMap<engine::CallId, (Abort, bool)>,
    tx: mpsc::Sender<Ev>,
    jobs_tx: mpsc::Sender<Vec<Job>>,
    deadline: Option<Instant>,
    settings: DriverSettings,
    otel: Option<crate::otel::Exporter>,
}

impl Threads {
    fn serve(&mut self, rx: &mpsc::Receiver<Ev>) {
        loop {
            self.drain();
            if let Some(deadline) = self.deadline {
                let idle = self.conns.is_empty() && self.inflight == 0 && self.pipe.is_quiet();
                if idle || Instant::now() >= deadline {
                    return;
                }
            }
            let timer = self.engine.poll_timeout().map(|t| self.clock.instant_at(t));
            let otel = self.otel.as_ref().and_then(|o| o.next_due());
            let wake = [timer, self.deadline, otel].into_iter().flatten().min();
            let ev = match wake {
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            match ev {
                Ok(ev) => self.handle(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if let Some(o) = &mut self.otel {
                o.pump(&mut self.engine);
            }
            let now = self.clock.now();
            if self.engine.poll_timeout().is_some_and(|t| t <= now.mono) {
                self.engine.handle_timeout(now);
            }
        }
    }

    fn input(&mut self, input: Input) {
        self.engine.note_store_backlog(self.pipe.backlog());
        self.engine.handle_input(self.clock.now(), input);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Accepted(listener, stream) => self.accept(listener, stream),
            Ev::Net(input) => {
                let conn = input.conn().unwrap_or_default();
                let known = if matches!(input, Input::Closed { .. }) {
                    self.conns.remove(&conn).is_some()
                } else {
                    self.conns.contains_key(&conn)
                };
                if known {
                    self.input(input);
                }
            }
            Ev::Provider(call, reply) => {
                self.inflight = self.inflight.saturating_sub(1);
                if self
                    .streaming
                    .remove(&call)
                    .is_some_and(|(_, aborted)| aborted)
                {
                    return;
                }
                self.input(Input::ProviderDone { call, reply });
            }
            Ev::ProviderChunk(call, bytes) => {
                if self
                    .streaming
                    .get(&call)
                    .is_some_and(|(_, aborted)| !aborted)
                {
                    self.input(Input::ProviderChunk { call, bytes });
                }
            }
            Ev::Store(done) => self.store_done(done),
            Ev::Mcp(conn, event) => self.input(Input::Mcp { conn, event }),
            Ev::Sandbox(op, reply) => {
                self.sandboxes.finished(op);
                self.input(Input::Sandbox { op, reply });
            }
            Ev::Signal if self.deadline.is_some() => self.deadline = Some(Instant::now()),
            Ev::Signal => {
                self.deadline = Some(Instant::now() + self.settings.shutdown_timeout);
                self.input(Input::Shutdown);
            }
        }
    }

    fn store_done(&mut self, done: StoreDone) {
        match done {
            StoreDone::Committed(batch) => self
                .pipe
                .committed(batch)
                .into_iter()
                .for_each(|d| self.dispatch(d)),
            StoreDone::Read(id, result) => {
                self.pipe.read_done();
                self.input(Input::ReadDone { id, result });
            }
        }
    }

    fn accept(&mut self, listener: Listener, stream: TcpStream) {
        if self.deadline.is_some() || self.conns.len() >= self.settings.max_connections {
            return drop(stream.shutdown(Shutdown::Both));
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let _ = stream.set_nodelay(true);
        let (Ok(reader), Ok(writer)) = (stream.try_clone(), stream.try_clone()) else {
            return;
        };
        let (wtx, wrx) = mpsc::channel();
        self.conns.insert(conn, wtx);
        self.input(Input::Accepted { conn, listener });
        let (rtx, tx) = (self.tx.clone(), self.tx.clone());
        thread::spawn(move || read_loop(conn, reader, rtx));
        thread::spawn(move || write_loop(conn, writer, wrx, tx));
    }

    /// Every engine output, then the store submission.
    fn drain(&mut self) {
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
        if let Some(jobs) = self.pipe.take_submission() {
            if self.jobs_tx.send(jobs).is_err() {
                tracing::error!("store worker unavailable; exiting");
                std::process::exit(1);
            }
        }
    }

    /// The engine closed a provider call (a cancel, a stream fault): a
    /// streamed one's socket is shut down now; an unstreamed one (ureq) is
    /// left to finish and its reply ignored.
    fn abort_provider(&mut self, call: engine::CallId) {
        tracing::debug!(call = call.0, "provider call aborted");
        if let Some((abort, aborted)) = self.streaming.get_mut(&call) {
            *aborted = true;
            abort.abort();
        }
    }

    fn dispatch(&mut self, d: Delivery) {
        let (conn, msg) = match d {
            Delivery::Send { conn, bytes } => (conn, Some(bytes)),
            Delivery::Close { conn } => (conn, None),
            Delivery::Forward(_) => return, // replica mode is refused at start
            Delivery::Call(call) => {
                self.inflight += 1;
                let tx = self.tx.clone();
                if call.stream {
                    let abort = Abort::default();
                    self.streaming.insert(call.id, (abort.clone(), false));
                    thread::spawn(move || {
                        let id = call.id;
                        let reply = provider_stream::perform(&call, &abort, |bytes| {
                            let _ = tx.send(Ev::ProviderChunk(id, bytes));
                        });
                        let _ = tx.send(Ev::Provider(id, reply));
                    });
                    return;
                }
                thread::spawn(move || {
                    let reply = provider::perform(&call);
                    let _ = tx.send(Ev::Provider(call.id, reply));
                });
                return;
            }
        };
        if let Some(w) = self.conns.get(&conn) {
            let _ = w.send(msg);
        }
    }
}

fn accept_loop(l: TcpListener, which: Listener, tx: mpsc::Sender<Ev>) {
    for stream in l.incoming() {
        // EMFILE and friends: back off instead of spinning.
        let Ok(s) = stream else {
            thread::sleep(Duration::from_millis(100));
            continue;
        };
        if tx.send(Ev::Accepted(which, s)).is_err() {
            return;
        }
    }
}

fn read_loop(conn: ConnId, mut stream: TcpStream, tx: mpsc::Sender<Ev>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let bytes = buf.get(..n).unwrap_or_default().to_vec();
        if tx.send(Ev::Net(Input::Received { conn, bytes })).is_err() {
            return;
        }
    }
    let _ = tx.send(Ev::Net(Input::Closed { conn }));
}

type Writes = mpsc::Receiver<Option<engine::bytes::Bytes>>;

fn write_loop(conn: ConnId, mut stream: TcpStream, rx: Writes, tx: mpsc::Sender<Ev>) {
    while let Ok(Some(bytes)) = rx.recv() {
        if stream.write_all(&bytes).is_err() {
            break;
        }
        let n = bytes.len();
        if tx.send(Ev::Net(Input::Flushed { conn, bytes: n })).is_err() {
            break;
        }
    }
    let _ = stream.flush();
    // Also wakes the reader, which then reports `Closed`.
    let _ = stream.shutdown(Shutdown::Both);
}
