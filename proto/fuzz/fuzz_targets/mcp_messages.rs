//! What an MCP server sends back: a stdio line or a streamable-HTTP JSON
//! body matched against a request id, the same bytes as an SSE body, and
//! for a matched answer the `tools/list` result and the `tools/call`
//! outcome as the engine records and renders them. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::mcp::{match_answer, match_answer_in_sse, tools_from_list, Answer, CallOutcome};

fn use_answer(a: Answer) {
    if let Answer::Result(r) = &a {
        for t in tools_from_list(r) {
            let _ = (t.name.len(), t.advertised.to_string());
        }
    }
    let outcome = CallOutcome::from_answer(a);
    let _ = outcome.rendered();
    let _ = outcome.response_payload("srv");
}

fuzz_target!(|data: &[u8]| {
    let Some((&id, body)) = data.split_first() else {
        return;
    };
    let id = u64::from(id % 8);
    if let Some(a) = match_answer(body, id) {
        use_answer(a);
    }
    if let Some(a) = match_answer_in_sse(body, id) {
        use_answer(a);
    }
});
