//! A prompt cache that bills like the providers' (opt-in:
//! [`super::MockProvider::enable_cache`]), so that tests and benches see the
//! tokens a real provider would report for the requests the server sends.
//! Tokens are approximated from bytes ([`BYTES_PER_TOKEN`]).
//!
//! Anthropic (Messages, explicit breakpoints), as documented:
//!
//! * the prompt is the tools, then the system blocks, then every message's
//!   content blocks (string content is one text block), in that order; a
//!   block marked with `cache_control` is a breakpoint (at most 4 per
//!   request, else a 400 like the API's);
//! * a breakpoint whose prefix reaches the minimum cacheable length writes
//!   that prefix to the cache for its TTL (`5m`, or `1h` with
//!   `"ttl":"1h"`); a prefix below the minimum is not cached, silently;
//! * a request reads the longest cached prefix that ends at a block
//!   boundary no more than 20 blocks before one of its breakpoints; a hit
//!   refreshes the entry's TTL;
//! * usage: `cache_read_input_tokens` (the prefix read),
//!   `cache_creation_input_tokens` (from there to the last breakpoint
//!   written), `input_tokens` (the rest).
//!
//! OpenAI (Chat Completions, automatic): a prompt of at least 1024 tokens
//! is cached in 128-token steps; a request reads the longest cached prefix
//! of its prompt (tools, then messages) among those seen with the same
//! `prompt_cache_key` and model; `usage.prompt_tokens` counts the whole
//! prompt and `prompt_tokens_details.cached_tokens` the part read.
//!
//! The canonical bytes of a block are its compact JSON without
//! `cache_control`, with its message's role before a message's first block:
//! two requests that differ only in where they place breakpoints share
//! their prefixes, and nothing else does.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Endpoint;

/// Bytes of canonical prompt per token.
pub const BYTES_PER_TOKEN: usize = 4;

/// How the mock's cache behaves.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Anthropic's minimum cacheable prefix, in tokens.
    pub anthropic_min_tokens: u64,
    /// How far before a breakpoint a hit is looked for, in blocks.
    pub lookback_blocks: usize,
    pub ttl_5m: Duration,
    pub ttl_1h: Duration,
    /// OpenAI's minimum cached prompt, and its step, in tokens.
    pub openai_min_tokens: u64,
    pub openai_step_tokens: u64,
    /// How long OpenAI keeps a prefix after its last use.
    pub openai_ttl: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            anthropic_min_tokens: 1024,
            lookback_blocks: 20,
            ttl_5m: Duration::from_secs(300),
            ttl_1h: Duration::from_secs(3600),
            openai_min_tokens: 1024,
            openai_step_tokens: 128,
            openai_ttl: Duration::from_secs(600),
        }
    }
}

/// What the cache made of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheCall {
    pub endpoint: Endpoint,
    pub model: String,
    /// The whole prompt, in tokens.
    pub prompt_tokens: u64,
    /// Billed at the input price: neither written nor read.
    pub input_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    /// Breakpoints the request marked (Anthropic).
    pub breakpoints: usize,
    /// Breakpoints below the minimum, not cached.
    pub too_short: usize,
    /// The prompt's tokens up to the breakpoint on the tools, if any.
    pub tools_mark: Option<u64>,
    /// The prompt's tokens up to each breakpoint after the tools.
    pub marks: Vec<u64>,
}

impl CacheCall {
    /// Input-token equivalents as billed: input, writes at 1.25×, reads at
    /// 0.1× (Anthropic's 5-minute prices; OpenAI writes nothing).
    pub fn billed(&self) -> f64 {
        self.input_tokens as f64
            + 1.25 * self.cache_write_tokens as f64
            + 0.1 * self.cache_read_tokens as f64
    }

    /// The share of the prompt read from the cache.
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            return 0.0;
        }
        self.cache_read_tokens as f64 / self.prompt_tokens as f64
    }
}

/// A request the cache refuses as the API would (`400`).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused(pub Value);

/// The cache: prefixes by namespace and digest, with their expiry.
#[derive(Debug, Default)]
pub struct Cache {
    pub config: CacheConfig,
    entries: HashMap<(String, u64), Instant>,
    pub calls: Vec<CacheCall>,
}

/// One block of a canonical Anthropic prompt.
struct Block {
    bytes: usize,
    digest: u64,
    /// `Some(ttl_1h)` when it carries `cache_control`.
    mark: Option<bool>,
}

fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN) as u64
}

fn without_marker(v: &Value) -> (Value, Option<bool>) {
    let mut v = v.clone();
    let mark = v
        .as_object_mut()
        .and_then(|o| o.shift_remove("cache_control"))
        .map(|c| c.get("ttl").and_then(Value::as_str) == Some("1h"));
    (v, mark)
}

impl Cache {
    pub fn new(config: CacheConfig) -> Self {
        Cache {
            config,
            ..Cache::default()
        }
    }

    /// Bills one request body of `endpoint` at `now`.
    pub fn bill(
        &mut self,
        endpoint: Endpoint,
        body: &Value,
        now: Instant,
    ) -> Result<CacheCall, Refused> {
        let call = match endpoint {
            Endpoint::Openai => self.openai(body, now),
            _ => self.anthropic(body, now)?,
        };
        self.calls.push(call.clone());
        Ok(call)
    }

    fn live(&self, key: &(String, u64), now: Instant) -> bool {
        self.entries.get(key).is_some_and(|e| *e > now)
    }

    fn anthropic(&mut self, body: &Value, now: Instant) -> Result<CacheCall, Refused> {
        let model = body["model"].as_str().unwrap_or("").to_string();
        let mut blocks: Vec<Block> = Vec::new();
        let mut h = DefaultHasher::new();
        model.hash(&mut h);
        let mut push = |h: &mut DefaultHasher, role: Option<&str>, block: &Value| {
            let (plain, mark) = without_marker(block);
            let mut text = String::new();
            if let Some(r) = role {
                text.push_str(&format!("\u{0}{r}\u{0}"));
            }
            text.push_str(&plain.to_string());
            text.hash(h);
            blocks.push(Block {
                bytes: text.len(),
                digest: h.finish(),
                mark,
            });
        };
        for t in body["tools"].as_array().into_iter().flatten() {
            push(&mut h, None, t);
        }
        match &body["system"] {
            Value::String(s) => push(&mut h, Some("system"), &json!({"type": "text", "text": s})),
            Value::Array(a) => {
                for (i, b) in a.iter().enumerate() {
                    push(&mut h, (i == 0).then_some("system"), b);
                }
            }
            _ => {}
        }
        for m in body["messages"].as_array().into_iter().flatten() {
            let role = m["role"].as_str().unwrap_or("");
            match &m["content"] {
                Value::String(s) => push(&mut h, Some(role), &json!({"type": "text", "text": s})),
                Value::Array(a) => {
                    for (i, b) in a.iter().enumerate() {
                        push(&mut h, (i == 0).then_some(role), b);
                    }
                }
                _ => {}
            }
        }
        let marks: Vec<usize> = (0..blocks.len())
            .filter(|i| blocks[*i].mark.is_some())
            .collect();
        if marks.len() > 4 {
            return Err(Refused(json!({
                "type": "error",
                "error": {"type": "invalid_request_error",
                          "message": format!("A maximum of 4 blocks with cache_control may be provided. Found {}.", marks.len())},
            })));
        }
        // Cumulative tokens at the end of each block.
        let mut cum = Vec::with_capacity(blocks.len());
        let mut bytes = 0;
        for b in &blocks {
            bytes += b.bytes;
            cum.push(tokens(bytes));
        }
        let total = tokens(bytes);
        let key = |i: usize| (model.clone(), blocks[i].digest);
        // The longest cached prefix within the lookback of a breakpoint.
        let mut hit: Option<usize> = None;
        for &b in &marks {
            let from = b.saturating_sub(self.config.lookback_blocks);
            if let Some(i) = (from..=b).rev().find(|i| self.live(&key(*i), now)) {
                hit = hit.max(Some(i));
            }
        }
        let read = hit.map_or(0, |i| cum[i]);
        if let Some(i) = hit {
            let ttl = if blocks[i].mark == Some(true) {
                self.config.ttl_1h
            } else {
                self.config.ttl_5m
            };
            let e = self.entries.entry(key(i)).or_insert(now);
            *e = (*e).max(now + ttl);
        }
        let min = self.config.anthropic_min_tokens;
        let mut written_to = read;
        let mut too_short = 0;
        for &b in &marks {
            if cum[b] < min {
                too_short += 1;
                continue;
            }
            let ttl = if blocks[b].mark == Some(true) {
                self.config.ttl_1h
            } else {
                self.config.ttl_5m
            };
            if !self.live(&key(b), now) {
                self.entries.insert(key(b), now + ttl);
            }
            written_to = written_to.max(cum[b]);
        }
        let write = written_to - read;
        let tools = body["tools"].as_array().map_or(0, Vec::len);
        let tools_mark = marks.iter().find(|&&b| b + 1 == tools).map(|&b| cum[b]);
        Ok(CacheCall {
            endpoint: Endpoint::Anthropic,
            model,
            tools_mark,
            marks: marks
                .iter()
                .filter(|&&b| b >= tools)
                .map(|&b| cum[b])
                .collect(),
            prompt_tokens: total,
            input_tokens: total - read - write,
            cache_write_tokens: write,
            cache_read_tokens: read,
            breakpoints: marks.len(),
            too_short,
        })
    }

    fn openai(&mut self, body: &Value, now: Instant) -> CacheCall {
        let model = body["model"].as_str().unwrap_or("");
        let space = format!(
            "{model}\u{0}{}",
            body["prompt_cache_key"].as_str().unwrap_or("")
        );
        let mut prompt = String::new();
        for t in body["tools"].as_array().into_iter().flatten() {
            prompt.push_str(&t.to_string());
        }
        for m in body["messages"].as_array().into_iter().flatten() {
            prompt.push_str(&m.to_string());
        }
        let total = tokens(prompt.len());
        let step = self.config.openai_step_tokens as usize * BYTES_PER_TOKEN;
        let min = self.config.openai_min_tokens as usize * BYTES_PER_TOKEN;
        // Digests of the prompt's prefixes at every step from the minimum.
        let mut marks: Vec<(usize, u64)> = Vec::new();
        let mut h = DefaultHasher::new();
        let bytes = prompt.as_bytes();
        let mut at = 0;
        let mut next = min;
        while next <= bytes.len() && step > 0 {
            bytes[at..next].hash(&mut h);
            marks.push((next, h.finish()));
            at = next;
            next += step;
        }
        let read = marks
            .iter()
            .rev()
            .find(|(_, d)| self.live(&(space.clone(), *d), now))
            .map_or(0, |(n, _)| *n);
        for (_, d) in &marks {
            self.entries
                .insert((space.clone(), *d), now + self.config.openai_ttl);
        }
        let read = tokens(read).min(total);
        CacheCall {
            endpoint: Endpoint::Openai,
            model: model.to_string(),
            tools_mark: None,
            marks: Vec::new(),
            prompt_tokens: total,
            input_tokens: total - read,
            cache_write_tokens: 0,
            cache_read_tokens: read,
            breakpoints: 0,
            too_short: 0,
        }
    }
}

/// Replaces the input side of a rendered reply's `usage` with what the
/// cache billed (the output tokens stay the script's); a reply without
/// usage keeps none.
pub fn apply(reply: &mut Value, call: &CacheCall) {
    let Some(usage) = reply.get_mut("usage").filter(|u| u.is_object()) else {
        return;
    };
    match call.endpoint {
        Endpoint::Openai => {
            let out = usage["completion_tokens"].as_u64().unwrap_or(0);
            *usage = json!({
                "prompt_tokens": call.prompt_tokens,
                "completion_tokens": out,
                "total_tokens": call.prompt_tokens + out,
                "prompt_tokens_details": {"cached_tokens": call.cache_read_tokens},
            });
        }
        _ => {
            let out = usage["output_tokens"].as_u64().unwrap_or(0);
            *usage = json!({
                "input_tokens": call.input_tokens,
                "cache_creation_input_tokens": call.cache_write_tokens,
                "cache_read_input_tokens": call.cache_read_tokens,
                "output_tokens": out,
            });
        }
    }
}

#[cfg(test)]
mod tests;
