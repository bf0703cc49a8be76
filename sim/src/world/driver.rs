//! The single-node world's process: its engine inside the driver core
//! every runtime uses, through the recording runtime and host of
//! `crate::driver`; the world performs what the core asked for after each
//! core call, on its virtual clock, with its faults.

use std::ops::ControlFlow;

use engine::driver::{self, WriterMsg};
use engine::pipeline::Job;
use engine::MonoMs;

use crate::driver::Effect;
pub(super) use crate::driver::{SimCore, SimEvent};

use super::*;

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
            // Replica mode is never on here.
            Effect::Forward(..) => {}
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
        crate::driver::drain(&mut Drainer(self));
        self.stats.graceful_restarts += 1;
        self.t("SHUTDOWN complete: drained, restart".into());
        self.restart(true);
    }
}

/// The single-node world around its stopped process, for
/// [`crate::driver::drain`]: reads fail as stopping, commits land.
struct Drainer<'a>(&'a mut World);

impl crate::driver::Draining for Drainer<'_> {
    fn core(&mut self) -> Option<&mut SimCore> {
        Some(&mut self.0.core)
    }

    fn perform_drained(&mut self) -> ControlFlow<()> {
        let effects = std::mem::take(&mut self.0.side.out.borrow_mut().effects);
        for e in effects {
            match e {
                Effect::Store(jobs) => self.0.running.extend(jobs),
                e => self.0.perform(e),
            }
        }
        ControlFlow::Continue(())
    }

    fn next_job(&mut self) -> Option<Job> {
        self.0.running.pop_front()
    }

    fn execute(&mut self, job: Job) -> ControlFlow<(), Option<driver::StoreDone>> {
        ControlFlow::Continue(match job {
            Job::Commit { batch, writes, .. } => {
                self.0.commit(batch, writes);
                Some(driver::StoreDone::Committed(batch))
            }
            Job::Read { id, .. } => Some(driver::StoreDone::Read(
                id,
                Err(engine::ReadError::Stopping),
            )),
            Job::Activity => None,
        })
    }
}
