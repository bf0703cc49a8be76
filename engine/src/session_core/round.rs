//! One tool round's bookkeeping (spec 06 §2), transport-free: which
//! server-side block runs next, the results so far, and how the round ends
//! (a pause for the client's blocks, or one more provider round trip).
//! [`super::tools`] runs the blocks and acts on the ending.

use serde_json::{json, Value};

use crate::MonoMs;
use proto::wire::content::Dispatch;

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
    /// The asynchronous tool this round waits on.
    pub waiting: Option<Waiting>,
    /// When the server-side block in progress started (tool latency).
    pub block_started: MonoMs,
}

/// A server-side tool in flight.
#[derive(Debug, PartialEq)]
pub enum Waiting {
    /// An MCP `tools/call`: `(tool_use index, server)`.
    Mcp(usize, String),
    /// A sandbox exec for the `tool_use` at this index.
    Sandbox(usize),
    /// The engine's check and launch of a subagent tool at this index.
    Subagent(usize),
}

/// How a round ends once every server-side block ran.
#[derive(Debug, PartialEq)]
pub enum RoundEnd {
    /// Client blocks remain: the turn pauses with this assistant message
    /// (every `tool_use` tagged with its dispatch), expecting results for
    /// these `tool_use` ids, the server's results kept for the merge.
    Pause {
        message: Value,
        expected: Vec<String>,
        server_results: Vec<Value>,
    },
    /// Every block ran on the server: the round's assistant message and
    /// the user message of its results extend the turn's history.
    Continue { assistant: Value, user: Value },
}

impl Round {
    /// A round over `content`'s `uses`, each with its dispatch.
    pub fn new(
        content: Vec<Value>,
        uses: Vec<Value>,
        dispatches: Vec<Dispatch>,
        now: MonoMs,
    ) -> Self {
        Round {
            content,
            uses,
            dispatches,
            next: 0,
            results: Vec::new(),
            waiting: None,
            block_started: now,
        }
    }

    /// The `id` of the `tool_use` at `index` (`""` when absent).
    pub fn tool_use_id(&self, index: usize) -> String {
        self.uses
            .get(index)
            .and_then(|u| u.get("id"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    /// The next server-side block in block order, `(index, dispatch,
    /// tool_use)`, marked as started at `now`; `None` once all ran.
    pub fn next_server_block(&mut self, now: MonoMs) -> Option<(usize, Dispatch, Value)> {
        let i = (self.next..self.uses.len()).find(|&i| {
            self.dispatches
                .get(i)
                .is_some_and(|d| *d != Dispatch::Client)
        })?;
        self.next = i + 1;
        self.block_started = now;
        let dispatch = *self.dispatches.get(i)?;
        Some((i, dispatch, self.uses.get(i)?.clone()))
    }

    /// A server-side block's provider-facing `tool_result`.
    pub fn push_result(&mut self, block: Value) {
        self.results.push(block);
    }

    /// How the round ends.
    pub fn finish(self) -> RoundEnd {
        let Round {
            content,
            uses,
            dispatches,
            results,
            ..
        } = self;
        if !dispatches.contains(&Dispatch::Client) {
            return RoundEnd::Continue {
                assistant: json!({"role": "assistant", "content": content}),
                user: json!({"role": "user", "content": results}),
            };
        }
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
        let expected = uses
            .iter()
            .map(|u| {
                u.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        RoundEnd::Pause {
            message: json!({"role": "assistant", "content": annotated}),
            expected,
            server_results: results,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_use(id: &str, name: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": name, "input": {}})
    }

    fn round(dispatches: &[Dispatch]) -> Round {
        let uses: Vec<Value> = (0..dispatches.len())
            .map(|i| tool_use(&format!("tu_{i}"), &format!("t{i}")))
            .collect();
        let mut content = vec![json!({"type": "text", "text": "calling"})];
        content.extend(uses.iter().cloned());
        Round::new(content, uses, dispatches.to_vec(), MonoMs(0))
    }

    /// Server blocks run in block order, client blocks are skipped, and
    /// each start is timed.
    #[test]
    fn server_blocks_run_in_block_order() {
        let mut r = round(&[Dispatch::Mcp, Dispatch::Client, Dispatch::Sandbox]);
        let (i, d, u) = r.next_server_block(MonoMs(5)).unwrap();
        assert_eq!((i, d, u["id"].as_str()), (0, Dispatch::Mcp, Some("tu_0")));
        assert_eq!(r.block_started, MonoMs(5));
        let (i, d, _) = r.next_server_block(MonoMs(9)).unwrap();
        assert_eq!((i, d), (2, Dispatch::Sandbox));
        assert!(r.next_server_block(MonoMs(10)).is_none());
        assert_eq!(r.tool_use_id(1), "tu_1");
        assert_eq!(r.tool_use_id(7), "");
    }

    /// All-server rounds continue with the assistant message and the user
    /// message of the results, in block order (spec 05 §9).
    #[test]
    fn an_all_server_round_continues() {
        let mut r = round(&[Dispatch::Mcp, Dispatch::Subagent]);
        while r.next_server_block(MonoMs(0)).is_some() {}
        r.push_result(json!({"type": "tool_result", "tool_use_id": "tu_0"}));
        r.push_result(json!({"type": "tool_result", "tool_use_id": "tu_1"}));
        let RoundEnd::Continue { assistant, user } = r.finish() else {
            panic!("paused");
        };
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(assistant["content"].as_array().unwrap().len(), 3);
        assert!(assistant["content"][1].get("dispatch").is_none());
        assert_eq!(user["content"][1]["tool_use_id"], "tu_1");
    }

    /// A round with a client block pauses: every `tool_use` is tagged with
    /// its dispatch, all ids are expected, server results kept (C-101).
    #[test]
    fn a_client_block_pauses_the_round() {
        let mut r = round(&[Dispatch::Client, Dispatch::Mcp]);
        r.next_server_block(MonoMs(0));
        r.push_result(json!({"type": "tool_result", "tool_use_id": "tu_1"}));
        let RoundEnd::Pause {
            message,
            expected,
            server_results,
        } = r.finish()
        else {
            panic!("continued");
        };
        assert_eq!(expected, ["tu_0", "tu_1"]);
        assert_eq!(server_results.len(), 1);
        assert_eq!(
            message["content"][0],
            json!({"type": "text", "text": "calling"})
        );
        assert_eq!(message["content"][1]["dispatch"], "client");
        assert_eq!(message["content"][2]["dispatch"], "mcp");
    }
}
