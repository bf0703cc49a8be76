//! Feeds a session export document (docs/extensions.md, "Forks, exports
//! and imports") to what reads one: every line to the header and line
//! parsers of `proto::wire::export`, and the whole document to the import
//! path (`engine::transfer::Transfers::import`, which checks all of it
//! before anything is written). Nothing may panic, and:
//! - an accepted header, event line or end line renders back (with the
//!   exporter's own writers) to a line that reads as the same;
//! - an import is refused as `invalid_document` or
//!   `unsupported_format_version`, or plans a session whose log starts
//!   with `session.open`, has unique `evt_` ids and object payloads; or,
//!   keeping the id, first asks the store whether that id is free;
//! - the same document with CRLF line ends reads the same.
//!
//! Input: a flags byte (bit 0: `keep_id`), then the document.
#![no_main]

use std::collections::HashSet;

use engine::transfer::{ImportTarget, Out, Transfers};
use engine::ConnId;
use libfuzzer_sys::fuzz_target;
use proto::wire::export::{end_line, parse_header, parse_line, push_event_line, Line};
use proto::wire::problem::ProblemType;
use proto::wire::EventType;

fn lines_round_trip(text: &str) {
    for line in text.split('\n') {
        if let Ok(h) = parse_header(line) {
            assert_eq!(
                parse_header(&h.to_line()),
                Ok(h),
                "a header does not round-trip"
            );
        }
        match parse_line(line) {
            Ok(Line::Event(e)) => {
                let mut out = String::new();
                let session_id = e.session_id.clone().unwrap_or_default();
                let (key, payload) = (e.client_key_id.as_deref(), e.payload.get());
                push_event_line(
                    &mut out,
                    &e.id,
                    &session_id,
                    key,
                    &e.event_type,
                    payload,
                    &e.created_at,
                );
                let Ok(Line::Event(back)) = parse_line(&out) else {
                    panic!("a rendered event line does not read back: {out}");
                };
                assert_eq!(back.id, e.id);
                assert_eq!(back.session_id.unwrap_or_default(), session_id);
                assert_eq!(back.client_key_id, e.client_key_id);
                assert_eq!(back.event_type, e.event_type);
                assert_eq!(back.payload.get(), payload);
                assert_eq!(back.created_at, e.created_at);
            }
            Ok(Line::End { events }) => {
                assert!(
                    matches!(parse_line(&end_line(events)), Ok(Line::End { events: n }) if n == events)
                );
            }
            Err(_) => {}
        }
    }
}

fn import(body: &[u8], target: &ImportTarget) -> String {
    let mut t = Transfers::new(1 << 20);
    let outs = t.import(ConnId(1), body, target);
    assert_eq!(outs.len(), 1, "an import answers with one output");
    match &outs[0] {
        Out::Problem(kind, _) => assert!(
            matches!(
                kind,
                ProblemType::InvalidDocument | ProblemType::UnsupportedFormatVersion
            ),
            "refused as {kind:?}"
        ),
        Out::Create(plan) => {
            assert!(!target.keep_id, "a kept id is created before its read");
            assert_eq!(
                plan.events.first().map(|e| e.event_type),
                Some(EventType::SessionOpen)
            );
            let mut ids = HashSet::new();
            for e in &plan.events {
                assert!(ids.insert(e.source_id.as_str()), "an event id twice");
                let payload: serde_json::Value =
                    serde_json::from_str(&e.payload).expect("a stored payload is JSON");
                assert!(payload.is_object(), "a stored payload is not an object");
            }
        }
        Out::Read(_) => assert!(target.keep_id, "a read for an import that keeps no id"),
        other => panic!("an import answered {other:?}"),
    }
    format!("{outs:?}")
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, doc)) = data.split_first() else {
        return;
    };
    let target = ImportTarget {
        creator: "key_00000000000000000000000000000009".into(),
        profile_id: "pro_9".into(),
        keep_id: flags & 1 == 1,
    };
    if let Ok(text) = std::str::from_utf8(doc) {
        lines_round_trip(text);
    }
    let once = import(doc, &target);
    assert_eq!(once, import(doc, &target), "an import is not deterministic");
    if !doc.contains(&b'\r') {
        let crlf: Vec<u8> = doc
            .iter()
            .flat_map(|&b| {
                if b == b'\n' {
                    vec![b'\r', b'\n']
                } else {
                    vec![b]
                }
            })
            .collect();
        assert_eq!(
            once,
            import(&crlf, &target),
            "CRLF line ends read differently"
        );
    }
});
