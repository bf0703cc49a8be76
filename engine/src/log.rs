//! The append-only event log's counters: rowid (`seq`) assignment and the
//! number of events stored. The engine's append (id, durable write, then
//! publication to live streams) is in `lib.rs` with its other core
//! services; this component only hands out seqs and rows.

use proto::wire::EventType;

use crate::store::EventRow;

pub use crate::streams::Appended;

/// Seq assignment for this process (see the module docs).
#[derive(Debug)]
pub struct EventLog {
    /// The seq the next event gets (global, strictly increasing).
    next_seq: u64,
    /// Distance between two seqs of ours: 1, or the number of replica
    /// lanes (replica mode writes only in its own lane).
    step: u64,
    /// The first seq this process assigned: later registrations are its.
    boot_seq: u64,
    /// Events in the log (gauge `bae.events.total`).
    events_total: u64,
}

impl EventLog {
    /// A log whose next event gets `first_seq` (already in our lane), with
    /// `events_total` events stored.
    pub fn new(first_seq: u64, step: u64, events_total: u64) -> Self {
        EventLog {
            next_seq: first_seq,
            step: step.max(1),
            boot_seq: first_seq,
            events_total,
        }
    }

    /// The seq of one more event (counted as stored).
    pub fn next_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += self.step;
        self.events_total += 1;
        seq
    }

    /// The row of one more event of `session_id`, its seq assigned.
    pub fn row(
        &mut self,
        id: String,
        session_id: &str,
        client_key_id: Option<&str>,
        event_type: EventType,
        payload: String,
        created_at: String,
    ) -> EventRow {
        EventRow {
            seq: self.next_seq(),
            id,
            session_id: session_id.to_string(),
            client_key_id: client_key_id.map(str::to_string),
            event_type: event_type.as_str().to_string(),
            payload,
            created_at,
        }
    }

    /// Moves the counter past `seq` (a session adopted from another
    /// replica: its log stays ordered), `align` keeping it in our lane.
    pub fn skip_past(&mut self, seq: u64, align: impl FnOnce(u64) -> u64) {
        self.next_seq = align(self.next_seq.max(seq.saturating_add(1)));
    }

    /// The first seq this process assigned.
    pub fn boot_seq(&self) -> u64 {
        self.boot_seq
    }

    /// Events in the log.
    pub fn events_total(&self) -> u64 {
        self.events_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqs_step_through_the_lane_and_are_counted() {
        let mut log = EventLog::new(3, 8, 10);
        assert_eq!((log.next_seq(), log.next_seq()), (3, 11));
        let row = log.row(
            "evt_1".into(),
            "ses_1",
            Some("key_1"),
            EventType::SessionOpen,
            "{}".into(),
            "t".into(),
        );
        assert_eq!((row.seq, row.event_type.as_str()), (19, "session.open"));
        assert_eq!((log.boot_seq(), log.events_total()), (3, 13));
        // Adopting a session whose log reached 40 moves past it, in lane.
        let lane =
            crate::replicas::Replicas::new(crate::replicas::ReplicaSettings { slot: 3, lanes: 8 });
        log.skip_past(40, |s| lane.align(s));
        assert_eq!(log.next_seq(), 43);
        // Never backwards.
        log.skip_past(5, |s| lane.align(s));
        assert_eq!(log.next_seq(), 51);
    }
}
