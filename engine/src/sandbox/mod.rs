//! Remote sandboxes and remote subagents (spec 06 §5–§6), split as quinn
//! splits an endpoint from its connections: each session owns its box
//! ([`SessionSandbox`]: the sandbox handle, its exec lock and queue, the
//! remote subagent map), kept in the session's entry of the sessions
//! table; the [`SandboxHub`] holds what is not one session's (the op
//! table that routes every driver reply to its session, one deadline
//! index over the ops, the per-profile image status) and speaks a small
//! vocabulary of its own.
//!
//! * In: typed requests on a session's box ([`SessionSandbox::start`],
//!   `stop`, `exec`, `launch`, `cancel`, `report`, `close`), the hub's
//!   [`SandboxHub::provision`], driver replies ([`SandboxReply`]) and timer
//!   ticks (both routed to the boxes through [`Boxes`]).
//! * Out: [`SandboxCommand`]s for the driver (which runs the container
//!   engine's CLI) and [`SandboxNotice`]s for the engine, which records the
//!   events and answers the requests.
//!
//! One sandbox per session, shared by all its drivers. The handle is locked
//! while an exec runs (later execs queue); a stop removes the handle before
//! the driver is asked to stop, so nothing is ever dispatched against a
//! container being stopped.

mod images;
mod session;
mod subagent;
#[cfg(test)]
mod tests;
mod vocab;

use crate::ids::SessionId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::MonoMs;
pub use session::{Boxes, SessionSandbox};
pub use subagent::{CancelOutcome, LaunchSpec, State as SubagentState, SubagentStatus};
pub use vocab::*;

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
    /// A remote subagent's exec, until it ends, is cancelled or expires.
    Subagent {
        session_id: SessionId,
        id: String,
        deadline: MonoMs,
    },
    Provision {
        profile_id: String,
        images: VecDeque<String>,
    },
    /// A container whose session went away while it started.
    Orphan,
}

impl Op {
    fn deadline(&self) -> Option<MonoMs> {
        match self {
            Op::Exec { deadline, .. } => *deadline,
            Op::Subagent { deadline, .. } => Some(*deadline),
            _ => None,
        }
    }
}

pub struct SandboxHub {
    settings: SandboxSettings,
    /// Every op in flight, with the session it answers to.
    ops: BTreeMap<OpId, Op>,
    /// The deadlines of `ops` (execs, subagents), earliest first.
    deadlines: BTreeSet<(MonoMs, OpId)>,
    next_op: OpId,
    images: BTreeMap<String, Vec<(String, ImageState)>>,
    commands: VecDeque<SandboxCommand>,
    notices: VecDeque<SandboxNotice>,
}

impl SandboxHub {
    pub fn new(settings: SandboxSettings) -> Self {
        SandboxHub {
            settings,
            ops: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            next_op: OpId(1),
            images: BTreeMap::new(),
            commands: VecDeque::new(),
            notices: VecDeque::new(),
        }
    }

    fn op(&mut self, op: Op) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        if let Some(d) = op.deadline() {
            self.deadlines.insert((d, id));
        }
        self.ops.insert(id, op);
        id
    }

    fn take_op(&mut self, id: OpId) -> Option<Op> {
        let op = self.ops.remove(&id)?;
        if let Some(d) = op.deadline() {
            self.deadlines.remove(&(d, id));
        }
        Some(op)
    }

    /// Kills the exec of `op` (a cancelled or expired subagent).
    fn kill(&mut self, op: OpId) {
        self.take_op(op);
        self.commands.push_back(SandboxCommand::Kill { op });
    }

    fn command(&mut self, command: SandboxCommand) {
        self.commands.push_back(command);
    }

    fn notice(&mut self, notice: SandboxNotice) {
        self.notices.push_back(notice);
    }

    /// A driver reply, routed to the box of the op's session.
    pub fn handle_reply(
        &mut self,
        op: OpId,
        reply: SandboxReply,
        now: MonoMs,
        boxes: &mut dyn Boxes,
    ) {
        let Some(pending) = self.take_op(op) else {
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
                Ok(()) if boxes.sandbox(&session_id).is_some() => {
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
                Ok(()) => {
                    let e = SandboxError::ClosedBeforeStart;
                    self.start_failed(boxes, session_id, requester, image, e)
                }
                Err(e) => {
                    let e = e.on(&image);
                    self.start_failed(boxes, session_id, requester, image, e)
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
                    match boxes.sandbox(&session_id) {
                        Some(b) => {
                            b.started(handle.clone());
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
                                result: Err(SandboxError::SessionClosed),
                            });
                        }
                    }
                }
                Err(e) => {
                    let e = e.on(&image);
                    self.start_failed(boxes, session_id, requester, image, e)
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
                let result = r.map_err(|e| e.on(&handle.image));
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
                let result = r.map_err(|e| e.on(&handle.image));
                self.notices.push_back(SandboxNotice::Executed {
                    session_id: session_id.clone(),
                    requester,
                    handle,
                    result,
                });
                if let Some(b) = boxes.sandbox(&session_id) {
                    b.unlock(self, now);
                }
            }
            (Op::Subagent { session_id, id, .. }, SandboxReply::Exec(r)) => {
                let Some(b) = boxes.sandbox(&session_id) else {
                    return;
                };
                if let Some(status) = b.subagent_done(&id, r) {
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
        boxes: &mut dyn Boxes,
        session_id: SessionId,
        requester: Requester,
        image: String,
        error: SandboxError,
    ) {
        if let Some(b) = boxes.sandbox(&session_id) {
            b.start_failed();
        }
        self.notices.push_back(SandboxNotice::Started {
            session_id,
            requester,
            image,
            result: Err(error),
        });
    }

    /// Fires exec and subagent deadlines due at `now`: the execs in op
    /// order, then the subagents by session and launch.
    pub fn handle_timeout(&mut self, now: MonoMs, boxes: &mut dyn Boxes) {
        let mut due: Vec<OpId> = (self.deadlines.range(..=(now, OpId(u64::MAX))))
            .map(|(_, op)| *op)
            .collect();
        due.sort_unstable();
        let mut subagents = Vec::new();
        for op in due {
            match self.ops.get(&op) {
                Some(Op::Exec { .. }) => {}
                Some(Op::Subagent { session_id, .. }) => {
                    subagents.push((session_id.clone(), op));
                    continue;
                }
                _ => continue,
            }
            if let Some(Op::Exec {
                session_id,
                handle,
                requester,
                ..
            }) = self.take_op(op)
            {
                self.commands.push_back(SandboxCommand::Kill { op });
                let secs = self.settings.exec_timeout_ms / 1000;
                self.notices.push_back(SandboxNotice::Executed {
                    session_id: session_id.clone(),
                    requester,
                    handle,
                    result: Err(SandboxError::TimedOut { secs }),
                });
                if let Some(b) = boxes.sandbox(&session_id) {
                    b.unlock(self, now);
                }
            }
        }
        subagents.sort();
        let mut kills = Vec::new();
        for (session_id, op) in subagents {
            if let Some(b) = boxes.sandbox(&session_id) {
                kills.extend(b.expire_subagent(self, op, now));
            }
        }
        for op in kills {
            self.kill(op);
        }
    }

    pub fn poll_timeout(&self) -> Option<MonoMs> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    pub fn poll_command(&mut self) -> Option<SandboxCommand> {
        self.commands.pop_front()
    }

    pub fn poll_notice(&mut self) -> Option<SandboxNotice> {
        self.notices.pop_front()
    }
}
