//! Extension: the web console on the admin port (`GET /admin/ui` and its
//! assets). The files are byte strings compiled into the binary; serving
//! them needs no admin key because they hold no data: every figure the page
//! shows comes from the admin JSON API, called by the page itself with the
//! operator's `Authorization: Bearer` admin key.

use proto::http::{Method, Request};
use proto::wire::problem::ProblemType;

use crate::respond::Reply;

/// One embedded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The prefix every console path starts with.
pub(crate) const PREFIX: &str = "/admin/ui";

/// Same origin only, nothing inline, no plugins, no framing; the login form
/// is handled by script, so a native submission (which could put the key
/// into a URL if the script failed to load) is refused outright.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// Revalidate on every load: an upgraded binary serves new files at the
/// same paths, and a stale script must not drive a newer API.
pub(crate) const CACHE_CONTROL: &str = "no-cache";

const HTML: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("admin_ui/index.html"),
};
const APP_JS: Asset = Asset {
    content_type: "text/javascript; charset=utf-8",
    body: include_bytes!("admin_ui/app.js"),
};
const TIMELINE_JS: Asset = Asset {
    content_type: "text/javascript; charset=utf-8",
    body: include_bytes!("admin_ui/timeline.js"),
};
const DOM_JS: Asset = Asset {
    content_type: "text/javascript; charset=utf-8",
    body: include_bytes!("admin_ui/dom.js"),
};
const ICON: Asset = Asset {
    content_type: "image/svg+xml",
    body: include_bytes!("admin_ui/icon.svg"),
};
const CSS: Asset = Asset {
    content_type: "text/css; charset=utf-8",
    body: include_bytes!("admin_ui/app.css"),
};

/// Whether `path` belongs to the console (the page, or a file under it).
pub(crate) fn is_ui_path(path: &str) -> bool {
    path == PREFIX
        || path
            .strip_prefix(PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The file served at `path`, if any.
pub(crate) fn asset(path: &str) -> Option<Asset> {
    match path.strip_prefix(PREFIX)? {
        "" | "/" | "/index.html" => Some(HTML),
        "/app.js" => Some(APP_JS),
        "/timeline.js" => Some(TIMELINE_JS),
        "/dom.js" => Some(DOM_JS),
        "/app.css" => Some(CSS),
        "/icon.svg" => Some(ICON),
        _ => None,
    }
}

/// Headers of every console file.
const HEADERS: &[(&str, &str)] = &[
    ("Cache-Control", CACHE_CONTROL),
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
];

/// The answer to a console path: the file, `404` for an unknown file under
/// the prefix, `405` for any method but `GET`. A pure function of the
/// request: the admin router sends it.
pub(crate) fn serve(req: &Request) -> Reply {
    let Some(file) = asset(req.path()) else {
        return Reply::problem(ProblemType::NotFound, "no such route");
    };
    if req.method != Method::Get {
        return Reply::problem(ProblemType::MethodNotAllowed, "method not allowed");
    }
    Reply {
        status: 200,
        content_type: file.content_type,
        headers: HEADERS,
        body: file.body.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_found_with_their_types() {
        assert_eq!(asset("/admin/ui"), Some(HTML));
        assert_eq!(asset("/admin/ui/"), Some(HTML));
        assert_eq!(
            asset("/admin/ui/app.js").map(|a| a.content_type),
            Some("text/javascript; charset=utf-8")
        );
        assert_eq!(
            asset("/admin/ui/app.css").map(|a| a.content_type),
            Some("text/css; charset=utf-8")
        );
        assert_eq!(asset("/admin/ui/nope.js"), None);
        assert_eq!(asset("/admin/uix"), None);
        assert!(is_ui_path("/admin/ui") && is_ui_path("/admin/ui/x"));
        assert!(!is_ui_path("/admin/uix") && !is_ui_path("/admin/v1/profiles"));
    }

    #[test]
    fn console_requests_are_answered_with_the_file_or_a_problem() {
        let req = |method: Method, path: &str| {
            let headers = proto::http::Headers::with_capacity(0, 0);
            Request::new(method, path.to_string(), 1, headers, Vec::new(), true)
        };
        let ok = serve(&req(Method::Get, "/admin/ui/app.css"));
        assert_eq!((ok.status, ok.content_type), (200, CSS.content_type));
        assert_eq!(&*ok.body, CSS.body);
        assert!(ok.headers.contains(&("Content-Security-Policy", CSP)));
        let missing = serve(&req(Method::Get, "/admin/ui/nope.js"));
        assert_eq!(
            (missing.status, missing.content_type),
            (404, "application/json")
        );
        let post = serve(&req(Method::Post, "/admin/ui"));
        assert_eq!(post.status, 405);
        let detail: serde_json::Value = serde_json::from_slice(&post.body).unwrap();
        assert_eq!(detail["detail"], "method not allowed");
    }

    #[test]
    fn the_page_loads_only_same_origin_files_and_has_no_inline_script() {
        let html = std::str::from_utf8(HTML.body).unwrap();
        // Every script and stylesheet the page names is one of ours.
        for src in html
            .split("src=\"")
            .skip(1)
            .chain(html.split("href=\"").skip(1))
        {
            let url = src.split('"').next().unwrap();
            assert!(asset(url).is_some() || url.starts_with('#'), "{url}");
        }
        // No inline script body and no inline event handler.
        for chunk in html.split("<script").skip(1) {
            let body = chunk.split_once('>').unwrap().1;
            assert!(body.starts_with("</script>"), "inline script: {chunk}");
        }
        let handler = html.match_indices(" on").any(|(i, _)| {
            let name: String = html[i + 3..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase())
                .collect();
            !name.is_empty() && html[i + 3 + name.len()..].starts_with('=')
        });
        assert!(!handler, "inline event handler");
        assert!(!html.contains("javascript:"));
        assert!(!html.contains("style=\""), "inline style");
        assert!(CSP.contains("script-src 'self'") && !CSP.contains("unsafe"));
    }

    #[test]
    fn the_scripts_never_write_markup_from_strings() {
        for file in [APP_JS, TIMELINE_JS, DOM_JS] {
            let js = std::str::from_utf8(file.body).unwrap();
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
                "localStorage",
                "document.cookie",
            ] {
                assert!(!js.contains(banned), "{banned} in a console script");
            }
        }
    }
}
