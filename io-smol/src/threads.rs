//! `baesrv-threads`: the driver core ([`engine::driver`]) on std
//! threads and blocking sockets: one engine thread, one store thread, a
//! reader and a writer per connection, one thread per provider call. Proof
//! that the engine is runtime-agnostic (docs/porting.md): everything but
//! this wait loop, these threads and these sockets is shared with `baesrv`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use engine::mcp::{McpConnId, McpEvent};
use engine::pipeline::Job;
use engine::replicas::Forward;
use engine::sandbox::{OpId, SandboxReply};
use engine::{ConnId, Input, Listener, Now, ProviderCall};

use crate::driver::host::ProcessHost;
use crate::driver::provider_stream::{perform_blocking, Abort};
use crate::driver::reports::{listen_signals, Reports};
use crate::driver::writes;
use crate::driver::{spawn_store_thread, Boot, Clock};
use engine::driver::{self as core, CallHandle, Core, Drain, Runtime, WriterMsg};

type Event = core::Event<TcpStream>;

/// The engine thread's queue (unbounded: a send never waits).
#[derive(Clone)]
struct Queue(mpsc::Sender<Event>);

impl Reports for Queue {
    async fn mcp(&self, conn: McpConnId, event: McpEvent) -> bool {
        self.0.send(Event::Mcp(conn, event)).is_ok()
    }

    async fn sandbox(&self, op: OpId, reply: SandboxReply) -> bool {
        self.0.send(Event::Sandbox(op, reply)).is_ok()
    }

    async fn signal(&self) -> bool {
        self.0.send(Event::Signal).is_ok()
    }
}

/// A connection's writer thread, as the core holds it.
struct WriterTx(mpsc::Sender<WriterMsg>);

impl core::Writer for WriterTx {
    fn put(&self, msg: WriterMsg) {
        let _ = self.0.send(msg);
    }
}

impl CallHandle for Abort {
    fn abort(&mut self) {
        Abort::abort(self);
    }
}

/// What the core asks of std: threads and channels.
struct Threads {
    clock: Clock,
    tx: mpsc::Sender<Event>,
    jobs_tx: mpsc::Sender<Vec<Job>>,
}

impl Runtime for Threads {
    type Stream = TcpStream;
    type Writer = WriterTx;
    type Call = Abort;
    type Relay = ();

    fn now(&self) -> Now {
        self.clock.now()
    }

    fn micros(&self) -> u64 {
        self.clock.micros()
    }

    fn open(&mut self, conn: ConnId, stream: TcpStream) -> Option<Self::Writer> {
        let _ = stream.set_nodelay(true);
        let (reader, writer) = (stream.try_clone().ok()?, stream);
        let (wtx, wrx) = mpsc::channel();
        let (rtx, tx) = (self.tx.clone(), self.tx.clone());
        thread::spawn(move || read_loop(conn, reader, rtx));
        thread::spawn(move || write_loop(conn, writer, wrx, tx));
        Some(WriterTx(wtx))
    }

    fn refuse(&mut self, stream: TcpStream) {
        let _ = stream.shutdown(Shutdown::Both);
    }

    /// The acceptor threads keep accepting; the core refuses what they
    /// hand over from now on.
    fn stop_accepting(&mut self) {}

    fn call_provider(&mut self, call: ProviderCall) -> Option<Abort> {
        let (tx, id) = (self.tx.clone(), call.id);
        let abort = call.stream.then(Abort::default);
        let a = abort.clone();
        thread::spawn(move || {
            let reply = perform_blocking(&call, a.as_ref(), |bytes| {
                let _ = tx.send(Event::ProviderChunk(id, bytes));
            });
            let _ = tx.send(Event::Provider(id, reply));
        });
        abort
    }

    fn submit_store(&mut self, jobs: Vec<Job>) -> bool {
        self.jobs_tx.send(jobs).is_ok()
    }

    fn store_lost(&mut self) -> ! {
        std::process::exit(1)
    }

    /// Never asked: replica mode is refused at start.
    fn forward(&mut self, _: Forward, _: &Self::Writer) -> Option<()> {
        None
    }
}

/// Runs the server until a graceful shutdown completes (see
/// [`crate::app::Runtime`]).
pub fn run(boot: Boot) -> io::Result<()> {
    tracing::info!("runtime: std threads");
    let (core_boot, host_boot, own) = boot.split();
    let listeners = own.listeners;
    let (tx, rx) = mpsc::channel();
    let (jobs_tx, jobs_rx) = mpsc::channel::<Vec<Job>>();
    let store_tx = tx.clone();
    let store_thread = spawn_store_thread(
        own.store,
        move || jobs_rx.recv().ok(),
        move |d| store_tx.send(Event::Store(d)).is_ok(),
    )?;
    // During a shutdown the core refuses what these accept.
    for (l, which) in [
        (listeners.client, Listener::Client),
        (listeners.admin, Listener::Admin),
    ] {
        let tx = tx.clone();
        thread::spawn(move || accept_loop(l, which, tx));
    }
    listen_signals(listeners.signals, Queue(tx.clone()));
    let rt = Threads {
        clock: own.clock,
        tx: tx.clone(),
        jobs_tx,
    };
    let mut core = Core::new(core_boot, rt, host_boot.build(Queue(tx)));
    serve(&mut core, &rx);
    core.begin_drain();
    while let Drain::Wait(until) = core.drain() {
        let ev = match until {
            Some(at) => {
                let wait = (core.rt.clock.instant_at(at))
                    .saturating_duration_since(std::time::Instant::now());
                rx.recv_timeout(wait)
            }
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match ev {
            Ok(ev) => core.drain_event(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    core.finish();
    let _ = store_thread.join();
    Ok(())
}

fn serve(core: &mut Core<Threads, ProcessHost<Queue>>, rx: &mpsc::Receiver<Event>) {
    loop {
        core.flush();
        if core.stopped() {
            return;
        }
        let wait = (core.rt.clock.instant_at(core.next_wake()))
            .saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(wait) {
            Ok(ev) => core.handle_burst(ev, || rx.try_recv().ok()),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        core.fire_timers();
    }
}

fn accept_loop(l: TcpListener, which: Listener, tx: mpsc::Sender<Event>) {
    for stream in l.incoming() {
        // EMFILE and friends: back off instead of spinning.
        let Ok(s) = stream else {
            thread::sleep(Duration::from_millis(100));
            continue;
        };
        if tx.send(Event::Accepted(which, s)).is_err() {
            return;
        }
    }
}

fn read_loop(conn: ConnId, mut stream: TcpStream, tx: mpsc::Sender<Event>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let bytes = buf.get(..n).unwrap_or_default().to_vec();
        if tx
            .send(Event::Net(Input::Received { conn, bytes }))
            .is_err()
        {
            return;
        }
    }
    let _ = tx.send(Event::Net(Input::Closed { conn }));
}

fn write_loop(
    conn: ConnId,
    mut s: TcpStream,
    rx: mpsc::Receiver<WriterMsg>,
    tx: mpsc::Sender<Event>,
) {
    while let Ok(WriterMsg::Data(first)) = rx.recv() {
        // What else is already queued (a burst of frames, a head and its
        // body) leaves in the same write, reported once (as `baesrv`).
        let batch = writes::gather(first, || rx.try_recv().ok());
        if writes::write_blocking(&mut s, &batch.bufs).is_err() {
            break;
        }
        let bytes = batch.total;
        if tx.send(Event::Net(Input::Flushed { conn, bytes })).is_err() || batch.close_after {
            break;
        }
    }
    let _ = s.flush();
    // Also wakes the reader, which then reports `Closed`.
    let _ = s.shutdown(Shutdown::Both);
}
