//! One attempt's request built from a session's [`HistoryText`]: the body
//! and the `provider.request` messages, each written once from the
//! history's text and the turn's own messages after it, with the prompt
//! cache breakpoints of an entry that opted in.
//!
//! With caching off the bytes are those of [`super::prepare_request_with`]
//! (tested below over random histories). With caching on:
//!
//! * the body's members come in an order that keeps its prefix the same
//!   from call to call: `model`, (`prompt_cache_key`), `tools`,
//!   `messages`, then `max_tokens` and (`tool_choice`), which vary;
//! * Anthropic: `cache_control` on the last tool and on the last block that
//!   can carry one, both at the end of the history the request sends and at
//!   the end of the whole request (at most three of the four the API
//!   allows), each only where the prefix it closes reaches the minimum
//!   cacheable length;
//! * OpenAI: `prompt_cache_key` (the caller derives it from the session).

use std::borrow::Cow;

use serde_json::Value;

use super::history_text::{mark_in, HistoryText, Piece, Role};
use super::normalize::{fold, preamble, record};
use super::{
    anthropic, endpoint_url, openai, strip_one, to_json_text, AuthHeader, HistoryItem, Kind,
    Message, ANTHROPIC_VERSION,
};

/// Prompt caching of a provider entry (opt-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caching {
    /// Anthropic breakpoints live an hour (`"ttl":"1h"`) instead of the
    /// default five minutes.
    pub ttl_1h: bool,
    /// The shortest prefix, in estimated tokens, worth a breakpoint.
    pub min_tokens: u32,
}

/// Default [`Caching::min_tokens`]: the smallest minimum Anthropic's
/// models have (some need more; see docs/configuration.md).
pub const DEFAULT_MIN_CACHE_TOKENS: u32 = 1024;

/// Bytes of request text per estimated token.
pub const BYTES_PER_TOKEN: usize = 4;

/// The `anthropic-beta` value that 1-hour breakpoints are sent with.
pub const EXTENDED_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";

impl Default for Caching {
    fn default() -> Self {
        Caching {
            ttl_1h: false,
            min_tokens: DEFAULT_MIN_CACHE_TOKENS,
        }
    }
}

/// Caching for one request.
#[derive(Debug, Clone, Copy)]
pub struct Cache<'a> {
    pub settings: Caching,
    /// OpenAI `prompt_cache_key`.
    pub key: &'a str,
    /// The tools are sent only so that the cached prefix stays the same;
    /// the model may not call them (`tool_choice` none): a compaction.
    pub tools_inert: bool,
}

/// What one attempt sends.
pub struct Spec<'a> {
    pub kind: Kind,
    pub base_url: &'a str,
    pub model: &'a str,
    pub max_tokens: u32,
    pub history: &'a HistoryText,
    /// How many of the history's messages are sent (a turn holds the
    /// steers it applied back, to send them after its tool rounds).
    pub upto: usize,
    /// Messages sent after them (a turn's tool rounds and steers, a
    /// compaction's instruction).
    pub tail: &'a [Message],
    pub tools: &'a [Value],
    /// `tools` as compact JSON.
    pub tools_json: &'a str,
    pub cache: Option<Cache<'a>>,
}

/// One attempt's request, minus the credential, and its logged messages.
pub struct Built<'a> {
    pub url: String,
    /// Lower-case names, without the credential.
    pub headers: Vec<(String, String)>,
    pub auth: AuthHeader,
    pub body: Vec<u8>,
    /// `provider.request.normalized`.
    pub normalized: Option<Value>,
    /// Cache breakpoints placed.
    pub breakpoints: usize,
    /// Body bytes before the breakpoint that closes the history this
    /// request sends (0: none): the prefix the next call of the session
    /// starts with too.
    pub stable_prefix: usize,
    /// Body bytes before the last breakpoint (0: none).
    pub cached_prefix: usize,
    logged: Vec<Piece<'a>>,
}

impl Built<'_> {
    /// Appends `provider.request.messages` (JSON text) to `out`.
    pub fn write_logged(&self, out: &mut String) {
        out.reserve(self.logged_len());
        out.push('[');
        for (i, p) in self.logged.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&p.text);
        }
        out.push(']');
    }

    /// Bytes [`Built::write_logged`] appends.
    pub fn logged_len(&self) -> usize {
        joined_len(&self.logged)
    }

    /// The logged messages as a string (tests and tools).
    pub fn logged_text(&self) -> String {
        let mut s = String::new();
        self.write_logged(&mut s);
        s
    }
}

fn joined_len(pieces: &[Piece<'_>]) -> usize {
    2 + pieces.iter().map(|p| p.text.len()).sum::<usize>() + pieces.len().saturating_sub(1)
}

/// Builds one attempt's request.
pub fn build<'a>(spec: &Spec<'a>) -> Built<'a> {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    let url = endpoint_url(spec.kind, spec.base_url);
    match spec.kind {
        Kind::Anthropic => {
            headers.push(("anthropic-version".into(), ANTHROPIC_VERSION.into()));
            if spec.cache.is_some_and(|c| c.settings.ttl_1h) {
                headers.push(("anthropic-beta".into(), EXTENDED_TTL_BETA.into()));
            }
            let list = anthropic_list(spec);
            let tools = (!spec.tools.is_empty())
                .then(|| anthropic::wire_tools_text(spec.tools, spec.tools_json));
            let cached = match spec.cache {
                None => Cached {
                    body: plain_body(spec, &list.pieces, tools.as_deref()),
                    ..Cached::default()
                },
                Some(c) => anthropic_cached_body(spec, c, &list, tools.as_deref()),
            };
            Built {
                url,
                headers,
                auth: AuthHeader::XApiKey,
                body: cached.body,
                normalized: list.normalized,
                breakpoints: cached.breakpoints,
                stable_prefix: cached.stable_prefix,
                cached_prefix: cached.cached_prefix,
                logged: list.pieces,
            }
        }
        Kind::Openai => {
            let upto = spec.upto.min(spec.history.len());
            let mut logged = spec.history.plain_upto(upto);
            let piece = |text| Piece { text, mark: None };
            let mut wire: Vec<Piece<'a>> = (spec.history.openai_upto(upto).into_iter())
                .map(|t| piece(Cow::Borrowed(t)))
                .collect();
            for m in spec.tail {
                logged.push(piece(Cow::Owned(m.stripped_text().into_owned())));
                let stripped = strip_one(m.value());
                for t in openai::translate_messages(std::slice::from_ref(&stripped)) {
                    wire.push(piece(Cow::Owned(to_json_text(&t))));
                }
            }
            let tools = (!spec.tools.is_empty())
                .then(|| to_json_text(&openai::translate_tools(spec.tools)));
            let body = match spec.cache {
                None => plain_body(spec, &wire, tools.as_deref()),
                Some(c) => openai_cached_body(spec, c, &wire, tools.as_deref()),
            };
            Built {
                url,
                headers,
                auth: AuthHeader::Bearer,
                body,
                normalized: None,
                breakpoints: 0,
                stable_prefix: 0,
                cached_prefix: 0,
                logged,
            }
        }
    }
}

/// Writes `[…]` of `pieces` into `out`, with `marker` inserted at each
/// of `marks` (piece index, offset of a block's closing brace, in order);
/// returns where in `out` each marker went.
fn push_list(
    out: &mut Vec<u8>,
    pieces: &[Piece<'_>],
    marks: &[(usize, usize)],
    marker: &str,
) -> Vec<usize> {
    let mut at_out = Vec::with_capacity(marks.len());
    out.push(b'[');
    for (i, p) in pieces.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let bytes = p.text.as_bytes();
        let mut from = 0;
        for &(_, at) in marks.iter().filter(|(pi, _)| *pi == i) {
            out.extend_from_slice(bytes.get(from..at).unwrap_or_default());
            at_out.push(out.len());
            out.extend_from_slice(marker.as_bytes());
            from = at;
        }
        out.extend_from_slice(bytes.get(from..).unwrap_or_default());
    }
    out.push(b']');
    at_out
}

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(to_json_text(s).as_bytes());
}

/// `{"model","max_tokens","messages","tools"?}`: the reference body.
fn plain_body(spec: &Spec<'_>, messages: &[Piece<'_>], tools: Option<&str>) -> Vec<u8> {
    let extra = tools.map_or(0, |t| t.len() + 9);
    let mut body = Vec::with_capacity(joined_len(messages) + spec.model.len() + extra + 64);
    body.extend_from_slice(b"{\"model\":");
    push_json_str(&mut body, spec.model);
    body.extend_from_slice(b",\"max_tokens\":");
    body.extend_from_slice(spec.max_tokens.to_string().as_bytes());
    body.extend_from_slice(b",\"messages\":");
    push_list(&mut body, messages, &[], "");
    if let Some(t) = tools {
        body.extend_from_slice(b",\"tools\":");
        body.extend_from_slice(t.as_bytes());
    }
    body.push(b'}');
    body
}

/// The varying members after the messages.
fn push_tail_members(body: &mut Vec<u8>, spec: &Spec<'_>, inert: Option<&str>) {
    body.extend_from_slice(b",\"max_tokens\":");
    body.extend_from_slice(spec.max_tokens.to_string().as_bytes());
    if let Some(choice) = inert {
        body.extend_from_slice(b",\"tool_choice\":");
        body.extend_from_slice(choice.as_bytes());
    }
    body.push(b'}');
}

fn openai_cached_body(
    spec: &Spec<'_>,
    cache: Cache<'_>,
    messages: &[Piece<'_>],
    tools: Option<&str>,
) -> Vec<u8> {
    let extra = tools.map_or(0, |t| t.len() + 9);
    let mut body = Vec::with_capacity(joined_len(messages) + spec.model.len() + extra + 128);
    body.extend_from_slice(b"{\"model\":");
    push_json_str(&mut body, spec.model);
    body.extend_from_slice(b",\"prompt_cache_key\":");
    push_json_str(&mut body, cache.key);
    if let Some(t) = tools {
        body.extend_from_slice(b",\"tools\":");
        body.extend_from_slice(t.as_bytes());
    }
    body.extend_from_slice(b",\"messages\":");
    push_list(&mut body, messages, &[], "");
    let inert = (cache.tools_inert && tools.is_some()).then_some("\"none\"");
    push_tail_members(&mut body, spec, inert);
    body
}

fn marker(c: &Caching) -> &'static str {
    if c.ttl_1h {
        ",\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}"
    } else {
        ",\"cache_control\":{\"type\":\"ephemeral\"}"
    }
}

/// A body with its breakpoints.
#[derive(Default)]
struct Cached {
    body: Vec<u8>,
    breakpoints: usize,
    stable_prefix: usize,
    cached_prefix: usize,
}

fn anthropic_cached_body(
    spec: &Spec<'_>,
    cache: Cache<'_>,
    list: &AnthropicList<'_>,
    tools: Option<&str>,
) -> Cached {
    let marker = marker(&cache.settings);
    let min_bytes = cache.settings.min_tokens as usize * BYTES_PER_TOKEN;
    let tools_len = tools.map_or(0, str::len);
    // Offsets of each piece's start in the list text (after `[`).
    let mut starts = Vec::with_capacity(list.pieces.len());
    let mut at = 1;
    for p in &list.pieces {
        starts.push(at);
        at += p.text.len() + 1;
    }
    let reaches = |(pi, off): (usize, usize)| {
        starts
            .get(pi)
            .is_some_and(|s| tools_len + s + off >= min_bytes)
    };
    let history_mark = list.history_mark.filter(|m| reaches(*m));
    let mut marks: Vec<(usize, usize)> = [history_mark, list.request_mark]
        .into_iter()
        .flatten()
        .filter(|m| reaches(*m))
        .collect();
    marks.dedup();
    let mut body = Vec::with_capacity(
        joined_len(&list.pieces) + spec.model.len() + tools_len + 64 + 3 * marker.len(),
    );
    body.extend_from_slice(b"{\"model\":");
    push_json_str(&mut body, spec.model);
    let mut breakpoints = marks.len();
    let mut tools_at = None;
    if let Some(t) = tools {
        body.extend_from_slice(b",\"tools\":");
        // The last tool's closing brace, before the array's `]`.
        let mark_tools = t.len() >= min_bytes && t.ends_with("}]");
        match t.len().checked_sub(2).filter(|_| mark_tools) {
            Some(cut) => {
                body.extend_from_slice(t.as_bytes().get(..cut).unwrap_or_default());
                tools_at = Some(body.len());
                body.extend_from_slice(marker.as_bytes());
                body.extend_from_slice(b"}]");
                breakpoints += 1;
            }
            None => body.extend_from_slice(t.as_bytes()),
        }
    }
    body.extend_from_slice(b",\"messages\":");
    let at = push_list(&mut body, &list.pieces, &marks, marker);
    let inert = (cache.tools_inert && tools.is_some()).then_some("{\"type\":\"none\"}");
    push_tail_members(&mut body, spec, inert);
    let stable = history_mark.and(at.first().copied()).or(tools_at);
    Cached {
        body,
        breakpoints,
        stable_prefix: stable.unwrap_or(0),
        cached_prefix: at.last().copied().or(tools_at).unwrap_or(0),
    }
}

/// The Anthropic normalised list of a request, as pieces.
struct AnthropicList<'a> {
    pieces: Vec<Piece<'a>>,
    normalized: Option<Value>,
    /// The last breakpoint place within the history's messages, and within
    /// the whole list: (piece index, offset).
    history_mark: Option<(usize, usize)>,
    request_mark: Option<(usize, usize)>,
}

/// One message of the part of a request normalised per call: a history
/// message (by index) or one of the turn's own.
enum Item<'a> {
    Hist(usize),
    Tail(&'a Message),
}

fn anthropic_list<'a>(spec: &Spec<'a>) -> AnthropicList<'a> {
    let h = spec.history;
    let n = spec.upto.min(h.len());
    let (stable, s, mut merged) = h.anthropic_stable(n);
    let items: Vec<Item<'a>> = (s..n)
        .map(Item::Hist)
        .chain(spec.tail.iter().map(Item::Tail))
        .collect();
    let role = |it: &Item<'_>| match it {
        Item::Hist(i) => h.role(*i).unwrap_or(Role::Missing),
        Item::Tail(m) => Role::of(m.value()),
    };
    let prepended = match n {
        0 => items.first().is_some_and(|it| role(it) != Role::User),
        _ => h.needs_preamble(),
    };
    let mut pieces: Vec<Piece<'a>> = Vec::with_capacity(stable.len() + items.len() + 1);
    if prepended {
        pieces.push(Piece {
            text: Cow::Owned(to_json_text(&preamble())),
            mark: None,
        });
    }
    pieces.extend(stable);
    let mut history_mark = last_mark(&pieces);
    // Runs of the per-call part: positions count the preamble and the
    // history before it.
    let mut at = usize::from(prepended) + s;
    let mut rest = items.as_slice();
    while let Some(first) = rest.first() {
        let r = role(first);
        let len = rest.iter().take_while(|it| role(it) == r).count().max(1);
        let (run, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let all_history = run.iter().all(|it| matches!(it, Item::Hist(_)));
        let piece = match run {
            [Item::Hist(i)] => Piece {
                text: Cow::Borrowed(h.text(*i).unwrap_or("null")),
                mark: h.mark(*i),
            },
            [Item::Tail(m)] => {
                let text = m.stripped_text();
                let mark = mark_in(&strip_one(m.value()), text.len());
                Piece { text, mark }
            }
            _ => {
                let members: Vec<Cow<'_, Value>> = run
                    .iter()
                    .map(|it| match it {
                        Item::Hist(i) => Cow::Owned(h.value(*i).unwrap_or(Value::Null)),
                        Item::Tail(m) => strip_one(m.value()),
                    })
                    .collect();
                merged.push(Value::Array((at..at + len).map(Value::from).collect()));
                let hist = run.iter().filter(|it| matches!(it, Item::Hist(_))).count();
                let own = (!all_history && hist > 0)
                    .then(|| history_part(members.get(..hist).unwrap_or_default()));
                let folded = fold(members);
                let text = to_json_text(&folded);
                let mark = mark_in(&folded, text.len());
                // A run the history and the turn share: the history's
                // breakpoint stays where its part alone had it, when that
                // part reads the same inside the fold.
                if let Some((own_text, Some(m))) = own {
                    if text.as_bytes().get(..m) == own_text.as_bytes().get(..m) {
                        history_mark = Some((pieces.len(), m));
                    }
                }
                Piece {
                    text: Cow::Owned(text),
                    mark,
                }
            }
        };
        at += len;
        pieces.push(piece);
        if all_history {
            history_mark = last_mark(&pieces).or(history_mark);
        }
    }
    let request_mark = last_mark(&pieces);
    AnthropicList {
        pieces,
        normalized: record(prepended, merged),
        history_mark,
        request_mark,
    }
}

/// The history's members of a run it shares with the turn, rendered as
/// they are alone, with their breakpoint place.
fn history_part(members: &[Cow<'_, Value>]) -> (String, Option<usize>) {
    let value = match members {
        [one] => one.clone().into_owned(),
        _ => fold(members.to_vec()),
    };
    let text = to_json_text(&value);
    let mark = mark_in(&value, text.len());
    (text, mark)
}

/// The last piece with a breakpoint place, and that place.
fn last_mark(pieces: &[Piece<'_>]) -> Option<(usize, usize)> {
    let (i, p) = pieces
        .iter()
        .enumerate()
        .rev()
        .take(32)
        .find(|(_, p)| p.mark.is_some())?;
    Some((i, p.mark?))
}

#[cfg(test)]
mod tests;
