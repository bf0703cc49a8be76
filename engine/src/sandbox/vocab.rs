//! The hub's vocabulary: what the engine and the driver exchange with it.

use super::subagent::SubagentStatus;
use crate::ids::SessionId;

/// Correlates a [`SandboxCommand`] with its [`SandboxReply`].
pub use crate::ids::OpId;

/// What went wrong in the driver (spec 06 §5.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// The configured driver cannot run here.
    Unsupported(String),
    /// Inspecting or pulling the image failed.
    Image(String),
    /// Running, exec or stop failed (or timed out).
    Runtime(String),
}

impl DriverError {
    /// The driver's own detail (trimmed CLI output).
    pub fn detail(&self) -> &str {
        match self {
            DriverError::Unsupported(d) | DriverError::Image(d) | DriverError::Runtime(d) => d,
        }
    }

    /// The documented text, used as `detail` / `error`.
    pub fn text(&self, image: &str) -> String {
        match self {
            DriverError::Unsupported(m) => format!("sandbox driver unsupported: {m}"),
            DriverError::Image(d) => format!("sandbox image \"{image}\" error: {d}"),
            DriverError::Runtime(d) => format!("sandbox runtime error: {d}"),
        }
    }
}

/// Why a start, stop or exec failed, as the hub reports it. Rendered to
/// its documented text (the events' `detail`, the RPC errors) only by
/// `Display`, here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxError {
    /// The driver failed (`image` is the one the operation concerned).
    Driver { error: DriverError, image: String },
    /// The session closed while the image was being ensured: the start
    /// ends before any container is asked for.
    ClosedBeforeStart,
    /// The session closed while the container started or the exec waited
    /// for the lock.
    SessionClosed,
    /// The sandbox was stopped while the exec waited for the lock.
    Stopped,
    /// The exec ran past the engine's timeout (whole seconds).
    TimedOut { secs: u64 },
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runtime = |d: String| DriverError::Runtime(d).text("");
        let text = match self {
            SandboxError::Driver { error, image } => error.text(image),
            SandboxError::ClosedBeforeStart => "the session was closed".to_string(),
            SandboxError::SessionClosed => runtime("the session was closed".into()),
            SandboxError::Stopped => runtime("the remote sandbox was stopped".into()),
            SandboxError::TimedOut { secs } => runtime(format!("exec timed out after {secs} s")),
        };
        f.write_str(&text)
    }
}

impl DriverError {
    /// The error of an operation on `image`.
    pub fn on(self, image: &str) -> SandboxError {
        SandboxError::Driver {
            error: self,
            image: image.to_string(),
        }
    }
}

/// What an exec printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    /// `-1` when the process had no exit code (killed by a signal).
    pub exit_code: i64,
    /// Whether the driver cut a stream at its capture limit.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxCommand {
    /// `image inspect`, then `pull` on a miss.
    EnsureImage { op: OpId, image: String },
    /// `run -d --rm [labels] <image> sleep infinity`; the reply carries the
    /// container id.
    Start {
        op: OpId,
        image: String,
        labels: Vec<(String, String)>,
    },
    /// `exec [-i] <container> sh -c <command>`; with `stdin`, the bytes are
    /// written and stdin closed. Each stream is captured up to `max_output`.
    Exec {
        op: OpId,
        container: String,
        command: String,
        stdin: Option<Vec<u8>>,
        max_output: usize,
    },
    /// `stop <container>` ("no such container" counts as success).
    Stop { op: OpId, container: String },
    /// Abort the exec of `op` (kill its CLI process); its reply, if any, is
    /// ignored.
    Kill { op: OpId },
}

/// The driver's answer to the command of `op`.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxReply {
    Ensured(Result<(), DriverError>),
    Started(Result<String, DriverError>),
    Exec(Result<ExecOutput, DriverError>),
    Stopped(Result<(), DriverError>),
}

/// Who asked for an operation (opaque to the hub, echoed in notices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requester {
    /// A JSON-RPC request waiting for its answer.
    Rpc { conn: crate::ConnId, key_id: String },
    /// A turn's tool round, on its `tool_use` at `index`.
    Turn {
        turn: crate::ids::TurnId,
        index: usize,
    },
    /// Session teardown (no one to answer).
    Teardown { key_id: String },
}

/// A running remote sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    pub image: String,
    pub container: String,
}

/// Why a sandbox stops (`reason` of the stop events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Explicit,
    SessionClose,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Explicit => "explicit",
            StopReason::SessionClose => "session_close",
        }
    }
}

/// What the hub tells the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxNotice {
    /// A start finished: the handle, or why not.
    Started {
        session_id: SessionId,
        requester: Requester,
        image: String,
        result: Result<Handle, SandboxError>,
    },
    /// A stop finished (the handle was removed when it began).
    Stopped {
        session_id: SessionId,
        requester: Requester,
        handle: Handle,
        reason: StopReason,
        result: Result<(), SandboxError>,
    },
    /// An exec finished: the output, or why not.
    Executed {
        session_id: SessionId,
        requester: Requester,
        handle: Handle,
        result: Result<ExecOutput, SandboxError>,
    },
    /// A remote subagent reached a terminal state on its own (exit,
    /// spawn failure, timeout).
    SubagentEnded {
        session_id: SessionId,
        status: SubagentStatus,
    },
    /// An image of a profile's `available_sandboxes` was provisioned.
    Provisioned {
        profile_id: String,
        image: String,
        result: Result<(), DriverError>,
    },
}

/// Why [`SandboxHub::start`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartRefused {
    AlreadyRunning,
}

/// Hub settings.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// Wall-clock bound of one Auto/Manual exec (0 = none).
    pub exec_timeout_ms: u64,
    /// Capture limit per stream of an exec or subagent.
    pub max_output: usize,
    /// `BAE_SUBAGENT_TIMEOUT`.
    pub subagent_timeout_ms: u64,
    /// Labels every started container carries (besides `bae.session`).
    pub labels: Vec<(String, String)>,
}

/// Provisioning state of one image (admin `sandbox-status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageState {
    Pending,
    Available,
    Error(String),
}
