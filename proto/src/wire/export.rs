//! The session export document (extension; docs/extensions.md, "Session
//! export format"): JSON Lines, one object per line, each naming its
//! `kind`:
//!
//! 1. one `header` line: the format name and version, the exporting
//!    server, the source session's row and the profile it was bound to;
//! 2. one `event` line per event, in log order: the EventView members,
//!    each payload exactly as stored;
//! 3. one `end` line with the number of event lines, so that a document
//!    cut short anywhere is recognised.
//!
//! Rendering is text concatenation (a payload is never re-serialised);
//! reading borrows each payload's text from the document
//! (`serde_json::value::RawValue`).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::json::{push_opt_str, push_str};

/// The `format` member of every header.
pub const FORMAT: &str = "bae.session.export";

/// The `format_version` this server writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// The exporting server (`header.server`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerMeta {
    pub name: String,
    pub version: String,
}

/// Where a session came from (`header.session.origin`; also the admin
/// lineage answer's `origin`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// Forked from `parent_session_id` at `parent_event_id` (ids of the
    /// server that holds both).
    Fork {
        parent_session_id: String,
        parent_event_id: String,
        created_at: String,
    },
    /// Imported from a document whose source session had this id.
    Import {
        source_session_id: String,
        created_at: String,
    },
}

/// The source session (`header.session`): its row, declarations
/// included. Only `id` and `client_key_id` are required to read a
/// document; the rest defaults as a new session would have it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub id: String,
    /// The creating client key (whose declarations an import carries).
    pub client_key_id: String,
    #[serde(default)]
    pub profile_id: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub client_version: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub closed_at: Option<String>,
    /// The normalised compaction config, or `null` (client mode).
    #[serde(default)]
    pub compaction: Value,
    /// `{"<client key id>": [tool, …]}` (the `sessions` columns).
    #[serde(default = "empty_object")]
    pub client_tools: Value,
    #[serde(default = "empty_object")]
    pub sandbox_tools: Value,
    #[serde(default = "empty_object")]
    pub subagent_tools: Value,
    #[serde(default)]
    pub origin: Option<Origin>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// The header line's members after `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub format_version: u64,
    pub server: ServerMeta,
    pub exported_at: String,
    pub session: SessionMeta,
    /// The profile row as the admin API shows it (plus `deleted_at`), or
    /// `null` when the exporting server no longer had it.
    #[serde(default)]
    pub profile: Value,
}

impl Header {
    /// The header line (without its newline).
    pub fn to_line(&self) -> String {
        #[derive(Serialize)]
        struct Tagged<'a> {
            kind: &'static str,
            #[serde(flatten)]
            header: &'a Header,
        }
        // Strings, maps of strings and JSON values always serialise.
        serde_json::to_string(&Tagged {
            kind: "header",
            header: self,
        })
        .unwrap_or_default()
    }
}

/// Appends one event line (without its newline): the EventView members
/// after `"kind":"event"`, `payload_json` inserted as stored.
pub fn push_event_line(
    out: &mut String,
    id: &str,
    session_id: &str,
    client_key_id: Option<&str>,
    event_type: &str,
    payload_json: &str,
    created_at: &str,
) {
    out.push_str("{\"kind\":\"event\",\"id\":");
    push_str(out, id);
    out.push_str(",\"session_id\":");
    push_str(out, session_id);
    out.push_str(",\"client_key_id\":");
    push_opt_str(out, client_key_id);
    out.push_str(",\"event_type\":");
    push_str(out, event_type);
    out.push_str(",\"payload\":");
    out.push_str(payload_json);
    out.push_str(",\"created_at\":");
    push_str(out, created_at);
    out.push('}');
}

/// The end line (without its newline).
pub fn end_line(events: u64) -> String {
    format!("{{\"kind\":\"end\",\"events\":{events}}}")
}

/// Why a header line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a header of this format (or not JSON).
    Invalid(String),
    /// A header of this format in a version this reader cannot read.
    Version(u64),
}

/// Reads a header line: the format and version first (an unknown version
/// is reported as such whatever else the line holds), then the rest.
pub fn parse_header(line: &str) -> Result<Header, HeaderError> {
    #[derive(Deserialize)]
    struct Probe {
        kind: Option<String>,
        format: Option<String>,
        format_version: Option<Value>,
    }
    let probe: Probe = serde_json::from_str(line)
        .map_err(|e| HeaderError::Invalid(format!("the header is not a JSON object: {e}")))?;
    if probe.kind.as_deref() != Some("header") || probe.format.as_deref() != Some(FORMAT) {
        return Err(HeaderError::Invalid(format!(
            "the first line must be a header with \"kind\":\"header\" and \"format\":\"{FORMAT}\""
        )));
    }
    match probe.format_version.as_ref().and_then(Value::as_u64) {
        Some(FORMAT_VERSION) => {}
        Some(v) => return Err(HeaderError::Version(v)),
        None => {
            return Err(HeaderError::Invalid(
                "\"format_version\" must be a non-negative integer".into(),
            ))
        }
    }
    serde_json::from_str(line).map_err(|e| HeaderError::Invalid(format!("invalid header: {e}")))
}

/// One event line as read: the payload is the document's own text.
#[derive(Debug, Clone)]
pub struct EventLine<'a> {
    pub id: String,
    pub session_id: Option<String>,
    pub client_key_id: Option<String>,
    pub event_type: String,
    pub payload: &'a RawValue,
    pub created_at: String,
}

/// A line after the header.
#[derive(Debug, Clone)]
pub enum Line<'a> {
    Event(EventLine<'a>),
    End { events: u64 },
}

/// Reads a line after the header: an event or the end line.
pub fn parse_line(line: &str) -> Result<Line<'_>, String> {
    #[derive(Deserialize)]
    struct Any<'a> {
        kind: Option<String>,
        id: Option<String>,
        session_id: Option<String>,
        client_key_id: Option<String>,
        event_type: Option<String>,
        #[serde(borrow)]
        payload: Option<&'a RawValue>,
        created_at: Option<String>,
        events: Option<u64>,
    }
    let any: Any<'_> = serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
    match any.kind.as_deref() {
        Some("event") => {
            let missing = |m: &str| format!("an event line needs \"{m}\"");
            Ok(Line::Event(EventLine {
                id: any.id.ok_or_else(|| missing("id"))?,
                session_id: any.session_id,
                client_key_id: any.client_key_id,
                event_type: any.event_type.ok_or_else(|| missing("event_type"))?,
                payload: any.payload.ok_or_else(|| missing("payload"))?,
                created_at: any.created_at.ok_or_else(|| missing("created_at"))?,
            }))
        }
        Some("end") => Ok(Line::End {
            events: any
                .events
                .ok_or("the end line needs \"events\", a non-negative integer")?,
        }),
        Some("header") => Err("a second header line".into()),
        Some(other) => Err(format!("unknown line kind {other:?}")),
        None => Err("a line without \"kind\"".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            server: ServerMeta {
                name: "baesrv".into(),
                version: "0.1.0".into(),
            },
            exported_at: "2026-01-01T00:00:00.000Z".into(),
            session: SessionMeta {
                id: "ses_1".into(),
                client_key_id: "key_1".into(),
                profile_id: Some("pro_1".into()),
                state: Some("open".into()),
                client_version: None,
                created_at: Some("2026-01-01T00:00:00.000Z".into()),
                closed_at: None,
                compaction: Value::Null,
                client_tools: serde_json::json!({"key_1": [{"name": "t"}]}),
                sandbox_tools: empty_object(),
                subagent_tools: empty_object(),
                origin: Some(Origin::Fork {
                    parent_session_id: "ses_0".into(),
                    parent_event_id: "evt_0".into(),
                    created_at: "2026-01-01T00:00:00.000Z".into(),
                }),
            },
            profile: Value::Null,
        }
    }

    #[test]
    fn header_round_trips_and_leads_with_its_kind() {
        let line = header().to_line();
        assert!(
            line.starts_with("{\"kind\":\"header\",\"format\":"),
            "{line}"
        );
        assert_eq!(parse_header(&line).unwrap(), header());
    }

    #[test]
    fn unknown_versions_are_told_apart_from_bad_headers() {
        let mut v: Value = serde_json::from_str(&header().to_line()).unwrap();
        v["format_version"] = 2.into();
        v["session"] = Value::Null;
        assert_eq!(parse_header(&v.to_string()), Err(HeaderError::Version(2)));
        v["format"] = "other".into();
        assert!(matches!(
            parse_header(&v.to_string()),
            Err(HeaderError::Invalid(_))
        ));
        assert!(matches!(parse_header("[1]"), Err(HeaderError::Invalid(_))));
    }

    #[test]
    fn event_lines_keep_the_payload_text() {
        let mut out = String::new();
        let payload = r#"{"a":[1,2.50,"\u2028"],"b":{}}"#;
        push_event_line(&mut out, "evt_1", "ses_1", None, "x.y", payload, "t");
        let Line::Event(e) = parse_line(&out).unwrap() else {
            panic!("an event line");
        };
        assert_eq!(e.payload.get(), payload);
        assert_eq!((e.id.as_str(), e.client_key_id), ("evt_1", None));
        let Line::End { events } = parse_line(&end_line(7)).unwrap() else {
            panic!("an end line");
        };
        assert_eq!(events, 7);
        assert!(parse_line(r#"{"kind":"event","id":"evt_1"}"#).is_err());
        assert!(parse_line(r#"{"kind":"header"}"#).is_err());
        assert!(parse_line("{\"kind\":\"event\"").is_err());
    }
}
