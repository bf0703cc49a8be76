//! A simulated process drives its engine through the driver core every
//! runtime uses (`engine::driver::Core`): the core's rules (stale reports,
//! the abort rule, the shutdown-idle test and drain, burst order, the
//! pipeline's gating and fencing, the lease check before a reveal) are the
//! ones under test. The runtime and host here only record what the core
//! asks for, on the virtual clock; the world around the process (the
//! single-node world, or one replica of the replica world) performs it
//! after each core call, with its faults.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::rc::Rc;

use engine::driver::{self, CallHandle, Core, CoreBoot, Event, Host, Limits, Runtime, WriterMsg};
use engine::mcp::McpCommand;
use engine::pipeline::Job;
use engine::replicas::Forward;
use engine::sandbox::SandboxCommand;
use engine::{CallId, ConnId, Engine, MonoMs, Now, Output, ProviderCall, UnixMs};

/// The core as a simulated process runs it.
pub type SimCore = Core<Side, Side>;
/// An event for the core; accepted "sockets" are the world's conn ids.
pub type SimEvent = Event<ConnId>;

/// The engine's time at virtual millisecond `mono`.
pub fn now_of(mono: u64, unix0: u64) -> Now {
    Now {
        mono: MonoMs(mono),
        unix: UnixMs(unix0 + mono),
    }
}

/// What the core asked for, in order, performed by the world afterwards.
pub enum Effect {
    Write(ConnId, WriterMsg),
    Refuse(ConnId),
    Call(ProviderCall),
    Abort(CallId),
    Store(Vec<Job>),
    Mcp(McpCommand),
    Sandbox(SandboxCommand),
    /// Replica mode: relay the world's connection to the session's owner.
    Forward(ConnId, Forward),
}

/// Shared between the world and the core's runtime and host.
#[derive(Default)]
pub struct Outbox {
    pub effects: Vec<Effect>,
    /// Every engine output of the last core call, connections renamed to
    /// the world's ids (only when the world checks them).
    pub outputs: Vec<Output>,
    /// The lease watch fired before a reveal: the process exited there,
    /// so nothing the core asks for afterwards happens.
    pub exited: Option<String>,
    /// The core numbers connections itself (from 1 in each process); the
    /// world's ids run on across restarts.
    to_world: BTreeMap<ConnId, ConnId>,
    pub(crate) to_core: BTreeMap<ConnId, ConnId>,
}

impl Outbox {
    fn push(&mut self, e: Effect) {
        if self.exited.is_none() {
            self.effects.push(e);
        }
    }
}

/// Replica mode's lease watch, as io-smol's host runs it before every
/// reveal: the time since the last successful renewal, on the virtual
/// clock (the database's).
#[derive(Clone)]
pub struct LeaseWatch {
    pub last_ok: Rc<Cell<u64>>,
    pub lease_ms: u64,
}

impl LeaseWatch {
    /// `Some(why)` when 3/4 of the lease passed since the last renewal.
    pub fn stale(&self, now: u64, before: &str) -> Option<String> {
        let since = now.saturating_sub(self.last_ok.get());
        (since * 4 >= self.lease_ms * 3)
            .then(|| format!("lease watch ({since} ms since renewal) before {before}"))
    }
}

/// The simulated runtime and host in one: a recorder and the virtual clock.
#[derive(Clone)]
pub struct Side {
    pub out: Rc<RefCell<Outbox>>,
    pub now_ms: Rc<Cell<u64>>,
    unix0: u64,
    /// Replica mode only.
    lease: Option<LeaseWatch>,
    /// Whether engine outputs are copied for the world's checks.
    observe: bool,
}

pub struct SimWriter {
    conn: ConnId,
    out: Rc<RefCell<Outbox>>,
}

impl driver::Writer for SimWriter {
    fn put(&self, msg: WriterMsg) {
        self.out.borrow_mut().push(Effect::Write(self.conn, msg));
    }
}

pub struct SimCall {
    call: CallId,
    out: Rc<RefCell<Outbox>>,
}

impl CallHandle for SimCall {
    fn abort(&mut self) {
        self.out.borrow_mut().push(Effect::Abort(self.call));
    }
}

impl Side {
    /// The single-node world's process: it checks every output.
    pub fn new(now_ms: u64, unix0: u64) -> Side {
        Side {
            out: Rc::default(),
            now_ms: Rc::new(Cell::new(now_ms)),
            unix0,
            lease: None,
            observe: true,
        }
    }

    /// A replica process: its lease watch, outputs left to the database's
    /// oracle.
    pub fn replica(now_ms: u64, unix0: u64, lease: LeaseWatch) -> Side {
        Side {
            lease: Some(lease),
            observe: false,
            ..Side::new(now_ms, unix0)
        }
    }

    fn push(&self, e: Effect) {
        self.out.borrow_mut().push(e);
    }

    /// The world's connection `world` was admitted by the core as `conn`.
    fn admitted(&self, conn: ConnId, world: ConnId) {
        let mut out = self.out.borrow_mut();
        out.to_world.insert(conn, world);
        out.to_core.insert(world, conn);
    }
}

impl Runtime for Side {
    type Stream = ConnId;
    type Writer = SimWriter;
    type Call = SimCall;
    /// The world runs the relay; the core only needs to know there is one.
    type Relay = ();

    fn now(&self) -> Now {
        now_of(self.now_ms.get(), self.unix0)
    }
    /// Virtual time: engine steps take no time (and the trace stays
    /// deterministic).
    fn micros(&self) -> u64 {
        0
    }
    fn open(&mut self, conn: ConnId, world: ConnId) -> Option<SimWriter> {
        self.admitted(conn, world);
        let out = Rc::clone(&self.out);
        Some(SimWriter { conn: world, out })
    }
    fn refuse(&mut self, world: ConnId) {
        self.push(Effect::Refuse(world));
    }
    fn stop_accepting(&mut self) {}
    fn call_provider(&mut self, call: ProviderCall) -> Option<SimCall> {
        let handle = call.stream.then(|| SimCall {
            call: call.id,
            out: Rc::clone(&self.out),
        });
        self.push(Effect::Call(call));
        handle
    }
    fn submit_store(&mut self, jobs: Vec<Job>) -> bool {
        self.push(Effect::Store(jobs));
        true
    }
    fn store_lost(&mut self) -> ! {
        unreachable!("the simulated store worker never goes away")
    }
    /// Only replica mode forwards (the single-node world never turns it
    /// on, so the engine never asks there).
    fn forward(&mut self, f: Forward, w: &SimWriter) -> Option<()> {
        self.push(Effect::Forward(w.conn, f));
        Some(())
    }
}

impl Host for Side {
    fn mcp(&mut self, cmd: McpCommand) {
        self.push(Effect::Mcp(cmd));
    }
    fn sandbox(&mut self, cmd: SandboxCommand) {
        self.push(Effect::Sandbox(cmd));
    }
    fn observe(&mut self, out: &Output) {
        if !self.observe {
            return;
        }
        let mut o = out.clone();
        let mut outbox = self.out.borrow_mut();
        if let Output::Send { conn, .. }
        | Output::SendUngated { conn, .. }
        | Output::Close { conn } = &mut o
        {
            if let Some(w) = outbox.to_world.get(conn) {
                *conn = *w;
            }
        }
        outbox.outputs.push(o);
    }
    /// io-smol's host exits the process here; the simulated one stops
    /// recording (the world ends the process after the core call).
    fn before_reveal(&mut self) {
        let Some(w) = &self.lease else {
            return;
        };
        let mut out = self.out.borrow_mut();
        if out.exited.is_none() {
            out.exited = w.stale(self.now_ms.get(), "revealing");
        }
    }
}

/// A core around `engine` for a fresh process (a new outbox: nothing of
/// the previous process's connections survives). `fenced`: replica mode's
/// pipeline.
pub fn new_core(
    engine: Engine,
    side: &Side,
    shutdown_timeout_ms: u64,
    fenced: bool,
    faults: engine::faults::Faults,
) -> SimCore {
    *side.out.borrow_mut() = Outbox::default();
    let limits = Limits {
        shutdown_timeout: std::time::Duration::from_millis(shutdown_timeout_ms),
        max_connections: usize::MAX,
    };
    let boot = CoreBoot {
        engine,
        limits,
        fenced,
        faults,
    };
    Core::new(boot, side.clone(), side.clone())
}

/// A world around one stopped process, as [`drain`] steps it.
pub trait Draining {
    /// The process's core, while it lives.
    fn core(&mut self) -> Option<&mut SimCore>;
    /// Performs what the last drain step asked for; `Break` when the
    /// process exited doing it.
    fn perform_drained(&mut self) -> ControlFlow<()>;
    /// The oldest store job still pending.
    fn next_job(&mut self) -> Option<Job>;
    /// Executes `job` now: what the core hears (`None`: nothing, as for
    /// the activity summary), or `Break` when the process exited.
    fn execute(&mut self, job: Job) -> ControlFlow<(), Option<driver::StoreDone>>;
}

/// Bounds a drain that would never end (a bug under test, not a hang).
const MAX_DRAIN_STEPS: usize = 100_000;

/// The drain after a graceful shutdown's loop, as a runtime runs it: the
/// core commits what is pending, each store job answered at once (the
/// process is exiting, no new work comes in). `true` when it ran to its
/// end, `false` when the process exited on the way.
pub fn drain(w: &mut impl Draining) -> bool {
    let Some(core) = w.core() else {
        return false;
    };
    core.begin_drain();
    for _ in 0..MAX_DRAIN_STEPS {
        let Some(core) = w.core() else {
            return false;
        };
        let d = core.drain();
        if w.perform_drained().is_break() {
            return false;
        }
        if d == driver::Drain::Done {
            break;
        }
        let Some(job) = w.next_job() else {
            break;
        };
        let done = match w.execute(job) {
            ControlFlow::Break(()) => return false,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Continue(Some(done)) => done,
        };
        if let Some(core) = w.core() {
            core.drain_event(Event::Store(done));
        }
    }
    true
}
