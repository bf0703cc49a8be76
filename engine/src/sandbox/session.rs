//! One session's remote sandbox ([`SessionSandbox`]): its handle, the
//! exec lock and queue, and its remote subagents. It lives in the
//! session's own entry of the sessions table; the [`SandboxHub`] hands out
//! op ids, routes driver replies and deadlines back to the owning session
//! (through [`Boxes`]) and queues what every box emits.

use std::collections::VecDeque;

use serde_json::Value;

use super::subagent::{CancelReason, Subagent};
use super::{
    CancelOutcome, DriverError, ExecOutput, Handle, LaunchSpec, Op, OpId, Requester,
    SandboxCommand, SandboxError, SandboxHub, SandboxNotice, StartRefused, StopReason,
    SubagentStatus,
};
use crate::ids::SessionId;
use crate::MonoMs;

/// Where the hub finds a session's box (the engine's sessions table; a
/// map in the hub's own tests).
pub trait Boxes {
    fn sandbox(&mut self, session_id: &SessionId) -> Option<&mut SessionSandbox>;
}

/// One session's sandbox and subagents (see the module docs).
pub struct SessionSandbox {
    session_id: SessionId,
    running: Option<Handle>,
    starting: bool,
    /// The exec holding the handle's lock.
    locked_by: Option<OpId>,
    waiting: VecDeque<(String, Requester)>,
    subagents: Vec<Subagent>,
}

fn no_handle() -> Handle {
    Handle {
        image: String::new(),
        container: String::new(),
    }
}

impl SessionSandbox {
    pub fn new(session_id: SessionId) -> Self {
        SessionSandbox {
            session_id,
            running: None,
            starting: false,
            locked_by: None,
            waiting: VecDeque::new(),
            subagents: Vec::new(),
        }
    }

    /// The running sandbox.
    pub fn handle(&self) -> Option<&Handle> {
        self.running.as_ref()
    }

    /// Running remote subagents (the launch limit, gauge
    /// `bae.subagents.active`).
    pub fn running_subagents(&self) -> usize {
        self.subagents.iter().filter(|s| s.is_running()).count()
    }

    /// Whether `remote_subagent_status` is advertised (spec 06 §6.4).
    pub fn tracks_subagents(&self) -> bool {
        !self.subagents.is_empty()
    }

    /// `startRemoteSandbox` accepted by the engine's checks: ensure the
    /// image, then start. Starts are serialised (a second one while one
    /// starts or runs is refused).
    pub fn start(
        &mut self,
        hub: &mut SandboxHub,
        image: &str,
        requester: Requester,
    ) -> Result<(), StartRefused> {
        if self.running.is_some() || self.starting {
            return Err(StartRefused::AlreadyRunning);
        }
        self.starting = true;
        let op = hub.op(Op::Ensure {
            session_id: self.session_id.clone(),
            image: image.to_string(),
            requester,
        });
        hub.command(SandboxCommand::EnsureImage {
            op,
            image: image.to_string(),
        });
        Ok(())
    }

    /// Removes the handle first, then asks the driver to stop it. `None`
    /// when no sandbox is running.
    pub fn stop(
        &mut self,
        hub: &mut SandboxHub,
        requester: Requester,
        reason: StopReason,
    ) -> Option<Handle> {
        let handle = self.running.take()?;
        let op = hub.op(Op::Stop {
            session_id: self.session_id.clone(),
            handle: handle.clone(),
            requester,
            reason,
        });
        hub.command(SandboxCommand::Stop {
            op,
            container: handle.container.clone(),
        });
        Some(handle)
    }

    /// Runs `sh -c command` in the sandbox, after any exec that holds the
    /// lock. `None` when no sandbox is running.
    pub fn exec(
        &mut self,
        hub: &mut SandboxHub,
        command: &str,
        requester: Requester,
        now: MonoMs,
    ) -> Option<String> {
        let handle = self.running.clone()?;
        if self.locked_by.is_some() {
            self.waiting.push_back((command.to_string(), requester));
        } else {
            self.run_exec(hub, handle.clone(), command, requester, now);
        }
        Some(handle.container)
    }

    fn run_exec(
        &mut self,
        hub: &mut SandboxHub,
        handle: Handle,
        command: &str,
        requester: Requester,
        now: MonoMs,
    ) {
        let timeout = hub.settings.exec_timeout_ms;
        let deadline = (timeout > 0).then(|| now + timeout);
        let container = handle.container.clone();
        let op = hub.op(Op::Exec {
            session_id: self.session_id.clone(),
            handle,
            requester,
            deadline,
        });
        self.locked_by = Some(op);
        let max_output = hub.settings.max_output;
        hub.command(SandboxCommand::Exec {
            op,
            container,
            command: command.to_string(),
            stdin: None,
            max_output,
        });
    }

    /// The lock is free: the next queued exec runs (against the handle as
    /// it is now; queued execs of a stopped sandbox fail).
    pub(super) fn unlock(&mut self, hub: &mut SandboxHub, now: MonoMs) {
        self.locked_by = None;
        while let Some((command, requester)) = self.waiting.pop_front() {
            if let Some(handle) = self.running.clone() {
                self.run_exec(hub, handle, &command, requester, now);
                return;
            }
            // Stopped while queued: the handle it was accepted on is gone.
            hub.notice(SandboxNotice::Executed {
                session_id: self.session_id.clone(),
                requester,
                handle: no_handle(),
                result: Err(SandboxError::Stopped),
            });
        }
    }

    /// Session DELETE or revocation-close: aborts every running remote
    /// subagent (returned, for their `cancelled` events) and stops the
    /// sandbox (its handle returned; a `Stopped` notice follows). The box
    /// is gone afterwards: a start in flight finds none and stops what it
    /// started.
    pub fn close(
        mut self,
        hub: &mut SandboxHub,
        creator: &str,
    ) -> (Vec<SubagentStatus>, Option<Handle>) {
        let mut cancelled = Vec::new();
        let mut kills = Vec::new();
        for s in self.subagents.iter_mut() {
            if let Some(op) = s.cancel(CancelReason::SessionClose) {
                kills.push(op);
                cancelled.push(s.status());
            }
        }
        let waiting: Vec<(String, Requester)> = self.waiting.drain(..).collect();
        for op in kills {
            hub.kill(op);
        }
        let teardown = Requester::Teardown {
            key_id: creator.to_string(),
        };
        let handle = self.stop(hub, teardown, StopReason::SessionClose);
        for (_, requester) in waiting {
            hub.notice(SandboxNotice::Executed {
                session_id: self.session_id.clone(),
                requester,
                handle: handle.clone().unwrap_or_else(no_handle),
                result: Err(SandboxError::SessionClosed),
            });
        }
        (cancelled, handle)
    }

    /// The container of a start is running.
    pub(super) fn started(&mut self, handle: Handle) {
        self.starting = false;
        self.running = Some(handle);
    }

    /// A start failed (the image, or the container).
    pub(super) fn start_failed(&mut self) {
        self.starting = false;
    }

    /// A subagent's exec answered: `Some` with its status when it ended
    /// by it (it may have been cancelled or expired meanwhile).
    pub(super) fn subagent_done(
        &mut self,
        id: &str,
        r: Result<ExecOutput, DriverError>,
    ) -> Option<SubagentStatus> {
        let s = self.subagents.iter_mut().find(|s| s.id() == id)?;
        s.finish(r, super::subagent::MAX_REPORTED_BYTES)
            .then(|| s.status())
    }

    /// Expires the subagents running on `op` whose deadline passed,
    /// returning the op to kill.
    pub(super) fn expire_subagent(
        &mut self,
        hub: &mut SandboxHub,
        op: OpId,
        now: MonoMs,
    ) -> Option<OpId> {
        let s = self.subagents.iter_mut().find(|s| s.op() == Some(op))?;
        let kill = s.expire(now)?;
        hub.notice(SandboxNotice::SubagentEnded {
            session_id: self.session_id.clone(),
            status: s.status(),
        });
        Some(kill)
    }

    /// Starts an accepted launch in the running sandbox.
    pub fn launch(
        &mut self,
        hub: &mut SandboxHub,
        spec: LaunchSpec,
        now: MonoMs,
    ) -> Option<SubagentStatus> {
        let container = self.running.as_ref()?.container.clone();
        let timeout_ms = spec.timeout_ms.unwrap_or(hub.settings.subagent_timeout_ms);
        let deadline = now + timeout_ms;
        let op = hub.op(Op::Subagent {
            session_id: self.session_id.clone(),
            id: spec.id.clone(),
            deadline,
        });
        let max_output = hub.settings.max_output;
        hub.command(SandboxCommand::Exec {
            op,
            container,
            command: spec.command.clone(),
            stdin: Some(spec.stdin.clone().unwrap_or_default()),
            max_output,
        });
        let s = Subagent::new(spec, op, deadline);
        let status = s.status();
        self.subagents.push(s);
        Some(status)
    }

    /// `session.cancelSubagent`.
    pub fn cancel(&mut self, hub: &mut SandboxHub, id: &str) -> CancelOutcome {
        let Some(s) = self.subagents.iter_mut().find(|s| s.id() == id) else {
            return CancelOutcome::NotFound;
        };
        match s.cancel(CancelReason::Explicit) {
            Some(op) => {
                let status = s.status();
                hub.kill(op);
                CancelOutcome::Cancelled(status)
            }
            None => CancelOutcome::AlreadyTerminal,
        }
    }

    /// `remote_subagent_status`: the entries asked for (one id, or all in
    /// launch order); every terminal entry reported is evicted. `None` for
    /// an unknown id.
    pub fn report(&mut self, id: Option<&str>) -> Option<Vec<Value>> {
        let picked: Vec<usize> = match id {
            Some(id) => vec![self.subagents.iter().position(|s| s.id() == id)?],
            None => (0..self.subagents.len()).collect(),
        };
        let entries = picked
            .iter()
            .filter_map(|&i| self.subagents.get(i))
            .map(Subagent::entry)
            .collect();
        let mut i = 0;
        self.subagents.retain(|s| {
            let keep = !picked.contains(&i) || s.is_running();
            i += 1;
            keep
        });
        Some(entries)
    }
}
