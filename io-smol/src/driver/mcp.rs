//! MCP transports (spec 06 §4.4): stdio children and streamable-HTTP
//! endpoints, performed for the engine's [`McpCommand`]s and reported back
//! as [`McpEvent`]s. No protocol logic: the engine builds every message and
//! matches every answer; this module moves bytes, resolves `${VAR}`
//! templates at open, and owns the children (killed and reaped on close).

use std::collections::HashMap;
use std::io::{self, Read};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use engine::mcp::{McpCommand, McpConnId, McpEvent, McpServerSpec, McpTransport};
use futures_lite::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use futures_lite::{future, AsyncBufRead};
use smol::channel::{self, Sender};
use smol::process::{Child, Command};
use smol::Timer;

use super::reports::Reports;
use crate::config::{process_env, substitute};

/// Longest stderr line kept for a debug log record.
const STDERR_LOG_BYTES: usize = 512;

/// The driver's MCP transports.
pub struct McpTransports<R: Reports> {
    conns: HashMap<McpConnId, Handle>,
    events: R,
    /// stdio children not yet reaped (shutdown waits for them).
    children: Arc<AtomicUsize>,
}

enum Handle {
    Stdio(Sender<StdioMsg>),
    Http(Arc<HttpConn>),
}

enum StdioMsg {
    Write(Vec<u8>),
}

struct HttpConn {
    url: String,
    /// Resolved at open; secrets, never logged.
    headers: Vec<(String, String)>,
    max_body: usize,
    timeout: Duration,
}

impl<R: Reports> McpTransports<R> {
    pub fn new(events: R) -> Self {
        McpTransports {
            conns: HashMap::new(),
            events,
            children: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn perform(&mut self, cmd: McpCommand) {
        match cmd {
            McpCommand::Open {
                conn,
                server,
                max_message_bytes,
                timeout_ms,
            } => self.open(conn, server, max_message_bytes, timeout_ms),
            McpCommand::Send {
                conn,
                exchange,
                message,
                session_id,
            } => match self.conns.get(&conn) {
                Some(Handle::Stdio(tx)) => {
                    let _ = tx.try_send(StdioMsg::Write(message));
                }
                Some(Handle::Http(http)) => {
                    let http = Arc::clone(http);
                    let tx = self.events.clone();
                    smol::spawn(async move {
                        let event =
                            blocking::unblock(move || http.post(exchange, &message, session_id))
                                .await;
                        let _ = tx.mcp(conn, event).await;
                    })
                    .detach();
                }
                None => {}
            },
            McpCommand::Close { conn, session_id } => match self.conns.remove(&conn) {
                // Dropping the sender ends the child's task: kill, then reap.
                Some(Handle::Stdio(_)) => {}
                Some(Handle::Http(http)) => {
                    if let Some(id) = session_id {
                        smol::spawn(blocking::unblock(move || http.delete(&id))).detach();
                    }
                }
                None => {}
            },
        }
    }

    /// Closes every transport: stdio children are killed, then reaped by
    /// their tasks ([`McpTransports::children`] counts the ones left).
    pub fn close_all(&mut self) {
        self.conns.clear();
    }

    /// stdio children not reaped yet.
    pub fn children(&self) -> usize {
        self.children.load(Ordering::Acquire)
    }

    fn open(&mut self, conn: McpConnId, server: McpServerSpec, max: usize, timeout_ms: u64) {
        let tx = self.events.clone();
        match server.transport {
            McpTransport::Stdio { command, args } => {
                let (msg_tx, msg_rx) = channel::unbounded();
                self.conns.insert(conn, Handle::Stdio(msg_tx));
                let children = Arc::clone(&self.children);
                smol::spawn(run_stdio(conn, command, args, max, msg_rx, tx, children)).detach();
            }
            McpTransport::Http { url, headers } => {
                let resolved: Result<Vec<(String, String)>, String> = headers
                    .iter()
                    .map(|(k, v)| {
                        substitute(v, process_env)
                            .map(|v| (k.clone(), v))
                            .map_err(|e| format!("header {k}: {e}"))
                    })
                    .collect();
                let event = match resolved {
                    Ok(headers) => {
                        let http = HttpConn {
                            url,
                            headers,
                            max_body: max,
                            // The engine's timer decides; this only bounds
                            // the blocking thread.
                            timeout: Duration::from_millis(timeout_ms.saturating_add(5_000)),
                        };
                        self.conns.insert(conn, Handle::Http(Arc::new(http)));
                        McpEvent::Opened
                    }
                    Err(e) => McpEvent::OpenFailed(e),
                };
                smol::spawn(async move {
                    let _ = tx.mcp(conn, event).await;
                })
                .detach();
            }
        }
    }
}

/// One stdio server: spawn (with `${VAR}`s resolved), then move lines both
/// ways until the engine closes it or the child exits.
async fn run_stdio<R: Reports>(
    conn: McpConnId,
    command: String,
    args: Vec<String>,
    max_line: usize,
    msgs: channel::Receiver<StdioMsg>,
    events: R,
    children: Arc<AtomicUsize>,
) {
    let report = |event: McpEvent| {
        let events = events.clone();
        async move {
            let _ = events.mcp(conn, event).await;
        }
    };
    let resolved = substitute(&command, process_env).and_then(|c| {
        let args = args
            .iter()
            .map(|a| substitute(a, process_env))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((c, args))
    });
    let (command, args) = match resolved {
        Ok(r) => r,
        Err(e) => return report(McpEvent::OpenFailed(e.to_string())).await,
    };
    let mut child = match spawn_with_retry(&command, &args).await {
        Ok(c) => c,
        Err(e) => {
            return report(McpEvent::OpenFailed(format!("cannot start {command}: {e}"))).await
        }
    };
    children.fetch_add(1, Ordering::AcqRel);
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.status().await;
        children.fetch_sub(1, Ordering::AcqRel);
        return report(McpEvent::OpenFailed("child has no pipes".into())).await;
    };
    report(McpEvent::Opened).await;
    let pid = child.id();
    smol::spawn(drain_stderr(pid, stderr)).detach();
    let reader = smol::spawn(read_lines(conn, stdout, max_line, events.clone()));
    // Reaped as soon as it exits, even if the engine closes it much later.
    let exited = child.status();
    futures_lite::pin!(exited);
    let status = loop {
        let next = future::or(
            async {
                match msgs.recv().await {
                    Ok(StdioMsg::Write(line)) => Next::Write(line),
                    Err(_) => Next::Close,
                }
            },
            async { Next::Exited((&mut exited).await) },
        )
        .await;
        match next {
            Next::Write(mut line) => {
                line.push(b'\n');
                // A dead child shows up as EOF on stdout and as its exit.
                let _ = stdin.write_all(&line).await;
                let _ = stdin.flush().await;
            }
            Next::Close => {
                drop(stdin);
                kill_group(pid);
                let _ = child.kill();
                break exited.await;
            }
            Next::Exited(status) => {
                kill_group(pid);
                break status;
            }
        }
    };
    children.fetch_sub(1, Ordering::AcqRel);
    // Lines already read still reach the engine; then the reader ends at EOF.
    let _ = reader.await;
    tracing::debug!(conn = conn.0, pid, status = ?status.ok(), "MCP stdio server reaped");
}

enum Next {
    Write(Vec<u8>),
    Close,
    Exited(io::Result<std::process::ExitStatus>),
}

/// SIGKILL to the child's process group (whatever it forked).
fn kill_group(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Spawns the child, retrying transient resource errors with backoff from
/// 25 ms to 400 ms within 4 s (spec 06 §4.4).
async fn spawn_with_retry(command: &str, args: &[String]) -> io::Result<Child> {
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut backoff = Duration::from_millis(25);
    loop {
        let mut std_cmd = std::process::Command::new(command);
        // Its own process group: closing kills launchers' children too
        // (`npx`, `uvx` and shell wrappers fork the real server).
        std::os::unix::process::CommandExt::process_group(&mut std_cmd, 0);
        // SAFETY: the closure runs in the forked child before exec and only
        // makes one async-signal-safe syscall (prctl). It makes the kernel
        // kill the server if baesrv dies without closing it (kill -9).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut std_cmd, || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(io::Error::from)
            });
        }
        let result = Command::from(std_cmd)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        match result {
            Ok(c) => return Ok(c),
            Err(e) if is_transient(&e) && Instant::now() + backoff < deadline => {
                tracing::debug!(error = %e, "MCP server spawn failed; retrying");
                Timer::after(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(400));
            }
            Err(e) => return Err(e),
        }
    }
}

/// EAGAIN, ENOMEM, ENFILE, EMFILE (Linux numbering) and would-block.
fn is_transient(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || matches!(e.raw_os_error(), Some(11 | 12 | 23 | 24))
}

async fn read_lines<R: Reports>(
    conn: McpConnId,
    stdout: smol::process::ChildStdout,
    max: usize,
    events: R,
) {
    let mut reader = BufReader::new(stdout);
    let reason = loop {
        match read_line_limited(&mut reader, max).await {
            Ok(Some(line)) => {
                if !events.mcp(conn, McpEvent::Line(line)).await {
                    return;
                }
            }
            Ok(None) => break None,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => break Some(e.to_string()),
            Err(e) => break Some(format!("reading from MCP server failed: {e}")),
        }
    };
    let _ = events.mcp(conn, McpEvent::Closed(reason)).await;
}

/// The next line without its `\n` (`None` at EOF). A line longer than `max`
/// is an `InvalidData` error: the stream cannot be resynchronised safely.
async fn read_line_limited<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        if line.len() + chunk.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("MCP server sent a line over the {max}-byte limit"),
            ));
        }
        line.extend_from_slice(chunk);
        let found_newline = done > chunk.len();
        reader.consume(done);
        if found_newline {
            return Ok(Some(line));
        }
    }
}

/// stderr is drained so the child never blocks on it; lines go to the debug
/// log, truncated (they may be large or sensitive at higher levels).
async fn drain_stderr(pid: u32, stderr: smol::process::ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let end = line.len().min(STDERR_LOG_BYTES);
                    let text = String::from_utf8_lossy(&line[..end]);
                    tracing::debug!(pid, line = %text.trim_end(), "MCP server stderr");
                }
                // Bound the buffer even for a child that never prints '\n'.
                if line.capacity() > 64 * 1024 {
                    line = Vec::new();
                }
            }
        }
    }
}

fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| ureq::AgentBuilder::new().redirects(0).build())
}

impl HttpConn {
    fn request(&self, method: &str, session_id: Option<&str>) -> ureq::Request {
        let mut req = agent().request(method, &self.url).timeout(self.timeout);
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        if let Some(id) = session_id {
            req = req.set("mcp-session-id", id);
        }
        req
    }

    /// One POST (spec 06 §4.4); any status is a reply for the engine.
    fn post(&self, exchange: u64, message: &[u8], session_id: Option<String>) -> McpEvent {
        let req = self
            .request("POST", session_id.as_deref())
            .set("content-type", "application/json")
            .set("accept", "application/json, text/event-stream");
        let resp = match req.send_bytes(message) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => {
                return McpEvent::HttpFailed {
                    exchange,
                    error: super::provider::transport_text(&t),
                }
            }
        };
        let status = resp.status();
        let content_type = resp.header("content-type").unwrap_or("").to_string();
        let session = resp.header("mcp-session-id").map(str::to_string);
        let sse = content_type
            .to_ascii_lowercase()
            .contains("text/event-stream");
        match read_body(resp.into_reader(), self.max_body, sse.then_some(exchange)) {
            Ok(body) => McpEvent::HttpReply {
                exchange,
                status,
                content_type,
                session_id: session,
                body,
            },
            Err(error) => McpEvent::HttpFailed { exchange, error },
        }
    }

    /// Ends the server's session (best effort).
    fn delete(&self, session_id: &str) {
        let req = self
            .request("DELETE", Some(session_id))
            .timeout(Duration::from_secs(5));
        if let Err(e) = req.call() {
            tracing::debug!(error = %strip(&e), "MCP session DELETE failed");
        }
    }
}

fn strip(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, _) => format!("HTTP {code}"),
        ureq::Error::Transport(t) => super::provider::transport_text(t),
    }
}

/// Reads a body up to `max` bytes. An event stream is read only until it
/// holds the answer to `sse_id`: servers may keep the stream open after it.
fn read_body(mut r: impl Read, max: usize, sse_id: Option<u64>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(body),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("error reading response body: {}", e.kind())),
        };
        if body.len() + n > max {
            return Err(format!("response body over the {max}-byte limit"));
        }
        body.extend_from_slice(&chunk[..n]);
        if let Some(id) = sse_id {
            if chunk[..n].contains(&b'\n') && proto::mcp::match_answer_in_sse(&body, id).is_some() {
                return Ok(body);
            }
        }
    }
}
