//! Remote sandboxes and remote subagents (spec 06 §5–§6): a sub-state
//! machine that owns every session's sandbox handle, its exec lock and
//! queue, the remote subagent map and the per-profile image status, and
//! speaks a small vocabulary of its own.
//!
//! * In: typed requests from the engine ([`SandboxHub::start`], `stop`,
//!   `exec`, `launch`, `cancel`, `status`, `close_session`, `provision`),
//!   driver replies ([`SandboxReply`]) and timer ticks.
//! * Out: [`SandboxCommand`]s for the driver (which runs the container
//!   engine's CLI) and [`SandboxNotice`]s for the engine, which records the
//!   events and answers the requests.
//!
//! One sandbox per session, shared by all its drivers. The handle is locked
//! while an exec runs (later execs queue); a stop removes the handle before
//! the driver is asked to stop, so nothing is ever dispatched against a
//! container being stopped.

mod images;
mod subagent;
#[cfg(test)]
mod tests;
mod vocab;

use crate::ids::SessionId;
use std::collections::{BTreeMap, VecDeque};

use crate::MonoMs;
use subagent::Subagent;
pub use subagent::{CancelOutcome, LaunchSpec, State as SubagentState, SubagentStatus};
pub use vocab::*;

#[derive(Default)]
struct SessionBox {
    running: Option<Handle>,
    starting: bool,
    /// The exec holding the handle's lock.
    locked_by: Option<OpId>,
    waiting: VecDeque<(String, Requester)>,
    subagents: Vec<Subagent>,
}

enum Op {
    Ensure {
        session_id: SessionId,
        image: String,
        requester: Requester,
    },
    Run {
        session_id: SessionId,
        image: String,
        requester: Requester,
    },
    Stop {
        session_id: SessionId,
        handle: Handle,
        requester: Requester,
        reason: StopReason,
    },
    Exec {
        session_id: SessionId,
        handle: Handle,
        requester: Requester,
        deadline: Option<MonoMs>,
    },
    Subagent {
        session_id: SessionId,
        id: String,
    },
    Provision {
        profile_id: String,
        images: VecDeque<String>,
    },
    /// A container whose session went away while it started.
    Orphan,
}

pub struct SandboxHub {
    settings: SandboxSettings,
    boxes: BTreeMap<SessionId, SessionBox>,
    ops: BTreeMap<OpId, Op>,
    next_op: OpId,
    images: BTreeMap<String, Vec<(String, ImageState)>>,
    commands: VecDeque<SandboxCommand>,
    notices: VecDeque<SandboxNotice>,
}

impl SandboxHub {
    pub fn new(settings: SandboxSettings) -> Self {
        SandboxHub {
            settings,
            boxes: BTreeMap::new(),
            ops: BTreeMap::new(),
            next_op: OpId(1),
            images: BTreeMap::new(),
            commands: VecDeque::new(),
            notices: VecDeque::new(),
        }
    }

    /// Remote sandboxes running (gauge `bae.sandboxes.live`).
    pub fn live_sandboxes(&self) -> usize {
        self.boxes.values().filter(|b| b.running.is_some()).count()
    }

    /// Remote subagents still running (gauge `bae.subagents.active`).
    pub fn active_subagents(&self) -> usize {
        self.boxes
            .values()
            .flat_map(|b| b.subagents.iter())
            .filter(|s| s.is_running())
            .count()
    }

    fn op(&mut self, op: Op) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        self.ops.insert(id, op);
        id
    }

    /// Whether the hub holds anything of the session (a sandbox starting,
    /// running or stopping, subagents, their statuses).
    pub fn tracks(&self, session_id: &str) -> bool {
        self.boxes.contains_key(session_id)
    }

    /// The session's running sandbox.
    pub fn handle(&self, session_id: &str) -> Option<&Handle> {
        self.boxes.get(session_id)?.running.as_ref()
    }

    /// `startRemoteSandbox` accepted by the engine's checks: ensure the
    /// image, then start. Starts are serialised per session (a second one
    /// while one starts or runs is refused).
    pub fn start(
        &mut self,
        session_id: &SessionId,
        image: &str,
        requester: Requester,
    ) -> Result<(), StartRefused> {
        let b = self.boxes.entry(session_id.clone()).or_default();
        if b.running.is_some() || b.starting {
            return Err(StartRefused::AlreadyRunning);
        }
        b.starting = true;
        let op = self.op(Op::Ensure {
            session_id: session_id.clone(),
            image: image.to_string(),
            requester,
        });
        self.commands.push_back(SandboxCommand::EnsureImage {
            op,
            image: image.to_string(),
        });
        Ok(())
    }

    /// Removes the handle first, then asks the driver to stop it. `None`
    /// when no sandbox is running.
    pub fn stop(
        &mut self,
        session_id: &SessionId,
        requester: Requester,
        reason: StopReason,
    ) -> Option<Handle> {
        let handle = self.boxes.get_mut(session_id)?.running.take()?;
        let op = self.op(Op::Stop {
            session_id: session_id.clone(),
            handle: handle.clone(),
            requester,
            reason,
        });
        self.commands.push_back(SandboxCommand::Stop {
            op,
            container: handle.container.clone(),
        });
        Some(handle)
    }

    /// Runs `sh -c command` in the session's sandbox, after any exec that
    /// holds the lock. `None` when no sandbox is running.
    pub fn exec(
        &mut self,
        session_id: &SessionId,
        command: &str,
        requester: Requester,
        now: MonoMs,
    ) -> Option<String> {
        let b = self.boxes.get_mut(session_id)?;
        let handle = b.running.clone()?;
        if b.locked_by.is_some() {
            b.waiting.push_back((command.to_string(), requester));
        } else {
            self.run_exec(session_id, handle.clone(), command, requester, now);
        }
        Some(handle.container)
    }

    fn run_exec(
        &mut self,
        session_id: &SessionId,
        handle: Handle,
        command: &str,
        requester: Requester,
        now: MonoMs,
    ) {
        let deadline =
            (self.settings.exec_timeout_ms > 0).then(|| now + self.settings.exec_timeout_ms);
        let container = handle.container.clone();
        let op = self.op(Op::Exec {
            session_id: session_id.clone(),
            handle,
            requester,
            deadline,
        });
        if let Some(b) = self.boxes.get_mut(session_id) {
            b.locked_by = Some(op);
        }
        self.commands.push_back(SandboxCommand::Exec {
            op,
            container,
            command: command.to_string(),
            stdin: None,
            max_output: self.settings.max_output,
        });
    }

    /// The lock is free: the next queued exec runs (against the handle as
    /// it is now; queued execs of a stopped sandbox fail).
    fn unlock(&mut self, session_id: &SessionId, now: MonoMs) {
        let Some(b) = self.boxes.get_mut(session_id) else {
            return;
        };
        b.locked_by = None;
        let Some((command, requester)) = b.waiting.pop_front() else {
            return;
        };
        match b.running.clone() {
            Some(handle) => self.run_exec(session_id, handle, &command, requester, now),
            None => {
                // Stopped while queued: the handle it was accepted on is gone.
                let handle = Handle {
                    image: String::new(),
                    container: String::new(),
                };
                self.notices.push_back(SandboxNotice::Executed {
                    session_id: session_id.clone(),
                    requester,
                    handle,
                    result: Err(
                        DriverError::Runtime("the remote sandbox was stopped".into()).text(""),
                    ),
                });
                self.unlock(session_id, now);
            }
        }
    }

    /// Session DELETE or revocation-close: aborts every running remote
    /// subagent (returned, for their `cancelled` events) and stops the
    /// sandbox (its handle returned; a `Stopped` notice follows).
    pub fn close_session(
        &mut self,
        session_id: &SessionId,
        creator: &str,
    ) -> (Vec<SubagentStatus>, Option<Handle>) {
        let Some(b) = self.boxes.get_mut(session_id) else {
            return (Vec::new(), None);
        };
        let mut cancelled = Vec::new();
        let mut kills = Vec::new();
        for s in b.subagents.iter_mut() {
            if let Some(op) = s.cancel(subagent::CancelReason::SessionClose) {
                kills.push(op);
                cancelled.push(s.status());
            }
        }
        let waiting: Vec<(String, Requester)> = b.waiting.drain(..).collect();
        for op in kills {
            self.ops.remove(&op);
            self.commands.push_back(SandboxCommand::Kill { op });
        }
        let handle = self.stop(
            session_id,
            Requester::Teardown {
                key_id: creator.to_string(),
            },
            StopReason::SessionClose,
        );
        for (_, requester) in waiting {
            let h = handle.clone().unwrap_or(Handle {
                image: String::new(),
                container: String::new(),
            });
            let text = DriverError::Runtime("the session was closed".into()).text(&h.image);
            self.notices.push_back(SandboxNotice::Executed {
                session_id: session_id.clone(),
                requester,
                handle: h,
                result: Err(text),
            });
        }
        // A start in flight finds no box and stops what it started.
        self.boxes.remove(session_id);
        (cancelled, handle)
    }

    /// A driver reply.
    pub fn handle_reply(&mut self, op: OpId, reply: SandboxReply, now: MonoMs) {
        let Some(pending) = self.ops.remove(&op) else {
            return;
        };
        match (pending, reply) {
            (
                Op::Ensure {
                    session_id,
                    image,
                    requester,
                },
                SandboxReply::Ensured(r),
            ) => match r {
                Ok(()) if self.boxes.contains_key(&session_id) => {
                    let mut labels = vec![("bae.session".to_string(), session_id.to_string())];
                    labels.extend(self.settings.labels.iter().cloned());
                    let op = self.op(Op::Run {
                        session_id,
                        image: image.clone(),
                        requester,
                    });
                    self.commands
                        .push_back(SandboxCommand::Start { op, image, labels });
                }
                Ok(()) => self.start_failed(
                    session_id,
                    requester,
                    image,
                    "the session was closed".into(),
                ),
                Err(e) => {
                    let text = e.text(&image);
                    self.start_failed(session_id, requester, image, text)
                }
            },
            (
                Op::Run {
                    session_id,
                    image,
                    requester,
                },
                SandboxReply::Started(r),
            ) => match r {
                Ok(container) => {
                    let handle = Handle {
                        image: image.clone(),
                        container,
                    };
                    match self.boxes.get_mut(&session_id) {
                        Some(b) => {
                            b.starting = false;
                            b.running = Some(handle.clone());
                            self.notices.push_back(SandboxNotice::Started {
                                session_id,
                                requester,
                                image,
                                result: Ok(handle),
                            });
                        }
                        None => {
                            // Closed meanwhile: never leak what we started.
                            let op = self.op(Op::Orphan);
                            self.commands.push_back(SandboxCommand::Stop {
                                op,
                                container: handle.container,
                            });
                            self.notices.push_back(SandboxNotice::Started {
                                session_id,
                                requester,
                                image,
                                result: Err(
                                    DriverError::Runtime("the session was closed".into()).text("")
                                ),
                            });
                        }
                    }
                }
                Err(e) => {
                    let text = e.text(&image);
                    self.start_failed(session_id, requester, image, text)
                }
            },
            (
                Op::Stop {
                    session_id,
                    handle,
                    requester,
                    reason,
                },
                SandboxReply::Stopped(r),
            ) => {
                let result = r.map_err(|e| e.text(&handle.image));
                self.notices.push_back(SandboxNotice::Stopped {
                    session_id,
                    requester,
                    handle,
                    reason,
                    result,
                });
            }
            (
                Op::Exec {
                    session_id,
                    handle,
                    requester,
                    ..
                },
                SandboxReply::Exec(r),
            ) => {
                let result = r.map_err(|e| e.text(&handle.image));
                self.notices.push_back(SandboxNotice::Executed {
                    session_id: session_id.clone(),
                    requester,
                    handle,
                    result,
                });
                self.unlock(&session_id, now);
            }
            (Op::Subagent { session_id, id }, SandboxReply::Exec(r)) => {
                let max = subagent::MAX_REPORTED_BYTES;
                let Some(s) = self
                    .boxes
                    .get_mut(&session_id)
                    .and_then(|b| b.subagents.iter_mut().find(|s| s.id() == id))
                else {
                    return;
                };
                if s.finish(r, max) {
                    let status = s.status();
                    self.notices
                        .push_back(SandboxNotice::SubagentEnded { session_id, status });
                }
            }
            (Op::Provision { profile_id, images }, SandboxReply::Ensured(r)) => {
                self.provisioned(profile_id, images, r)
            }
            // Orphan stops and mismatched replies need nothing more.
            _ => {}
        }
    }

    fn start_failed(
        &mut self,
        session_id: SessionId,
        requester: Requester,
        image: String,
        text: String,
    ) {
        if let Some(b) = self.boxes.get_mut(&session_id) {
            b.starting = false;
        }
        self.notices.push_back(SandboxNotice::Started {
            session_id,
            requester,
            image,
            result: Err(text),
        });
    }

    /// Fires exec and subagent deadlines due at `now`.
    pub fn handle_timeout(&mut self, now: MonoMs) {
        let due: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, op)| matches!(op, Op::Exec { deadline: Some(d), .. } if *d <= now))
            .map(|(id, _)| *id)
            .collect();
        for op in due {
            if let Some(Op::Exec {
                session_id,
                handle,
                requester,
                ..
            }) = self.ops.remove(&op)
            {
                self.commands.push_back(SandboxCommand::Kill { op });
                let secs = self.settings.exec_timeout_ms / 1000;
                let text = DriverError::Runtime(format!("exec timed out after {secs} s"))
                    .text(&handle.image);
                self.notices.push_back(SandboxNotice::Executed {
                    session_id: session_id.clone(),
                    requester,
                    handle,
                    result: Err(text),
                });
                self.unlock(&session_id, now);
            }
        }
        let mut kills = Vec::new();
        for (session_id, b) in self.boxes.iter_mut() {
            for s in b.subagents.iter_mut() {
                if let Some(op) = s.expire(now) {
                    kills.push(op);
                    self.notices.push_back(SandboxNotice::SubagentEnded {
                        session_id: session_id.clone(),
                        status: s.status(),
                    });
                }
            }
        }
        for op in kills {
            self.ops.remove(&op);
            self.commands.push_back(SandboxCommand::Kill { op });
        }
    }

    pub fn poll_timeout(&self) -> Option<MonoMs> {
        let execs = self.ops.values().filter_map(|op| match op {
            Op::Exec { deadline, .. } => *deadline,
            _ => None,
        });
        let subagents = self
            .boxes
            .values()
            .flat_map(|b| b.subagents.iter().filter_map(Subagent::deadline));
        execs.chain(subagents).min()
    }

    pub fn poll_command(&mut self) -> Option<SandboxCommand> {
        self.commands.pop_front()
    }

    pub fn poll_notice(&mut self) -> Option<SandboxNotice> {
        self.notices.pop_front()
    }
}
