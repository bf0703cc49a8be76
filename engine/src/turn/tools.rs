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

use super::{Outcome, Pause, TurnId};
use crate::Engine;

/// Dispatch classes (spec 06 §2), in priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    Client,
    Sandbox,
    Subagent,
    Mcp,
}

impl Dispatch {
    pub fn as_str(self) -> &'static str {
        match self {
            Dispatch::Client => "client",
            Dispatch::Sandbox => "sandbox",
            Dispatch::Subagent => "subagent",
            Dispatch::Mcp => "mcp",
        }
    }
}

/// A tool round in progress.
pub struct Round {
    /// The assistant content of this round trip.
    content: Vec<Value>,
    uses: Vec<Value>,
    dispatches: Vec<Dispatch>,
    /// Next block to look at.
    next: usize,
    /// Server `tool_result` blocks so far, in block order.
    results: Vec<Value>,
    /// The MCP call this round waits on: `(token, tool_use index, server)`.
    waiting: Option<(crate::mcp::CallToken, usize, String)>,
}

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
            self.turn_event(turn_id, "server.message.send", message.clone());
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
            self.turn_event(turn_id, "tool.call", payload);
        }
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.round = Some(Box::new(Round {
                content,
                uses,
                dispatches,
                next: 0,
                results: Vec::new(),
                waiting: None,
            }));
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
            let Some(i) = (round.next..round.uses.len())
                .find(|&i| round.dispatches.get(i) != Some(&Dispatch::Client))
            else {
                return self.finish_round(turn_id);
            };
            round.next = i + 1;
            let dispatch = round.dispatches.get(i).copied().unwrap_or(Dispatch::Mcp);
            let Some(tool_use) = round.uses.get(i).cloned() else {
                return;
            };
            if dispatch == Dispatch::Mcp {
                let name = tool_name(&tool_use);
                if let Some(server) = self.mcp.route(&session_id, name).map(str::to_string) {
                    let input = tool_input(&tool_use);
                    self.turn_event(
                        turn_id,
                        "mcp.request",
                        json!({"method": "tools/call", "server_name": server, "tool": name, "input": input}),
                    );
                    let token = self.next_mcp_call;
                    self.next_mcp_call += 1;
                    self.mcp_calls.insert(token, turn_id);
                    if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut())
                    {
                        round.waiting = Some((token, i, server));
                    }
                    let now = self.now.mono_ms;
                    self.mcp.call(&session_id, name, &input, token, now);
                    return;
                }
            }
            let block = self.dispatch_sync_tool(turn_id, &tool_use, dispatch);
            if let Some(round) = self.turns.get_mut(&turn_id).and_then(|t| t.round.as_mut()) {
                round.results.push(block);
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
        let Some((waited, i, server)) = round.waiting.take() else {
            return;
        };
        if waited != token {
            round.waiting = Some((waited, i, server));
            return;
        }
        let id = round
            .uses
            .get(i)
            .and_then(|u| u.get("id"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.turn_event(turn_id, "mcp.response", outcome.response_payload(&server));
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
            round.results.push(block);
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
        let Round {
            content,
            uses,
            dispatches,
            results,
            ..
        } = *round;
        if dispatches.contains(&Dispatch::Client) {
            let mut annotated = content;
            let mut tags = dispatches.iter();
            for block in annotated.iter_mut() {
                if block.get("type").and_then(Value::as_str) == Some("tool_use")
                    && block.get("name").is_some_and(Value::is_string)
                {
                    if let Some(d) = tags.next() {
                        block["dispatch"] = json!(d.as_str());
                    }
                }
            }
            let message = json!({"role": "assistant", "content": annotated});
            self.turn_event(turn_id, "server.message.send", message.clone());
            let expected = uses
                .iter()
                .map(|u| {
                    u.get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                })
                .collect();
            let auto_trigger = self.auto_crossing(turn_id);
            let pause = Pause {
                owner: key_id,
                deadline: self.now.mono_ms + self.config.turn_timeout_ms,
                expected,
                server_results: results,
                auto_trigger,
            };
            #[cfg(feature = "planted-bugs")]
            let pause = self.planted_early_deadline(pause);
            return self.end_turn(turn_id, Outcome::Paused(message, pause));
        }
        // All-server round: extend the in-memory history only.
        if let Some(t) = self.turns.get_mut(&turn_id) {
            t.tail
                .push(json!({"role": "assistant", "content": content}));
            t.tail.push(json!({"role": "user", "content": results}));
        }
        self.next_round(turn_id);
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
        self.turn_event(turn_id, "tool.result", payload);
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
                let error = format!(
                    "no remote sandbox is running for tool '{name}'; call session.startRemoteSandbox first"
                );
                self.turn_event(
                    turn_id,
                    "sandbox.request",
                    json!({"tool": name, "input": input, "command": command}),
                );
                self.turn_event(
                    turn_id,
                    "sandbox.response",
                    json!({"sandbox_id": null, "ok": false, "error": error}),
                );
                (
                    json!([{"type": "text", "text": format!("sandbox error: {error}")}]),
                    true,
                )
            }
            Dispatch::Subagent => {
                let (text, failed) = self.subagent_result(turn_id, &name, &input);
                (json!([{"type": "text", "text": text}]), failed)
            }
            Dispatch::Mcp | Dispatch::Client => {
                let error = mcp::unrouted_error(&name);
                self.turn_event(
                    turn_id,
                    "mcp.request",
                    json!({"method": "tools/call", "server_name": null, "tool": name, "input": input}),
                );
                self.turn_event(
                    turn_id,
                    "mcp.response",
                    json!({"server_name": null, "ok": false, "error": error}),
                );
                (mcp::error_content(&error), true)
            }
        };
        self.record_tool_result(turn_id, &id, dispatch, None, content, is_error)
    }

    /// Remote subagent dispatch (spec 06 §6.3–§6.4) in a server with no
    /// remote sandbox: launches fail validation in the documented order and
    /// the status tool tracks nothing. Returns the result text and whether
    /// it is an error.
    fn subagent_result(&self, turn_id: TurnId, name: &str, input: &Value) -> (String, bool) {
        if name == proto::wire::session::REMOTE_SUBAGENT_STATUS {
            return match input.get("subagent_id") {
                Some(Value::String(_)) => {
                    (json!({"error": "unknown subagent_id"}).to_string(), true)
                }
                _ => (json!({"subagents": []}).to_string(), false),
            };
        }
        let field = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.trim().is_empty())
        };
        let error = |e: String| (json!({ "error": e }).to_string(), true);
        let (Some(harness), Some(_), Some(_)) = (field("harness"), field("model"), field("prompt"))
        else {
            return error(
                "launch_subagent requires string \"harness\", \"model\", and \"prompt\""
                    .to_string(),
            );
        };
        let Some(t) = self.turns.get(&turn_id) else {
            return error("turn is gone".to_string());
        };
        let declared = self
            .catalog
            .sessions
            .get(&t.session_id)
            .and_then(|s| {
                s.subagent_tools
                    .get(&t.key_id)
                    .iter()
                    .find(|d| d.get("name").and_then(Value::as_str) == Some(name))
                    .and_then(|d| d.get("subagents").and_then(Value::as_array))
                    .map(|entries| {
                        entries
                            .iter()
                            .any(|e| e.get("harness").and_then(Value::as_str) == Some(harness))
                    })
            })
            .unwrap_or(false);
        if !declared {
            return error(format!("unknown harness \"{harness}\""));
        }
        if self.config.max_subagents_per_session == 0 {
            return error("subagent limit reached (max 0 per session)".to_string());
        }
        error(format!(
            "no remote sandbox is running for tool '{name}'; call session.startRemoteSandbox first"
        ))
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
        out
    }
}

fn tool_name(tool_use: &Value) -> &str {
    tool_use.get("name").and_then(Value::as_str).unwrap_or("")
}

fn tool_input(tool_use: &Value) -> Value {
    tool_use.get("input").cloned().unwrap_or_else(|| json!({}))
}
