//! One tracked remote subagent (spec 06 §6.3–§6.5): running until its exec
//! ends, times out or is cancelled; its output kept for the status tool
//! (never in events), reported once, then evicted.

use serde_json::{json, Value};

use super::{DriverError, ExecOutput, OpId};
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

    /// The exec it runs on, while running.
    pub(super) fn op(&self) -> Option<OpId> {
        self.op
    }

    pub(super) fn is_running(&self) -> bool {
        self.state == State::Running
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
