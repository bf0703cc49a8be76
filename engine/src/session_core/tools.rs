//! One tool round of a turn (spec 06 §2): classify every `tool_use`, log
//! the `tool.call`s, run the server-side blocks in block order, then pause
//! for the client's blocks or go round again.
//!
//! A server-side block may be asynchronous (an MCP `tools/call`, a sandbox
//! exec): the round waits on the turn ([`Round::waiting`]) and goes on when
//! the engine reports the outcome, so nothing blocks while a tool runs.

use proto::mcp::{self, CallOutcome};
use proto::wire::content::Dispatch;
use proto::wire::EventType;
use serde_json::{json, Value};

use super::effect::{Effect, Ending, Fact, SubagentAnswer, World};
use super::round::{Round, RoundEnd, Waiting};
use super::{Pause, SessionCore};
use crate::sandbox::{ExecOutput, SandboxError};
use crate::MonoMs;

impl SessionCore {
    /// A successful round trip: finish, or start a tool round.
    pub(super) fn on_assistant(&mut self, content: Vec<Value>, world: &dyn World, now: MonoMs) {
        let Some(t) = self.turn() else {
            return;
        };
        let key_id = t.key_id.clone();
        let uses: Vec<Value> = proto::provider::tool_uses(&content)
            .into_iter()
            .cloned()
            .collect();
        if uses.is_empty() {
            let message = self.log_answer(json!({"role": "assistant", "content": content}));
            if self.maybe_auto_compact(&message, world) {
                return;
            }
            return self.end(Ending::Completed(message));
        }
        let dispatches: Vec<Dispatch> = uses
            .iter()
            .map(|u| world.classify(&key_id, tool_name(u)))
            .collect();
        for (u, d) in uses.iter().zip(&dispatches) {
            let server = match d {
                Dispatch::Mcp => world.mcp_server(tool_name(u)),
                _ => None,
            };
            let payload = json!({
                "id": u.get("id").cloned().unwrap_or(Value::Null),
                "name": u.get("name").cloned().unwrap_or(Value::Null),
                "input": u.get("input").cloned().unwrap_or_else(|| json!({})),
                "dispatch": d.as_str(),
                "server_name": server,
            });
            self.log(EventType::ToolCall, payload);
            self.fact(Fact::ToolCalled {
                tool_use_id: tool_use_id(u).to_string(),
                name: tool_name(u).to_string(),
                dispatch: *d,
                input_bytes: u.get("input").map_or(2, json_len),
            });
        }
        if let Some(t) = self.turn_mut() {
            t.phase =
                super::turn::Phase::Tools(Box::new(Round::new(content, uses, dispatches, now)));
        }
        self.run_server_tools(world, now);
    }

    /// Runs server-side blocks in order until one waits or the round is
    /// done.
    fn run_server_tools(&mut self, world: &dyn World, now: MonoMs) {
        loop {
            let Some(round) = self.turn_mut().and_then(|t| t.round_mut()) else {
                return;
            };
            let Some((i, dispatch, tool_use)) = round.next_server_block(now) else {
                return self.finish_round(world, now);
            };
            let name = tool_name(&tool_use).to_string();
            let id = tool_use_id(&tool_use).to_string();
            let input = tool_input(&tool_use);
            match dispatch {
                Dispatch::Mcp => {
                    if let Some(server) = world.mcp_server(&name) {
                        self.log(
                            EventType::McpRequest,
                            json!({"method": "tools/call", "server_name": server, "tool": name, "input": input}),
                        );
                        self.wait(Waiting::Mcp(i, server));
                        return self.emit(Effect::CallMcp {
                            tool_use_id: id,
                            tool: name,
                            input,
                        });
                    }
                }
                Dispatch::Sandbox => {
                    let command = input.get("command").and_then(Value::as_str);
                    if let (Some(command), Some(_)) = (command, world.sandbox()) {
                        let command = command.to_string();
                        self.log(
                            EventType::SandboxRequest,
                            json!({"tool": name, "input": input, "command": command}),
                        );
                        self.wait(Waiting::Sandbox(i));
                        return self.emit(Effect::Exec {
                            index: i,
                            tool_use_id: id,
                            command,
                        });
                    }
                }
                Dispatch::Subagent => {
                    self.wait(Waiting::Subagent(i));
                    return self.emit(Effect::Subagent {
                        tool_use_id: id,
                        name,
                        input,
                    });
                }
                Dispatch::Client => {}
            }
            let block = self.sync_tool_result(&id, &name, input, dispatch, world, now);
            if let Some(round) = self.turn_mut().and_then(|t| t.round_mut()) {
                round.push_result(block);
            }
        }
    }

    fn wait(&mut self, waiting: Waiting) {
        if let Some(round) = self.turn_mut().and_then(|t| t.round_mut()) {
            round.waiting = Some(waiting);
        }
    }

    /// Takes the round's wait if it is `expected`; `None` otherwise (a late
    /// or stray outcome changes nothing).
    fn stop_waiting(&mut self, expected: impl Fn(&Waiting) -> bool) -> Option<(Waiting, String)> {
        let round = self.turn_mut().and_then(|t| t.round_mut())?;
        if !round.waiting.as_ref().is_some_and(expected) {
            return None;
        }
        let waiting = round.waiting.take()?;
        let index = match &waiting {
            Waiting::Mcp(i, _) | Waiting::Sandbox(i) | Waiting::Subagent(i) => *i,
        };
        let id = round.tool_use_id(index);
        Some((waiting, id))
    }

    /// The MCP call of the block in progress finished.
    pub fn on_mcp_done(&mut self, outcome: CallOutcome, world: &dyn World, now: MonoMs) {
        self.step(|c| {
            let Some((Waiting::Mcp(_, server), id)) =
                c.stop_waiting(|w| matches!(w, Waiting::Mcp(..)))
            else {
                return;
            };
            let ok = matches!(outcome, CallOutcome::Returned { .. });
            c.fact(Fact::ToolChildEnded {
                tool_use_id: id.clone(),
                ok,
                exit_code: None,
            });
            c.log(EventType::McpResponse, outcome.response_payload(&server));
            let (content, is_error) = outcome.rendered();
            let block =
                c.record_tool_result(&id, Dispatch::Mcp, Some(&server), content, is_error, now);
            c.push_and_go_on(block, world, now);
        });
    }

    /// The sandbox exec of the block at `index` finished; `sandbox` is
    /// `(image, container)`.
    pub fn on_exec_done(
        &mut self,
        index: usize,
        sandbox: (&str, &str),
        result: Result<ExecOutput, SandboxError>,
        world: &dyn World,
        now: MonoMs,
    ) {
        self.step(|c| {
            let Some((_, id)) = c.stop_waiting(|w| *w == Waiting::Sandbox(index)) else {
                return;
            };
            let (image, container) = sandbox;
            let exit_code = result.as_ref().ok().map(|o| o.exit_code);
            c.fact(Fact::ToolChildEnded {
                tool_use_id: id.clone(),
                ok: exit_code.is_some(),
                exit_code,
            });
            let (content, is_error) = match result {
                Ok(out) => {
                    let (stdout, stderr) = marked_streams(&out, world.max_output());
                    c.log(
                        EventType::SandboxResponse,
                        json!({"sandbox_id": container, "ok": out.exit_code == 0,
                               "result": {"stdout": stdout, "stderr": stderr, "exit_code": out.exit_code}}),
                    );
                    let text = render_exec(&stdout, &stderr, out.exit_code);
                    (json!([{"type": "text", "text": text}]), out.exit_code != 0)
                }
                Err(error) => {
                    // Logged as its documented text.
                    let error = error.to_string();
                    // The driver error first (spec 06 §5.5 step 3), as the turn's.
                    c.log(
                        EventType::SessionSandboxError,
                        json!({"image": image, "sandbox_id": container, "phase": "exec",
                               "detail": error, "dispatch": "remote", "unsandboxed": false}),
                    );
                    c.log(
                        EventType::SandboxResponse,
                        json!({"sandbox_id": container, "ok": false, "error": error}),
                    );
                    (
                        json!([{"type": "text", "text": format!("sandbox error: {error}")}]),
                        true,
                    )
                }
            };
            let block = c.record_tool_result(&id, Dispatch::Sandbox, None, content, is_error, now);
            c.push_and_go_on(block, world, now);
        });
    }

    /// The engine's answer to an [`Effect::Subagent`] (spec 06 §6.3–§6.4):
    /// a launch logs `session.subagent.start` and `.running`.
    pub fn subagent_answered(&mut self, answer: SubagentAnswer, world: &dyn World, now: MonoMs) {
        self.step(|c| {
            let Some((_, id)) = c.stop_waiting(|w| matches!(w, Waiting::Subagent(_))) else {
                return;
            };
            let (text, is_error) = match answer {
                SubagentAnswer::Done { text, is_error } => (text, is_error),
                SubagentAnswer::Launched { id, harness, model } => {
                    let common = json!({"dispatch": "remote", "subagent_id": id, "harness": harness, "model": model, "detail": null});
                    c.log(EventType::SessionSubagentStart, common.clone());
                    c.log(EventType::SessionSubagentRunning, common);
                    let result = json!({"subagent_id": id, "harness": harness, "model": model, "status": "started"});
                    (result.to_string(), false)
                }
            };
            let content = json!([{"type": "text", "text": text}]);
            let block = c.record_tool_result(&id, Dispatch::Subagent, None, content, is_error, now);
            c.push_and_go_on(block, world, now);
        });
    }

    fn push_and_go_on(&mut self, block: Value, world: &dyn World, now: MonoMs) {
        if let Some(round) = self.turn_mut().and_then(|t| t.round_mut()) {
            round.push_result(block);
        }
        self.run_server_tools(world, now);
    }

    /// Logs `tool.result` and returns the provider-facing block.
    fn record_tool_result(
        &mut self,
        id: &str,
        dispatch: Dispatch,
        server: Option<&str>,
        content: Value,
        is_error: bool,
        now: MonoMs,
    ) -> Value {
        let payload = json!({
            "tool_use_id": id,
            "dispatch": dispatch.as_str(),
            "server_name": server,
            "is_error": is_error,
            "content": content,
        });
        self.log(EventType::ToolResult, payload);
        let started = (self.turn())
            .and_then(|t| t.round())
            .map(|r| r.block_started);
        self.fact(Fact::ToolDone {
            tool_use_id: id.to_string(),
            dispatch,
            is_error,
            output_bytes: json_len(&content),
            latency_ms: started
                .filter(|_| dispatch != Dispatch::Client)
                .map(|s| now - s),
        });
        json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
    }

    /// A server-side block that completes at once: an MCP tool no server
    /// advertises, and a sandbox tool without a running sandbox or a
    /// `command` (their documented "not available" results).
    fn sync_tool_result(
        &mut self,
        id: &str,
        name: &str,
        input: Value,
        dispatch: Dispatch,
        world: &dyn World,
        now: MonoMs,
    ) -> Value {
        let (content, is_error) = match dispatch {
            Dispatch::Sandbox => {
                let command = input
                    .get("command")
                    .filter(|c| c.is_string())
                    .cloned()
                    .unwrap_or(Value::Null);
                // Spec 06 §5.5 step 2: no sandbox first, then no command.
                let error = if world.sandbox().is_some() {
                    format!(
                        "sandbox tool '{name}' input is missing the required string \"command\""
                    )
                } else {
                    format!(
                        "no remote sandbox is running for tool '{name}'; call session.startRemoteSandbox first"
                    )
                };
                self.log(
                    EventType::SandboxRequest,
                    json!({"tool": name, "input": input, "command": command}),
                );
                self.log(
                    EventType::SandboxResponse,
                    json!({"sandbox_id": null, "ok": false, "error": error}),
                );
                (
                    json!([{"type": "text", "text": format!("sandbox error: {error}")}]),
                    true,
                )
            }
            Dispatch::Mcp | Dispatch::Client | Dispatch::Subagent => {
                let error = mcp::unrouted_error(name);
                self.log(
                    EventType::McpRequest,
                    json!({"method": "tools/call", "server_name": null, "tool": name, "input": input}),
                );
                self.log(
                    EventType::McpResponse,
                    json!({"server_name": null, "ok": false, "error": error}),
                );
                (mcp::error_content(&error), true)
            }
        };
        self.record_tool_result(id, dispatch, None, content, is_error, now)
    }

    /// Every server block ran: pause for the client's, or go round again.
    fn finish_round(&mut self, world: &dyn World, now: MonoMs) {
        let Some(t) = self.turn_mut() else {
            return;
        };
        let Some(round) = t.take_round() else {
            return;
        };
        let owner = t.key_id.clone();
        match round.finish() {
            RoundEnd::Pause {
                message,
                expected,
                server_results,
            } => {
                let message = self.log_answer(message);
                let auto_trigger = self.auto_crossing(world);
                let deadline = now + world.turn_timeout_ms();
                let pause = Pause {
                    owner,
                    deadline: self.faults().pause_deadline(deadline),
                    expected,
                    server_results,
                    auto_trigger,
                    cancelled: false,
                };
                self.end(Ending::Paused(message, pause))
            }
            // All-server round: extend the in-memory history only.
            RoundEnd::Continue { assistant, user } => {
                if let Some(t) = self.turn_mut() {
                    t.tail.push(assistant.into());
                    t.tail.push(user.into());
                }
                self.next_round(world)
            }
        }
    }
}

/// stdout/stderr with a marker where the driver cut them at `max` bytes.
pub fn marked_streams(out: &ExecOutput, max: usize) -> (String, String) {
    let mark = |s: &str, cut: bool| {
        if cut {
            format!("{s}\n[output truncated at {max} bytes]")
        } else {
            s.to_string()
        }
    };
    (
        mark(&out.stdout, out.stdout_truncated),
        mark(&out.stderr, out.stderr_truncated),
    )
}

/// The Auto tool's text (spec 06 §2.1): stdout, then a `[stderr]` section
/// if stderr is not blank, then `[exit_code: N]` if it is not 0; each
/// section on a new line unless the text is empty or already ends with one.
pub fn render_exec(stdout: &str, stderr: &str, exit_code: i64) -> String {
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

pub(super) fn tool_name(tool_use: &Value) -> &str {
    tool_use.get("name").and_then(Value::as_str).unwrap_or("")
}

fn tool_use_id(tool_use: &Value) -> &str {
    tool_use.get("id").and_then(Value::as_str).unwrap_or("")
}

fn tool_input(tool_use: &Value) -> Value {
    tool_use.get("input").cloned().unwrap_or_else(|| json!({}))
}

/// Serialised size of a JSON value (the `bae.tool.*.bytes` attributes):
/// counted, not built.
pub(super) fn json_len(v: &Value) -> usize {
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
