//! A provider's reply body, Anthropic or OpenAI (the first byte picks):
//! parsed as the turn loop parses it, then its content's tool uses and its
//! usage read as the engine reads them. A malformed body is an error
//! answer, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::provider::{parse_response, tool_uses, Kind};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let kind = if which & 1 == 0 {
        Kind::Anthropic
    } else {
        Kind::Openai
    };
    if let Ok(r) = parse_response(kind, body) {
        let _ = tool_uses(&r.content);
        if let Some(u) = &r.usage {
            let _ = (u.to_json(), u.total());
        }
    }
    let _ = proto::provider::http_error_text(u16::from(which) * 3);
});
