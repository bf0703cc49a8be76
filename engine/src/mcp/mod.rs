//! MCP connections (spec 06 §4), split as quinn splits an endpoint from
//! its connections: each session owns its connection set
//! ([`SessionMcp`], kept in the session's entry of the sessions table),
//! and the [`McpHub`] only routes (connection id → session, one deadline
//! index) and queues what the sets emit.
//!
//! * In: [`McpHub::connect_session`] (which returns the new set),
//!   [`SessionMcp::call`], [`SessionMcp::close`], transport events
//!   ([`McpEvent`], routed by [`McpHub::owner`]) and timer ticks
//!   ([`McpHub::due`]).
//! * Out: [`McpCommand`]s for the driver (open a transport, send a message,
//!   close it) and [`McpNotice`]s for the engine (a session's connects are
//!   done, a call finished).
//!
//! It never touches the session log, HTTP or the turn gate: the engine
//! records events and answers requests from the notices. Every request has
//! an engine timer (`mcp_timeout_ms`), never a socket timeout, so a silent
//! server cannot hold a turn past it.

mod conn;
mod session;
#[cfg(test)]
mod tests;

use crate::ids::SessionId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proto::mcp::CallOutcome;

use crate::MonoMs;
use conn::Conn;
pub use session::SessionMcp;

pub use crate::ids::{CallToken, McpConnId};

/// One `[[mcp.servers]]` registry entry. Templates stay unresolved: the
/// driver resolves `${VAR}`s when it opens the transport.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// Extension (`reconnect = true`): a broken server is replaced on the
    /// next call, with backoff, and an expired HTTP session is renewed.
    pub reconnect: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking one JSON object per line on stdin/stdout.
    Stdio { command: String, args: Vec<String> },
    /// MCP "streamable HTTP" (`transport = "http"` or `"sse"`).
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// What the driver must do for the hub.
#[derive(Debug, Clone, PartialEq)]
pub enum McpCommand {
    /// Spawn the child / prepare the HTTP endpoint (resolving templates),
    /// then report [`McpEvent::Opened`] or [`McpEvent::OpenFailed`].
    Open {
        conn: McpConnId,
        server: McpServerSpec,
        /// Longest stdout line or HTTP body accepted; beyond it the
        /// transport reports [`McpEvent::Closed`] with a reason.
        max_message_bytes: usize,
        /// The engine's per-request timeout; a transport may bound its own
        /// blocking work by it (the engine's timer decides the outcome).
        timeout_ms: u64,
    },
    /// stdio: write `message` and a newline. HTTP: POST it (echoing
    /// `session_id` as `mcp-session-id`) and report
    /// [`McpEvent::HttpReply`] / [`McpEvent::HttpFailed`] for `exchange`.
    Send {
        conn: McpConnId,
        /// The JSON-RPC id of a request, `0` for a notification.
        exchange: u64,
        message: Vec<u8>,
        session_id: Option<String>,
    },
    /// Tear the transport down: kill and reap the child, or end the HTTP
    /// session with `DELETE` when the server gave it an id.
    Close {
        conn: McpConnId,
        session_id: Option<String>,
    },
}

/// What happened on a transport.
#[derive(Debug, Clone, PartialEq)]
pub enum McpEvent {
    Opened,
    /// The transport could not be opened (spawn error, unresolved `${VAR}`).
    OpenFailed(String),
    /// stdio: one line from the child's stdout (without the newline).
    Line(Vec<u8>),
    /// stdio: the child's stdout ended (it exited, or the driver gave up on
    /// it, with the reason).
    Closed(Option<String>),
    /// HTTP: the answer to the POST of `exchange`.
    HttpReply {
        exchange: u64,
        status: u16,
        content_type: String,
        session_id: Option<String>,
        body: Vec<u8>,
    },
    /// HTTP: no response for `exchange` (connect/IO error, text log-safe).
    HttpFailed {
        exchange: u64,
        error: String,
    },
}

/// What the hub tells the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum McpNotice {
    /// Every server of the session finished connecting (or failed and was
    /// skipped): the create request may be answered.
    SessionReady { session_id: SessionId },
    /// A [`SessionMcp::call`] finished.
    CallDone {
        token: CallToken,
        outcome: CallOutcome,
    },
}

/// Hub settings.
#[derive(Debug, Clone)]
pub struct McpSettings {
    pub server_version: String,
    /// Per-request timeout (spec: 30 s).
    pub timeout_ms: u64,
    pub max_message_bytes: usize,
}

/// The endpoint side of MCP: hands out connection ids, routes every
/// connection's transport events and deadline to the session that owns it
/// (the sets themselves live in the sessions' own entries), and queues what
/// the sets emit.
pub struct McpHub {
    settings: McpSettings,
    /// Every open connection → the session whose set holds it.
    owners: BTreeMap<McpConnId, Owner>,
    /// The request deadlines of `owners`, earliest first.
    deadlines: BTreeSet<(MonoMs, McpConnId)>,
    next_conn: McpConnId,
    commands: VecDeque<McpCommand>,
    notices: VecDeque<McpNotice>,
}

struct Owner {
    session: SessionId,
    deadline: Option<MonoMs>,
}

impl McpHub {
    pub fn new(settings: McpSettings) -> Self {
        McpHub {
            settings,
            owners: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            next_conn: McpConnId(1),
            commands: VecDeque::new(),
            notices: VecDeque::new(),
        }
    }

    /// Connects `servers` for a session, all at once; a
    /// [`McpNotice::SessionReady`] follows when the last one is done. The
    /// caller keeps the returned set in the session (`None`: no servers,
    /// the notice is already queued).
    pub fn connect_session(
        &mut self,
        session_id: &SessionId,
        servers: Vec<McpServerSpec>,
        now: MonoMs,
    ) -> Option<SessionMcp> {
        if servers.is_empty() {
            self.notices.push_back(McpNotice::SessionReady {
                session_id: session_id.clone(),
            });
            return None;
        }
        let mut conns = Vec::with_capacity(servers.len());
        for server in servers {
            let c = Conn::new(server, now, &self.settings);
            conns.push((self.open(session_id, &c), c));
        }
        Some(SessionMcp::connecting(session_id.clone(), conns))
    }

    /// The session whose set holds `conn` (`None`: closed or replaced, its
    /// late events are dropped).
    pub fn owner(&self, conn: McpConnId) -> Option<&SessionId> {
        self.owners.get(&conn).map(|o| &o.session)
    }

    /// The connections whose request deadline is due at `now`, by id.
    pub fn due(&self, now: MonoMs) -> Vec<McpConnId> {
        let mut due: Vec<McpConnId> = (self.deadlines.range(..=(now, McpConnId(u64::MAX))))
            .map(|(_, id)| *id)
            .collect();
        due.sort_unstable();
        due
    }

    pub fn poll_timeout(&self) -> Option<MonoMs> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    pub fn poll_command(&mut self) -> Option<McpCommand> {
        self.commands.pop_front()
    }

    pub fn poll_notice(&mut self) -> Option<McpNotice> {
        self.notices.pop_front()
    }

    /// Sessions with a connection set (gauge `bae.mcp.sessions.live`).
    pub fn live_sessions(&self) -> usize {
        let sessions: BTreeSet<&SessionId> = self.owners.values().map(|o| &o.session).collect();
        sessions.len()
    }

    // ---- what the sets use ------------------------------------------------

    fn settings(&self) -> &McpSettings {
        &self.settings
    }

    /// A new id for `conn` of `session`, and the command to open it.
    fn open(&mut self, session: &SessionId, conn: &Conn) -> McpConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        self.commands.push_back(McpCommand::Open {
            conn: id,
            server: conn.spec().clone(),
            max_message_bytes: self.settings.max_message_bytes,
            timeout_ms: self.settings.timeout_ms,
        });
        let owner = Owner {
            session: session.clone(),
            deadline: None,
        };
        self.owners.insert(id, owner);
        self.track(id, conn.deadline());
        id
    }

    /// `id`'s request deadline is now `deadline`.
    fn track(&mut self, id: McpConnId, deadline: Option<MonoMs>) {
        let Some(owner) = self.owners.get_mut(&id) else {
            return;
        };
        if owner.deadline == deadline {
            return;
        }
        if let Some(d) = owner.deadline {
            self.deadlines.remove(&(d, id));
        }
        if let Some(d) = deadline {
            self.deadlines.insert((d, id));
        }
        owner.deadline = deadline;
    }

    /// `id` left its set: it routes nothing any more.
    fn forget(&mut self, id: McpConnId) {
        if let Some(Owner {
            deadline: Some(d), ..
        }) = self.owners.remove(&id)
        {
            self.deadlines.remove(&(d, id));
        }
    }

    fn command(&mut self, command: McpCommand) {
        self.commands.push_back(command);
    }

    fn notice(&mut self, notice: McpNotice) {
        self.notices.push_back(notice);
    }
}
