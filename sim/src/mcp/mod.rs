//! Simulated MCP servers (spec 06 §4, the `reconnect` extension of
//! docs/extensions.md) and the MCP invariants.
//!
//! The world hands every `Output::Mcp` to [`McpSim::on_command`], which plays
//! the driver's transport *and* the server behind it: it parses the engine's
//! JSON-RPC messages, answers `initialize`, `notifications/initialized` (HTTP:
//! `202`), `tools/list` and `tools/call` after a seeded latency, with the
//! seed's faults (spawn failures, JSON-RPC errors, `isError` results, noise
//! lines, answers later than the engine's timeout, exits mid-call, HTTP
//! non-2xx, expired HTTP sessions), and returns the [`McpEvent`]s to
//! schedule. [`McpSim::deliver`] is asked before each of them reaches the
//! engine (a stdio child killed by `Close` reports nothing but its EOF).
//!
//! The invariants come from two vantage points: the transports (what the
//! engine sent to which server, and when) and the emitted event log
//! (`tool.call` … `tool.result`). Transports are attributed to sessions by
//! the events emitted before the `Open` (the create's `session.open`, the
//! turn's `mcp.request`, the last history read of a restored session) or,
//! for a reconnect, by the `Close` of the transport it replaces right
//! before it.
//!
//! Everything is drawn from the seed's own forked generator and kept in
//! ordered maps, so it is deterministic.

use std::collections::{BTreeMap, VecDeque};

use engine::mcp::{McpCommand, McpConnId, McpEvent, McpServerSpec, McpTransport};
use engine::store::{EventRow, SessionState};
use serde_json::{json, Value};

use crate::check::{self, Checker};
use crate::rng::Rng;
use crate::swarm::{McpServerOpt, McpSwarm};

mod oracle;
mod replies;
mod transport;

/// A transport: the engine's connection id within one engine incarnation
/// (ids restart at 1 after a restart).
type Key = (u32, McpConnId);

/// `(virtual time, conn, event)` for the world to schedule.
pub type Scheduled = (u64, McpConnId, McpEvent);

/// The engine registry built from the swarm.
pub fn registry(sw: &McpSwarm) -> Vec<McpServerSpec> {
    sw.servers.iter().map(spec_of).collect()
}

fn spec_of(s: &McpServerOpt) -> McpServerSpec {
    McpServerSpec {
        name: s.name.clone(),
        transport: if s.http {
            McpTransport::Http {
                url: format!("http://{}.mcp.sim/mcp", s.name),
                headers: vec![("authorization".into(), "Bearer ${SIM_MCP_TOKEN}".into())],
            }
        } else {
            McpTransport::Stdio {
                command: format!("sim-mcp-{}", s.name),
                args: vec!["--stdio".into()],
            }
        },
        reconnect: s.reconnect,
    }
}

/// Adds the profile's `mcp_servers` to an admin profile body.
pub fn profile_fields(sw: &McpSwarm, body: &mut Value) {
    if !sw.profile.is_empty() {
        body["mcp_servers"] = json!(sw.profile);
    }
}

/// The session a store read is about (context for a restored session's
/// reconnects, which follow its history read).
pub fn read_session(read: &engine::store::StoreRead) -> &str {
    read.session_id()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A trace rendering of a command (message bytes included: the trace hash
/// covers them).
pub fn describe_command(c: &McpCommand) -> String {
    match c {
        McpCommand::Open {
            conn,
            server,
            max_message_bytes,
            timeout_ms,
        } => {
            let kind = match server.transport {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            };
            format!(
                "open conn={conn} {} {kind} reconnect={} max={max_message_bytes} timeout={timeout_ms}ms",
                server.name, server.reconnect
            )
        }
        McpCommand::Send {
            conn,
            exchange,
            message,
            session_id,
        } => format!(
            "send conn={conn} ex={exchange} sid={} {}",
            session_id.as_deref().unwrap_or("-"),
            text(message)
        ),
        McpCommand::Close { conn, session_id } => format!(
            "close conn={conn} sid={}",
            session_id.as_deref().unwrap_or("-")
        ),
    }
}

pub fn describe_event(e: &McpEvent) -> String {
    match e {
        McpEvent::Opened => "opened".into(),
        McpEvent::OpenFailed(t) => format!("open failed {t:?}"),
        McpEvent::Line(l) => format!("line {:?}", text(l)),
        McpEvent::Closed(r) => format!("closed {r:?}"),
        McpEvent::HttpReply {
            exchange,
            status,
            content_type,
            session_id,
            body,
        } => format!(
            "http reply ex={exchange} {status} {content_type:?} sid={} {:?}",
            session_id.as_deref().unwrap_or("-"),
            text(body)
        ),
        McpEvent::HttpFailed { exchange, error } => {
            format!("http failed ex={exchange} {error:?}")
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Initialize,
    Initialized,
    ToolsList,
    ToolsCall,
    Other,
}

impl Method {
    fn parse(m: &str) -> Method {
        match m {
            "initialize" => Method::Initialize,
            "notifications/initialized" => Method::Initialized,
            "tools/list" => Method::ToolsList,
            "tools/call" => Method::ToolsCall,
            _ => Method::Other,
        }
    }
}

/// A request the server has not answered yet (or whose answer is still on
/// its way to the engine).
#[derive(Debug, Clone)]
struct Out {
    method: Method,
    sent_at: u64,
    /// The planned answer is a success (result / `202`).
    ok: bool,
    /// `tools/list`: the page's tool names and its `nextCursor`.
    page: Vec<String>,
    next: Option<String>,
    /// A `tools/call` whose turn was cancelled: the engine abandoned it and
    /// may send the next call at once.
    abandoned: bool,
}

#[derive(Debug, Default)]
struct Transport {
    server: usize,
    session: Option<String>,
    /// Attributed by a guess (several sessions had events before the
    /// `Open`); confirmed or corrected by its first `tools/call`.
    uncertain: bool,
    /// When the open outcome reaches the engine, and whether it succeeds.
    open_at: u64,
    open_ok: bool,
    opened: bool,
    engine_closed: bool,
    /// stdio: `Closed` was delivered (the child exited, or its EOF after
    /// the kill).
    closed_seen: bool,
    /// stdio: a `Closed` is scheduled; nothing follows it.
    eof: bool,
    /// The server is gone (stdio child exited: writes vanish; HTTP: every
    /// request is refused).
    dead: bool,
    next_id: u64,
    init_ok: bool,
    notif_sent: bool,
    notif_ok: bool,
    list_sent: bool,
    /// A `tools/list` page was answered (and the engine still had the
    /// transport open).
    listed: bool,
    /// The tool names the engine may route here: the pages answered so far
    /// (a reconnect starts with its predecessor's, as the engine does).
    routable: Vec<String>,
    /// Pages answered by this transport.
    pages: u32,
    /// Tools of the pages answered so far, routable once the listing ends.
    gathered: Vec<String>,
    /// The `nextCursor` of the last page (an engine may follow it).
    cursor: Option<String>,
    /// A handshake answer the engine still took although it came after its
    /// deadline: `(method, ms past the deadline)`.
    late: Option<(Method, u64)>,
    /// The `mcp-session-id` the engine received (set on delivery).
    issued_sid: Option<String>,
    /// The server handed one out (its side; the reply may still be on its
    /// way, or arrive after the engine gave up).
    server_sid: bool,
    expired: bool,
    /// stdio: the child answers in order; the next line leaves no earlier.
    pipe_at: u64,
    outstanding: BTreeMap<u64, Out>,
}

/// A pending `tool.call` with dispatch `mcp`, in block order.
#[derive(Debug, Clone)]
struct Use {
    id: String,
    name: String,
    server: Option<String>,
    responded: bool,
}

/// An `mcp.request` waiting for its `mcp.response`.
#[derive(Debug, Clone)]
struct Req {
    tool: String,
    server: Option<String>,
    at: u64,
    /// Transport operations with an engine deadline started for it (the
    /// `tools/call`; an `Open` and each handshake request of a reconnect).
    ops: u64,
}

#[derive(Debug, Default)]
struct SessionMcp {
    /// Current transports in profile order (a reconnect replaces its
    /// predecessor in place). Reset by a restart.
    order: Vec<Key>,
    /// Every transport opened for it by this engine incarnation.
    all: Vec<Key>,
    closed: bool,
    uses: VecDeque<Use>,
    req: Option<Req>,
}

#[derive(Debug, Clone, Default)]
pub struct McpStats {
    pub transports: u64,
    pub calls: u64,
    pub answered: u64,
    pub timeouts: u64,
    /// Transports of `error` sessions still open at the end (spec: only
    /// DELETE / revocation tear a session's connections down).
    pub error_session_live: u64,
    pub double_close: u64,
    /// `Open`s replacing a closed transport of the same session (reconnect).
    pub reconnects: u64,
    /// HTTP 404s for an expired `mcp-session-id`.
    pub expired: u64,
    /// Longest hold of a turn by one MCP call, in % of `mcp_timeout_ms`,
    /// and the most transport operations one call needed.
    pub max_hold_pct: u64,
    pub max_ops: u64,
    pub uncertain: u64,
    pub unattributed: u64,
}

enum Fault {
    Normal,
    Exit,
    Status(u16),
    Expire,
    RpcError,
    ToolError,
    Slow,
    Garbage,
}

pub struct McpSim {
    rng: Rng,
    servers: Vec<McpServerOpt>,
    timeout_ms: u64,
    epoch: u32,
    transports: BTreeMap<Key, Transport>,
    sessions: BTreeMap<String, SessionMcp>,
    /// Sessions with events since the last batch of MCP commands.
    ctx: Vec<String>,
    after_command: bool,
    /// The previous command, when it was a `Close` (a reconnect's `Open`
    /// follows the `Close` of the transport it replaces).
    last_close: Option<Key>,
    /// Sessions closed during the current drain.
    closing: Vec<String>,
    /// `tools/call` params → (times sent, processed by a server).
    calls: BTreeMap<String, (u32, bool)>,
    /// Transports whose last `tools/list` page had a `nextCursor`, delivered
    /// in the current drain.
    cursor_checks: Vec<Key>,
    pub stats: McpStats,
}

impl McpSim {
    pub fn new(rng: Rng, sw: &McpSwarm) -> McpSim {
        McpSim {
            rng,
            servers: sw.servers.clone(),
            timeout_ms: sw.timeout_ms,
            epoch: 0,
            transports: BTreeMap::new(),
            sessions: BTreeMap::new(),
            ctx: Vec::new(),
            after_command: false,
            last_close: None,
            closing: Vec::new(),
            calls: BTreeMap::new(),
            cursor_checks: Vec::new(),
            stats: McpStats::default(),
        }
    }

    // ---- context ------------------------------------------------------------

    /// The input about to reach the engine concerns `session`.
    pub fn set_context(&mut self, session: &str) {
        self.ctx = vec![session.to_string()];
        self.after_command = false;
    }

    fn note_session(&mut self, session: &str) {
        if self.after_command {
            self.ctx.clear();
            self.after_command = false;
        }
        if self.ctx.last().map(String::as_str) != Some(session) {
            self.ctx.retain(|s| s != session);
            self.ctx.push(session.to_string());
        }
    }

    /// End of one input's output drain: teardown of sessions closed in it.
    pub fn after_drain(&mut self, checker: &mut Checker) {
        // A page with a `nextCursor` the engine did not follow ended its
        // listing (an engine that does not paginate).
        for key in std::mem::take(&mut self.cursor_checks) {
            if let Some(t) = self.transports.get_mut(&key) {
                if t.cursor.is_some() && !t.engine_closed {
                    t.routable = std::mem::take(&mut t.gathered);
                }
            }
        }
        self.ctx.clear();
        self.after_command = false;
        self.last_close = None;
        let closing = std::mem::take(&mut self.closing);
        for sid in closing {
            self.check_teardown(&sid, "the drain of its session.close", checker);
        }
    }

    fn check_teardown(&self, sid: &str, when: &str, checker: &mut Checker) {
        let Some(s) = self.sessions.get(sid) else {
            return;
        };
        for key in &s.all {
            let Some(t) = self.transports.get(key) else {
                continue;
            };
            if !t.engine_closed && !t.uncertain {
                checker.fail(
                    check::INV_MCP_TEARDOWN,
                    format!(
                        "session {sid} is closed but its MCP transport conn={} ({}) was not closed by the end of {when}",
                        key.1, self.servers[t.server].name
                    ),
                );
            }
        }
    }

    /// A restart: the old process's transports died with it (stdio children
    /// get the parent-death signal; HTTP sessions are simply abandoned), and
    /// its turns are gone. A close that was not committed is undone.
    pub fn on_restart(&mut self, states: &BTreeMap<String, SessionState>) {
        self.epoch += 1;
        self.transports.clear();
        for (sid, s) in self.sessions.iter_mut() {
            s.closed = states.get(sid) == Some(&SessionState::Closed);
            s.order.clear();
            s.all.clear();
            s.uses.clear();
            s.req = None;
        }
        self.ctx.clear();
        self.after_command = false;
        self.last_close = None;
        self.closing.clear();
        self.cursor_checks.clear();
    }
}

/// The numeric id of a line that answers a request (a JSON object with a
/// numeric `id` and no `method`).
fn answer_id(line: &[u8]) -> Option<u64> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let obj = v.as_object()?;
    if obj.contains_key("method") {
        return None;
    }
    obj.get("id")?.as_u64()
}
