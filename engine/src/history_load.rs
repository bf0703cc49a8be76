//! Provider-facing history of a session, rebuilt from the log (spec 05 §8,
//! 07 §6) with plain store reads: the domain rules live here, once, and the
//! stores only answer typed queries ([`StoreRead::LatestOfType`],
//! [`StoreRead::EventById`], [`StoreRead::OfTypesFrom`]).
//!
//! A [`HistoryLoader`] is a small state machine that asks for one read at a
//! time:
//!
//! 1. the newest `session.compaction.completed`;
//! 2. the event its `preamble_event_id` names, accepted only when it is a
//!    `server.message.send` of the session;
//! 3. otherwise the event its `summary_event_id` names, accepted only when
//!    it is a `client.message.send` / `server.message.send`;
//! 4. the message events from that bound on (0 when nothing resolved);
//! 5. `provider.response` rows, newest first, [`USAGE_PAGE`] at a time,
//!    until one has `"ok": true` and no `purpose` key, or none are left.
//!
//! A payload that does not parse reads as JSON `null` (a compaction that
//! names nothing, a response that is not successful, a message whose
//! payload is `null`). Any failed read fails the whole load.
//!
//! The reads are not one transaction. They do not need to be: the loads run
//! while the session's gate is held (recovery or the turn itself), and only
//! gated work appends messages, compactions and provider responses.

use serde_json::Value;

use crate::ids::SessionId;
use crate::store::{EventRow, EventType, ReadError, ReadResult, StoreRead};

/// `provider.response` rows asked for per read while looking for the
/// newest usage (most sessions find it in the first page: compaction calls
/// and failed attempts are the only rows skipped).
pub const USAGE_PAGE: usize = 16;

/// The provider-facing message types, in the order they are asked for.
const MESSAGE_TYPES: [EventType; 2] = [EventType::ClientMessageSend, EventType::ServerMessageSend];

/// Provider-facing history of a session as reconstructed from the log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistoryLoad {
    /// `client.message.send` / `server.message.send` rows at or after the
    /// compaction lower bound (spec 07 §6), in order, as `(seq, event_type,
    /// payload)`.
    pub messages: Vec<(u64, String, Value)>,
    /// `usage` of the newest successful non-compaction `provider.response`:
    /// `None` = no such event; `Some(None)` = it had no usable usage.
    pub newest_usage: Option<Option<(u64, u64)>>,
}

/// The provider-facing history of a load (spec 05 §8), as request text.
pub fn history_text(load: &HistoryLoad) -> proto::provider::HistoryText {
    let mut h = proto::provider::HistoryText::new();
    for (_, et, payload) in &load.messages {
        h.push(&proto::provider::history_message(et, payload));
    }
    h
}

/// An unfinished load: which answer it waits for and what it has so far.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryLoader {
    session_id: SessionId,
    stage: Stage,
    messages: Vec<(u64, String, Value)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// The newest `session.compaction.completed` (0 or 1 row).
    Compaction,
    /// The event named by `preamble_event_id`; `summary` is the fallback.
    Preamble { summary: Option<String> },
    /// The event named by `summary_event_id`.
    Summary,
    /// The message rows from the bound on.
    Messages,
    /// A page of `provider.response` rows older than `before_seq`.
    Usage { before_seq: Option<u64> },
}

/// What a load needs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Answer this read and pass the result to [`HistoryLoader::advance`].
    Read(HistoryLoader, StoreRead),
    Done(HistoryLoad),
    /// A read failed (or was answered with the wrong kind of result).
    Failed(ReadError),
}

impl HistoryLoader {
    /// A load of `session_id`'s history and the first read it needs.
    pub fn start(session_id: &SessionId) -> (HistoryLoader, StoreRead) {
        let loader = HistoryLoader {
            session_id: session_id.clone(),
            stage: Stage::Compaction,
            messages: Vec::new(),
        };
        let read = loader.latest(EventType::SessionCompactionCompleted, None, 1);
        (loader, read)
    }

    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// Takes the answer to the read last asked for.
    pub fn advance(mut self, result: Result<ReadResult, ReadError>) -> Progress {
        let rows = match result {
            Ok(ReadResult::Events(rows)) => rows,
            Ok(other) => return Progress::Failed(ReadError::HistoryAnswer(Box::new(other))),
            Err(e) => return Progress::Failed(e),
        };
        match std::mem::replace(&mut self.stage, Stage::Messages) {
            Stage::Compaction => {
                let Some(done) = rows.first() else {
                    return self.messages_from(0);
                };
                let p = payload(done);
                let id = |key: &str| p.get(key).and_then(Value::as_str).map(str::to_string);
                match (id("preamble_event_id"), id("summary_event_id")) {
                    (Some(preamble), summary) => {
                        self.resolve(Stage::Preamble { summary }, preamble)
                    }
                    (None, Some(summary)) => self.resolve(Stage::Summary, summary),
                    (None, None) => self.messages_from(0),
                }
            }
            Stage::Preamble { summary } => match resolved(&rows, &[EventType::ServerMessageSend]) {
                Some(seq) => self.messages_from(seq),
                None => match summary {
                    Some(summary) => self.resolve(Stage::Summary, summary),
                    None => self.messages_from(0),
                },
            },
            Stage::Summary => {
                let bound = resolved(&rows, &MESSAGE_TYPES).unwrap_or(0);
                self.messages_from(bound)
            }
            Stage::Messages => {
                self.messages = rows
                    .into_iter()
                    .map(|r| {
                        let p = payload(&r);
                        (r.seq, r.event_type, p)
                    })
                    .collect();
                self.usage_page(None)
            }
            Stage::Usage { before_seq } => {
                for row in &rows {
                    let p = payload(row);
                    if p.get("ok") == Some(&Value::Bool(true)) && p.get("purpose").is_none() {
                        return self.done(Some(usage(&p)));
                    }
                }
                // A full page may have older rows behind it. The next page
                // must start strictly lower, so the walk always ends.
                let oldest = rows.iter().map(|r| r.seq).min();
                match oldest {
                    Some(oldest)
                        if rows.len() >= USAGE_PAGE && before_seq.is_none_or(|b| oldest < b) =>
                    {
                        self.usage_page(Some(oldest))
                    }
                    _ => self.done(None),
                }
            }
        }
    }

    fn latest(&self, event_type: EventType, before_seq: Option<u64>, limit: usize) -> StoreRead {
        StoreRead::LatestOfType {
            session_id: self.session_id.to_string(),
            event_type,
            before_seq,
            limit,
        }
    }

    fn resolve(mut self, stage: Stage, event_id: String) -> Progress {
        self.stage = stage;
        let read = StoreRead::EventById {
            session_id: self.session_id.to_string(),
            event_id,
        };
        Progress::Read(self, read)
    }

    fn messages_from(mut self, bound: u64) -> Progress {
        self.stage = Stage::Messages;
        let read = StoreRead::OfTypesFrom {
            session_id: self.session_id.to_string(),
            event_types: MESSAGE_TYPES.to_vec(),
            from_seq: bound,
        };
        Progress::Read(self, read)
    }

    fn usage_page(mut self, before_seq: Option<u64>) -> Progress {
        self.stage = Stage::Usage { before_seq };
        let read = self.latest(EventType::ProviderResponse, before_seq, USAGE_PAGE);
        Progress::Read(self, read)
    }

    fn done(self, newest_usage: Option<Option<(u64, u64)>>) -> Progress {
        Progress::Done(HistoryLoad {
            messages: self.messages,
            newest_usage,
        })
    }
}

/// Runs a whole load against a store answered in place (benches, tests and
/// tools that hold a store directly).
pub fn load(
    session_id: &str,
    mut answer: impl FnMut(&StoreRead) -> Result<ReadResult, ReadError>,
) -> Result<HistoryLoad, ReadError> {
    let (mut loader, mut read) = HistoryLoader::start(&SessionId::new(session_id));
    loop {
        let result = answer(&read);
        match loader.advance(result) {
            Progress::Read(next, next_read) => {
                loader = next;
                read = next_read;
            }
            Progress::Done(load) => return Ok(load),
            Progress::Failed(e) => return Err(e),
        }
    }
}

/// The payload, or `null` when it does not parse.
fn payload(row: &EventRow) -> Value {
    serde_json::from_str(&row.payload).unwrap_or(Value::Null)
}

/// The seq of an `EventById` answer when its type is one of `types`.
fn resolved(rows: &[EventRow], types: &[EventType]) -> Option<u64> {
    rows.first()
        .filter(|r| types.iter().any(|t| r.event_type == t.as_str()))
        .map(|r| r.seq)
}

/// `usage.input_tokens` / `usage.output_tokens` when both are u64s.
fn usage(p: &Value) -> Option<(u64, u64)> {
    let u = p.get("usage")?;
    let tokens = |key: &str| u.get(key).and_then(Value::as_u64);
    Some((tokens("input_tokens")?, tokens("output_tokens")?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mem_store::MemStore;
    use crate::store::StoreWrite;

    const S: &str = "ses_1";

    fn eid(seq: u64) -> String {
        format!("evt_{seq:032x}")
    }

    fn row(seq: u64, session: &str, ty: EventType, payload: &str) -> StoreWrite {
        StoreWrite::InsertEvent(EventRow {
            seq,
            id: eid(seq),
            session_id: session.into(),
            client_key_id: Some("key_1".into()),
            event_type: ty.as_str().into(),
            payload: payload.into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        })
    }

    fn ev(seq: u64, ty: EventType, payload: Value) -> StoreWrite {
        row(seq, S, ty, &payload.to_string())
    }

    /// Messages at seq 1..=8 (client on odd, server on even), plus a
    /// message and a response of another session at 9 and 10.
    fn fixture() -> MemStore {
        let mut m = MemStore::default();
        for seq in 1..=8 {
            let ty = if seq % 2 == 1 {
                EventType::ClientMessageSend
            } else {
                EventType::ServerMessageSend
            };
            m.apply(&ev(seq, ty, json!({"n": seq})));
        }
        m.apply(&row(9, "ses_2", EventType::ServerMessageSend, "{}"));
        m.apply(&row(
            10,
            "ses_2",
            EventType::ProviderResponse,
            r#"{"ok":true,"usage":{"input_tokens":9,"output_tokens":9}}"#,
        ));
        m
    }

    fn run(m: &MemStore) -> HistoryLoad {
        load(S, |r| Ok(m.read(r))).unwrap()
    }

    /// The reads a load made, in order.
    fn reads(m: &MemStore) -> Vec<StoreRead> {
        let mut seen = Vec::new();
        load(S, |r| {
            seen.push(r.clone());
            Ok(m.read(r))
        })
        .unwrap();
        seen
    }

    fn seqs(h: &HistoryLoad) -> Vec<u64> {
        h.messages.iter().map(|m| m.0).collect()
    }

    fn compaction(seq: u64, payload: Value) -> StoreWrite {
        ev(seq, EventType::SessionCompactionCompleted, payload)
    }

    fn response(seq: u64, payload: Value) -> StoreWrite {
        ev(seq, EventType::ProviderResponse, payload)
    }

    #[test]
    fn no_compaction_gives_every_message() {
        let m = fixture();
        let h = run(&m);
        assert_eq!(seqs(&h), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(h.messages[0].1, "client.message.send");
        assert_eq!(h.messages[1].1, "server.message.send");
        assert_eq!(h.messages[0].2, json!({"n": 1}));
        assert_eq!(h.newest_usage, None);
        assert_eq!(
            reads(&m),
            [
                StoreRead::LatestOfType {
                    session_id: S.into(),
                    event_type: EventType::SessionCompactionCompleted,
                    before_seq: None,
                    limit: 1,
                },
                StoreRead::OfTypesFrom {
                    session_id: S.into(),
                    event_types: MESSAGE_TYPES.to_vec(),
                    from_seq: 0,
                },
                StoreRead::LatestOfType {
                    session_id: S.into(),
                    event_type: EventType::ProviderResponse,
                    before_seq: None,
                    limit: USAGE_PAGE,
                },
            ]
        );
    }

    #[test]
    fn bound_from_the_newest_preamble() {
        let mut m = fixture();
        m.commit(&[
            // Superseded by the newer one.
            compaction(
                11,
                json!({"preamble_event_id": eid(2), "summary_event_id": eid(3)}),
            ),
            compaction(
                12,
                json!({"preamble_event_id": eid(6), "summary_event_id": eid(3)}),
            ),
            ev(13, EventType::SessionCompactionStarted, json!({})),
        ]);
        assert_eq!(seqs(&run(&m)), [6, 7, 8]);
        // The summary is not looked up once the preamble resolved.
        let r = reads(&m);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[1],
            StoreRead::EventById {
                session_id: S.into(),
                event_id: eid(6),
            }
        );
    }

    #[test]
    fn falls_back_to_the_summary() {
        let mut m = fixture();
        // No preamble (legacy compaction): the summary gives the bound.
        m.apply(&compaction(11, json!({"summary_event_id": eid(5)})));
        assert_eq!(seqs(&run(&m)), [5, 6, 7, 8]);
        assert_eq!(reads(&m).len(), 4);
        // A preamble that names no event: the summary still counts.
        m.apply(&compaction(
            12,
            json!({"preamble_event_id": "evt_missing", "summary_event_id": eid(4)}),
        ));
        assert_eq!(seqs(&run(&m)), [4, 5, 6, 7, 8]);
        assert_eq!(reads(&m).len(), 5);
    }

    #[test]
    fn ids_of_the_wrong_type_or_session_are_ignored() {
        let mut m = fixture();
        m.apply(&ev(11, EventType::ToolCall, json!({})));
        // A preamble must be a server message; a client one is skipped and
        // the summary (a client message) is used.
        m.apply(&compaction(
            12,
            json!({"preamble_event_id": eid(3), "summary_event_id": eid(5)}),
        ));
        assert_eq!(seqs(&run(&m)), [5, 6, 7, 8]);
        // A summary that is not a message: no bound.
        m.apply(&compaction(
            13,
            json!({"preamble_event_id": eid(11), "summary_event_id": eid(11)}),
        ));
        assert_eq!(seqs(&run(&m)).len(), 8);
        // Events of another session do not resolve.
        m.apply(&compaction(
            14,
            json!({"preamble_event_id": eid(9), "summary_event_id": eid(9)}),
        ));
        assert_eq!(seqs(&run(&m)).len(), 8);
        // Non-string ids name nothing (and are not looked up).
        m.apply(&compaction(
            15,
            json!({"preamble_event_id": 6, "summary_event_id": null}),
        ));
        assert_eq!(seqs(&run(&m)).len(), 8);
        assert_eq!(reads(&m).len(), 3);
    }

    #[test]
    fn unparsable_payloads() {
        let mut m = fixture();
        m.apply(&row(
            11,
            S,
            EventType::SessionCompactionCompleted,
            "{not json",
        ));
        m.apply(&row(12, S, EventType::ClientMessageSend, "{not json"));
        m.apply(&row(13, S, EventType::ProviderResponse, "{not json"));
        let h = run(&m);
        // The compaction names nothing: full history.
        assert_eq!(seqs(&h), [1, 2, 3, 4, 5, 6, 7, 8, 12]);
        // A message that does not parse reads as null.
        assert_eq!(h.messages[8].2, Value::Null);
        // A response that does not parse is not a successful one.
        assert_eq!(h.newest_usage, None);
    }

    #[test]
    fn newest_successful_non_compaction_usage() {
        let mut m = fixture();
        m.commit(&[
            response(
                11,
                json!({"ok": true, "usage": {"input_tokens": 100, "output_tokens": 20}}),
            ),
            response(
                12,
                json!({"ok": true, "purpose": "compaction",
                       "usage": {"input_tokens": 1, "output_tokens": 1}}),
            ),
            response(
                13,
                json!({"ok": false, "usage": {"input_tokens": 2, "output_tokens": 2}}),
            ),
            // `purpose` present even when null.
            response(
                14,
                json!({"ok": true, "purpose": null,
                       "usage": {"input_tokens": 3, "output_tokens": 3}}),
            ),
            // `ok` must be the boolean true.
            response(
                15,
                json!({"ok": "true", "usage": {"input_tokens": 4, "output_tokens": 4}}),
            ),
        ]);
        assert_eq!(run(&m).newest_usage, Some(Some((100, 20))));
    }

    #[test]
    fn unusable_usage_is_some_none() {
        for usage in [
            json!(null),
            json!({"input_tokens": 5}),
            json!({"input_tokens": 5, "output_tokens": 1.5}),
            json!({"input_tokens": -1, "output_tokens": 1}),
            json!({"input_tokens": "5", "output_tokens": 1}),
        ] {
            let mut m = fixture();
            m.apply(&response(11, json!({"ok": true, "usage": usage})));
            assert_eq!(run(&m).newest_usage, Some(None), "{usage}");
        }
        let mut m = fixture();
        m.apply(&response(11, json!({"ok": true})));
        assert_eq!(run(&m).newest_usage, Some(None));
        // Large but valid u64 counts are kept.
        let mut m = fixture();
        m.apply(&response(
            11,
            json!({"ok": true, "usage": {"input_tokens": u64::MAX, "output_tokens": 0}}),
        ));
        assert_eq!(run(&m).newest_usage, Some(Some((u64::MAX, 0))));
    }

    /// `n` responses from `first` on that never qualify (compaction calls
    /// and failed attempts, alternating).
    fn skipped(m: &mut MemStore, first: u64, n: u64) {
        for seq in first..first + n {
            m.apply(&response(
                seq,
                if seq % 2 == 0 {
                    json!({"ok": true, "purpose": "compaction",
                           "usage": {"input_tokens": 1, "output_tokens": 1}})
                } else {
                    json!({"ok": false})
                },
            ));
        }
    }

    #[test]
    fn usage_is_found_across_pages() {
        let mut m = fixture();
        m.apply(&response(
            11,
            json!({"ok": true, "usage": {"input_tokens": 7, "output_tokens": 8}}),
        ));
        // Interleaved with other events, so pages are of responses only.
        skipped(&mut m, 12, 2 * USAGE_PAGE as u64 + 3);
        m.apply(&ev(100, EventType::ToolCall, json!({})));
        let h = run(&m);
        assert_eq!(h.newest_usage, Some(Some((7, 8))));
        let r = reads(&m);
        let pages: Vec<_> = r
            .iter()
            .filter_map(|r| match r {
                StoreRead::LatestOfType {
                    event_type: EventType::ProviderResponse,
                    before_seq,
                    ..
                } => Some(*before_seq),
                _ => None,
            })
            .collect();
        // 35 skipped rows at 12..=46: pages end at 31 and 15.
        assert_eq!(pages, [None, Some(31), Some(15)]);
    }

    #[test]
    fn usage_walk_ends_when_nothing_qualifies() {
        // Exactly one full page: one more (empty) page ends the walk.
        let mut m = fixture();
        skipped(&mut m, 11, USAGE_PAGE as u64);
        assert_eq!(run(&m).newest_usage, None);
        assert_eq!(reads(&m).len(), 4);
        // A short page ends it at once.
        let mut m = fixture();
        skipped(&mut m, 11, USAGE_PAGE as u64 + 1);
        assert_eq!(run(&m).newest_usage, None);
        assert_eq!(reads(&m).len(), 4);
    }

    #[test]
    fn a_store_that_ignores_before_seq_cannot_loop() {
        let mut m = fixture();
        skipped(&mut m, 11, USAGE_PAGE as u64);
        let mut n = 0;
        let h = load(S, |r| {
            n += 1;
            let r = match r {
                StoreRead::LatestOfType {
                    session_id,
                    event_type,
                    limit,
                    ..
                } => StoreRead::LatestOfType {
                    session_id: session_id.clone(),
                    event_type: *event_type,
                    before_seq: None,
                    limit: *limit,
                },
                other => other.clone(),
            };
            Ok(m.read(&r))
        })
        .unwrap();
        assert_eq!(h.newest_usage, None);
        assert_eq!(n, 4);
    }

    #[test]
    fn a_failed_read_at_any_step_fails_the_load() {
        let mut m = fixture();
        m.apply(&compaction(
            11,
            json!({"preamble_event_id": eid(3), "summary_event_id": eid(5)}),
        ));
        skipped(&mut m, 12, USAGE_PAGE as u64 + 2);
        let total = reads(&m).len();
        // Compaction, preamble, summary, messages, two usage pages.
        assert_eq!(total, 6);
        for fail_at in 0..total {
            let mut i = 0;
            let r = load(S, |r| {
                i += 1;
                if i - 1 == fail_at {
                    Err(ReadError::Store("disk on fire".to_string()))
                } else {
                    Ok(m.read(r))
                }
            });
            let e = r.unwrap_err();
            assert_eq!(
                e,
                ReadError::Store("disk on fire".to_string()),
                "read {fail_at}"
            );
            assert_eq!(e.to_string(), "disk on fire");
            assert_eq!(i, fail_at + 1, "no read after the failure");
        }
        // The wrong kind of answer is a failure too.
        let r = load(S, |_| Ok(ReadResult::EventSeq(Some(1))));
        let e = r.unwrap_err();
        assert_eq!(
            e.to_string(),
            "history read answered with EventSeq(Some(1))"
        );
    }
}
