//! The small parsers of what clients send besides `/rpc` bodies: the
//! `POST /sessions` and `/join` bodies (with their tool declaration
//! checks), an events page's `cursor` and `limit`, the admin listing's
//! `state` filter, a `traceparent` header and a `created_at` stamp. The
//! first byte picks one. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::{admin, page, session, time};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 6 {
        0 => {
            if let Ok(open) = session::parse_open(rest) {
                let _ = open.check_reserved_names();
                let _ = open.check_allowed(&["get_time".to_string()]);
                let _ = open.validate_subagent_tools();
                let _ = open.event_payload();
            }
        }
        1 => {
            let _ = session::parse_join(rest);
        }
        2 => {
            let (cursor, limit) = text.split_once('&').unwrap_or((&text, ""));
            let _ = page::parse_page_query(Some(cursor), Some(limit));
        }
        3 => {
            let _ = admin::parse_state_filter(Some(&text));
        }
        4 => {
            let _ = proto::trace_context::TraceParent::parse(rest);
        }
        _ => {
            let _ = time::parse_created_at(&text);
        }
    }
});
