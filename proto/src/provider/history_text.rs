//! A session's provider-facing history as the text its requests send,
//! kept and extended message by message.
//!
//! Every provider call sends the whole history. Joining it again for every
//! call made a long session's turns cost the server time in proportion to
//! its length, and a history held as value trees weighed about four times
//! its text, so the history cache gave long sessions up and every turn read
//! them back from the log. A [`HistoryText`] keeps text only: every
//! message's stripped compact JSON (§6.1 step 1) in one string, with what a
//! request needs to know of each (its role, where a cache breakpoint may
//! go), and, once a request of that kind needs them, the Anthropic
//! normalised runs (§6.1 steps 2–4) and the OpenAI translation (§6.2). A
//! request copies those bytes once into its body and once into its
//! `provider.request` payload (`request_text.rs`).
//!
//! Appending never changes what earlier messages render as, so the text a
//! request sends for the history's first messages is the same from call to
//! call: the stable prefix prompt caching needs.

use std::borrow::Cow;

use serde_json::Value;

use super::normalize::fold;
use super::{content_blocks, openai, strip_one, to_json_text};

mod chunks;

use chunks::{Chunks, Pos};

/// A message's `role`, as runs compare it (§6.1 step 3: equal values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Role {
    User,
    Assistant,
    /// Any other value, as its JSON text.
    Other(Box<str>),
    /// No `role` member (or not an object).
    Missing,
}

impl Role {
    pub(super) fn of(m: &Value) -> Role {
        match m.get("role") {
            None => Role::Missing,
            Some(Value::String(s)) if s == "user" => Role::User,
            Some(Value::String(s)) if s == "assistant" => Role::Assistant,
            Some(v) => Role::Other(to_json_text(v).into_boxed_str()),
        }
    }
}

/// One message of the history (24 bytes: a long session holds thousands).
#[derive(Debug, Clone)]
struct Entry {
    /// Where its text starts in [`HistoryText::plain`].
    start: Pos,
    len: u32,
    /// Offset in its text of the closing brace of its last block that can
    /// carry a cache breakpoint (array content only; see [`mark_in`]), plus
    /// one; 0 for none.
    mark: u32,
    /// 0 user, 1 assistant, 2 no role, 3 + i: `other_roles[i]`.
    role: u32,
}

impl Entry {
    fn end(&self) -> Pos {
        Pos {
            at: self.start.at + self.len,
            ..self.start
        }
    }

    fn mark(&self) -> Option<usize> {
        (self.mark as usize).checked_sub(1)
    }
}

/// A run of two or more messages of equal role, folded into one (§6.1
/// step 3), rendered once and extended as members join.
#[derive(Debug, Clone)]
struct Folded {
    text: String,
    /// Blocks in its content array.
    blocks: usize,
    mark: Option<usize>,
    /// Its text ends with the content array (`…]}`): a new member's blocks
    /// are appended in place; otherwise the run is folded again.
    appendable: bool,
}

/// A run of equal role: its first message and size, and when two or more,
/// its folded rendering in [`HistoryText::folds`].
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u32,
    count: u32,
    folded: Option<u32>,
}

/// The OpenAI translation of every message (§6.2).
#[derive(Debug, Clone, Default)]
struct Translated {
    text: Chunks,
    /// Per message, the end of the last translation at or before it.
    ends: Vec<Option<Pos>>,
}

/// A session's provider-facing history as request text.
#[derive(Debug, Clone, Default)]
pub struct HistoryText {
    /// Every message's stripped compact JSON, joined by `,`.
    plain: Chunks,
    entries: Vec<Entry>,
    /// Roles other than `user` and `assistant`, as JSON text.
    other_roles: Vec<Box<str>>,
    /// Anthropic runs, once a request of that kind needed them.
    runs: Option<Vec<Run>>,
    folds: Vec<Folded>,
    openai: Option<Translated>,
}

/// A piece of a rendered message list: one or more whole messages' JSON
/// (joined by `,`), with the offset in it of the closing brace where a
/// cache breakpoint may go (the last such place in the piece).
#[derive(Debug, Clone)]
pub(super) struct Piece<'a> {
    pub text: Cow<'a, str>,
    pub mark: Option<usize>,
}

impl HistoryText {
    pub fn new() -> Self {
        HistoryText::default()
    }

    /// The history of `messages`, in order.
    pub fn from_messages<'a>(messages: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut h = HistoryText::new();
        for m in messages {
            h.push(m);
        }
        h
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Approximate heap bytes held (the history cache's weight).
    pub fn weight(&self) -> usize {
        let runs = self
            .runs
            .as_ref()
            .map_or(0, |r| r.capacity() * std::mem::size_of::<Run>())
            + self.folds.capacity() * std::mem::size_of::<Folded>()
            + self.folds.iter().map(|f| f.text.capacity()).sum::<usize>();
        let openai = self.openai.as_ref().map_or(0, |t| {
            t.text.weight() + t.ends.capacity() * std::mem::size_of::<Option<Pos>>()
        });
        self.plain.weight() + self.entries.capacity() * std::mem::size_of::<Entry>() + runs + openai
    }

    /// Appends one message (a `{"role","content"}` value; its server-internal
    /// `dispatch`/`caller` members are stripped).
    pub fn push(&mut self, message: &Value) {
        let stripped = strip_one(message);
        let text = to_json_text(&stripped);
        let role = match Role::of(&stripped) {
            Role::User => 0,
            Role::Assistant => 1,
            Role::Missing => 2,
            Role::Other(r) => match self.other_roles.iter().position(|o| *o == r) {
                Some(i) => 3 + i as u32,
                None => {
                    self.other_roles.push(r);
                    2 + self.other_roles.len() as u32
                }
            },
        };
        let mark = mark_in(&stripped, text.len()).map_or(0, |m| m as u32 + 1);
        let start = self.plain.push(&text);
        self.entries.push(Entry {
            start,
            len: text.len() as u32,
            mark,
            role,
        });
        if self.runs.is_some() {
            self.extend_runs(self.entries.len() - 1, &stripped);
        }
        if let Some(t) = self.openai.as_mut() {
            translate_into(t, &stripped);
        }
    }

    /// The messages as values, parsed back from their text (a compaction
    /// summarises them; rare next to requests).
    pub fn values(&self) -> Vec<Value> {
        (0..self.len()).filter_map(|i| self.value(i)).collect()
    }

    /// Message `i` as a value (stripped).
    pub fn value(&self, i: usize) -> Option<Value> {
        serde_json::from_str(self.text(i)?).ok()
    }

    /// Message `i`'s stripped compact JSON.
    pub(super) fn text(&self, i: usize) -> Option<&str> {
        let e = self.entries.get(i)?;
        self.plain.get(e.start, e.len as usize)
    }

    pub(super) fn role(&self, i: usize) -> Option<Role> {
        let e = self.entries.get(i)?;
        Some(match e.role {
            0 => Role::User,
            1 => Role::Assistant,
            2 => Role::Missing,
            r => Role::Other(self.other_roles.get(r as usize - 3)?.clone()),
        })
    }

    pub(super) fn mark(&self, i: usize) -> Option<usize> {
        self.entries.get(i).and_then(Entry::mark)
    }

    /// Messages `..n` as pieces (none when `n` is 0).
    pub(super) fn plain_upto(&self, n: usize) -> Vec<Piece<'_>> {
        match n {
            0 => Vec::new(),
            n => self.slice(0, n),
        }
    }

    /// Builds what requests of `kind` need beyond the plain text.
    pub fn prepare(&mut self, kind: super::Kind) {
        match kind {
            super::Kind::Anthropic if self.runs.is_none() => {
                self.runs = Some(Vec::new());
                self.folds.clear();
                for i in 0..self.len() {
                    let v = self.value(i).unwrap_or(Value::Null);
                    self.extend_runs(i, &v);
                }
            }
            super::Kind::Openai if self.openai.is_none() => {
                let mut t = Translated::default();
                for i in 0..self.len() {
                    translate_into(&mut t, &self.value(i).unwrap_or(Value::Null));
                }
                self.openai = Some(t);
            }
            _ => {}
        }
    }

    /// Message `i` (`stripped`, the one after every message the runs
    /// hold) joins the Anthropic runs.
    fn extend_runs(&mut self, i: usize, stripped: &Value) {
        let Some(runs) = self.runs.as_mut() else {
            return;
        };
        let last = runs.last().copied();
        let last = last.filter(|r| {
            let role = |i: usize| self.entries.get(i).map(|e| e.role);
            role(r.first as usize) == role(i)
        });
        let Some(run) = last else {
            runs.push(Run {
                first: i as u32,
                count: 1,
                folded: None,
            });
            return;
        };
        let appendable = run.folded.and_then(|f| self.folds.get(f as usize));
        let folded = match appendable.filter(|f| f.appendable) {
            Some(_) => {
                let f = run.folded.and_then(|f| self.folds.get_mut(f as usize));
                if let Some(f) = f {
                    append_blocks(f, &content_blocks(stripped.get("content")));
                }
                run.folded
            }
            None => {
                // The run is folded again from its members' texts.
                let (first, count) = (run.first as usize, run.count as usize);
                let members: Vec<Cow<'_, Value>> = (first..first + count)
                    .filter_map(|m| self.value(m))
                    .map(Cow::Owned)
                    .chain(std::iter::once(Cow::Borrowed(stripped)))
                    .collect();
                let f = folded_of(&fold(members));
                match run.folded.and_then(|at| self.folds.get_mut(at as usize)) {
                    Some(slot) => {
                        *slot = f;
                        run.folded
                    }
                    None => {
                        self.folds.push(f);
                        Some(self.folds.len() as u32 - 1)
                    }
                }
            }
        };
        if let Some(r) = self.runs.as_mut().and_then(|r| r.last_mut()) {
            r.count += 1;
            r.folded = folded;
        }
    }

    /// Whether the Anthropic normalised list gets the preamble (§6.1 step
    /// 2): a first message whose role is not `user`.
    pub(super) fn needs_preamble(&self) -> bool {
        self.entries.first().is_some_and(|e| e.role != 0)
    }

    /// The Anthropic pieces of the whole runs before the one holding
    /// message `n - 1`, the message that run starts at, and the `merged`
    /// positions of those runs. Requires [`HistoryText::prepare`].
    pub(super) fn anthropic_stable<'a>(&'a self, n: usize) -> (Vec<Piece<'a>>, usize, Vec<Value>) {
        let Some(runs) = self.runs.as_ref() else {
            return (Vec::new(), 0, Vec::new());
        };
        let Some(last) = n.checked_sub(1) else {
            return (Vec::new(), 0, Vec::new());
        };
        // The run holding message `last`.
        let r = (runs.partition_point(|run| run.first as usize <= last)).saturating_sub(1);
        let s = runs.get(r).map_or(0, |run| run.first as usize);
        let at0 = usize::from(self.needs_preamble());
        let mut pieces = Vec::new();
        let mut merged = Vec::new();
        // Consecutive single-message runs are one slice of `plain`.
        let mut plain_from: Option<usize> = None;
        let flush = |from: &mut Option<usize>, to: usize, pieces: &mut Vec<Piece<'a>>| {
            if let Some(a) = from.take() {
                pieces.extend(self.slice(a, to));
            }
        };
        for run in runs.iter().take(r) {
            let first = run.first as usize;
            match run.folded.and_then(|f| self.folds.get(f as usize)) {
                None => {
                    plain_from.get_or_insert(first);
                }
                Some(f) => {
                    flush(&mut plain_from, first, &mut pieces);
                    pieces.push(Piece {
                        text: Cow::Borrowed(&f.text),
                        mark: f.mark,
                    });
                    let at = at0 + first;
                    let count = run.count as usize;
                    merged.push(Value::Array((at..at + count).map(Value::from).collect()));
                }
            }
        }
        flush(&mut plain_from, s, &mut pieces);
        (pieces, s, merged)
    }

    /// Messages `a..b` as pieces, one per chunk they span; the last is
    /// marked at the last marked message among its last few.
    fn slice(&self, a: usize, b: usize) -> Vec<Piece<'_>> {
        let (Some(first), Some(last)) = (
            self.entries.get(a),
            b.checked_sub(1).and_then(|l| self.entries.get(l)),
        ) else {
            return Vec::new();
        };
        let texts = self.plain.range(first.start, last.end());
        let n = texts.len();
        // A breakpoint far back caches little the later ones would not.
        let mark = (a..b)
            .rev()
            .take(32)
            .map_while(|i| {
                self.entries
                    .get(i)
                    .filter(|e| e.start.chunk == last.start.chunk)
            })
            .find_map(|e| Some((e.start.at as usize + e.mark()?, e)));
        let chunk_start = if first.start.chunk == last.start.chunk {
            first.start.at as usize
        } else {
            0
        };
        texts
            .into_iter()
            .enumerate()
            .map(|(i, text)| Piece {
                text: Cow::Borrowed(text),
                mark: mark.filter(|_| i + 1 == n).map(|(m, _)| m - chunk_start),
            })
            .collect()
    }

    /// The OpenAI translation of messages `..n`, joined (pieces, none when
    /// empty). Requires [`HistoryText::prepare`].
    pub(super) fn openai_upto(&self, n: usize) -> Vec<&str> {
        let Some(t) = self.openai.as_ref() else {
            return Vec::new();
        };
        match n
            .checked_sub(1)
            .and_then(|i| t.ends.get(i))
            .copied()
            .flatten()
        {
            Some(end) => t.text.range(Pos::default(), end),
            None => Vec::new(),
        }
    }
}

impl FromIterator<Value> for HistoryText {
    fn from_iter<I: IntoIterator<Item = Value>>(iter: I) -> Self {
        let mut h = HistoryText::new();
        for m in iter {
            h.push(&m);
        }
        h
    }
}

/// Appends a message's OpenAI translation (its messages as one unit).
fn translate_into(t: &mut Translated, stripped: &Value) {
    let texts: Vec<String> = openai::translate_messages(std::slice::from_ref(stripped))
        .iter()
        .map(to_json_text)
        .collect();
    let before = t.ends.last().copied().flatten();
    if texts.is_empty() {
        t.ends.push(before);
        return;
    }
    let unit = texts.join(",");
    let start = t.text.push(&unit);
    t.ends.push(Some(Pos {
        at: start.at + unit.len() as u32,
        ..start
    }));
}

/// A folded run's text and breakpoint place.
fn folded_of(folded: &Value) -> Folded {
    let text = to_json_text(folded);
    let mark = mark_in(folded, text.len());
    let blocks = folded
        .get("content")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let appendable = content_last(folded) && text.ends_with("]}");
    Folded {
        text,
        blocks,
        mark,
        appendable,
    }
}

/// Appends a member's blocks to a folded run's content array in place:
/// the same text folding the whole run again would give.
fn append_blocks(f: &mut Folded, blocks: &[Value]) {
    f.text.truncate(f.text.len().saturating_sub(2));
    for b in blocks {
        if f.blocks > 0 {
            f.text.push(',');
        }
        f.text.push_str(&to_json_text(b));
        if markable(b) {
            f.mark = Some(f.text.len() - 1);
        }
        f.blocks += 1;
    }
    f.text.push_str("]}");
}

/// Whether `content` is the last member of message `m`, so that its text
/// ends with the content array.
fn content_last(m: &Value) -> bool {
    m.as_object()
        .and_then(|o| o.keys().next_back())
        .is_some_and(|k| k == "content")
}

/// Whether a block may carry `cache_control` (Anthropic): text with text,
/// images, documents, tool uses and results. Thinking blocks and blocks
/// this server does not know are passed over.
pub(super) fn markable(b: &Value) -> bool {
    match b.get("type").and_then(Value::as_str) {
        Some("text") => b
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        Some("image" | "document" | "tool_use" | "tool_result" | "search_result") => true,
        _ => false,
    }
}

/// Where a cache breakpoint goes in message `m` rendered as `len` bytes
/// of compact JSON: the offset of the closing brace of its last markable
/// block, when its content is an array and its last member (so the text
/// ends `…}]}`). A message whose content is a string gets none: marking
/// it would change its text from one request to the next.
pub(super) fn mark_in(m: &Value, len: usize) -> Option<usize> {
    if !content_last(m) {
        return None;
    }
    let blocks = m.get("content")?.as_array()?;
    // The text ends with `]}`; walk back over the blocks after the one
    // marked, each with its `,`.
    let mut end = len.checked_sub(2)?;
    for b in blocks.iter().rev() {
        if markable(b) {
            return end.checked_sub(1);
        }
        end = end.checked_sub(to_json_text(b).len() + 1)?;
    }
    None
}

#[cfg(test)]
mod tests;
