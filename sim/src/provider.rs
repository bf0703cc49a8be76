//! The simulated LLM provider: answers `Output::CallProvider` after a random
//! virtual latency with Anthropic-shaped JSON — text, `tool_use` for the
//! client tools the request advertises and for undeclared (MCP) tools —
//! or with HTTP 500s, malformed bodies, transport errors and timeouts.

use engine::{ProviderCall, ProviderReply};
use serde_json::{json, Value};

use crate::rng::Rng;
use crate::swarm::Swarm;

/// An undeclared tool name no simulated MCP server advertises: the engine
/// dispatches it to MCP and answers "no MCP server is configured".
pub const MCP_TOOL: &str = "mcp_lookup";

pub struct Provider {
    rng: Rng,
    tag: u64,
    next_id: u64,
}

/// The JSON value after the last occurrence of `key` (e.g. `"tools":`).
fn find_member(body: &[u8], key: &[u8]) -> Option<Value> {
    let at = body.windows(key.len()).rposition(|w| w == key)?;
    serde_json::Deserializer::from_slice(&body[at + key.len()..])
        .into_iter::<Value>()
        .next()?
        .ok()
}

pub fn describe(r: &ProviderReply) -> String {
    match r {
        ProviderReply::Http { status, body, .. } => {
            let text = String::from_utf8_lossy(body);
            let kinds: Vec<&str> = ["\"tool_use\"", "\"text\""]
                .into_iter()
                .filter(|k| text.contains(k))
                .collect();
            format!("http {status} {} bytes {kinds:?}", body.len())
        }
        ProviderReply::Transport(t) => format!("transport error {t:?}"),
        ProviderReply::Credential(t) => format!("credential error {t:?}"),
        ProviderReply::Streamed => "streamed body ended".to_string(),
    }
}

impl Provider {
    pub fn new(rng: Rng, seed: u64) -> Self {
        Provider {
            rng,
            tag: seed,
            next_id: 0,
        }
    }

    /// `(latency_ms, reply)` for one call.
    pub fn answer(&mut self, call: &ProviderCall, sw: &Swarm) -> (u64, ProviderReply) {
        let latency = self
            .rng
            .range(sw.provider_latency_ms.0, sw.provider_latency_ms.1);
        if latency > call.timeout_ms {
            return (
                call.timeout_ms,
                ProviderReply::Transport("request timed out".into()),
            );
        }
        let r = self.rng.unit();
        let reply = if r < sw.provider_http500 {
            ProviderReply::Http {
                status: 500,
                body: br#"{"type":"error","error":{"type":"api_error","message":"simulated overload"}}"#
                    .to_vec(),
                advice: Default::default(),
            }
        } else if r < sw.provider_http500 + sw.provider_malformed {
            ProviderReply::Http {
                status: 200,
                body: br#"{"id":"msg_cut","type":"message","content":[{"type":"te"#.to_vec(),
                advice: Default::default(),
            }
        } else if r < sw.provider_http500 + sw.provider_malformed + sw.provider_transport {
            ProviderReply::Transport("connection reset by peer".into())
        } else {
            self.message(call, sw)
        };
        (latency, reply)
    }

    fn message(&mut self, call: &ProviderCall, sw: &Swarm) -> ProviderReply {
        // Only the advertised tools matter; they follow the (possibly long)
        // message list, so parse just that member.
        let tools: Vec<String> = find_member(&call.body, b"\"tools\":")
            .and_then(|v| {
                v.as_array().map(|t| {
                    t.iter()
                        .filter_map(|t| t["name"].as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default();
        let mut content = Vec::new();
        // Like a real model: tool calls only when tools are advertised
        // (compaction calls advertise none), though possibly naming a tool
        // that is not client-declared (dispatched to MCP).
        let use_tools = !tools.is_empty() && self.rng.chance(sw.tool_use);
        if use_tools {
            if self.rng.chance(0.5) {
                content.push(json!({"type": "text", "text": "let me check"}));
            }
            for _ in 0..self.rng.range(1, 3) {
                self.next_id += 1;
                let name = if self.rng.chance(sw.mcp_tool) {
                    // Undeclared names: some no server has, some the
                    // simulated MCP servers advertise (drawn only when
                    // there is a choice, so MCP-less seeds are unchanged).
                    match sw.mcp.undeclared.as_slice() {
                        [] => MCP_TOOL.to_string(),
                        [one] => one.clone(),
                        many => self.rng.pick(many).clone(),
                    }
                } else {
                    self.rng.pick(&tools).clone()
                };
                content.push(json!({
                    "type": "tool_use",
                    "id": format!("toolu_{:x}_{}", self.tag, self.next_id),
                    "name": name,
                    "input": crate::sandbox::tool_input(&name, self.next_id)
                        .unwrap_or_else(|| json!({"n": self.next_id})),
                }));
            }
        } else {
            self.next_id += 1;
            content.push(
                json!({"type": "text", "text": format!("simulated answer {}", self.next_id)}),
            );
        }
        let mut msg = json!({
            "id": format!("msg_{:x}_{}", self.tag, self.next_id),
            "type": "message",
            "role": "assistant",
            "model": "sim-model",
            "content": content,
            "stop_reason": if use_tools { "tool_use" } else { "end_turn" },
        });
        if !self.rng.chance(0.05) {
            let input = if self.rng.chance(sw.big_usage) {
                self.rng.range(1_000, 30_000)
            } else {
                self.rng.range(5, 500)
            };
            msg["usage"] = json!({"input_tokens": input, "output_tokens": self.rng.range(1, 200)});
        }
        ProviderReply::Http {
            status: 200,
            body: msg.to_string().into_bytes(),
            advice: Default::default(),
        }
    }
}
