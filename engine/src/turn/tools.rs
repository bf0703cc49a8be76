//! The engine's side of a turn's subagent tools (spec 06 §6.3–§6.4): the
//! launch checks against the session's declarations and its sandbox, the
//! launch itself on the sandbox hub, and the synthesized status tool. The
//! session core logs what comes of it.

use crate::ids::SessionId;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::session_core::SubagentAnswer;
use crate::session_sandbox::SandboxCx;

impl SandboxCx<'_> {
    /// A turn's subagent tool: the status tool's report, or a launch
    /// checked in the documented order and started in the session's
    /// sandbox (the core then logs `session.subagent.start` and
    /// `.running`).
    pub(super) fn subagent_tool(
        &mut self,
        session_id: &SessionId,
        turn: (crate::ids::TurnId, &str),
        tool_use_id: &str,
        name: &str,
        input: &Value,
    ) -> SubagentAnswer {
        let (turn_id, key_id) = turn;
        let done = |text: String, is_error| SubagentAnswer::Done { text, is_error };
        if name == proto::wire::session::REMOTE_SUBAGENT_STATUS {
            let id = input.get("subagent_id").and_then(Value::as_str);
            let report = match self.sessions.sandbox_mut(session_id) {
                Some(b) => b.report(id),
                None => id.is_none().then(Vec::new),
            };
            return match report {
                Some(entries) => done(json!({ "subagents": entries }).to_string(), false),
                None => done(json!({"error": "unknown subagent_id"}).to_string(), true),
            };
        }
        let field = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_string)
        };
        let error = |e: String| done(json!({ "error": e }).to_string(), true);
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
            .get(session_id)
            .and_then(|s| {
                s.subagent_tools
                    .get(key_id)
                    .iter()
                    .find(|d| d.get("name").and_then(Value::as_str) == Some(name))
            })
            .and_then(|d| proto::wire::session::SubagentToolDef::deserialize(d).ok());
        let Some((decl, entry)) = declaration.and_then(|d| {
            let e = d.subagents.iter().find(|e| e.harness == harness).cloned()?;
            Some((d, e))
        }) else {
            return error(format!("unknown harness \"{harness}\""));
        };
        let max = self.svc.config.max_subagents_per_session;
        let b = self.sessions.sandbox(session_id);
        if b.map_or(0, |b| b.running_subagents()) as u64 >= max {
            return error(format!("subagent limit reached (max {max} per session)"));
        }
        let Some(running_image) = b.and_then(|b| b.handle()).map(|h| h.image.clone()) else {
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
        let id = self.svc.new_id(proto::wire::ids::IdKind::Subagent);
        let spec = crate::sandbox::LaunchSpec {
            id: id.clone(),
            harness: harness.clone(),
            model: model.clone(),
            command,
            stdin: (!arg_mode).then(|| prompt.into_bytes()),
            timeout_ms: entry.timeout_secs.map(|s| s.saturating_mul(1000)),
            key_id: key_id.to_string(),
        };
        let now = self.svc.now.mono;
        let hub = &mut *self.sandbox;
        if let Some(b) = self.sessions.sandbox_mut(session_id) {
            b.launch(hub, spec, now);
        }
        (self.svc.telemetry).subagent_begin(turn_id, tool_use_id, session_id, &id);
        SubagentAnswer::Launched { id, harness, model }
    }
}

/// The synthesized `remote_subagent_status` definition (spec 06 §6.4).
pub(super) fn status_tool() -> Value {
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
