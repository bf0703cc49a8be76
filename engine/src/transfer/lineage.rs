//! A session's family tree for the admin API: where it came from, its
//! ancestors (parent first, one lineage read each, at most
//! [`MAX_ANCESTORS`]) and the sessions forked from it.

use serde_json::{json, Value};

use super::Out;
use crate::store::{LineageRow, Origin, ReadError, ReadResult, StoreRead};

/// Ancestors listed at most (a longer chain ends the list there).
pub const MAX_ANCESTORS: usize = 64;

pub(super) struct Lineage {
    session_id: String,
    origin: Option<LineageRow>,
    children: Vec<LineageRow>,
    ancestors: Vec<String>,
    /// The first answer (the session's own row) has arrived.
    started: bool,
}

impl Lineage {
    pub fn start(session_id: &str) -> (Lineage, Out) {
        let job = Lineage {
            session_id: session_id.to_string(),
            origin: None,
            children: Vec::new(),
            ancestors: Vec::new(),
            started: false,
        };
        let read = read(session_id, true);
        (job, read)
    }

    /// A lineage read was answered; returns the output and whether the
    /// walk is over.
    pub fn read_done(&mut self, result: Result<ReadResult, ReadError>) -> (Out, bool) {
        let (own, children) = match result {
            Ok(ReadResult::Lineage { own, children }) => (own, children),
            other => {
                let e = ReadError::of(other);
                tracing::error!(error = %e, "lineage read failed");
                let internal = Out::Problem(
                    proto::wire::problem::ProblemType::Internal,
                    "internal error".into(),
                );
                return (internal, true);
            }
        };
        if !std::mem::replace(&mut self.started, true) {
            self.children = children;
            self.origin = own.clone();
        }
        let parent = own.and_then(|l| match l.origin {
            Origin::Fork { parent_id, .. } => Some(parent_id),
            Origin::Import { .. } => None,
        });
        match parent {
            Some(p)
                if self.ancestors.len() < MAX_ANCESTORS
                    && p != self.session_id
                    && !self.ancestors.contains(&p) =>
            {
                let out = read(&p, false);
                self.ancestors.push(p);
                (out, false)
            }
            _ => (Out::Json(200, self.answer().to_string()), true),
        }
    }

    fn answer(&self) -> Value {
        let children: Vec<Value> = (self.children.iter())
            .map(|c| {
                let event = match &c.origin {
                    Origin::Fork {
                        parent_event_id, ..
                    } => Value::String(parent_event_id.clone()),
                    Origin::Import { .. } => Value::Null,
                };
                json!({"session_id": c.session_id, "parent_event_id": event, "created_at": c.created_at})
            })
            .collect();
        json!({
            "session_id": self.session_id,
            "origin": self.origin.as_ref().map(origin_json),
            "ancestors": self.ancestors,
            "children": children,
        })
    }
}

fn read(session_id: &str, children: bool) -> Out {
    Out::Read(StoreRead::Lineage {
        session_id: session_id.to_string(),
        children,
    })
}

/// `{"kind": "fork", "parent_session_id", "parent_event_id", "created_at"}`
/// or `{"kind": "import", "source_session_id", "created_at"}`.
pub fn origin_json(l: &LineageRow) -> Value {
    match &l.origin {
        Origin::Fork {
            parent_id,
            parent_event_id,
        } => json!({
            "kind": "fork",
            "parent_session_id": parent_id,
            "parent_event_id": parent_event_id,
            "created_at": l.created_at,
        }),
        Origin::Import { source_session_id } => json!({
            "kind": "import",
            "source_session_id": source_session_id,
            "created_at": l.created_at,
        }),
    }
}
