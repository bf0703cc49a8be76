//! The decoded request value and its accessors.

/// A request method. The standard ones the server routes on get their own
/// variant; anything else is kept verbatim. Methods are case-sensitive
/// (`get` is `Other("get")`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
    Head,
    Options,
    Patch,
    Other(String),
}

impl Method {
    /// Maps a method token as sent on the request line.
    pub fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        }
    }

    /// The method token.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other(s) => s,
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A complete, framed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The raw request-target, e.g. `/api/v1/sessions/x/events?limit=5`.
    pub target: String,
    /// Where [`Request::path`] ends in `target` (at the first `?`, or its
    /// end).
    path_len: usize,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Header fields in order, names as sent, values with surrounding
    /// whitespace trimmed.
    pub headers: Headers,
    /// The de-framed body (chunked framing and trailers removed).
    pub body: Vec<u8>,
    /// Whether the connection may carry another request after this one:
    /// HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
    /// `Connection: keep-alive` (and no `close`).
    pub keep_alive: bool,
}

impl Request {
    /// A request for `target`, split into path and query at its first `?`.
    pub fn new(
        method: Method,
        target: String,
        minor_version: u8,
        headers: Headers,
        body: Vec<u8>,
        keep_alive: bool,
    ) -> Request {
        let path_len = target.find('?').unwrap_or(target.len());
        Request {
            method,
            target,
            path_len,
            minor_version,
            headers,
            body,
            keep_alive,
        }
    }

    /// `target` before the first `?`, not percent-decoded.
    pub fn path(&self) -> &str {
        self.target.get(..self.path_len).unwrap_or_default()
    }

    /// `target` after the first `?`, if there is one (possibly empty).
    pub fn query(&self) -> Option<&str> {
        self.target.get(self.path_len..)?.strip_prefix('?')
    }

    /// The value of the first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.get(name)
    }

    /// The first query parameter whose decoded name is `name`, decoded
    /// (`%XX` escapes and `+` as space; invalid escapes are kept literally,
    /// invalid UTF-8 is replaced). A bare `name` without `=` yields `""`.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query()?.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// A request's header fields, in order: all names and values in one
/// buffer (two allocations per request instead of two per field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    bytes: Vec<u8>,
    /// Per field: where its name ends and where its value ends in `bytes`
    /// (each starts where the one before ended).
    ends: Vec<(usize, usize)>,
}

impl Headers {
    /// Room for `fields` fields of `bytes` bytes in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(fields),
        }
    }

    /// Appends a field.
    pub fn push(&mut self, name: &str, value: &[u8]) {
        self.bytes.extend_from_slice(name.as_bytes());
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push((name_end, self.bytes.len()));
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&(name_end, end)| {
            let name = self.bytes.get(start..name_end).unwrap_or_default();
            let value = self.bytes.get(name_end..end).unwrap_or_default();
            start = end;
            // Names are pushed as `&str`, so this never falls back.
            (std::str::from_utf8(name).unwrap_or_default(), value)
        })
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl<'a> FromIterator<(&'a str, &'a [u8])> for Headers {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a [u8])>>(fields: I) -> Headers {
        let mut h = Headers::default();
        for (name, value) in fields {
            h.push(name, value);
        }
        h
    }
}
