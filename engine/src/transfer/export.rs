//! One session export in progress: its header, then the store's rendered
//! pages in log order, then the end line. Memory is bounded by one page
//! whatever the session's size: a page is read only when the connection
//! has flushed all but [`RESUME_BELOW`] bytes of what went before it.

use proto::wire::export::{self, Header, ServerMeta, SessionMeta};
use serde_json::{json, Value};

use super::Out;
use crate::store::{LineageRow, Origin, ProfileRow, ReadError, ReadResult, SessionRow, StoreRead};

/// Events per page read.
pub const PAGE_EVENTS: usize = 200;

/// Payload bytes after which a page takes no further event (at least one
/// is always taken).
pub const PAGE_BYTES: usize = 256 * 1024;

/// Unflushed bytes on the connection at or below which the next page is
/// read.
pub const RESUME_BELOW: usize = 64 * 1024;

/// What the header is made of, gathered by the engine when the export
/// starts.
#[derive(Debug, Clone)]
pub struct ExportStart {
    pub session: SessionRow,
    /// The profile row as the catalogue holds it now (deleted ones too).
    pub profile: Option<ProfileRow>,
    pub server_version: String,
    pub exported_at: String,
}

pub(super) struct Export {
    session_id: String,
    /// Until the header is written (after the lineage read).
    start: Option<Box<ExportStart>>,
    after_seq: u64,
    events: u64,
    /// A page read is in flight.
    reading: bool,
    /// The last page read said more events follow.
    more: bool,
}

impl Export {
    pub fn start(start: ExportStart) -> (Export, Out) {
        let session_id = start.session.id.clone();
        let read = StoreRead::Lineage {
            session_id: session_id.clone(),
            children: false,
        };
        let job = Export {
            session_id,
            start: Some(Box::new(start)),
            after_seq: 0,
            events: 0,
            reading: true,
            more: true,
        };
        (job, Out::Read(read))
    }

    /// A read was answered; `unflushed` is what the connection has not
    /// written yet. Returns the outputs and whether the export is over.
    pub fn read_done(
        &mut self,
        result: Result<ReadResult, ReadError>,
        unflushed: usize,
    ) -> (Vec<Out>, bool) {
        self.reading = false;
        if let Some(start) = self.start.take() {
            let own = match result {
                Ok(ReadResult::Lineage { own, .. }) => own,
                other => return (vec![failed(&other, false)], true),
            };
            let line = header(&start, own.as_ref()).to_line();
            let mut chunk = Vec::with_capacity(line.len() + 16);
            proto::http::encode_chunk(format!("{line}\n").as_bytes(), &mut chunk);
            let pending = unflushed + chunk.len();
            let name = format!("{}.bae.jsonl", self.session_id);
            let mut outs = vec![Out::StreamHead(name), Out::Chunk(chunk)];
            outs.extend(self.next(pending));
            return (outs, false);
        }
        let (chunk, events, last_seq, more) = match result {
            Ok(ReadResult::ExportPage {
                chunk,
                events,
                last_seq,
                more,
            }) => (chunk, events, last_seq, more),
            other => return (vec![failed(&other, true)], true),
        };
        self.events += events;
        if events > 0 {
            self.after_seq = last_seq;
        }
        self.more = more && events > 0;
        let pending = unflushed + chunk.len();
        let mut outs = Vec::with_capacity(3);
        if !chunk.is_empty() {
            outs.push(Out::Chunk(chunk));
        }
        if !self.more {
            let mut end = Vec::new();
            let line = export::end_line(self.events);
            proto::http::encode_chunk(format!("{line}\n").as_bytes(), &mut end);
            outs.push(Out::Chunk(end));
            outs.push(Out::Finish);
            return (outs, true);
        }
        outs.extend(self.next(pending));
        (outs, false)
    }

    /// The connection flushed down to `unflushed` bytes.
    pub fn flushed(&mut self, unflushed: usize) -> Option<Out> {
        if self.reading || self.start.is_some() || !self.more {
            return None;
        }
        self.next(unflushed)
    }

    /// The next page's read, once the connection has room for it.
    fn next(&mut self, unflushed: usize) -> Option<Out> {
        if unflushed > RESUME_BELOW {
            return None;
        }
        self.reading = true;
        Some(Out::Read(StoreRead::ExportPage {
            session_id: self.session_id.clone(),
            after_seq: self.after_seq,
            limit: PAGE_EVENTS,
            max_bytes: PAGE_BYTES,
        }))
    }
}

/// A failed read: before the head, a `500`; after it, the connection is
/// closed without the end line, so the document is visibly cut short.
fn failed(result: &Result<ReadResult, ReadError>, streaming: bool) -> Out {
    let e = match result {
        Err(e) => e,
        Ok(_) => &ReadError::Unexpected,
    };
    tracing::error!(error = %e, "session export read failed");
    if streaming {
        Out::Abort
    } else {
        Out::Problem(
            proto::wire::problem::ProblemType::Internal,
            "internal error".into(),
        )
    }
}

/// The header line's contents.
fn header(s: &ExportStart, lineage: Option<&LineageRow>) -> Header {
    let row = &s.session;
    let map = |text: &str| serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!({}));
    let compaction = (row.compaction.as_deref())
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null);
    let origin = lineage.map(|l| match &l.origin {
        Origin::Fork {
            parent_id,
            parent_event_id,
        } => export::Origin::Fork {
            parent_session_id: parent_id.clone(),
            parent_event_id: parent_event_id.clone(),
            created_at: l.created_at.clone(),
        },
        Origin::Import { source_session_id } => export::Origin::Import {
            source_session_id: source_session_id.clone(),
            created_at: l.created_at.clone(),
        },
    });
    Header {
        format: export::FORMAT.into(),
        format_version: export::FORMAT_VERSION,
        server: ServerMeta {
            name: "baesrv".into(),
            version: s.server_version.clone(),
        },
        exported_at: s.exported_at.clone(),
        session: SessionMeta {
            id: row.id.clone(),
            client_key_id: row.client_key_id.clone(),
            profile_id: Some(row.profile_id.clone()),
            state: Some(row.state.as_str().into()),
            client_version: row.client_version.clone(),
            created_at: Some(row.created_at.clone()),
            closed_at: row.closed_at.clone(),
            compaction,
            client_tools: map(&row.client_tools),
            sandbox_tools: map(&row.sandbox_tools),
            subagent_tools: map(&row.subagent_tools),
            origin,
        },
        profile: s.profile.as_ref().map_or(Value::Null, profile_view),
    }
}

/// The profile as the admin API shows it, with its deletion time.
fn profile_view(p: &ProfileRow) -> Value {
    json!({
        "id": p.id,
        "name": p.name,
        "primary_provider": p.primary_provider,
        "fallback_providers": p.fallback_providers,
        "mcp_servers": p.mcp_servers,
        "allowed_tools": p.allowed_tools,
        "available_sandboxes": p.available_sandboxes,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
        "deleted_at": p.deleted_at,
    })
}
