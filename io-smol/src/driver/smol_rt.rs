//! `baesrv`'s runtime: the driver core ([`engine::driver`]) on smol.
//!
//! One thread owns the core (`smol::block_on`) and runs its loop: wait for
//! the next events, hand them to the core as one burst, fire due timers.
//! While it has nothing to do it waits in async-io's reactor itself, so a
//! ready socket wakes it directly (the `async-io` thread only takes the
//! reactor over while this one is busy). Its own executor ([`LOCAL`]) runs
//! the per-connection reader and writer tasks and the provider-call tasks
//! (`calls.rs`), so bytes reach the engine and answers reach the sockets
//! without waking another thread; they only move bytes and report back
//! through one bounded channel. Small answers for idle connections do not
//! even wake their writer: the loop writes them itself (`outbox.rs`). smol's global executor runs the acceptors,
//! the signal listener, the replica relays and the MCP and sandbox tasks.
//! One dedicated store thread runs the store jobs.

use std::cell::Cell;
use std::io;
use std::net::Shutdown;
use std::rc::Rc;
use std::time::{Duration, Instant};

use engine::pipeline::Job;
use engine::replicas::Forward;
use engine::{ConnId, Input, Listener, Now, ProviderCall};
use futures_lite::{future, AsyncWriteExt};
use smol::channel::{self, Receiver, Sender};
use smol::net::{TcpListener, TcpStream};
use smol::Timer;

use super::host::ProcessHost;
use super::outbox::{ConnWriter, Outbox};
use super::reports::listen_signals;
use super::writes::{self, Flushes};
use super::{deadlines, provider, provider_http, spawn_store_thread, Boot, Clock};
use engine::driver::{Core, Drain, Event as CoreEvent, Runtime, WriterMsg};

/// This runtime's events.
pub type Event = CoreEvent<TcpStream>;

/// Capacity of the event channel: readers wait (back-pressure) when the
/// engine falls this far behind.
const EVENT_CAPACITY: usize = 4096;
/// A connection's first read buffer: most requests fit, and an idle
/// keep-alive connection holds no more than this.
const READ_FIRST: usize = 4 * 1024;
/// The largest read buffer a connection grows to while reads fill it.
pub(super) const READ_CHUNK: usize = 16 * 1024;

/// What the core asks of smol: the tasks, the channels, the acceptors.
pub(super) struct Smol {
    clock: Clock,
    pub(super) events_tx: Sender<Event>,
    jobs_tx: Sender<Vec<Job>>,
    acceptors: Vec<smol::Task<()>>,
    /// Keep-alive connections of plain-HTTP provider calls.
    pub(super) http_providers: Rc<provider_http::Pool>,
    /// Timeouts of the driver thread's provider-call tasks.
    pub(super) deadlines: Rc<deadlines::Deadlines>,
    /// `BAE_FORWARD_TIMEOUT_MS` (replica mode).
    forward_timeout: Duration,
    /// The connections' writers, and what they wrote.
    outbox: Rc<Outbox>,
}

impl Runtime for Smol {
    type Stream = TcpStream;
    type Writer = ConnWriter;
    type Call = super::calls::StreamingCall;
    type Relay = Sender<()>;

    fn now(&self) -> Now {
        self.clock.now()
    }

    fn micros(&self) -> u64 {
        self.clock.micros()
    }

    fn open(&mut self, conn: ConnId, stream: TcpStream) -> Option<ConnWriter> {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(conn = conn.0, error = %e, "TCP_NODELAY failed");
        }
        let (queue, writer_rx) = channel::unbounded();
        let busy = Rc::new(Cell::new(false));
        spawn_local(read_loop(conn, stream.clone(), self.events_tx.clone()));
        let socket = stream.clone().into();
        let writer = self.outbox.writer(conn, queue, socket, busy.clone());
        let flushes = self.outbox.flushes.clone();
        spawn_local(write_loop(conn, stream, writer_rx, busy, flushes));
        Some(writer)
    }

    fn refuse(&mut self, stream: TcpStream) {
        let _ = stream.shutdown(Shutdown::Both);
    }

    fn stop_accepting(&mut self) {
        // Cancelling the acceptors drops (closes) both listening sockets.
        self.acceptors.clear();
    }

    fn call_provider(&mut self, call: ProviderCall) -> Option<Self::Call> {
        self.start_call(call)
    }

    fn submit_store(&mut self, jobs: Vec<Job>) -> bool {
        self.jobs_tx.try_send(jobs).is_ok()
    }

    fn store_lost(&mut self) -> ! {
        std::process::exit(1)
    }

    fn forward(&mut self, f: Forward, writer: &ConnWriter) -> Option<Sender<()>> {
        let (cancel_tx, cancel_rx) = smol::channel::bounded(1);
        // The engine has forgotten the connection: from now on only the
        // relay writes to it, through the queue.
        let queue = writer.queue();
        let relay = super::forward::relay(f, queue, cancel_rx, self.forward_timeout);
        smol::spawn(relay).detach();
        Some(cancel_tx)
    }
}

/// Runs the server on smol until a graceful shutdown completes. Blocks the
/// calling thread, which becomes the engine thread.
pub fn run(boot: Boot) -> io::Result<()> {
    let (core_boot, host_boot, own) = boot.split();
    let (events_tx, events_rx) = channel::bounded(EVENT_CAPACITY);
    if let Some(url) = own.replica_notices {
        let tx = events_tx.clone();
        let deliver = move |u| tx.send_blocking(Event::Catalog(Box::new(u))).is_ok();
        crate::store::pg::listener::start_listener(url, deliver)
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let (jobs_tx, jobs_rx) = channel::unbounded::<Vec<Job>>();
    let store_tx = events_tx.clone();
    let store_thread = spawn_store_thread(
        own.store,
        move || jobs_rx.recv_blocking().ok(),
        move |d| store_tx.send_blocking(Event::Store(d)).is_ok(),
    )?;
    let rt = Smol {
        clock: own.clock,
        events_tx: events_tx.clone(),
        jobs_tx,
        acceptors: Vec::new(),
        http_providers: Rc::new(provider_http::Pool::new(provider::idle_per_host())),
        deadlines: Rc::default(),
        forward_timeout: host_boot.settings.forward_timeout,
        outbox: Rc::default(),
    };
    let listeners = own.listeners;
    listen_signals(listeners.signals, events_tx.clone());
    let core = Core::new(core_boot, rt, host_boot.build(events_tx));
    // async-io's block_on: when the loop has nothing to do, this thread
    // waits in the reactor itself, so a socket becoming ready wakes it
    // directly instead of waking the reactor thread, which then wakes it.
    let result = LOCAL.with(|ex| {
        smol::block_on(ex.run(serve(core, events_rx, listeners.client, listeners.admin)))
    });
    // The store thread ends once the job channel is dropped (with the
    // core) and every submitted job has finished.
    let _ = store_thread.join();
    result
}

async fn serve(
    mut core: Core<Smol, ProcessHost<Sender<Event>>>,
    events: Receiver<Event>,
    client: std::net::TcpListener,
    admin: std::net::TcpListener,
) -> io::Result<()> {
    for (l, which) in [(client, Listener::Client), (admin, Listener::Admin)] {
        let tx = core.rt.events_tx.clone();
        core.rt
            .acceptors
            .push(smol::spawn(accept_loop(l.try_into()?, which, tx)));
    }
    let mut timer = Timer::never();
    let mut armed: Option<Instant> = None;
    let outbox = core.rt.outbox.clone();
    let flushes = outbox.flushes.clone();
    // Flush reports taken from the ledger and not handed to the core yet
    // (a burst takes at most `BURST` events).
    let mut flushed: Vec<(ConnId, usize)> = Vec::new();
    loop {
        core.flush();
        // What this turn routed to the sockets leaves now.
        outbox.write_all();
        if core.stopped() {
            break;
        }
        let wake = core.rt.clock.instant_at(core.next_wake());
        let wake = core.rt.deadlines.next().map_or(wake, |d| d.min(wake));
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
        let first = if flushed.is_empty() {
            let woken = async {
                future::or(flushes.ready(), async {
                    (&mut timer).await;
                })
                .await;
                None
            };
            future::or(async { events.recv().await.ok() }, woken).await
        } else {
            None
        };
        flushes.take_into(&mut flushed);
        let mut next = || {
            let f = flushed
                .pop()
                .map(|(conn, bytes)| Event::Net(Input::Flushed { conn, bytes }));
            f.or_else(|| events.try_recv().ok())
        };
        if let Some(ev) = first.or_else(&mut next) {
            core.handle_burst(ev, next);
        }
        core.rt.deadlines.fire(Instant::now());
        core.fire_timers();
    }

    core.rt.acceptors.clear();
    outbox.write_straight();
    core.begin_drain();
    while let Drain::Wait(until) = core.drain() {
        let next = async { Some(events.recv().await.ok()) };
        let ev = match until {
            Some(at) => {
                let at = core.rt.clock.instant_at(at);
                future::or(next, async {
                    Timer::at(at).await;
                    None
                })
                .await
            }
            None => next.await,
        };
        match ev {
            Some(Some(ev)) => core.drain_event(ev),
            Some(None) => break,
            None => {}
        }
    }
    core.finish();
    Ok(())
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
                let bytes = buf.get(..n).unwrap_or_default().to_vec();
                if n == buf.len() && buf.len() < READ_CHUNK {
                    buf.resize(buf.len() * 2, 0);
                }
                if tx
                    .send(Event::Net(Input::Received { conn, bytes }))
                    .await
                    .is_err()
                {
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

/// A connection's writer task: what [`ConnWriter`] could not write at
/// once, in order, then the close.
async fn write_loop(
    conn: ConnId,
    mut stream: TcpStream,
    rx: Receiver<WriterMsg>,
    busy: Rc<Cell<bool>>,
    flushes: Rc<Flushes>,
) {
    while let Ok(WriterMsg::Data(first)) = rx.recv().await {
        busy.set(true);
        // Whatever else is already queued goes out in the same write.
        let batch = writes::gather(first, || rx.try_recv().ok());
        let written = writes::write_all_vectored(&mut stream, &batch.bufs).await;
        busy.set(false);
        if written.is_err() {
            break;
        }
        flushes.add(conn, batch.total);
        if batch.close_after {
            break;
        }
    }
    // Nothing more is written directly: the queue is closed.
    rx.close();
    let _ = stream.flush().await;
    // Also wakes the reader, which then reports `Closed`.
    let _ = stream.shutdown(Shutdown::Both);
}

thread_local! {
    /// The driver thread's own executor: connection readers and writers and
    /// provider-call tasks run here, on the thread that owns the engine, so
    /// that handing bytes between them and the engine wakes no other thread.
    static LOCAL: smol::LocalExecutor<'static> = const { smol::LocalExecutor::new() };
}

/// Runs `task` on the driver thread's executor (call from that thread).
pub(super) fn spawn_local(task: impl std::future::Future<Output = ()> + 'static) {
    LOCAL.with(|ex| ex.spawn(task).detach());
}
