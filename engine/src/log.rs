//! The append-only event log: id and rowid assignment, the durable write,
//! and publication to live streams (after the write, so the driver commits
//! before any stream sees the event).

use proto::wire::json;
use proto::wire::EventType;
use serde_json::Value;

use crate::store::{EventRow, StoreWrite};
use crate::Engine;

pub use crate::streams::Appended;

impl Engine {
    /// Appends one event to `session_id`'s log and publishes it. (Message
    /// events come only from session cores, which extend their cached
    /// history themselves.)
    pub(crate) fn append_event(
        &mut self,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: EventType,
        payload: Value,
    ) -> Appended {
        self.append_event_text(session_id, client_key_id, event_type, json::text(&payload))
    }

    /// [`Engine::append_event`] for a payload already rendered as compact
    /// JSON text (a large `provider.request` is built as text so that its
    /// history is never copied as a value tree).
    pub(crate) fn append_event_text(
        &mut self,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: EventType,
        payload: String,
    ) -> Appended {
        let seq = self.next_seq;
        self.next_seq += self.replicas.as_ref().map_or(1, |r| r.step());
        self.events_total += 1;
        let id = self.new_id(proto::wire::ids::IdKind::Event);
        let row = EventRow {
            seq,
            id: id.clone(),
            session_id: session_id.to_string(),
            client_key_id: client_key_id.map(str::to_string),
            event_type: event_type.as_str().to_string(),
            payload,
            created_at: self.timestamp(),
        };
        tracing::trace!(session_id, event_type = event_type.as_str(), payload = %row.payload, "event");
        let json = crate::respond::escaped(crate::respond::event_json(&row));
        let appended = Appended { seq, id, json };
        if self.faults.deliver_before_commit() {
            self.publish(session_id, &appended);
            self.write(StoreWrite::InsertEvent(row));
            return appended;
        }
        self.write(StoreWrite::InsertEvent(row));
        self.publish(session_id, &appended);
        appended
    }
}
