//! A small blocking client for the admin API (`/admin/v1/*`).
//!
//! Responses are kept as `serde_json::Value` so `--json` can print exactly
//! what the server sent. Non-2xx answers are turned into [`CtlError`]s from
//! their RFC 7807 `type` and `detail`.

use std::io::Read;
use std::time::Duration;

use serde_json::Value;

use super::CtlError;

/// Page size used when following `next_cursor` (the server's maximum).
pub const FOLLOW_LIMIT: u32 = 200;

/// Largest response body read (an events page can hold raw provider
/// bodies).
const MAX_BODY: u64 = 256 * 1024 * 1024;

/// The admin API at one base URL.
pub struct AdminClient {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// `host:port` → `http://host:port`; a value with a scheme is used as is
/// (without trailing slashes).
pub fn base_url(addr: &str) -> String {
    let addr = addr.trim();
    if addr.contains("://") {
        addr.trim_end_matches('/').to_string()
    } else {
        format!("http://{}", addr.trim_end_matches('/'))
    }
}

/// Everything but RFC 3986 unreserved characters.
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, RESERVED).to_string()
}

/// Appends `key=value` pairs (encoded) to `path`.
pub fn with_query(path: &str, query: &[(&str, String)]) -> String {
    let mut out = path.to_string();
    for (i, (k, v)) in query.iter().enumerate() {
        out.push(if i == 0 && !path.contains('?') {
            '?'
        } else {
            '&'
        });
        out.push_str(k);
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

/// Builds the error for a non-2xx answer from its body.
pub fn problem_error(status: u16, body: &str) -> CtlError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let member = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match member("type") {
        Some(kind) if !kind.trim().is_empty() => {
            let detail = member("detail")
                .filter(|d| !d.trim().is_empty())
                .or_else(|| member("title"))
                .unwrap_or_else(|| format!("HTTP {status}"));
            CtlError::api(kind, detail)
        }
        _ => {
            let text: String = body.trim().chars().take(200).collect();
            let detail = if text.is_empty() {
                format!("the admin API answered HTTP {status} without a problem body")
            } else {
                format!("the admin API answered HTTP {status}: {text}")
            };
            CtlError::api(format!("http_{status}"), detail)
        }
    }
}

impl AdminClient {
    pub fn new(addr: &str, token: Option<String>) -> AdminClient {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout_read(Duration::from_secs(120))
            .timeout_write(Duration::from_secs(30))
            .redirects(0)
            .build();
        AdminClient {
            base: base_url(addr),
            token,
            agent,
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// One request; `Ok(None)` for an empty 2xx body (204).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>, CtlError> {
        let mut req = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set("Accept", "application/json");
        if let Some(token) = &self.token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        let result = match body {
            Some(b) => req
                .set("Content-Type", "application/json")
                .send_string(&b.to_string()),
            None => req.call(),
        };
        match result {
            Ok(resp) => {
                let text = read_body(resp)?;
                if text.trim().is_empty() {
                    return Ok(None);
                }
                serde_json::from_str(&text).map(Some).map_err(|e| {
                    CtlError::runtime(
                        "unexpected_response",
                        format!("{method} {path}: the answer is not JSON ({e})"),
                    )
                })
            }
            Err(ureq::Error::Status(status, resp)) => {
                let text = read_body(resp).unwrap_or_default();
                Err(problem_error(status, &text))
            }
            Err(ureq::Error::Transport(t)) => Err(CtlError::runtime(
                "connection",
                format!(
                    "could not reach the admin API at {}: {t} (is baesrv running, and is --admin-addr / BAE_ADMIN_ADDR right?)",
                    self.base
                ),
            )),
        }
    }

    /// `GET path` whose `200` body is copied to `sink` line by line;
    /// `on_line` sees each line (without its newline) before it is written.
    /// Nothing is buffered beyond one line.
    pub fn stream_lines(
        &self,
        path: &str,
        sink: &mut dyn std::io::Write,
        on_line: &mut dyn FnMut(&str) -> Result<(), CtlError>,
    ) -> Result<(), CtlError> {
        use std::io::BufRead;
        let resp = self.send(self.prepare("GET", path), None)?;
        let mut reader = std::io::BufReader::new(resp.into_reader());
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).map_err(|e| {
                CtlError::runtime("connection", format!("GET {path}: reading failed: {e}"))
            })?;
            if n == 0 {
                return Ok(());
            }
            on_line(line.trim_end_matches(['\n', '\r']))?;
            sink.write_all(line.as_bytes()).map_err(|e| {
                CtlError::runtime("io", format!("writing the document failed: {e}"))
            })?;
        }
    }

    /// `POST path` with `body` of `content_type`; the JSON answer.
    pub fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Value, CtlError> {
        let req = self.prepare("POST", path).set("Content-Type", content_type);
        let text = read_body(self.send(req, Some(body))?)?;
        serde_json::from_str(&text).map_err(|e| {
            CtlError::runtime(
                "unexpected_response",
                format!("POST {path}: the answer is not JSON ({e})"),
            )
        })
    }

    fn prepare(&self, method: &str, path: &str) -> ureq::Request {
        let req = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.token {
            Some(token) => req.set("Authorization", &format!("Bearer {token}")),
            None => req,
        }
    }

    /// Sends `req`; a non-2xx answer or a transport failure is the error.
    fn send(&self, req: ureq::Request, body: Option<&[u8]>) -> Result<ureq::Response, CtlError> {
        let result = match body {
            Some(b) => req.send_bytes(b),
            None => req.call(),
        };
        match result {
            Ok(resp) => Ok(resp),
            Err(ureq::Error::Status(status, resp)) => {
                let text = read_body(resp).unwrap_or_default();
                Err(problem_error(status, &text))
            }
            Err(ureq::Error::Transport(t)) => Err(CtlError::runtime(
                "connection",
                format!(
                    "could not reach the admin API at {}: {t} (is baesrv running, and is --admin-addr / BAE_ADMIN_ADDR right?)",
                    self.base
                ),
            )),
        }
    }

    /// A request whose 2xx answer must carry a JSON body.
    pub fn json(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, CtlError> {
        self.request(method, path, body)?.ok_or_else(|| {
            CtlError::runtime(
                "unexpected_response",
                format!("{method} {path}: empty answer"),
            )
        })
    }

    /// One page of a paginated list.
    pub fn page(
        &self,
        path: &str,
        query: &[(&str, String)],
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<Value, CtlError> {
        let mut q = query.to_vec();
        if let Some(c) = cursor {
            q.push(("cursor", c.to_string()));
        }
        if let Some(l) = limit {
            q.push(("limit", l.to_string()));
        }
        let page = self.json("GET", &with_query(path, &q), None)?;
        if !page.get("items").is_some_and(Value::is_array) {
            return Err(CtlError::runtime(
                "unexpected_response",
                format!("GET {path}: the answer has no \"items\" array"),
            ));
        }
        Ok(page)
    }

    /// Every item of a paginated list, following `next_cursor` until null.
    pub fn all(&self, path: &str, query: &[(&str, String)]) -> Result<Vec<Value>, CtlError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.page(path, query, Some(FOLLOW_LIMIT), cursor.as_deref())?;
            if let Some(Value::Array(batch)) = page.get("items") {
                items.extend(batch.iter().cloned());
            }
            match page.get("next_cursor") {
                Some(Value::String(next)) => {
                    if cursor.as_deref() == Some(next.as_str()) {
                        return Err(CtlError::runtime(
                            "unexpected_response",
                            format!("GET {path}: next_cursor {next:?} repeats"),
                        ));
                    }
                    cursor = Some(next.clone());
                }
                Some(Value::Null) | None => return Ok(items),
                Some(other) => {
                    return Err(CtlError::runtime(
                        "unexpected_response",
                        format!("GET {path}: next_cursor is not a string: {other}"),
                    ))
                }
            }
        }
    }
}

fn read_body(resp: ureq::Response) -> Result<String, CtlError> {
    let mut bytes = Vec::new();
    resp.into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            CtlError::runtime(
                "connection",
                format!("reading the admin API answer failed: {e}"),
            )
        })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(base_url("127.0.0.1:8081"), "http://127.0.0.1:8081");
        assert_eq!(base_url("[::1]:8081"), "http://[::1]:8081");
        assert_eq!(
            base_url("https://tunnel.example:443/"),
            "https://tunnel.example:443"
        );
        assert_eq!(base_url(" http://h:1 "), "http://h:1");
    }

    #[test]
    fn query_encoding() {
        assert_eq!(
            with_query(
                "/a",
                &[("state", "open".into()), ("cursor", "1 2&x".into())]
            ),
            "/a?state=open&cursor=1%202%26x"
        );
        assert_eq!(with_query("/a", &[]), "/a");
        assert_eq!(encode("ses_AZ09-._~/é"), "ses_AZ09-._~%2F%C3%A9");
    }

    #[test]
    fn problems() {
        let e = problem_error(
            404,
            r#"{"type":"not_found","title":"Not Found","status":404,"detail":"no profile pro_x"}"#,
        );
        assert_eq!((e.kind(), e.detail()), ("not_found", "no profile pro_x"));
        assert_eq!(e.exit_code(), 1);
        let e = problem_error(409, r#"{"type":"duplicate_name","title":"Conflict"}"#);
        assert_eq!((e.kind(), e.detail()), ("duplicate_name", "Conflict"));
        let e = problem_error(502, "Bad Gateway");
        assert_eq!(e.kind(), "http_502");
        assert!(e.detail().contains("Bad Gateway"));
        let e = problem_error(500, "");
        assert_eq!(e.kind(), "http_500");
    }
}
