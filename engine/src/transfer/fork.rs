//! One fork (or rewind) in progress: the parent's log read from its start,
//! page by page, walked ([`Walker`]) until the fork point, whose history
//! must be complete; the events up to it become the fork's log.

use proto::wire::problem::ProblemType;
use proto::wire::EventType;
use serde_json::Value;

use super::copy::{Answer, CopiedEvent, Declarations, NewSession};
use super::rules::{Point, Walker};
use super::Out;
use crate::store::{EventRow, ReadError, ReadResult, StoreRead};

/// Events per page read.
const PAGE: usize = 200;

/// Where to fork (the body's point, typed by `proto::wire::fork`).
pub use proto::wire::fork::ForkPoint as At;

/// A fork as the engine asks for it: the parent, the point, and who gets
/// the fork.
#[derive(Debug, Clone)]
pub struct ForkStart {
    pub parent_id: String,
    pub at: At,
    /// The parent's creator's declarations, carried to the fork's creator.
    pub declarations: Declarations,
    pub client_version: Option<String>,
    pub compaction: proto::wire::CompactionConfig,
    pub creator: String,
    pub profile_id: String,
    /// Answer in the admin API's shape.
    pub admin: bool,
}

pub(super) struct Fork {
    start: ForkStart,
    walker: Walker,
    events: Vec<CopiedEvent>,
    bytes: usize,
    after_seq: u64,
    /// The message a rewind stopped before.
    message: Option<Value>,
}

/// How a page left the fork.
enum Found {
    /// The point is the last copied event.
    Here,
    /// Not reached yet.
    Reading,
    Refused(ProblemType, String),
}

impl Fork {
    pub fn start(start: ForkStart) -> (Fork, Out) {
        let job = Fork {
            start,
            walker: Walker::default(),
            events: Vec::new(),
            bytes: 0,
            after_seq: 0,
            message: None,
        };
        let read = job.read();
        (job, read)
    }

    fn read(&self) -> Out {
        Out::Read(StoreRead::Events {
            session_id: self.start.parent_id.clone(),
            after_seq: self.after_seq,
            limit: PAGE,
        })
    }

    /// A page of the parent's log arrived; `max_bytes` bounds what a fork
    /// may copy. Returns the output and whether the fork is over.
    pub fn read_done(
        &mut self,
        result: Result<ReadResult, ReadError>,
        max_bytes: usize,
    ) -> (Out, bool) {
        let rows = match result {
            Ok(ReadResult::Events(rows)) => rows,
            other => {
                let e = ReadError::of(other);
                tracing::error!(error = %e, "fork read failed");
                let internal = Out::Problem(ProblemType::Internal, "internal error".into());
                return (internal, true);
            }
        };
        let last_page = rows.len() < PAGE;
        match self.take(rows, max_bytes) {
            Found::Here => (self.finish(), true),
            Found::Refused(kind, detail) => (Out::Problem(kind, detail), true),
            Found::Reading if !last_page => (self.read(), false),
            Found::Reading => match self.at_end() {
                Found::Here => (self.finish(), true),
                Found::Refused(kind, detail) => (Out::Problem(kind, detail), true),
                Found::Reading => (self.read(), false),
            },
        }
    }

    /// Copies rows up to the fork point.
    fn take(&mut self, rows: Vec<EventRow>, max_bytes: usize) -> Found {
        for row in rows {
            self.after_seq = row.seq;
            let Some(event_type) = EventType::parse(&row.event_type) else {
                // Not in the catalogue (a foreign row): not copied.
                continue;
            };
            if matches!(self.start.at, At::AfterTurn(0))
                && self.first_turn_or_end(event_type, &row.payload)
            {
                // Before the first turn: right before its message, or, in a
                // log that ended without one, right before the end (the
                // point is never at or after the end, docs/extensions.md).
                return match self.walker.point() {
                    Point::Complete => Found::Here,
                    point => incomplete(&row.id, point, "the first turn starts here"),
                };
            }
            if event_type == EventType::ClientMessageSend {
                let point = self.walker.point();
                match &self.start.at {
                    At::BeforeMessage(id) if *id == row.id => {
                        if point != Point::Complete {
                            return incomplete(
                                &row.id,
                                point,
                                "this message does not start a turn",
                            );
                        }
                        self.message = serde_json::from_str(&row.payload).ok();
                        return Found::Here;
                    }
                    _ => {}
                }
            } else if matches!(&self.start.at, At::BeforeMessage(id) if *id == row.id) {
                let detail = format!("event {} is not a client.message.send", row.id);
                return Found::Refused(ProblemType::BadRequest, detail);
            }
            self.bytes += row.payload.len();
            if self.bytes > max_bytes {
                let detail = format!(
                    "the log up to the fork point is over the copy limit of {max_bytes} bytes \
                     (BAE_MAX_IMPORT_BYTES)"
                );
                return Found::Refused(ProblemType::PayloadTooLarge, detail);
            }
            let ended = self.walker.turns_ended;
            self.walker.step(event_type, &row.payload);
            let id = row.id.clone();
            self.events.push(CopiedEvent {
                source_id: row.id,
                event_type,
                client_key_id: row.client_key_id,
                payload: row.payload,
                created_at: row.created_at,
            });
            match &self.start.at {
                At::Event(target) if *target == id => {
                    return match self.walker.point() {
                        Point::Complete => Found::Here,
                        point => incomplete(&id, point, ""),
                    }
                }
                At::AfterTurn(n)
                    if self.walker.turns_ended > ended && self.walker.turns_ended == *n =>
                {
                    return match self.walker.point() {
                        Point::Complete => Found::Here,
                        point => incomplete(&id, point, &format!("turn {n} ends here")),
                    };
                }
                _ => {}
            }
        }
        Found::Reading
    }

    /// Whether `event_type` starts the first turn or ends the session
    /// (with no turn before it): where `after_turn: 0` stops.
    fn first_turn_or_end(&self, event_type: EventType, payload: &str) -> bool {
        match event_type {
            EventType::ClientMessageSend => true,
            EventType::SessionClose | EventType::SessionError => {
                let mut next = self.walker.clone();
                next.step(event_type, payload);
                next.point() == Point::Ended
            }
            _ => false,
        }
    }

    /// The parent's log ended before the point was found.
    fn at_end(&self) -> Found {
        let parent = &self.start.parent_id;
        match &self.start.at {
            At::Last => match self.walker.point() {
                Point::Complete => Found::Here,
                point => {
                    let last = self.events.last().map_or("", |e| e.source_id.as_str());
                    incomplete(last, point, "")
                }
            },
            // No message and no end: before the first turn is the whole log.
            At::AfterTurn(0) => Found::Here,
            At::AfterTurn(n) if self.walker.turns_started >= *n => {
                let detail = format!("turn {n} of session {parent} has not ended");
                Found::Refused(ProblemType::ForkPointIncomplete, detail)
            }
            At::AfterTurn(n) => {
                let ended = self.walker.turns_ended;
                let detail =
                    format!("session {parent} has {ended} ended turn(s); there is no turn {n}");
                Found::Refused(ProblemType::NotFound, detail)
            }
            At::Event(id) | At::BeforeMessage(id) => Found::Refused(
                ProblemType::NotFound,
                format!("no event {id} in session {parent}"),
            ),
        }
    }

    fn finish(&mut self) -> Out {
        let Some(last) = self.events.last() else {
            let detail = format!(
                "session {} has no event to fork after",
                self.start.parent_id
            );
            return Out::Problem(ProblemType::NotFound, detail);
        };
        let s = &self.start;
        Out::Create(Box::new(NewSession {
            keep_id: None,
            state: crate::store::SessionState::Open,
            closed_at: None,
            creator: s.creator.clone(),
            profile_id: s.profile_id.clone(),
            client_version: s.client_version.clone(),
            declarations: s.declarations.clone(),
            compaction: s.compaction.clone(),
            answer: Answer::Fork {
                parent_id: s.parent_id.clone(),
                event_id: last.source_id.clone(),
                message: self.message.take(),
                admin: s.admin,
            },
            events: std::mem::take(&mut self.events),
        }))
    }
}

fn incomplete(event_id: &str, point: Point, why: &str) -> Found {
    let inside = match point {
        Point::Running => "inside a running turn (or one cut short)",
        Point::Paused => "inside a turn paused for client tool results",
        Point::Committing => "inside a compaction's commit",
        Point::Ended => "after the session ended (closed, or failed)",
        Point::Complete => "at a complete point",
    };
    let detail = match why {
        "" => format!("event {event_id} is {inside}: fork after a completed turn, a compaction, or before the first turn"),
        why => format!("event {event_id}: {why}; the log there is {inside}"),
    };
    Found::Refused(ProblemType::ForkPointIncomplete, detail)
}
