//! Building the recorded user turn when a request resumes or retires a
//! paused turn (spec 01 §8.4). Pure functions over content values.

use serde_json::{json, Value};

/// Text of the synthetic result for a client tool call nobody answered.
pub const ABANDONED_TEXT: &str = "Client tool call was abandoned before returning a result.";

/// The synthetic error result for an unanswered client `tool_use` id.
pub fn abandoned_result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": ABANDONED_TEXT, "is_error": true})
}

fn is_tool_result(b: &Value) -> bool {
    b.get("type").and_then(Value::as_str) == Some("tool_result")
}

fn result_id(b: &Value) -> Option<&str> {
    b.get("tool_use_id").and_then(Value::as_str)
}

/// Whether the incoming content is a *replacement* (a non-empty string, or a
/// non-empty block array with no `tool_result`); anything else continues.
pub fn is_replacement(content: &Value) -> bool {
    match content {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty() && !a.iter().any(is_tool_result),
        _ => false,
    }
}

/// Whether content carries any `tool_result` block.
pub fn has_tool_result(content: &Value) -> bool {
    matches!(content, Value::Array(a) if a.iter().any(is_tool_result))
}

/// The parked state a merge needs.
pub struct PausedTurn<'a> {
    /// `tool_use` ids of the paused assistant message, in order (E).
    pub expected: &'a [String],
    /// Server-dispatched results produced before the pause.
    pub server_results: &'a [Value],
}

impl PausedTurn<'_> {
    fn server_result(&self, id: &str) -> Option<&Value> {
        self.server_results
            .iter()
            .find(|r| result_id(r) == Some(id))
    }
}

/// The merged content and which of its results came from the server (those
/// are not re-logged as `tool.result`).
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub content: Value,
    pub server_ids: Vec<String>,
}

/// Owner + continuation: one result per expected id (server results win),
/// then the client's non-result blocks in their order.
pub fn merge_continuation(p: &PausedTurn<'_>, content: &Value) -> Result<Merged, MergeInvalid> {
    let blocks: &[Value] = match content {
        Value::Array(a) => a,
        _ => &[],
    };
    let mut client: Vec<(&str, &Value)> = Vec::new();
    for b in blocks.iter().filter(|b| is_tool_result(b)) {
        let id = result_id(b).unwrap_or("");
        if !p.expected.iter().any(|e| e == id) {
            return Err(MergeInvalid::NotInPausedTurn(id.to_string()));
        }
        if client.iter().any(|(c, _)| *c == id) {
            return Err(MergeInvalid::DuplicateResult(id.to_string()));
        }
        client.push((id, b));
    }
    let mut out = Vec::new();
    let mut server_ids = Vec::new();
    for id in p.expected {
        if let Some(r) = p.server_result(id) {
            out.push(r.clone());
            server_ids.push(id.clone());
        } else if let Some((_, b)) = client.iter().find(|(c, _)| c == id) {
            out.push((*b).clone());
        } else {
            return Err(MergeInvalid::MissingResult(id.clone()));
        }
    }
    out.extend(blocks.iter().filter(|b| !is_tool_result(b)).cloned());
    Ok(Merged {
        content: Value::Array(out),
        server_ids,
    })
}

/// Owner replacement or timeout retirement: synthetic errors for unanswered
/// client ids plus parked server results, then the new content.
/// `retiring` applies the retirement-only validity rules.
pub fn merge_abandonment(
    p: &PausedTurn<'_>,
    content: Option<&Value>,
    retiring: bool,
) -> Result<Merged, MergeInvalid> {
    let mut out = Vec::new();
    let mut server_ids = Vec::new();
    for id in p.expected {
        if let Some(r) = p.server_result(id) {
            out.push(r.clone());
            server_ids.push(id.clone());
        } else {
            out.push(abandoned_result(id));
        }
    }
    match content {
        None => {}
        Some(Value::String(s)) if !s.is_empty() => out.push(json!({"type": "text", "text": s})),
        Some(Value::String(_)) => {}
        Some(Value::Array(a)) => {
            if retiring && a.iter().any(is_tool_result) {
                return Err(MergeInvalid::ResultsInReplacement);
            }
            out.extend(a.iter().cloned());
        }
        Some(_) => {
            return Err(MergeInvalid::AbandonmentContent);
        }
    }
    Ok(Merged {
        content: Value::Array(out),
        server_ids,
    })
}

/// Why a request's message cannot become its turn's user message.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// `tool_result`s with no paused turn to answer (it may have timed
    /// out and been retired): the request fails, nothing is logged.
    NoPausedTurn,
    /// The continuation does not fit the paused turn: logged as the
    /// session's `tool_result_merge_invalid` error.
    Invalid(MergeInvalid),
}

/// Why a message does not fit the paused turn it resumes or retires.
/// `Display` is the wire text: the `-32000 tool result merge invalid: …`
/// error and the logged `session.error` detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeInvalid {
    /// A `tool_result` answers an id the paused turn did not ask for.
    NotInPausedTurn(String),
    /// Two client `tool_result`s answer the same id.
    DuplicateResult(String),
    /// A paused `tool_use` id has no result.
    MissingResult(String),
    /// A retirement's replacement carries `tool_result`s.
    ResultsInReplacement,
    /// An abandonment's content is neither a string nor a block array.
    AbandonmentContent,
    /// The continuation's role is not `user`.
    Role(String),
}

impl std::fmt::Display for MergeInvalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MergeInvalid::NotInPausedTurn(id) => write!(
                f,
                "tool_result id \"{id}\" is not in the paused assistant turn"
            ),
            MergeInvalid::DuplicateResult(id) => {
                write!(f, "client returned a duplicate tool_result for id \"{id}\"")
            }
            MergeInvalid::MissingResult(id) => {
                write!(f, "no tool_result for tool_use id \"{id}\"")
            }
            MergeInvalid::ResultsInReplacement => {
                f.write_str("timed-out replacement message must not contain tool_result blocks")
            }
            MergeInvalid::AbandonmentContent => {
                f.write_str("abandonment message content must be a string or content-block array")
            }
            MergeInvalid::Role(role) => write!(
                f,
                "paused tool continuation must have role \"user\", got \"{role}\""
            ),
        }
    }
}

/// The single user message a request records when it takes the gate in
/// `takeover` (spec 01 §8.4): its own content on a fresh turn, else the
/// continuation (the paused turn's owner answering its tool uses) or the
/// abandonment (a replacement message, or a retired pause) merged with the
/// paused turn.
pub fn user_turn(
    takeover: &crate::session_core::Takeover,
    role: &str,
    content: &Value,
) -> Result<Merged, Refused> {
    use crate::session_core::Takeover;
    match takeover {
        Takeover::Fresh if has_tool_result(content) => Err(Refused::NoPausedTurn),
        Takeover::Fresh => Ok(Merged {
            content: content.clone(),
            server_ids: Vec::new(),
        }),
        Takeover::Resume(p) | Takeover::Retire(p) => {
            let retiring = matches!(takeover, Takeover::Retire(_));
            let paused = PausedTurn {
                expected: &p.expected,
                server_results: &p.server_results,
            };
            if role != "user" {
                Err(MergeInvalid::Role(role.to_string()))
            } else if !retiring && !is_replacement(content) {
                merge_continuation(&paused, content)
            } else {
                merge_abandonment(&paused, Some(content), retiring)
            }
            .map_err(Refused::Invalid)
        }
    }
}

/// The `tool.result` payloads of a merged message's client results (the
/// server's were logged when they ran), in block order.
pub fn client_tool_results(merged: &Merged) -> Vec<Value> {
    let Value::Array(blocks) = &merged.content else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| is_tool_result(b))
        .filter_map(|b| {
            let id = result_id(b).unwrap_or("");
            if merged.server_ids.iter().any(|s| s == id) {
                return None;
            }
            Some(json!({
                "tool_use_id": id,
                "dispatch": "client",
                "server_name": null,
                "is_error": b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                "content": b.get("content").cloned().unwrap_or(Value::Null),
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused<'a>(expected: &'a [String], server: &'a [Value]) -> PausedTurn<'a> {
        PausedTurn {
            expected,
            server_results: server,
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classification_of_incoming_content() {
        assert!(is_replacement(&json!("hi")));
        assert!(!is_replacement(&json!("")));
        assert!(is_replacement(&json!([{"type":"text","text":"x"}])));
        assert!(!is_replacement(&json!([])));
        assert!(!is_replacement(
            &json!([{"type":"tool_result","tool_use_id":"a","content":"x"}])
        ));
        assert!(!is_replacement(&json!(5)));
    }

    #[test]
    fn continuation_orders_results_by_paused_turn_c104_c105() {
        let e = ids(&["mcp1", "c1", "c2"]);
        let server =
            vec![json!({"type":"tool_result","tool_use_id":"mcp1","content":[],"is_error":false})];
        let content = json!([
            {"type":"tool_result","tool_use_id":"c2","content":"two"},
            {"type":"text","text":"note"},
            {"type":"tool_result","tool_use_id":"mcp1","content":"client copy dropped"},
            {"type":"tool_result","tool_use_id":"c1","content":"one"}
        ]);
        let m = merge_continuation(&paused(&e, &server), &content).unwrap();
        let blocks = m.content.as_array().unwrap();
        assert_eq!(blocks[0], server[0]);
        assert_eq!(blocks[1]["tool_use_id"], "c1");
        assert_eq!(blocks[2]["tool_use_id"], "c2");
        assert_eq!(blocks[3]["type"], "text");
        assert_eq!(m.server_ids, vec!["mcp1".to_string()]);
    }

    #[test]
    fn continuation_rejections_c106_c107() {
        let e = ids(&["a", "b"]);
        let p = paused(&e, &[]);
        let missing = json!([{"type":"tool_result","tool_use_id":"a","content":"x"}]);
        assert_eq!(
            merge_continuation(&p, &missing).unwrap_err(),
            MergeInvalid::MissingResult("b".into())
        );
        let extra = json!([{"type":"tool_result","tool_use_id":"z","content":"x"}]);
        assert_eq!(
            merge_continuation(&p, &extra).unwrap_err(),
            MergeInvalid::NotInPausedTurn("z".into())
        );
        let dup = json!([
            {"type":"tool_result","tool_use_id":"a","content":"x"},
            {"type":"tool_result","tool_use_id":"a","content":"y"}
        ]);
        assert_eq!(
            merge_continuation(&p, &dup).unwrap_err(),
            MergeInvalid::DuplicateResult("a".into())
        );
        assert!(merge_continuation(&p, &json!([])).is_err());
    }

    #[test]
    fn abandonment_synthesises_errors_then_appends_text_c109() {
        let e = ids(&["a"]);
        let m = merge_abandonment(&paused(&e, &[]), Some(&json!("new question")), false).unwrap();
        assert_eq!(
            m.content,
            json!([
                {"type":"tool_result","tool_use_id":"a","content":ABANDONED_TEXT,"is_error":true},
                {"type":"text","text":"new question"}
            ])
        );
    }

    #[test]
    fn retirement_rejects_tool_results_and_odd_content() {
        let e = ids(&["a"]);
        let p = paused(&e, &[]);
        let with_result = json!([{"type":"tool_result","tool_use_id":"a","content":"x"}]);
        assert_eq!(
            merge_abandonment(&p, Some(&with_result), true).unwrap_err(),
            MergeInvalid::ResultsInReplacement
        );
        assert_eq!(
            merge_abandonment(&p, Some(&json!(7)), true).unwrap_err(),
            MergeInvalid::AbandonmentContent
        );
        assert!(merge_abandonment(&p, None, true).is_ok());
    }

    fn pause(expected: &[&str], server: Vec<Value>) -> crate::session_core::Pause {
        crate::session_core::Pause {
            owner: "key_a".into(),
            deadline: crate::MonoMs(10),
            expected: expected.iter().map(|s| s.to_string()).collect(),
            server_results: server,
            auto_trigger: None,
            cancelled: false,
        }
    }

    fn result(id: &str, text: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": text})
    }

    /// C-121: `tool_result`s on a fresh turn are refused without a merge.
    #[test]
    fn a_fresh_turn_takes_its_content_or_refuses_results() {
        use crate::session_core::Takeover;
        let m = user_turn(&Takeover::Fresh, "user", &json!("hi")).unwrap();
        assert_eq!((m.content, m.server_ids.len()), (json!("hi"), 0));
        let err = user_turn(&Takeover::Fresh, "user", &json!([result("tu_1", "x")]));
        assert_eq!(err, Err(Refused::NoPausedTurn));
    }

    /// The owner's results continue the paused turn; the server's result
    /// is merged in and not re-logged; a non-user role is invalid.
    #[test]
    fn the_owner_continues_and_only_client_results_are_logged() {
        use crate::session_core::Takeover;
        let server = result("tu_2", "from server");
        let p = pause(&["tu_1", "tu_2"], vec![server]);
        let take = Takeover::Resume(p.clone());
        let m = user_turn(&take, "user", &json!([result("tu_1", "from client")])).unwrap();
        assert_eq!(m.server_ids, ["tu_2"]);
        let logged = client_tool_results(&m);
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0]["tool_use_id"], "tu_1");
        assert_eq!(logged[0]["dispatch"], "client");
        assert_eq!(logged[0]["is_error"], false);
        let bad = user_turn(&Takeover::Resume(p), "assistant", &json!([]));
        let role = MergeInvalid::Role("assistant".into());
        assert_eq!(bad, Err(Refused::Invalid(role)));
    }

    /// A retired pause is abandoned: every unanswered id gets the
    /// synthetic error result, logged as a client result (C-122).
    #[test]
    fn a_retired_pause_is_abandoned() {
        use crate::session_core::Takeover;
        let take = Takeover::Retire(pause(&["tu_1"], Vec::new()));
        let m = user_turn(&take, "user", &json!("new question")).unwrap();
        let logged = client_tool_results(&m);
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0]["is_error"], true);
        assert_eq!(logged[0]["content"], ABANDONED_TEXT);
    }

    /// The wire text of each merge refusal (after `tool result merge
    /// invalid: `, and the `session.error` detail), byte for byte.
    #[test]
    fn each_merge_refusal_renders_its_wire_text() {
        let texts = [
            (
                MergeInvalid::NotInPausedTurn("z".into()),
                "tool_result id \"z\" is not in the paused assistant turn",
            ),
            (
                MergeInvalid::DuplicateResult("a".into()),
                "client returned a duplicate tool_result for id \"a\"",
            ),
            (
                MergeInvalid::MissingResult("b".into()),
                "no tool_result for tool_use id \"b\"",
            ),
            (
                MergeInvalid::ResultsInReplacement,
                "timed-out replacement message must not contain tool_result blocks",
            ),
            (
                MergeInvalid::AbandonmentContent,
                "abandonment message content must be a string or content-block array",
            ),
            (
                MergeInvalid::Role("assistant".into()),
                "paused tool continuation must have role \"user\", got \"assistant\"",
            ),
        ];
        for (e, text) in texts {
            assert_eq!(e.to_string(), text);
        }
    }
}
