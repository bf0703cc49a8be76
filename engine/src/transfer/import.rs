//! Reading an export document for an import: every line checked before
//! anything is written (all or nothing). A document is refused when it is
//! cut short (no end line, or fewer events than it announces), of an
//! unknown format version, or when an event breaks the log's rules: an
//! unknown event type, a malformed id, attribution, timestamp or payload,
//! an id used twice, a log that does not start with `session.open`, an
//! unanswered `tool_use`, a `tool_result` that answers nothing, a pause
//! with no owner ([`MessageRules`]).

use proto::wire::export::{self, HeaderError, Line};
use proto::wire::ids::{is_id, IdKind};
use proto::wire::problem::ProblemType;
use proto::wire::{json, CompactionConfig, EventType};
use serde_json::Value;

use super::copy::{Answer, CopiedEvent, Declarations, NewSession};
use super::rules::{MessageFacts, MessageRules, Walker};

/// Who gets the imported session.
#[derive(Debug, Clone)]
pub struct ImportTarget {
    /// The client key that will hold its session key.
    pub creator: String,
    pub profile_id: String,
    /// Keep the source session's id (refused when it is taken).
    pub keep_id: bool,
}

/// Why a document was refused: `422 invalid_document` or `422
/// unsupported_format_version`, with a detail naming the line.
pub type Refusal = (ProblemType, String);

fn invalid(detail: impl std::fmt::Display) -> Refusal {
    (ProblemType::InvalidDocument, detail.to_string())
}

/// The session a document describes, for `target`.
pub fn read_document(body: &[u8], target: &ImportTarget) -> Result<NewSession, Refusal> {
    let text = std::str::from_utf8(body).map_err(|_| invalid("the document is not UTF-8"))?;
    // Blank lines are skipped (JSON Lines readers do); CRLF is accepted.
    let mut lines = (text.split('\n').enumerate())
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err(invalid("the document is empty"));
    };
    let header = export::parse_header(first).map_err(|e| match e {
        HeaderError::Version(v) => (
            ProblemType::UnsupportedFormatVersion,
            format!(
                "format_version {v} is not supported (this server reads {})",
                export::FORMAT_VERSION
            ),
        ),
        HeaderError::Invalid(detail) => invalid(format!("line 1: {detail}")),
    })?;
    let source = header.session;
    if target.keep_id && !is_id(IdKind::Session, &source.id) {
        let detail = format!(
            "line 1: session id {:?} is not a ses_ id to keep",
            source.id
        );
        return Err(invalid(detail));
    }
    let mut events: Vec<CopiedEvent> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut rules = MessageRules::default();
    let mut walker = Walker::default();
    let mut closed_at = None;
    let mut end = None;
    for (n, line) in lines {
        if end.is_some() {
            return Err(invalid(format!("line {n}: a line after the end line")));
        }
        let event = match export::parse_line(line).map_err(|e| invalid(format!("line {n}: {e}")))? {
            Line::End { events } => {
                end = Some(events);
                continue;
            }
            Line::Event(e) => e,
        };
        let Some(event_type) = EventType::parse(&event.event_type) else {
            return Err(invalid(format!(
                "line {n}: unknown event type {:?}",
                event.event_type
            )));
        };
        if events.is_empty() && event_type != EventType::SessionOpen {
            return Err(invalid(format!(
                "line {n}: the log must start with session.open"
            )));
        }
        if !is_id(IdKind::Event, &event.id) || !seen.insert(event.id.clone()) {
            return Err(invalid(format!(
                "line {n}: event id {:?} is not a new evt_ id",
                event.id
            )));
        }
        if event.session_id.as_ref().is_some_and(|s| *s != source.id) {
            let detail =
                format!("line {n}: the event belongs to another session than the header's");
            return Err(invalid(detail));
        }
        if event
            .client_key_id
            .as_ref()
            .is_some_and(|k| !is_id(IdKind::Key, k))
        {
            return Err(invalid(format!("line {n}: client_key_id is not a key_ id")));
        }
        if !proto::wire::time::is_created_at(&event.created_at) {
            return Err(invalid(format!(
                "line {n}: created_at is not YYYY-MM-DDTHH:MM:SS.sssZ"
            )));
        }
        let raw = event.payload.get();
        if !raw.trim_start().starts_with('{') {
            return Err(invalid(format!(
                "line {n}: the payload is not a JSON object"
            )));
        }
        if matches!(
            event_type,
            EventType::ClientMessageSend | EventType::ServerMessageSend
        ) {
            let payload: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
            let facts = MessageFacts::of(&payload);
            rules
                .message(n, &facts, event.client_key_id.as_deref())
                .map_err(invalid)?;
        }
        let ended = walker.ending.is_some();
        walker.step(event_type, raw);
        if !ended && walker.ending.is_some() {
            closed_at = Some(event.created_at.clone());
        }
        // Stored compact, as the engine writes payloads (the exporting
        // server's own text is compact already, and kept byte for byte).
        let payload = json::compact(raw).unwrap_or_else(|| {
            json::text(&serde_json::from_str::<Value>(raw).unwrap_or(Value::Null))
        });
        events.push(CopiedEvent {
            source_id: event.id,
            event_type,
            client_key_id: event.client_key_id,
            payload,
            created_at: event.created_at,
        });
    }
    match end {
        None => return Err(invalid("the document is cut short: it has no end line")),
        Some(n) if n != events.len() as u64 => {
            let detail = format!(
                "the document is cut short: its end line announces {n} events, it holds {}",
                events.len()
            );
            return Err(invalid(detail));
        }
        Some(_) => {}
    }
    if events.is_empty() {
        return Err(invalid("the document holds no event"));
    }
    rules.finish().map_err(invalid)?;
    let compaction = match &source.compaction {
        Value::Null => CompactionConfig::default(),
        v => CompactionConfig::from_value(v).map_err(|e| invalid(format!("line 1: {e}")))?,
    };
    let declarations = Declarations::of_creator(
        &source.client_tools,
        &source.sandbox_tools,
        &source.subagent_tools,
        &source.client_key_id,
    );
    (declarations.typed()).map_err(|e| invalid(format!("line 1: the creator's {e}")))?;
    Ok(NewSession {
        keep_id: target.keep_id.then(|| source.id.clone()),
        state: walker.ending.unwrap_or(crate::store::SessionState::Open),
        closed_at,
        creator: target.creator.clone(),
        profile_id: target.profile_id.clone(),
        client_version: source.client_version.clone(),
        declarations,
        compaction,
        events,
        answer: Answer::Import {
            source_session_id: source.id,
        },
    })
}
