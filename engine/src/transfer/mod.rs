//! Sessions that branch and move (extension; docs/extensions.md,
//! "Forks, exports and imports"): a session streamed out as an export
//! document, a document read back in as a new session, a new session
//! forked from another's log at a complete point, and the family tree.
//!
//! A sub-state machine: it owns every transfer in progress, one per
//! connection, takes typed starts and the store's answers, and answers
//! with [`Out`]s for the engine to perform. It reads no catalogue and
//! mints no id: the engine passes what a start needs and creates the
//! session a [`Out::Create`] describes (its ids, keys and rows), in one
//! batch of writes.

pub mod copy;
mod export;
mod fork;
mod import;
mod lineage;
pub mod rules;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use proto::wire::problem::ProblemType;

pub use copy::{Answer, Declarations, NewSession};
pub use export::ExportStart;
pub use fork::{At, ForkStart};
pub use import::ImportTarget;
pub use lineage::origin_json;

use crate::store::{ReadError, ReadResult, StoreRead};
use crate::ConnId;

/// What the engine does for a transfer.
#[derive(Debug)]
pub enum Out {
    /// Read this; the answer comes back through [`Transfers::read_done`].
    Read(StoreRead),
    /// The export's `200` head (chunked JSON Lines, as an attachment of
    /// this file name).
    StreamHead(String),
    /// Export bytes, already chunk-encoded.
    Chunk(Vec<u8>),
    /// The export is complete: the last chunk, then the next request.
    Finish,
    /// The export failed after its head: close the connection, so the
    /// document is visibly cut short.
    Abort,
    /// A complete JSON answer.
    Json(u16, String),
    Problem(ProblemType, String),
    /// Create this session and answer `201`.
    Create(Box<NewSession>),
}

enum Job {
    Export(export::Export),
    Fork(Box<fork::Fork>),
    /// An import that keeps its id, waiting to learn whether it is free.
    Import(Box<NewSession>),
    Lineage(lineage::Lineage),
}

/// Every transfer in progress (see the module docs).
pub struct Transfers {
    jobs: BTreeMap<ConnId, Job>,
    /// Bytes of log a fork may copy (`BAE_MAX_IMPORT_BYTES`: a fork holds
    /// what it copies, as an import holds its document).
    max_copy_bytes: usize,
}

impl Transfers {
    pub fn new(max_copy_bytes: usize) -> Self {
        Transfers {
            jobs: BTreeMap::new(),
            max_copy_bytes,
        }
    }

    /// Starts streaming a session's export on `conn`.
    pub fn export(&mut self, conn: ConnId, start: ExportStart) -> Vec<Out> {
        let (job, out) = export::Export::start(start);
        self.jobs.insert(conn, Job::Export(job));
        vec![out]
    }

    /// Starts a fork (or rewind).
    pub fn fork(&mut self, conn: ConnId, start: ForkStart) -> Vec<Out> {
        let (job, out) = fork::Fork::start(start);
        self.jobs.insert(conn, Job::Fork(Box::new(job)));
        vec![out]
    }

    /// Reads an import document: refused, created at once, or (keeping its
    /// id) after a read says the id is free.
    pub fn import(&mut self, conn: ConnId, body: &[u8], target: &ImportTarget) -> Vec<Out> {
        let plan = match import::read_document(body, target) {
            Ok(plan) => plan,
            Err((kind, detail)) => return vec![Out::Problem(kind, detail)],
        };
        let Some(id) = plan.keep_id.clone() else {
            return vec![Out::Create(Box::new(plan))];
        };
        self.jobs.insert(conn, Job::Import(Box::new(plan)));
        vec![Out::Read(StoreRead::LoadSession {
            session_id: id,
            // (Registrations are not wanted: none is at or after this seq.)
            drivers_since: i64::MAX as u64,
        })]
    }

    /// Starts the family-tree answer of a session.
    pub fn lineage(&mut self, conn: ConnId, session_id: &str) -> Vec<Out> {
        let (job, out) = lineage::Lineage::start(session_id);
        self.jobs.insert(conn, Job::Lineage(job));
        vec![out]
    }

    /// A read of `conn`'s transfer was answered; `unflushed` is what the
    /// connection still has to write.
    pub fn read_done(
        &mut self,
        conn: ConnId,
        result: Result<ReadResult, ReadError>,
        unflushed: usize,
    ) -> Vec<Out> {
        if let Some(Job::Import(_)) = self.jobs.get(&conn) {
            let Some(Job::Import(plan)) = self.jobs.remove(&conn) else {
                return Vec::new();
            };
            return vec![import_checked(plan, result)];
        }
        let Some(job) = self.jobs.get_mut(&conn) else {
            return Vec::new();
        };
        let (outs, done) = match job {
            Job::Export(e) => e.read_done(result, unflushed),
            Job::Fork(f) => {
                let (out, done) = f.read_done(result, self.max_copy_bytes);
                (vec![out], done)
            }
            Job::Lineage(l) => {
                let (out, done) = l.read_done(result);
                (vec![out], done)
            }
            Job::Import(_) => (Vec::new(), true),
        };
        if done {
            self.jobs.remove(&conn);
        }
        outs
    }

    /// `conn` flushed down to `unflushed` bytes: an export waiting for room
    /// reads its next page.
    pub fn flushed(&mut self, conn: ConnId, unflushed: usize) -> Vec<Out> {
        match self.jobs.get_mut(&conn) {
            Some(Job::Export(e)) => e.flushed(unflushed).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// `conn` is gone: its transfer ends (a late answer finds nothing).
    pub fn forget(&mut self, conn: ConnId) {
        self.jobs.remove(&conn);
    }

    /// Whether a transfer runs on `conn`.
    pub fn has(&self, conn: ConnId) -> bool {
        self.jobs.contains_key(&conn)
    }
}

/// An import keeping its id, once the store said whether the id is taken.
fn import_checked(plan: Box<NewSession>, result: Result<ReadResult, ReadError>) -> Out {
    match result {
        Ok(ReadResult::Session(None)) => Out::Create(plan),
        Ok(ReadResult::Session(Some(s))) => Out::Problem(
            ProblemType::SessionExists,
            format!(
                "session {} exists; import without keep_id to get a new id",
                s.session.id
            ),
        ),
        other => {
            let e = ReadError::of(other);
            tracing::error!(error = %e, "import id check failed");
            Out::Problem(ProblemType::Internal, "internal error".into())
        }
    }
}
