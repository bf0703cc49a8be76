//! The services every part of the engine speaks through: configuration,
//! the time of the input being handled, ids and secrets from the injected
//! entropy, the connection table and its NDJSON streams (answers, frames,
//! subscriptions, live publication), the event log's seq lane, store reads
//! and writes, the output queue, metrics and telemetry. The [`Engine`](crate::Engine)
//! routes inputs to sessions and hubs; they act on the world only through
//! these. Nothing here knows a session's gate or turn: whatever an answer
//! leaves for later (a connection free for its next request, a turn stream
//! that ended) is queued in the connection table or the stream hub and
//! worked off by [`Engine::settle`](crate::Engine).

use std::collections::VecDeque;

use crate::store::StoreWrite;
use crate::streams::Fanout;
use crate::{
    config::Config, conn, connections, faults, ids, log, metrics, respond, streams, telemetry,
    ConnId, Entropy, Now, Output, ReadId, StoreRead,
};

pub(crate) struct Services {
    pub config: Config,
    pub entropy: Box<dyn Entropy>,
    pub outputs: VecDeque<Output>,
    /// Time of the input being handled.
    pub now: Now,
    // Ordered maps wherever iteration order reaches the outputs: the same
    // inputs must give the same outputs (the simulator depends on it).
    pub conns: connections::Table,
    /// Event seq assignment and the number of events stored.
    pub log: log::EventLog,
    /// Store reads in flight and what each answer is for.
    pub reads: ids::InFlight<ReadId, conn::PendingRead>,
    /// The open NDJSON streams, by connection.
    pub streams: streams::Hub,
    /// While set, events are not echoed on these connections' streams (a
    /// request's own recorded input, spec 01 §7).
    pub quiet: Vec<ConnId>,
    /// The planted bug (if any), handed to the components that host one.
    pub faults: faults::Faults,
    /// Counters and histograms of `GET /metrics`.
    pub metrics: metrics::Metrics,
    /// Span facts for the driver's exporter (spec 04 §7.1).
    pub telemetry: telemetry::Telemetry,
}

impl Services {
    pub(crate) fn random_bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.entropy.fill(&mut b);
        b
    }

    /// A fresh `<prefix>` + 32-hex id (time-ordered unless configured).
    pub(crate) fn new_id(&mut self, kind: proto::wire::ids::IdKind) -> String {
        let random = self.random_bytes::<16>();
        let bytes = self.config.id_order.bytes(self.now.unix.0, random);
        proto::wire::ids::make_id(kind, bytes)
    }

    /// A fresh secret token (192 bits of entropy).
    pub(crate) fn new_secret(&mut self, kind: proto::wire::ids::SecretKind) -> String {
        let bytes = self.random_bytes::<24>();
        proto::wire::ids::make_secret(kind, bytes)
    }

    /// `created_at` text for the current input.
    pub(crate) fn timestamp(&self) -> String {
        proto::wire::time::format_created_at(self.now.unix.0)
    }

    /// Appends one event to `session_id`'s log and publishes it to the
    /// session's streams (`fanout`: its part, from
    /// [`crate::sessions::Sessions::streams_mut`]).
    /// (Message events come only from session cores, which extend their
    /// cached history themselves.)
    pub(crate) fn append_event(
        &mut self,
        fanout: Fanout<'_>,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: proto::wire::EventType,
        payload: serde_json::Value,
    ) -> log::Appended {
        let payload = proto::wire::json::text(&payload);
        self.append_event_text(fanout, session_id, client_key_id, event_type, payload)
    }

    /// [`Services::append_event`] for a payload already rendered as compact
    /// JSON text (a large `provider.request` is built as text so that its
    /// history is never copied as a value tree). The write is emitted
    /// before the publication, so the driver commits before any stream
    /// sees the event.
    pub(crate) fn append_event_text(
        &mut self,
        fanout: Fanout<'_>,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: proto::wire::EventType,
        payload: String,
    ) -> log::Appended {
        let id = self.new_id(proto::wire::ids::IdKind::Event);
        let created_at = self.timestamp();
        let row = (self.log).row(
            id,
            session_id,
            client_key_id,
            event_type,
            payload,
            created_at,
        );
        tracing::trace!(session_id, event_type = event_type.as_str(), payload = %row.payload, "event");
        let json = respond::escaped(respond::event_json(&row));
        let appended = log::Appended {
            seq: row.seq,
            id: row.id.clone(),
            json,
        };
        if self.faults.deliver_before_commit() {
            if let Some(streams) = fanout {
                streams.publish(self, session_id, &appended);
            }
            self.write(StoreWrite::InsertEvent(row));
            return appended;
        }
        self.write(StoreWrite::InsertEvent(row));
        if let Some(streams) = fanout {
            streams.publish(self, session_id, &appended);
        }
        appended
    }

    pub(crate) fn write(&mut self, w: StoreWrite) {
        self.outputs.push_back(Output::Write(w));
    }

    pub(crate) fn read(&mut self, read: StoreRead, then: conn::PendingRead) {
        let id = self.reads.issue(then);
        self.outputs.push_back(Output::Read { id, read });
    }
}
