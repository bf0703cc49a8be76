//! One tracked remote subagent (spec 06 §6.3–§6.5): running until its exec
//! ends, times out or is cancelled; its output kept for the status tool
//! (never in events), reported once, then evicted.

use crate::ids::SessionId;
use serde_json::{json, Value};

use super::{DriverError, ExecOutput, Op, OpId, SandboxCommand, SandboxHub};
use crate::MonoMs;

/// stdout and stderr are each cut to this many bytes for the status tool.
pub const MAX_REPORTED_BYTES: usize = 65_536;

/// An accepted launch, as the engine built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// `sba_…`.
    pub id: String,
    pub harness: String,
    pub model: String,
    /// The interpolated command for `sh -c`.
    pub command: String,
    /// The raw prompt (`prompt_via: "stdin"`); `None` in arg mode (stdin is
    /// then closed at once).
    pub stdin: Option<Vec<u8>>,
    /// The entry's `timeout_secs`, else `BAE_SUBAGENT_TIMEOUT`.
    pub timeout_ms: Option<u64>,
    /// The launching client key (terminal events are attributed to it).
    pub key_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Completed,
    Failed,
    TimedOut,
    Cancelled,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Completed => "completed",
            State::Failed => "failed",
            State::TimedOut => "timed_out",
            State::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CancelReason {
    Explicit,
    SessionClose,
}

/// A snapshot for events and answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentStatus {
    pub id: String,
    pub harness: String,
    pub model: String,
    pub key_id: String,
    pub state: State,
    pub exit_code: Option<i64>,
    pub reason: Option<&'static str>,
    pub detail: Option<String>,
}

impl SubagentStatus {
    /// `{"dispatch":"remote","subagent_id","harness","model","detail"}`.
    pub fn common_payload(&self) -> Value {
        json!({
            "dispatch": "remote",
            "subagent_id": self.id,
            "harness": self.harness,
            "model": self.model,
            "detail": self.detail,
        })
    }

    /// The terminal event: its type and payload (spec 02 §4.22–§4.26).
    pub fn terminal_event(&self) -> Option<(proto::wire::EventType, Value)> {
        use proto::wire::EventType;
        let mut p = self.common_payload();
        let kind = match self.state {
            State::Running => return None,
            State::Completed => EventType::SessionSubagentCompleted,
            State::Failed | State::TimedOut => EventType::SessionSubagentFailed,
            State::Cancelled => EventType::SessionSubagentCancelled,
        };
        if let Some(o) = p.as_object_mut() {
            if self.state != State::Completed {
                o.insert("reason".into(), json!(self.reason));
            }
            o.insert("exit_code".into(), json!(self.exit_code));
        }
        Some((kind, p))
    }
}

/// What `cancelSubagent` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    NotFound,
    Cancelled(SubagentStatus),
    AlreadyTerminal,
}

pub(super) struct Subagent {
    spec: LaunchSpec,
    state: State,
    /// The exec while running.
    op: Option<OpId>,
    deadline: MonoMs,
    exit_code: Option<i64>,
    stdout: String,
    stderr: String,
    truncated: bool,
    reason: Option<&'static str>,
    detail: Option<String>,
}

impl Subagent {
    pub(super) fn new(spec: LaunchSpec, op: OpId, deadline: MonoMs) -> Self {
        Subagent {
            spec,
            state: State::Running,
            op: Some(op),
            deadline,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            reason: None,
            detail: None,
        }
    }

    pub(super) fn id(&self) -> &str {
        &self.spec.id
    }

    pub(super) fn is_running(&self) -> bool {
        self.state == State::Running
    }

    pub(super) fn deadline(&self) -> Option<MonoMs> {
        self.is_running().then_some(self.deadline)
    }

    /// The exec ended; `false` if the task was no longer running.
    pub(super) fn finish(&mut self, r: Result<ExecOutput, DriverError>, max: usize) -> bool {
        if !self.is_running() {
            return false;
        }
        self.op = None;
        match r {
            Ok(out) => {
                let (stdout, cut_out) = cut(out.stdout, max);
                let (stderr, cut_err) = cut(out.stderr, max);
                self.stdout = stdout;
                self.stderr = stderr;
                self.truncated = cut_out || cut_err || out.stdout_truncated || out.stderr_truncated;
                self.exit_code = Some(out.exit_code);
                if out.exit_code == 0 {
                    self.state = State::Completed;
                } else {
                    self.state = State::Failed;
                    self.reason = Some("nonzero_exit");
                }
            }
            Err(e) => {
                self.state = State::Failed;
                self.reason = Some("spawn_failed");
                self.detail = Some(e.text(""));
            }
        }
        true
    }

    /// The deadline passed: `timed_out`; returns the exec to kill.
    pub(super) fn expire(&mut self, now: MonoMs) -> Option<OpId> {
        if !self.is_running() || self.deadline > now {
            return None;
        }
        self.state = State::TimedOut;
        self.reason = Some("timeout");
        self.op.take()
    }

    /// Cancels a running task; returns the exec to kill.
    pub(super) fn cancel(&mut self, why: CancelReason) -> Option<OpId> {
        if !self.is_running() {
            return None;
        }
        self.state = State::Cancelled;
        self.reason = Some(match why {
            CancelReason::Explicit => "explicit",
            CancelReason::SessionClose => "session_close",
        });
        self.op.take()
    }

    pub(super) fn status(&self) -> SubagentStatus {
        SubagentStatus {
            id: self.spec.id.clone(),
            harness: self.spec.harness.clone(),
            model: self.spec.model.clone(),
            key_id: self.spec.key_id.clone(),
            state: self.state,
            exit_code: self.exit_code,
            reason: self.reason,
            detail: self.detail.clone(),
        }
    }

    /// A status-tool entry (spec 06 §6.4).
    pub(super) fn entry(&self) -> Value {
        json!({
            "subagent_id": self.spec.id,
            "harness": self.spec.harness,
            "model": self.spec.model,
            "status": self.state.as_str(),
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "truncated": self.truncated,
            "reason": self.reason,
            "detail": self.detail,
        })
    }
}

/// `s` cut to at most `max` bytes on a UTF-8 boundary.
fn cut(mut s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    (s, true)
}

/// The hub's subagent operations (the map lives in each session's box).
impl SandboxHub {
    /// Running remote subagents of the session (the launch limit).
    pub fn running_subagents(&self, session_id: &str) -> usize {
        self.boxes
            .get(session_id)
            .map_or(0, |b| b.subagents.iter().filter(|s| s.is_running()).count())
    }

    /// Whether `remote_subagent_status` is advertised (spec 06 §6.4).
    pub fn tracks_subagents(&self, session_id: &str) -> bool {
        self.boxes
            .get(session_id)
            .is_some_and(|b| !b.subagents.is_empty())
    }

    /// Starts an accepted launch in the session's running sandbox.
    pub fn launch(
        &mut self,
        session_id: &SessionId,
        spec: LaunchSpec,
        now: MonoMs,
    ) -> Option<SubagentStatus> {
        let container = self.handle(session_id)?.container.clone();
        let timeout_ms = spec.timeout_ms.unwrap_or(self.settings.subagent_timeout_ms);
        let op = self.op(Op::Subagent {
            session_id: session_id.clone(),
            id: spec.id.clone(),
        });
        self.commands.push_back(SandboxCommand::Exec {
            op,
            container,
            command: spec.command.clone(),
            stdin: Some(spec.stdin.clone().unwrap_or_default()),
            max_output: self.settings.max_output,
        });
        let s = Subagent::new(spec, op, now + timeout_ms);
        let status = s.status();
        self.boxes
            .entry(session_id.clone())
            .or_default()
            .subagents
            .push(s);
        Some(status)
    }

    /// `session.cancelSubagent`.
    pub fn cancel(&mut self, session_id: &SessionId, id: &str) -> CancelOutcome {
        let Some(s) = self
            .boxes
            .get_mut(session_id)
            .and_then(|b| b.subagents.iter_mut().find(|s| s.id() == id))
        else {
            return CancelOutcome::NotFound;
        };
        match s.cancel(CancelReason::Explicit) {
            Some(op) => {
                let status = s.status();
                self.ops.remove(&op);
                self.commands.push_back(SandboxCommand::Kill { op });
                CancelOutcome::Cancelled(status)
            }
            None => CancelOutcome::AlreadyTerminal,
        }
    }

    /// `remote_subagent_status`: the entries asked for (one id, or all in
    /// launch order); every terminal entry reported is evicted. `None` for
    /// an unknown id.
    pub fn report(&mut self, session_id: &str, id: Option<&str>) -> Option<Vec<Value>> {
        let Some(b) = self.boxes.get_mut(session_id) else {
            return if id.is_some() { None } else { Some(Vec::new()) };
        };
        let picked: Vec<usize> = match id {
            Some(id) => vec![b.subagents.iter().position(|s| s.id() == id)?],
            None => (0..b.subagents.len()).collect(),
        };
        let entries = picked
            .iter()
            .filter_map(|&i| b.subagents.get(i))
            .map(Subagent::entry)
            .collect();
        let mut i = 0;
        b.subagents.retain(|s| {
            let keep = !picked.contains(&i) || s.is_running();
            i += 1;
            keep
        });
        Some(entries)
    }
}
