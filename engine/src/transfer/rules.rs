//! The event log's turn structure read from the log alone (no live state):
//! where the provider-facing history is complete, so that a fork may start
//! there; where each turn ends, so that a rewind can name a turn; and the
//! message rules every log keeps, which an imported one must keep too.
//!
//! A log is a sequence of turns serialised by the turn gate. Only four
//! kinds of event move the structure: `client.message.send` (a turn starts
//! or continues), `server.message.send` (an answer ends it, a paused
//! message parks it, a compaction's preamble and summary are its commit),
//! `session.compaction.completed`, and the `session.error`s that end a turn.
//! Everything else (provider and tool records, joins, registrations,
//! sandbox and subagent lifecycle, a compaction attempt before its commit)
//! leaves it where it is: a compaction attempt changes no history until its
//! three records commit together. `session.close` and the errors that move
//! a session to `error` end the log's history: nothing after them is a
//! point a new session can continue from.

use proto::wire::{EventType, SessionState};
use serde_json::Value;

/// Where the log stands after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The history is complete: before the first turn, after a turn ended
    /// (answered or failed), after a compaction.
    Complete,
    /// A turn's user message is logged and its end is not (it runs, or it
    /// was cut short by a cancel or a restart and the next turn has not
    /// ended yet).
    Running,
    /// A turn paused for client tool results.
    Paused,
    /// Inside a compaction's commit: its preamble (and summary) without its
    /// completion.
    Committing,
    /// The session ended here (`session.close`, or an error that moved it
    /// to `error`).
    Ended,
}

/// What a message payload says about the turn structure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageFacts {
    /// `role` is `user` (absent counts as assistant).
    pub user: bool,
    /// The `synthetic` marker, if any.
    pub synthetic: Option<String>,
    /// Ids of its `tool_use` blocks, in order.
    pub tool_uses: Vec<String>,
    /// Some `tool_use` block carries `dispatch`: the turn paused.
    pub paused: bool,
    /// `tool_use_id`s of its `tool_result` blocks, in order.
    pub tool_results: Vec<String>,
}

impl MessageFacts {
    pub fn of(payload: &Value) -> MessageFacts {
        let blocks = payload.get("content").and_then(Value::as_array);
        let of_type = |t: &'static str| {
            blocks
                .into_iter()
                .flatten()
                .filter(move |b| b.get("type").and_then(Value::as_str) == Some(t))
        };
        let id = |b: &Value, k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        MessageFacts {
            user: payload.get("role").and_then(Value::as_str) == Some("user"),
            synthetic: (payload.get("synthetic").and_then(Value::as_str)).map(str::to_string),
            tool_uses: of_type("tool_use").map(|b| id(b, "id")).collect(),
            paused: of_type("tool_use").any(|b| b.get("dispatch").is_some()),
            tool_results: of_type("tool_result")
                .map(|b| id(b, "tool_use_id"))
                .collect(),
        }
    }
}

/// `session.error` reasons that move a live session to `error` (spec 02
/// §3), ending the turn that logged them.
const SESSION_ENDING_ERRORS: [&str; 5] = [
    "all_providers_failed",
    "loop_limit",
    "provider_config",
    "profile_unavailable",
    "tool_result_merge_invalid",
];

/// Walks a log event by event (see the module docs).
#[derive(Debug, Clone)]
pub struct Walker {
    point: Point,
    /// Turns started from a complete history.
    pub turns_started: u64,
    /// Times a turn ended (answered, retired, or failed).
    pub turns_ended: u64,
    /// The state the log's end left the session in, once it ended.
    pub ending: Option<SessionState>,
}

impl Default for Walker {
    fn default() -> Self {
        Walker {
            point: Point::Complete,
            turns_started: 0,
            turns_ended: 0,
            ending: None,
        }
    }
}

impl Walker {
    /// Where the log stands after the events seen so far.
    pub fn point(&self) -> Point {
        self.point
    }

    /// Takes one event; `payload` is read only for message and error
    /// events (a large `provider.request` is never parsed).
    pub fn step(&mut self, event_type: EventType, payload: &str) {
        if self.point == Point::Ended {
            return;
        }
        match event_type {
            EventType::ClientMessageSend => {
                if self.point == Point::Complete {
                    self.turns_started += 1;
                }
                self.point = Point::Running;
            }
            EventType::ServerMessageSend => {
                let facts = MessageFacts::of(&parse(payload));
                self.message(&facts);
            }
            EventType::SessionCompactionCompleted => self.point = Point::Complete,
            EventType::SessionClose => self.end(SessionState::Closed),
            EventType::SessionError => {
                let p = parse(payload);
                let reason = p.get("reason").and_then(Value::as_str).unwrap_or("");
                if SESSION_ENDING_ERRORS.contains(&reason) {
                    if self.point == Point::Running {
                        self.turns_ended += 1;
                    }
                    self.end(SessionState::Error);
                }
            }
            _ => {}
        }
    }

    fn message(&mut self, facts: &MessageFacts) {
        match facts.synthetic.as_deref() {
            Some("compaction_preamble") => self.point = Point::Committing,
            // A compaction retired an expired pause: every paused tool_use
            // now has its result, and that turn is over.
            Some("abandoned_tool_results") => self.ended(),
            _ if facts.user => {}
            // The summary, between its preamble and its completion.
            _ if self.point == Point::Committing => {}
            _ if facts.paused => self.point = Point::Paused,
            _ => self.ended(),
        }
    }

    fn ended(&mut self) {
        if self.point != Point::Complete {
            self.turns_ended += 1;
        }
        self.point = Point::Complete;
    }

    fn end(&mut self, state: SessionState) {
        self.point = Point::Ended;
        self.ending = Some(state);
    }
}

/// The payload, or `null` when it does not parse.
fn parse(payload: &str) -> Value {
    serde_json::from_str(payload).unwrap_or(Value::Null)
}

/// The rule every log keeps between its messages: an assistant message's
/// `tool_use`s are all answered by `tool_result`s in the next message,
/// which is a user message; a `tool_result` answers a `tool_use` of the
/// message right before it; only the last message may leave its
/// `tool_use`s unanswered, and only as a pause with an owner (the client
/// key it is attributed to). Providers refuse histories that break it.
#[derive(Debug, Default)]
pub struct MessageRules {
    /// The unanswered `tool_use`s of the last assistant message: where it
    /// is (a line number), its ids, whether it is a pause with an owner.
    open: Option<(usize, Vec<String>, bool)>,
}

impl MessageRules {
    /// Takes the message logged at `line` (attributed to `owner`).
    pub fn message(
        &mut self,
        line: usize,
        facts: &MessageFacts,
        owner: Option<&str>,
    ) -> Result<(), RuleBroken> {
        let answering = self.open.take();
        if facts.user {
            let expected = answering.as_ref().map_or(&[][..], |(_, ids, _)| ids);
            if let Some(orphan) = (facts.tool_results.iter()).find(|id| !expected.contains(id)) {
                return Err(RuleBroken::OrphanResult {
                    line,
                    id: orphan.clone(),
                });
            }
            if let Some((at, ids, _)) = &answering {
                if let Some(open) = ids.iter().find(|id| !facts.tool_results.contains(id)) {
                    return Err(RuleBroken::unanswered(*at, open, Some(line)));
                }
            }
            return Ok(());
        }
        if let Some((at, ids, _)) = &answering {
            let first = ids.first().map_or("", String::as_str);
            return Err(RuleBroken::unanswered(*at, first, Some(line)));
        }
        if facts.paused && owner.is_none() {
            return Err(RuleBroken::PauseWithoutOwner { line });
        }
        if !facts.tool_uses.is_empty() {
            self.open = Some((line, facts.tool_uses.clone(), facts.paused));
        }
        Ok(())
    }

    /// The log ended: only a pause may be left unanswered.
    pub fn finish(self) -> Result<(), RuleBroken> {
        match self.open {
            Some((at, ids, false)) => {
                let first = ids.first().map_or("", String::as_str);
                Err(RuleBroken::unanswered(at, first, None))
            }
            _ => Ok(()),
        }
    }
}

/// Which of the [`MessageRules`] a log breaks, and where (line numbers of
/// the document). `Display` is the import's `invalid_document` detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleBroken {
    /// A `tool_result` at `line` answers no `tool_use` of the message
    /// before it.
    OrphanResult { line: usize, id: String },
    /// The `tool_use` `id` of the message at `at` is not answered before
    /// the message at `before` (`None`: the end of the log).
    Unanswered {
        at: usize,
        id: String,
        before: Option<usize>,
    },
    /// A paused assistant message at `line` names no owner.
    PauseWithoutOwner { line: usize },
}

impl RuleBroken {
    fn unanswered(at: usize, id: &str, before: Option<usize>) -> Self {
        RuleBroken::Unanswered {
            at,
            id: id.to_string(),
            before,
        }
    }
}

impl std::fmt::Display for RuleBroken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleBroken::OrphanResult { line, id } => write!(
                f,
                "line {line}: tool_result {id:?} answers no tool_use of the \
                 assistant message before it"
            ),
            RuleBroken::Unanswered { at, id, before } => {
                write!(
                    f,
                    "line {at}: tool_use {id:?} has no tool_result in the user message that \
                     follows it (before "
                )?;
                match before {
                    Some(line) => write!(f, "line {line})"),
                    None => f.write_str("the end of the log)"),
                }
            }
            RuleBroken::PauseWithoutOwner { line } => write!(
                f,
                "line {line}: a paused assistant message (tool_use with \"dispatch\") \
                 must be attributed to its owner's client key"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn walk(events: &[(EventType, Value)]) -> Walker {
        let mut w = Walker::default();
        for (t, p) in events {
            w.step(*t, &p.to_string());
        }
        w
    }

    fn user(text: &str) -> (EventType, Value) {
        (
            EventType::ClientMessageSend,
            json!({"role": "user", "content": text}),
        )
    }

    fn answer() -> (EventType, Value) {
        (
            EventType::ServerMessageSend,
            json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
        )
    }

    fn paused() -> (EventType, Value) {
        let block = json!({"type": "tool_use", "id": "tu_1", "name": "t", "input": {}, "dispatch": "client"});
        (
            EventType::ServerMessageSend,
            json!({"role": "assistant", "content": [block]}),
        )
    }

    fn other(t: EventType) -> (EventType, Value) {
        (t, json!({}))
    }

    #[test]
    fn a_text_turn_is_complete_once_answered() {
        let mut w = walk(&[other(EventType::SessionOpen)]);
        assert_eq!(w.point(), Point::Complete);
        for (e, at) in [
            (user("hi"), Point::Running),
            (other(EventType::ProviderRequest), Point::Running),
            (other(EventType::ProviderResponse), Point::Running),
            (answer(), Point::Complete),
            (other(EventType::SessionJoin), Point::Complete),
        ] {
            w.step(e.0, &e.1.to_string());
            assert_eq!(w.point(), at, "{e:?}");
        }
        assert_eq!((w.turns_started, w.turns_ended), (1, 1));
    }

    #[test]
    fn a_pause_is_incomplete_until_its_continuation_is_answered() {
        let w = walk(&[user("a"), paused()]);
        assert_eq!(w.point(), Point::Paused);
        let abandon = (
            EventType::SessionError,
            json!({"reason": "driver_turn_abandoned"}),
        );
        let w = walk(&[user("a"), paused(), abandon.clone()]);
        assert_eq!(w.point(), Point::Paused);
        let w = walk(&[user("a"), paused(), user("results"), answer()]);
        assert_eq!(w.point(), Point::Complete);
        assert_eq!((w.turns_started, w.turns_ended), (1, 1));
    }

    #[test]
    fn a_compaction_commit_is_incomplete_until_its_completion() {
        let pre = (
            EventType::ServerMessageSend,
            json!({"role": "user", "content": [], "synthetic": "compaction_preamble"}),
        );
        let mut events = vec![
            user("a"),
            answer(),
            other(EventType::SessionCompactionStarted),
            other(EventType::ProviderRequest),
            other(EventType::ProviderResponse),
        ];
        assert_eq!(walk(&events).point(), Point::Complete);
        events.push(pre);
        assert_eq!(walk(&events).point(), Point::Committing);
        events.push(answer());
        assert_eq!(walk(&events).point(), Point::Committing);
        events.push(other(EventType::SessionCompactionCompleted));
        let w = walk(&events);
        assert_eq!(w.point(), Point::Complete);
        assert_eq!(w.turns_ended, 1, "a compaction is not a turn");
    }

    #[test]
    fn a_failed_turn_or_a_close_ends_the_log() {
        let failed = (
            EventType::SessionError,
            json!({"reason": "all_providers_failed", "attempts": 1}),
        );
        let w = walk(&[user("a"), failed.clone()]);
        assert_eq!((w.point(), w.turns_ended), (Point::Ended, 1));
        assert_eq!(w.ending, Some(SessionState::Error));
        let close = (EventType::SessionClose, json!({"reason": "client_close"}));
        let w = walk(&[user("a"), answer(), close, user("late")]);
        assert_eq!(
            (w.point(), w.ending),
            (Point::Ended, Some(SessionState::Closed))
        );
        let step_error = (
            EventType::SessionError,
            json!({"reason": "provider_call_failed"}),
        );
        assert_eq!(walk(&[user("a"), step_error]).point(), Point::Running);
        // A cancelled running turn leaves no end: the next one's answer ends both.
        let w = walk(&[user("a"), user("b"), answer()]);
        assert_eq!((w.turns_started, w.turns_ended), (1, 1));
    }

    fn facts(v: Value) -> MessageFacts {
        MessageFacts::of(&v)
    }

    #[test]
    fn message_rules_answer_every_tool_use() {
        let use_ = facts(
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a"}, {"type": "tool_use", "id": "b"}]}),
        );
        let both = facts(
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}, {"type": "tool_result", "tool_use_id": "b"}]}),
        );
        let one = facts(
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]}),
        );
        let text = facts(json!({"role": "assistant", "content": "x"}));

        let mut r = MessageRules::default();
        r.message(1, &use_, Some("k")).unwrap();
        r.message(2, &both, Some("k")).unwrap();
        r.finish().unwrap();

        let mut r = MessageRules::default();
        r.message(1, &use_, Some("k")).unwrap();
        let e = r.message(2, &one, Some("k")).unwrap_err();
        assert!(e.to_string().contains("\"b\""), "{e}");

        let mut r = MessageRules::default();
        r.message(1, &use_, Some("k")).unwrap();
        assert!(r.message(2, &text, Some("k")).is_err());

        let mut r = MessageRules::default();
        let e = r.message(1, &one, Some("k")).unwrap_err();
        assert!(matches!(e, RuleBroken::OrphanResult { line: 1, .. }), "{e}");

        let mut r = MessageRules::default();
        r.message(1, &use_, Some("k")).unwrap();
        let e = r.finish().unwrap_err();
        assert!(
            matches!(e, RuleBroken::Unanswered { before: None, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_pause_may_end_the_log_when_it_has_an_owner() {
        let pause = facts(
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "dispatch": "client"}]}),
        );
        let mut r = MessageRules::default();
        r.message(3, &pause, Some("key_1")).unwrap();
        r.finish().unwrap();
        let mut r = MessageRules::default();
        let e = r.message(3, &pause, None).unwrap_err();
        assert_eq!(e, RuleBroken::PauseWithoutOwner { line: 3 });
    }

    /// The texts an import's `invalid_document` detail carries, byte for
    /// byte.
    #[test]
    fn each_broken_rule_renders_its_wire_text() {
        let texts = [
            (
                RuleBroken::OrphanResult { line: 4, id: "tu_9".into() },
                "line 4: tool_result \"tu_9\" answers no tool_use of the assistant message before it",
            ),
            (
                RuleBroken::unanswered(2, "tu_1", Some(3)),
                "line 2: tool_use \"tu_1\" has no tool_result in the user message that follows it (before line 3)",
            ),
            (
                RuleBroken::unanswered(2, "tu_1", None),
                "line 2: tool_use \"tu_1\" has no tool_result in the user message that follows it (before the end of the log)",
            ),
            (
                RuleBroken::PauseWithoutOwner { line: 5 },
                "line 5: a paused assistant message (tool_use with \"dispatch\") must be attributed to its owner's client key",
            ),
        ];
        for (e, text) in texts {
            assert_eq!(e.to_string(), text);
        }
    }
}
