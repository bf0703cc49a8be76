//! Provider HTTP calls made with ureq (blocking, run on the `blocking`
//! thread pool): every call of `baesrv-threads`, and `baesrv`'s calls to
//! HTTPS endpoints (plain-HTTP ones are `provider_http`'s).
//!
//! The credential template is resolved against the real environment
//! immediately before each call and exists only on this thread's stack for
//! the duration of the call; it is never logged.

use std::io::Read;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use engine::{AuthPlacement, ProviderCall, ProviderReply};
use proto::provider::retry::RetryAdvice;

use crate::config::{process_env, substitute};

/// Largest provider response body read into memory.
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// Keep-alive connections kept idle per provider host when
/// [`configure`] was not called (tests, tools).
pub const DEFAULT_IDLE_PER_HOST: usize = 64;

/// How long one connection pool serves new calls before a fresh one
/// replaces it. ureq 2 reuses an idle connection whatever its age and only
/// notices a close the provider already sent; a connection silently
/// dropped on the way (a NAT or load balancer idle timeout, typically a
/// minute or more) would take a call down to its timeout. Bounding the
/// pool's age bounds every pooled connection's idle time, for one new
/// handshake per connection and period.
pub const POOL_MAX_AGE: Duration = Duration::from_secs(30);

static IDLE_PER_HOST: OnceLock<usize> = OnceLock::new();
static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Sets the provider connection pool once, before the first call:
/// `idle_per_host` idle keep-alive connections are kept per provider host
/// (ureq's own default of one made every concurrent call but one open a
/// new TCP connection). Later calls keep the first setting.
pub fn configure(idle_per_host: usize) {
    let _ = IDLE_PER_HOST.set(idle_per_host);
}

/// The agent (and so the connection pool) new calls use.
struct Pool {
    agent: ureq::Agent,
    born: Instant,
}

impl Pool {
    /// The agent for a call at `now`: this pool's, or a fresh pool's once
    /// this one is [`POOL_MAX_AGE`] old (calls still running on the old
    /// agent keep it; its connections close with its last call).
    fn agent_at(
        slot: &mut Option<Pool>,
        now: Instant,
        build: impl FnOnce() -> ureq::Agent,
    ) -> ureq::Agent {
        match slot {
            Some(p) if now.saturating_duration_since(p.born) < POOL_MAX_AGE => p.agent.clone(),
            _ => {
                let agent = build();
                *slot = Some(Pool {
                    agent: agent.clone(),
                    born: now,
                });
                agent
            }
        }
    }
}

fn build_agent(idle_per_host: usize) -> ureq::Agent {
    ureq::AgentBuilder::new()
        // A provider endpoint never legitimately redirects a POST; do not
        // follow (and do not forward credentials) anywhere else.
        .redirects(0)
        .max_idle_connections_per_host(idle_per_host)
        // Room for every configured host's share (fallback chains).
        .max_idle_connections(idle_per_host.saturating_mul(4).max(100))
        .build()
}

/// Idle keep-alive connections kept per provider host
/// (`BAE_PROVIDER_IDLE_CONNECTIONS`).
pub fn idle_per_host() -> usize {
    *IDLE_PER_HOST.get().unwrap_or(&DEFAULT_IDLE_PER_HOST)
}

fn agent() -> ureq::Agent {
    let idle = idle_per_host();
    let mut slot = POOL.lock().unwrap_or_else(|p| p.into_inner());
    Pool::agent_at(&mut slot, Instant::now(), || build_agent(idle))
}

/// Performs `call`, mapping every outcome onto a [`ProviderReply`].
pub fn perform(call: &ProviderCall) -> ProviderReply {
    perform_with_env(call, process_env)
}

/// [`perform`] with an injectable environment (tests).
pub fn perform_with_env(
    call: &ProviderCall,
    get_env: impl Fn(&str) -> Option<String>,
) -> ProviderReply {
    let token = match substitute(&call.auth_template, get_env) {
        Ok(t) => t,
        Err(e) => return ProviderReply::Credential(e.to_string()),
    };
    let mut req = agent()
        .post(&call.url)
        .timeout(Duration::from_millis(call.timeout_ms.max(1)));
    for (name, value) in &call.headers {
        req = req.set(name, value);
    }
    req = match call.auth {
        AuthPlacement::XApiKey => req.set("x-api-key", &token),
        AuthPlacement::Bearer => req.set("authorization", &format!("Bearer {token}")),
    };
    drop(token);
    let response = match req.send_bytes(&call.body) {
        Ok(resp) => resp,
        // ureq 2 reports non-2xx/3xx statuses as errors; they are still
        // HTTP responses with a body the engine records.
        Err(ureq::Error::Status(_, resp)) => resp,
        Err(ureq::Error::Transport(t)) => return ProviderReply::Transport(transport_text(&t)),
    };
    let status = response.status();
    let advice = match status {
        200..=299 => RetryAdvice::None,
        _ => {
            let names = response.headers_names();
            let pairs: Vec<(&str, &str)> = (names.iter())
                .filter_map(|n| Some((n.as_str(), response.header(n)?)))
                .collect();
            RetryAdvice::from_headers(pairs)
        }
    };
    let mut body = Vec::new();
    match response
        .into_reader()
        .take(MAX_RESPONSE_BYTES)
        .read_to_end(&mut body)
    {
        Ok(_) => ProviderReply::Http {
            status,
            body,
            advice,
        },
        Err(e) => {
            ProviderReply::Transport(strip_urls(&format!("error reading response body: {e}")))
        }
    }
}

/// The transport error without its URL (spec 08 §6: a URL may carry a
/// secret).
pub(crate) fn transport_text(t: &ureq::Transport) -> String {
    let mut s = t.kind().to_string();
    if let Some(m) = t.message() {
        s.push_str(": ");
        s.push_str(m);
    }
    let mut source = std::error::Error::source(t);
    while let Some(e) = source {
        s.push_str(": ");
        s.push_str(&e.to_string());
        source = e.source();
    }
    strip_urls(&s)
}

/// Removes every `scheme://…` token (up to whitespace or a quote) together
/// with a directly following `": "` separator.
pub fn strip_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = find_url_start(rest) {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        let mut after = &tail[end..];
        // "…/path: Connection Failed" → drop the separator as well.
        if url.ends_with(':') {
            after = after.strip_prefix(' ').unwrap_or(after);
        }
        if (out.is_empty() || out.ends_with(' ')) && after.starts_with(' ') {
            after = &after[1..];
        }
        if out.ends_with(' ') && after.is_empty() {
            out.pop();
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Byte offset of the scheme of the next `xxx://` URL in `s`.
fn find_url_start(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut search = 0;
    while let Some(rel) = s[search..].find("://") {
        let sep = search + rel;
        let mut start = sep;
        while start > 0 {
            let b = bytes[start - 1];
            if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
                start -= 1;
            } else {
                break;
            }
        }
        if start < sep {
            return Some(start);
        }
        search = sep + 3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool serves new calls for `POOL_MAX_AGE`, then a fresh one does.
    #[test]
    fn the_pool_is_replaced_once_it_is_old() {
        let mut slot = None;
        let built = std::cell::Cell::new(0);
        let t0 = Instant::now();
        let at = |slot: &mut Option<Pool>, t| {
            Pool::agent_at(slot, t, || {
                built.set(built.get() + 1);
                build_agent(4)
            });
        };
        at(&mut slot, t0);
        at(&mut slot, t0 + Duration::from_secs(1));
        at(&mut slot, t0 + POOL_MAX_AGE - Duration::from_millis(1));
        assert_eq!(built.get(), 1);
        at(&mut slot, t0 + POOL_MAX_AGE);
        assert_eq!(built.get(), 2);
        at(&mut slot, t0 + POOL_MAX_AGE + Duration::from_secs(1));
        assert_eq!(built.get(), 2);
    }

    #[test]
    fn urls_are_removed() {
        assert_eq!(
            strip_urls("https://api.x.com/v1/messages?key=s3cret: Connection Failed: refused"),
            "Connection Failed: refused"
        );
        assert_eq!(
            strip_urls("Bad URL: http://u:p@h/x is invalid"),
            "Bad URL: is invalid"
        );
        assert_eq!(
            strip_urls("redirect to \"https://a/b\""),
            "redirect to \"\""
        );
        assert_eq!(strip_urls("no url here: a://"), "no url here:");
        assert_eq!(strip_urls("plain"), "plain");
        assert!(!strip_urls("x https://secret.example/tok y").contains("secret"));
    }

    #[test]
    fn credential_errors_do_not_call_out() {
        let call = ProviderCall {
            id: engine::CallId(1),
            url: "http://127.0.0.1:1/v1/messages".into(),
            headers: vec![],
            auth_template: "${BAE_TEST_SURELY_UNSET_VAR}".into(),
            auth: AuthPlacement::Bearer,
            body: b"{}".to_vec(),
            timeout_ms: 1000,
            stream: false,
        };
        match perform_with_env(&call, |_| None) {
            ProviderReply::Credential(msg) => {
                assert!(msg.contains("BAE_TEST_SURELY_UNSET_VAR"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn transport_failures_have_no_url() {
        // Port 1 on loopback: connection refused.
        let call = ProviderCall {
            id: engine::CallId(1),
            url: "http://127.0.0.1:1/v1/messages?secret=abc".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            auth_template: "tok".into(),
            auth: AuthPlacement::XApiKey,
            body: b"{}".to_vec(),
            timeout_ms: 2000,
            stream: false,
        };
        match perform_with_env(&call, |_| None) {
            ProviderReply::Transport(msg) => {
                assert!(!msg.contains("secret"), "{msg}");
                assert!(!msg.contains("127.0.0.1:1/"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }
}
