//! The simulated process drives the engine through the driver core every
//! runtime uses (`engine::driver::Core`): the core's rules (stale reports,
//! the abort rule, the shutdown-idle test and drain, burst order, the
//! pipeline's gating) are the ones under test. The sim's runtime and host
//! only record what the core asks for; the world performs it after each
//! core call, on its virtual clock, with its faults.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use engine::driver::{self, CallHandle, Core, CoreBoot, Event, Host, Limits, Runtime, WriterMsg};
use engine::mcp::McpCommand;
use engine::pipeline::Job;
use engine::replicas::Forward;
use engine::sandbox::SandboxCommand;
use engine::{CallId, ConnId, Engine, MonoMs, Now, Output, ProviderCall};

use super::*;

/// The core as the simulated process runs it.
pub(super) type SimCore = Core<Side, Side>;
/// An event for the core; accepted "sockets" are the world's conn ids.
pub(super) type SimEvent = Event<ConnId>;

/// What the core asked for, in order, performed by the world afterwards.
pub(super) enum Effect {
    Write(ConnId, WriterMsg),
    Refuse(ConnId),
    Call(ProviderCall),
    Abort(CallId),
    Store(Vec<Job>),
    Mcp(McpCommand),
    Sandbox(SandboxCommand),
}

/// Shared between the world and the core's runtime and host.
#[derive(Default)]
pub(super) struct Outbox {
    pub(super) effects: Vec<Effect>,
    /// Every engine output of the last core call, connections renamed to
    /// the world's ids.
    pub(super) outputs: Vec<Output>,
    /// The core numbers connections itself (from 1 in each process); the
    /// world's ids run on across restarts.
    to_world: BTreeMap<ConnId, ConnId>,
    to_core: BTreeMap<ConnId, ConnId>,
}

/// The simulated runtime and host in one: a recorder and the virtual clock.
#[derive(Clone)]
pub(super) struct Side {
    pub(super) out: Rc<RefCell<Outbox>>,
    pub(super) now_ms: Rc<Cell<u64>>,
    unix0: u64,
}

pub(super) struct SimWriter {
    conn: ConnId,
    out: Rc<RefCell<Outbox>>,
}

impl driver::Writer for SimWriter {
    fn put(&self, msg: WriterMsg) {
        self.out
            .borrow_mut()
            .effects
            .push(Effect::Write(self.conn, msg));
    }
}

pub(super) struct SimCall {
    call: CallId,
    out: Rc<RefCell<Outbox>>,
}

impl CallHandle for SimCall {
    fn abort(&mut self) {
        self.out.borrow_mut().effects.push(Effect::Abort(self.call));
    }
}

impl Side {
    fn push(&self, e: Effect) {
        self.out.borrow_mut().effects.push(e);
    }
}

impl Runtime for Side {
    type Stream = ConnId;
    type Writer = SimWriter;
    type Call = SimCall;
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
        let mut out = self.out.borrow_mut();
        out.to_world.insert(conn, world);
        out.to_core.insert(world, conn);
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
    /// The simulator runs one server: replica mode is never on.
    fn forward(&mut self, _: Forward, _: &SimWriter) -> Option<()> {
        None
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
}

impl Side {
    pub(super) fn new(now_ms: u64, unix0: u64) -> Side {
        Side {
            out: Rc::default(),
            now_ms: Rc::new(Cell::new(now_ms)),
            unix0,
        }
    }
}

/// A core around `engine` for a fresh process (a new outbox: nothing of
/// the previous process's connections survives).
pub(super) fn new_core(engine: Engine, side: &Side, faults: engine::faults::Faults) -> SimCore {
    *side.out.borrow_mut() = Outbox::default();
    let limits = Limits {
        shutdown_timeout: std::time::Duration::from_millis(SHUTDOWN_TIMEOUT_MS),
        max_connections: usize::MAX,
    };
    let boot = CoreBoot {
        engine,
        limits,
        fenced: false,
        faults,
    };
    Core::new(boot, side.clone(), side.clone())
}

impl World {
    /// The core's id of the world's connection `conn` (`None`: the core
    /// never admitted it).
    pub(super) fn core_conn(&self, conn: ConnId) -> Option<ConnId> {
        self.side.out.borrow().to_core.get(&conn).copied()
    }

    /// Runs `f` on the core (an engine panic is a violation), then
    /// performs what it asked for.
    pub(super) fn with_core(&mut self, f: impl FnOnce(&mut SimCore)) {
        if self.dead_engine {
            return;
        }
        self.side.now_ms.set(self.now_ms);
        self.transfer.copying.clear();
        let core = &mut self.core;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(core))) {
            self.side.out.borrow_mut().effects.clear();
            self.engine_panicked(p);
            return;
        }
        self.after_core();
    }

    /// One event, as a runtime's loop turn hands it over.
    pub(super) fn event(&mut self, ev: SimEvent) {
        self.with_core(|core| {
            core.handle_burst(ev, || None);
            core.flush();
        });
    }

    /// The outputs the core routed are checked, then what it asked for is
    /// performed, in order.
    fn after_core(&mut self) {
        let (outputs, effects) = {
            let mut o = self.side.out.borrow_mut();
            (
                std::mem::take(&mut o.outputs),
                std::mem::take(&mut o.effects),
            )
        };
        self.ext.closes_in_drain.clear();
        match self.cancel_probe.take() {
            // The drain of the input that delivered `session.cancelTurn`
            // request `rid`: its answer is read first (`ext_probe_cancel`),
            // so the gate model knows what the cancel did before the
            // events that follow it.
            Some(rid) => {
                self.ext_probe_cancel(rid, &outputs);
                for o in outputs {
                    self.on_output(o);
                }
                self.ext_probe_done(rid);
            }
            None => {
                for o in outputs {
                    self.on_output(o);
                }
            }
        }
        for e in effects {
            self.perform(e);
        }
        self.mcp.after_drain(&mut self.checker);
        self.sandbox.check_execs(self.now_ms, &mut self.checker);
        self.arm_timer();
    }

    fn perform(&mut self, e: Effect) {
        match e {
            Effect::Write(conn, WriterMsg::Data(bytes)) => self.release_send(conn, bytes),
            Effect::Write(conn, WriterMsg::Close) | Effect::Refuse(conn) => {
                self.release_close(conn)
            }
            Effect::Call(call) => self.call_provider(call),
            Effect::Abort(call) => self.abort_provider(call),
            Effect::Store(jobs) => {
                self.running.extend(jobs);
                if !self.job_scheduled {
                    self.start_job();
                }
            }
            Effect::Mcp(cmd) => {
                let now = self.now_ms;
                let events = self
                    .mcp
                    .on_command(cmd, now, &self.swarm.mcp, &mut self.checker);
                for (at, conn, event) in events {
                    self.schedule(at, Ev::Mcp { conn, event });
                }
            }
            Effect::Sandbox(cmd) => {
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
        }
    }

    /// The core's next wake (the engine's timer, the shutdown deadline,
    /// the hourly activity summary) as the world's timer event.
    pub(super) fn arm_timer(&mut self) {
        let t = match catch_unwind(AssertUnwindSafe(|| self.core.next_wake())) {
            Ok(t) => t,
            Err(p) => return self.engine_panicked(p),
        };
        if Some(t) != self.timer_at {
            self.timer_at = Some(t);
            self.schedule(t.0, Ev::Timer);
        }
    }

    /// The world's timer fired.
    pub(super) fn on_timer(&mut self) {
        if self.timer_at.is_some_and(|t: MonoMs| t.0 <= self.now_ms) {
            self.timer_at = None;
            self.t("in timeout".into());
            self.with_core(|core| {
                core.fire_timers();
                core.flush();
            });
        }
    }

    /// The graceful shutdown's end once the core says it is over (idle, or
    /// its budget spent): the drain commits what is pending, as a runtime
    /// does after its loop (the worker answers at once: the process is
    /// exiting, no new work comes in).
    pub(super) fn drain_and_restart(&mut self) {
        self.side.now_ms.set(self.now_ms);
        let r = catch_unwind(AssertUnwindSafe(|| self.core.stopped()));
        match r {
            Ok(false) => return,
            Ok(true) => {}
            Err(p) => return self.engine_panicked(p),
        }
        self.core.begin_drain();
        for _ in 0..100_000 {
            let d = self.core.drain();
            let effects = std::mem::take(&mut self.side.out.borrow_mut().effects);
            for e in effects {
                match e {
                    Effect::Store(jobs) => self.running.extend(jobs),
                    e => self.perform(e),
                }
            }
            if d == driver::Drain::Done {
                break;
            }
            let Some(job) = self.running.pop_front() else {
                break;
            };
            let done = match job {
                Job::Commit { batch, writes, .. } => {
                    self.commit(batch, writes);
                    driver::StoreDone::Committed(batch)
                }
                Job::Read { id, .. } => {
                    driver::StoreDone::Read(id, Err(engine::ReadError::Stopping))
                }
                Job::Activity => continue,
            };
            self.core.drain_event(Event::Store(done));
        }
        self.stats.graceful_restarts += 1;
        self.t("SHUTDOWN complete: drained, restart".into());
        self.restart(true);
    }
}
