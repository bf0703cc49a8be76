//! A session about to be created from another's log (a fork) or from a
//! document (an import): what it copies, and the rows it becomes once the
//! engine has minted its ids and seqs.

use proto::wire::json;
use proto::wire::{ClientToolDef, CompactionConfig, EventType, SubagentToolDef};
use serde_json::Value;

use crate::store::{EventRow, LineageRow, Origin, SessionState};

/// One event to copy: its source id (references to it are rewritten),
/// type, attribution, payload as stored and original timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct CopiedEvent {
    pub source_id: String,
    pub event_type: EventType,
    pub client_key_id: Option<String>,
    pub payload: String,
    pub created_at: String,
}

/// The declarations the new session's creator gets (the source creator's,
/// as stored).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declarations {
    pub tools: Vec<Value>,
    pub sandbox_tools: Vec<Value>,
    pub subagent_tools: Vec<Value>,
}

impl Declarations {
    /// The creator's entries of the three stored maps (`{"key_…": [..]}`).
    pub fn of_creator(client: &Value, sandbox: &Value, subagent: &Value, creator: &str) -> Self {
        let list = |m: &Value| {
            (m.get(creator).and_then(Value::as_array))
                .cloned()
                .unwrap_or_default()
        };
        Declarations {
            tools: list(client),
            sandbox_tools: list(sandbox),
            subagent_tools: list(subagent),
        }
    }

    /// The typed declarations, for the checks a create makes (allowlist,
    /// reserved names, subagent entries); `Err` names a malformed one.
    pub fn typed(&self) -> Result<Typed, BadDeclaration> {
        fn parse<T: serde::de::DeserializeOwned>(
            list: &[Value],
            kind: DeclarationKind,
        ) -> Result<Vec<T>, BadDeclaration> {
            (list.iter())
                .map(|v| {
                    serde_json::from_value(v.clone()).map_err(|e| BadDeclaration {
                        kind,
                        serde: e.to_string(),
                    })
                })
                .collect()
        }
        Ok((
            parse(&self.tools, DeclarationKind::Client)?,
            parse(&self.sandbox_tools, DeclarationKind::Sandbox)?,
            parse(&self.subagent_tools, DeclarationKind::Subagent)?,
        ))
    }
}

/// Which of the creator's declaration lists an entry is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclarationKind {
    Client,
    Sandbox,
    Subagent,
}

/// A stored declaration that does not read as its type: which list, and
/// serde's message. `Display`: `invalid <kind> declaration: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDeclaration {
    pub kind: DeclarationKind,
    pub serde: String,
}

impl std::fmt::Display for BadDeclaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            DeclarationKind::Client => "tool",
            DeclarationKind::Sandbox => "sandbox tool",
            DeclarationKind::Subagent => "subagent tool",
        };
        write!(f, "invalid {kind} declaration: {}", self.serde)
    }
}

/// Client, sandbox and subagent declarations, typed.
pub type Typed = (Vec<ClientToolDef>, Vec<ClientToolDef>, Vec<SubagentToolDef>);

/// What the `201` of a fork or an import says besides the new ids.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A fork or rewind; `message` is the user message a rewind before it
    /// stopped at (to edit and send again); `admin` answers in the admin
    /// shape, else in the client port's.
    Fork {
        parent_id: String,
        event_id: String,
        message: Option<Value>,
        admin: bool,
    },
    Import {
        source_session_id: String,
    },
}

/// A session to create from copied events (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// The id to keep (an import asked for the source's id), else a new one.
    pub keep_id: Option<String>,
    /// `open`, unless the copied log ended the session (an import of a
    /// closed or failed session keeps that state, and when it began).
    pub state: SessionState,
    pub closed_at: Option<String>,
    /// The client key that will hold its session key.
    pub creator: String,
    pub profile_id: String,
    pub client_version: Option<String>,
    pub declarations: Declarations,
    pub compaction: CompactionConfig,
    pub events: Vec<CopiedEvent>,
    pub answer: Answer,
}

impl NewSession {
    /// The event rows of session `session_id`: a new id and the next seq
    /// for each, and every `session.compaction.completed` naming the new
    /// ids of its preamble and summary (a name not among the copied events
    /// is kept: it resolved nowhere in the source either).
    pub fn rows(
        &mut self,
        session_id: &str,
        mut new_id: impl FnMut() -> String,
        mut seq: impl FnMut() -> u64,
    ) -> Vec<EventRow> {
        let mut renamed: std::collections::HashMap<String, String> = Default::default();
        let events = std::mem::take(&mut self.events);
        let mut rows = Vec::with_capacity(events.len());
        for e in events {
            let id = new_id();
            renamed.insert(e.source_id, id.clone());
            let payload = match e.event_type {
                EventType::SessionCompactionCompleted => renamed_refs(&e.payload, &renamed),
                _ => e.payload,
            };
            rows.push(EventRow {
                seq: seq(),
                id,
                session_id: session_id.to_string(),
                client_key_id: e.client_key_id,
                event_type: e.event_type.as_str().to_string(),
                payload,
                created_at: e.created_at,
            });
        }
        rows
    }

    /// The `201` body of session `session_id` with `events` copied: the
    /// client port's fork answers `open` (a create's answer) with the
    /// parent; the admin API names the key, the profile and the count.
    pub fn answer_json(
        &self,
        session_id: &str,
        session_key: &str,
        events: usize,
        open: Option<String>,
    ) -> String {
        let mut a = match open.and_then(|o| serde_json::from_str::<Value>(&o).ok()) {
            Some(Value::Object(m)) => m,
            _ => {
                let mut m = serde_json::Map::new();
                m.insert("session_id".into(), session_id.into());
                m.insert("session_key".into(), session_key.into());
                m.insert("client_key_id".into(), self.creator.as_str().into());
                m.insert("profile_id".into(), self.profile_id.as_str().into());
                m
            }
        };
        match &self.answer {
            Answer::Fork {
                parent_id,
                event_id,
                message,
                admin,
            } => {
                let parent = serde_json::json!({"session_id": parent_id, "event_id": event_id});
                a.insert("parent".into(), parent);
                if *admin {
                    a.insert("events".into(), events.into());
                }
                if let Some(m) = message {
                    a.insert("message".into(), m.clone());
                }
            }
            Answer::Import { source_session_id } => {
                a.insert(
                    "source_session_id".into(),
                    source_session_id.as_str().into(),
                );
                a.insert("events".into(), events.into());
            }
        }
        json::text(&Value::Object(a))
    }

    /// The lineage row of the created session, whose copied events end at
    /// seq `copied_through` (0: none copied).
    pub fn lineage(&self, session_id: &str, created_at: &str, copied_through: u64) -> LineageRow {
        let origin = match &self.answer {
            Answer::Fork {
                parent_id,
                event_id,
                ..
            } => Origin::Fork {
                parent_id: parent_id.clone(),
                parent_event_id: event_id.clone(),
            },
            Answer::Import { source_session_id } => Origin::Import {
                source_session_id: source_session_id.clone(),
            },
        };
        LineageRow {
            session_id: session_id.to_string(),
            origin,
            created_at: created_at.to_string(),
            copied_through,
        }
    }
}

/// A completion payload with its preamble and summary ids renamed.
fn renamed_refs(payload: &str, renamed: &std::collections::HashMap<String, String>) -> String {
    let Ok(Value::Object(mut p)) = serde_json::from_str::<Value>(payload) else {
        return payload.to_string();
    };
    for key in ["preamble_event_id", "summary_event_id"] {
        let new = (p.get(key).and_then(Value::as_str)).and_then(|old| renamed.get(old));
        if let Some(new) = new.cloned() {
            p.insert(key.to_string(), Value::String(new));
        }
    }
    json::text(&Value::Object(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: &str, t: EventType, payload: Value) -> CopiedEvent {
        CopiedEvent {
            source_id: id.into(),
            event_type: t,
            client_key_id: Some("key_1".into()),
            payload: payload.to_string(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn rows_get_new_ids_and_seqs_and_completions_follow_them() {
        let mut s = NewSession {
            keep_id: None,
            state: SessionState::Open,
            closed_at: None,
            creator: "key_1".into(),
            profile_id: "pro_1".into(),
            client_version: None,
            declarations: Declarations::default(),
            compaction: CompactionConfig::default(),
            events: vec![
                event(
                    "evt_a",
                    EventType::ServerMessageSend,
                    json!({"role": "user"}),
                ),
                event(
                    "evt_b",
                    EventType::ServerMessageSend,
                    json!({"role": "assistant"}),
                ),
                event(
                    "evt_c",
                    EventType::SessionCompactionCompleted,
                    json!({"preamble_event_id": "evt_a", "summary_event_id": "evt_b", "compacted_message_count": 2, "other": "evt_zz"}),
                ),
            ],
            answer: Answer::Import {
                source_session_id: "ses_0".into(),
            },
        };
        let mut n = 0;
        let rows = s.rows(
            "ses_new",
            || {
                n += 1;
                format!("evt_new{n}")
            },
            {
                let mut next = 41;
                move || {
                    next += 1;
                    next
                }
            },
        );
        assert_eq!(
            rows.iter()
                .map(|r| (r.seq, r.id.as_str()))
                .collect::<Vec<_>>(),
            [(42, "evt_new1"), (43, "evt_new2"), (44, "evt_new3")]
        );
        let done: Value = serde_json::from_str(&rows[2].payload).unwrap();
        assert_eq!(
            done,
            json!({"preamble_event_id": "evt_new1", "summary_event_id": "evt_new2", "compacted_message_count": 2, "other": "evt_zz"})
        );
        assert!(rows.iter().all(|r| r.session_id == "ses_new"));
        assert_eq!(rows[0].payload, json!({"role": "user"}).to_string());
    }

    #[test]
    fn the_creators_declarations_are_taken() {
        let client = json!({"key_1": [{"name": "a"}], "key_2": [{"name": "b"}]});
        let d = Declarations::of_creator(&client, &json!({}), &Value::Null, "key_2");
        assert_eq!(d.tools, vec![json!({"name": "b"})]);
        assert!(d.sandbox_tools.is_empty() && d.subagent_tools.is_empty());
        let (tools, _, _) = d.typed().unwrap();
        assert_eq!(tools[0].name, "b");
        let bad = Declarations {
            tools: vec![json!({"description": "no name"})],
            ..Default::default()
        };
        let e = bad.typed().unwrap_err();
        assert_eq!(e.kind, DeclarationKind::Client);
        assert_eq!(
            e.to_string(),
            "invalid tool declaration: missing field `name`"
        );
    }

    /// The import's `invalid_document` detail names the list.
    #[test]
    fn a_bad_declaration_renders_its_wire_text() {
        let e = |kind| BadDeclaration {
            kind,
            serde: "msg".into(),
        };
        assert_eq!(
            e(DeclarationKind::Sandbox).to_string(),
            "invalid sandbox tool declaration: msg"
        );
        assert_eq!(
            e(DeclarationKind::Subagent).to_string(),
            "invalid subagent tool declaration: msg"
        );
    }
}
