//! One tool round of a turn (spec 06 §2): classify every `tool_use`, log the
//! `tool.call`s, run the server-side blocks in block order, then pause for
//! the client's blocks or go round again.
//!
//! Server-side blocks may be asynchronous (an MCP `tools/call`): the round
//! is parked on the turn ([`Round`]) and resumed by the call's notice, so
//! the turn never blocks the engine while a tool runs.

use std::collections::BTreeSet;

use proto::mcp::{self, CallOutcome};
use serde_json::{json, Value};

use super::round::{Round, RoundEnd, Waiting};
use super::{Outcome, Pause, TurnId};
use crate::Engine;
use proto::wire::EventType;

pub use proto::wire::content::Dispatch;

impl Engine {
    /// A successful round trip: finish, or start a tool round.
    pub(super) fn on_assistant(&mut self, turn_id: TurnId, content: Vec<Value>) {
        let Some(t) = self.turns.get(&turn_id) else {
            return;
        };
        let (session_id, key_id) = (t.session_id.clone(), t.key_id.clone());
        let uses: Vec<Value> = proto::provider::tool_uses(&content)
            .into_iter()
            .cloned()
            .collect();
        if uses.is_empty() {
            let message = json!({"role": "assistant", "content": content});
            self.turn_event(turn_id, EventType::ServerMessageSend, message.clone());
            if self.maybe_auto_compact(turn_id, &message) {
                return;
            }
            return self.end_turn(turn_id, Outcome::Completed(message));
        }
        let dispatches: Vec<Dispatch> = uses
            .iter()
            .map(|u| self.classify(&session_id, &key_id, tool_name(u)))
            .collect();
        for (u, d) in uses.iter().zip(&dispatches) {
            let server = match d {
                Dispatch::Mcp => self
                    .mcp
                    .route(&session_id, tool_name(u))
                    .map(str::to_string),
                _ => None,
            };
            let payload = json!({
                "id": u.get("id").cloned().unwrap_or(Value::Null),
                "name": u.get("name").cloned().unwrap_or(Value::Null),
                "input": u.get("input").cloned().unwrap_or_else(|| json!({})),
                "dispatch": d.as_str(),
                "server_name": server,
            });
            self.turn_event(turn_id, EventType::ToolCall, payload);
            self.metrics.tool_called(*d);
            if self.telemetry.enabled() {
                let id = u.get("id").and_then(Value::as_str).unwrap_or("");
                let input_bytes = u.get("input").map_or(2, json_len);
                (self.telemetry).dispatch_begin(turn_id, id, tool_name(u), *d, input_bytes);
            }
        }
        let now = self.now.mono;
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.round = Some(Box::new(Round::new(content, uses, dispatches, now)));
        }
        self.run_server_tools(turn_id);
    }

    /// Runs server-side blocks in order until one goes asynchronous or the
    /// round is done.
    fn run_server_tools(&mut self, turn_id: TurnId) {
        loop {
            let Some(t) = self.turns.get_mut(&turn_id) else {
                return;
            };
            let session_id = t.session_id.clone();
            let Some(round) = t.round.as_mut() else {
                return;
            };
            let Some((i, dispatch, tool_use)) = round.next_server_block(self.now.mono) else {
                return self.finish_round(turn_id);
            };
            if dispatch == Dispatch::Mcp {
                let name = tool_name(&tool_use);
                if let Some(server) = self.mcp.route(&session_id, name).map(str::to_string) {
                    let input = tool_input(&tool_use);
                    self.turn_event(
                        turn_id,
                        EventType::McpRequest,
                        json!({"method": "tools/call", "server_name": server, "tool": name, "input": input}),
                    );
                    let token = self.next_mcp_call;
                    self.next_mcp_call += 1;
                    self.mcp_calls.insert(token, turn_id);
                    if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut())
                    {
                        round.waiting = Some(Waiting::Mcp(token, i, server));
                    }
                    let now = self.now.mono;
                    self.mcp.call(&session_id, name, &input, token, now);
                    if self.telemetry.enabled() {
                        let id = tool_use.get("id").and_then(Value::as_str).unwrap_or("");
                        let server = self.mcp.route(&session_id, name).unwrap_or("");
                        let child = crate::telemetry::ToolChild::Mcp { server };
                        self.telemetry.tool_child_begin(turn_id, id, child);
                    }
                    return;
                }
            }
            if dispatch == Dispatch::Sandbox
                && self.start_sandbox_tool(turn_id, i, &session_id, &tool_use)
            {
                return;
            }
            let block = self.dispatch_sync_tool(turn_id, &tool_use, dispatch);
            if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) {
                round.push_result(block);
            }
        }
    }

    /// An MCP call finished: record it and go on with the round.
    pub(crate) fn on_mcp_call_done(&mut self, token: crate::mcp::CallToken, outcome: CallOutcome) {
        let Some(turn_id) = self.mcp_calls.remove(&token) else {
            return;
        };
        let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) else {
            return;
        };
        let (i, server) = match round.waiting.take() {
            Some(Waiting::Mcp(waited, i, server)) if waited == token => (i, server),
            other => {
                round.waiting = other;
                return;
            }
        };
        let id = round.tool_use_id(i);
        let ok = matches!(outcome, CallOutcome::Returned { .. });
        self.telemetry.tool_child_end(turn_id, &id, ok, None);
        self.turn_event(
            turn_id,
            EventType::McpResponse,
            outcome.response_payload(&server),
        );
        let (content, is_error) = outcome.rendered();
        let block = self.record_tool_result(
            turn_id,
            &id,
            Dispatch::Mcp,
            Some(&server),
            content,
            is_error,
        );
        if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) {
            round.push_result(block);
        }
        self.run_server_tools(turn_id);
    }

    /// An Auto sandbox tool with a running sandbox and a string `command`:
    /// logs `sandbox.request` and queues the exec on the session's handle.
    /// `false` when it completes at once (no sandbox, no command).
    fn start_sandbox_tool(
        &mut self,
        turn_id: TurnId,
        index: usize,
        session_id: &str,
        tool_use: &Value,
    ) -> bool {
        let input = tool_input(tool_use);
        let Some(command) = input
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return false;
        };
        if self.sandbox.handle(session_id).is_none() {
            return false;
        }
        let name = tool_name(tool_use);
        self.turn_event(
            turn_id,
            EventType::SandboxRequest,
            json!({"tool": name, "input": input, "command": command}),
        );
        if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) {
            round.waiting = Some(Waiting::Sandbox(index));
        }
        let requester = crate::sandbox::Requester::Turn {
            turn: turn_id,
            index,
        };
        let now = self.now.mono;
        self.sandbox.exec(session_id, &command, requester, now);
        if self.telemetry.enabled() {
            let id = tool_use.get("id").and_then(Value::as_str).unwrap_or("");
            let child = crate::telemetry::ToolChild::Sandbox;
            self.telemetry.tool_child_begin(turn_id, id, child);
        }
        true
    }

    /// A turn's sandbox exec finished: record it and go on with the round.
    pub(crate) fn on_sandbox_tool_done(
        &mut self,
        turn_id: TurnId,
        index: usize,
        session_id: &str,
        handle: &crate::sandbox::Handle,
        result: Result<crate::sandbox::ExecOutput, String>,
    ) {
        let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) else {
            return;
        };
        if !matches!(round.waiting, Some(Waiting::Sandbox(i)) if i == index) {
            return;
        }
        round.waiting = None;
        let id = round.tool_use_id(index);
        let _ = session_id;
        let exit_code = result.as_ref().ok().map(|o| o.exit_code);
        let ok = exit_code.is_some();
        self.telemetry.tool_child_end(turn_id, &id, ok, exit_code);
        let (content, is_error) = match result {
            Ok(out) => {
                let (stdout, stderr) = self.marked_streams(&out);
                self.turn_event(
                    turn_id,
                    EventType::SandboxResponse,
                    json!({"sandbox_id": handle.container, "ok": out.exit_code == 0,
                           "result": {"stdout": stdout, "stderr": stderr, "exit_code": out.exit_code}}),
                );
                let text = render_exec(&stdout, &stderr, out.exit_code);
                (json!([{"type": "text", "text": text}]), out.exit_code != 0)
            }
            Err(error) => {
                // The driver error first (spec 06 §5.5 step 3), as the turn's.
                self.turn_event(
                    turn_id,
                    EventType::SessionSandboxError,
                    json!({"image": handle.image, "sandbox_id": handle.container, "phase": "exec",
                           "detail": error, "dispatch": "remote", "unsandboxed": false}),
                );
                self.turn_event(
                    turn_id,
                    EventType::SandboxResponse,
                    json!({"sandbox_id": handle.container, "ok": false, "error": error}),
                );
                (
                    json!([{"type": "text", "text": format!("sandbox error: {error}")}]),
                    true,
                )
            }
        };
        let block =
            self.record_tool_result(turn_id, &id, Dispatch::Sandbox, None, content, is_error);
        if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) {
            round.push_result(block);
        }
        self.run_server_tools(turn_id);
    }

    /// Every server block ran: pause for the client's, or go round again.
    fn finish_round(&mut self, turn_id: TurnId) {
        let Some(t) = self.turns.get_mut(&turn_id) else {
            return;
        };
        let Some(round) = t.round.take() else {
            return;
        };
        let key_id = t.key_id.clone();
        match round.finish() {
            RoundEnd::Pause {
                message,
                expected,
                server_results,
            } => {
                self.turn_event(turn_id, EventType::ServerMessageSend, message.clone());
                let auto_trigger = self.auto_crossing(turn_id);
                let deadline = self.now.mono + self.config.turn_timeout_ms;
                let pause = Pause {
                    owner: key_id,
                    deadline: self.faults.pause_deadline(deadline),
                    expected,
                    server_results,
                    auto_trigger,
                    cancelled: false,
                };
                self.end_turn(turn_id, Outcome::Paused(message, pause))
            }
            // All-server round: extend the in-memory history only.
            RoundEnd::Continue { assistant, user } => {
                if let Some(t) = self.turns.get_mut(&turn_id) {
                    t.tail.push(assistant);
                    t.tail.push(user);
                }
                self.next_round(turn_id)
            }
        }
    }

    /// `client` | `sandbox` | `subagent` | `mcp` for a tool name (spec 06 §2).
    fn classify(&self, session_id: &str, key_id: &str, name: &str) -> Dispatch {
        let Some(s) = self.catalog.sessions.get(session_id) else {
            return Dispatch::Mcp;
        };
        let has = |map: &crate::model::ToolMap| {
            map.get(key_id)
                .iter()
                .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
        };
        if has(&s.client_tools) {
            Dispatch::Client
        } else if has(&s.sandbox_tools) {
            Dispatch::Sandbox
        } else if has(&s.subagent_tools) || name == proto::wire::session::REMOTE_SUBAGENT_STATUS {
            Dispatch::Subagent
        } else {
            Dispatch::Mcp
        }
    }

    /// Logs `tool.result` and returns the provider-facing block.
    fn record_tool_result(
        &mut self,
        turn_id: TurnId,
        id: &str,
        dispatch: Dispatch,
        server: Option<&str>,
        content: Value,
        is_error: bool,
    ) -> Value {
        let payload = json!({
            "tool_use_id": id,
            "dispatch": dispatch.as_str(),
            "server_name": server,
            "is_error": is_error,
            "content": content,
        });
        self.turn_event(turn_id, EventType::ToolResult, payload);
        if self.telemetry.enabled() {
            let output_bytes = json_len(&content);
            (self.telemetry).dispatch_end(turn_id, id, Some((is_error, output_bytes)));
        }
        let started = (self.turns.get(&turn_id))
            .and_then(|t| t.round.as_ref())
            .map(|r| r.block_started);
        if let Some(started) = started.filter(|_| dispatch != Dispatch::Client) {
            let latency_ms = self.now.mono - started;
            self.metrics.tool_finished(dispatch, latency_ms);
        }
        json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
    }

    /// A server-side block that completes at once: an MCP tool no server
    /// advertises, and the sandbox/subagent tools of a server that has no
    /// remote sandbox yet (their documented "not available" results).
    fn dispatch_sync_tool(
        &mut self,
        turn_id: TurnId,
        tool_use: &Value,
        dispatch: Dispatch,
    ) -> Value {
        let id = tool_use
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = tool_name(tool_use).to_string();
        let input = tool_input(tool_use);
        let (content, is_error) = match dispatch {
            Dispatch::Sandbox => {
                let command = input
                    .get("command")
                    .filter(|c| c.is_string())
                    .cloned()
                    .unwrap_or(Value::Null);
                // Spec 06 §5.5 step 2: no sandbox first, then no command.
                let running = self
                    .turns
                    .get(&turn_id)
                    .is_some_and(|t| self.sandbox.handle(&t.session_id).is_some());
                let error = if running {
                    format!(
                        "sandbox tool '{name}' input is missing the required string \"command\""
                    )
                } else {
                    format!(
                        "no remote sandbox is running for tool '{name}'; call session.startRemoteSandbox first"
                    )
                };
                self.turn_event(
                    turn_id,
                    EventType::SandboxRequest,
                    json!({"tool": name, "input": input, "command": command}),
                );
                self.turn_event(
                    turn_id,
                    EventType::SandboxResponse,
                    json!({"sandbox_id": null, "ok": false, "error": error}),
                );
                (
                    json!([{"type": "text", "text": format!("sandbox error: {error}")}]),
                    true,
                )
            }
            Dispatch::Subagent => {
                let (text, failed) = self.subagent_result(turn_id, &id, &name, &input);
                (json!([{"type": "text", "text": text}]), failed)
            }
            Dispatch::Mcp | Dispatch::Client => {
                let error = mcp::unrouted_error(&name);
                self.turn_event(
                    turn_id,
                    EventType::McpRequest,
                    json!({"method": "tools/call", "server_name": null, "tool": name, "input": input}),
                );
                self.turn_event(
                    turn_id,
                    EventType::McpResponse,
                    json!({"server_name": null, "ok": false, "error": error}),
                );
                (mcp::error_content(&error), true)
            }
        };
        self.record_tool_result(turn_id, &id, dispatch, None, content, is_error)
    }

    /// Remote subagent dispatch (spec 06 §6.3–§6.4): the status tool, or a
    /// launch validated in the documented order and started in the
    /// session's sandbox. Returns the result text and whether it is an
    /// error. A launch logs `session.subagent.start` and `.running`.
    fn subagent_result(
        &mut self,
        turn_id: TurnId,
        tool_use_id: &str,
        name: &str,
        input: &Value,
    ) -> (String, bool) {
        let Some((session_id, key_id)) = self
            .turns
            .get(&turn_id)
            .map(|t| (t.session_id.clone(), t.key_id.clone()))
        else {
            return (json!({"error": "turn is gone"}).to_string(), true);
        };
        if name == proto::wire::session::REMOTE_SUBAGENT_STATUS {
            let id = input.get("subagent_id").and_then(Value::as_str);
            return match self.sandbox.report(&session_id, id) {
                Some(entries) => (json!({ "subagents": entries }).to_string(), false),
                None => (json!({"error": "unknown subagent_id"}).to_string(), true),
            };
        }
        let field = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_string)
        };
        let error = |e: String| (json!({ "error": e }).to_string(), true);
        let (Some(harness), Some(model), Some(prompt)) =
            (field("harness"), field("model"), field("prompt"))
        else {
            return error(
                "launch_subagent requires string \"harness\", \"model\", and \"prompt\""
                    .to_string(),
            );
        };
        let declaration = self
            .catalog
            .sessions
            .get(session_id.as_str())
            .and_then(|s| {
                s.subagent_tools
                    .get(&key_id)
                    .into_iter()
                    .find(|d| d.get("name").and_then(Value::as_str) == Some(name))
            })
            .and_then(|d| serde_json::from_value::<proto::wire::session::SubagentToolDef>(d).ok());
        let Some((decl, entry)) = declaration.and_then(|d| {
            let e = d.subagents.iter().find(|e| e.harness == harness).cloned()?;
            Some((d, e))
        }) else {
            return error(format!("unknown harness \"{harness}\""));
        };
        let max = self.config.max_subagents_per_session;
        if self.sandbox.running_subagents(&session_id) as u64 >= max {
            return error(format!("subagent limit reached (max {max} per session)"));
        }
        let Some(running_image) = self.sandbox.handle(&session_id).map(|h| h.image.clone()) else {
            return error(format!(
                "no remote sandbox is running for tool '{name}'; call session.startRemoteSandbox first"
            ));
        };
        if running_image != decl.image {
            return error(format!(
                "remote sandbox image mismatch: subagent declared \"{}\" but the running sandbox uses \"{running_image}\"",
                decl.image
            ));
        }
        let arg_mode = entry.prompt_via_kind() == Some(proto::wire::session::PromptVia::Arg);
        let command = proto::wire::session::interpolate_command(
            &entry.command_template,
            &model,
            arg_mode.then_some(prompt.as_str()),
        );
        let id = self.new_id(proto::wire::ids::IdKind::Subagent);
        let spec = crate::sandbox::LaunchSpec {
            id: id.clone(),
            harness: harness.clone(),
            model: model.clone(),
            command,
            stdin: (!arg_mode).then(|| prompt.into_bytes()),
            timeout_ms: entry.timeout_secs.map(|s| s.saturating_mul(1000)),
            key_id: key_id.to_string(),
        };
        let common = json!({"dispatch": "remote", "subagent_id": id, "harness": harness, "model": model, "detail": null});
        self.turn_event(turn_id, EventType::SessionSubagentStart, common.clone());
        let now = self.now.mono;
        self.sandbox.launch(&session_id, spec, now);
        (self.telemetry).subagent_begin(turn_id, tool_use_id, &session_id, &id);
        self.turn_event(turn_id, EventType::SessionSubagentRunning, common);
        let result =
            json!({"subagent_id": id, "harness": harness, "model": model, "status": "started"});
        (result.to_string(), false)
    }

    /// What the provider is offered (spec 06 §1): the acting driver's
    /// client, sandbox and subagent tools, then the session's MCP tools.
    /// An MCP tool whose name one of the driver's own tools already has is
    /// left out: that name never dispatches to MCP, and providers reject
    /// duplicate names (spec 05 §10 note 2).
    pub(super) fn advertised_tools(&self, session_id: &str, key_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let Some(s) = self.catalog.sessions.get(session_id) else {
            return out;
        };
        let mut own: BTreeSet<String> = BTreeSet::new();
        for map in [&s.client_tools, &s.sandbox_tools, &s.subagent_tools] {
            for t in map.get(key_id) {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    own.insert(n.to_string());
                }
                out.push(json!({
                    "name": t.get("name").cloned().unwrap_or(Value::Null),
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "input_schema": t.get("input_schema").cloned().unwrap_or_else(|| json!({})),
                }));
            }
        }
        for t in self.mcp.tools(session_id) {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            if !own.contains(name) && name != proto::wire::session::REMOTE_SUBAGENT_STATUS {
                out.push(t.clone());
            }
        }
        if self.sandbox.tracks_subagents(session_id) {
            out.push(status_tool());
        }
        out
    }
}

/// The Auto tool's text (spec 06 §2.1): stdout, then a `[stderr]` section
/// if stderr is not blank, then `[exit_code: N]` if it is not 0; each
/// section on a new line unless the text is empty or already ends with one.
pub(crate) fn render_exec(stdout: &str, stderr: &str, exit_code: i64) -> String {
    let mut text = stdout.to_string();
    let newline = |t: &mut String| {
        if !t.is_empty() && !t.ends_with('\n') {
            t.push('\n');
        }
    };
    if !stderr.trim().is_empty() {
        newline(&mut text);
        text.push_str("[stderr]\n");
        text.push_str(stderr);
    }
    if exit_code != 0 {
        newline(&mut text);
        text.push_str(&format!("[exit_code: {exit_code}]"));
    }
    text
}

/// The synthesized `remote_subagent_status` definition (spec 06 §6.4).
fn status_tool() -> Value {
    json!({
        "name": proto::wire::session::REMOTE_SUBAGENT_STATUS,
        "description": "Check on remote subagents launched in this session. Pass a subagent_id to \
    query one, or nothing to list every tracked subagent. A finished subagent is reported once, \
    with its exit code and output, and is then no longer tracked.",
        "input_schema": {
            "type": "object",
            "properties": {"subagent_id": {"type": "string", "description": "The sba_ id returned when the subagent was launched; omit to list all."}},
            "required": [],
            "additionalProperties": false,
        },
    })
}

fn tool_name(tool_use: &Value) -> &str {
    tool_use.get("name").and_then(Value::as_str).unwrap_or("")
}

fn tool_input(tool_use: &Value) -> Value {
    tool_use.get("input").cloned().unwrap_or_else(|| json!({}))
}

/// Serialised size of a JSON value (the `bae.tool.*.bytes` attributes):
/// counted, not built.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}
