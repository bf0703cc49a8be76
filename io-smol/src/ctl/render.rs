//! Human-readable output of `baectl` (the default; `--json` bypasses it).
//!
//! Tables have an upper-case header row and columns separated by two
//! spaces; absent or null values print as `-`. The profile and key layouts
//! are those of the reference baectl.

use serde_json::Value;

/// A cell: strings verbatim, null/absent as `-`, arrays joined by `,`,
/// anything else as compact JSON.
pub fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) if s.is_empty() => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.is_empty() => "-".to_string(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| cell(Some(x)))
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

fn field(v: &Value, key: &str) -> String {
    cell(v.get(key))
}

/// Column-aligned table with a header row.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = widths[i] - c.chars().count();
                format!("{c}{}", " ".repeat(pad))
            })
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn rows(items: &[Value], keys: &[&str]) -> Vec<Vec<String>> {
    items
        .iter()
        .map(|it| keys.iter().map(|k| field(it, k)).collect())
        .collect()
}

fn list_or(items: &[Value], empty: &str, headers: &[&str], keys: &[&str]) -> String {
    if items.is_empty() {
        format!("{empty}\n")
    } else {
        table(headers, &rows(items, keys))
    }
}

pub fn profiles(items: &[Value]) -> String {
    list_or(
        items,
        "no profiles found",
        &["ID", "NAME", "PRIMARY_PROVIDER"],
        &["id", "name", "primary_provider"],
    )
}

pub fn keys(items: &[Value]) -> String {
    list_or(
        items,
        "no keys found",
        // The reference baectl's layout, which scripts read; `last_used_at`
        // is in `--json`.
        &["ID", "NAME", "PREFIX", "PROFILE_ID"],
        &["id", "name", "prefix", "profile_id"],
    )
}

pub fn sessions(items: &[Value]) -> String {
    list_or(
        items,
        "no sessions found",
        &[
            "ID",
            "PROFILE_ID",
            "STATE",
            "CLIENT_VERSION",
            "CREATED_AT",
            "CLOSED_AT",
        ],
        &[
            "id",
            "profile_id",
            "state",
            "client_version",
            "created_at",
            "closed_at",
        ],
    )
}

pub fn events(items: &[Value]) -> String {
    list_or(
        items,
        "no events found",
        &["ID", "EVENT_TYPE", "CLIENT_KEY_ID", "CREATED_AT"],
        &["id", "event_type", "client_key_id", "created_at"],
    )
}

pub fn providers(items: &[Value]) -> String {
    list_or(
        items,
        "no providers configured",
        &["NAME", "PROVIDER", "MODEL", "BASE_URL"],
        &["name", "provider", "model", "base_url"],
    )
}

pub fn mcp_servers(items: &[Value]) -> String {
    list_or(
        items,
        "no MCP servers configured",
        &["NAME", "TRANSPORT"],
        &["name", "transport"],
    )
}

/// `mcp-servers list` from the redacted config view: what each server
/// runs or where it is, its header names (values are always redacted by
/// the server) and the reconnect switch.
pub fn mcp_servers_detail(servers: &[Value]) -> String {
    if servers.is_empty() {
        return "no MCP servers configured\n".to_string();
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            let target = match s.get("url").and_then(Value::as_str) {
                Some(url) => url.to_string(),
                None => {
                    let mut parts = vec![field(s, "command")];
                    if let Some(args) = s.get("args").and_then(Value::as_array) {
                        parts.extend(args.iter().map(|a| a.as_str().unwrap_or("").to_string()));
                    }
                    parts.join(" ")
                }
            };
            let headers = s
                .get("headers")
                .and_then(Value::as_object)
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "-".into());
            let reconnect = if s.get("reconnect") == Some(&Value::Bool(true)) {
                "yes"
            } else {
                "no"
            };
            vec![
                field(s, "name"),
                field(s, "transport"),
                target,
                headers,
                reconnect.into(),
            ]
        })
        .collect();
    table(
        &["NAME", "TRANSPORT", "TARGET", "HEADERS", "RECONNECT"],
        &rows,
    )
}

pub fn sandbox_status(items: &[Value]) -> String {
    let mut out = Vec::new();
    for item in items {
        let profile = field(item, "profile_id");
        let images = item
            .get("images")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if images.is_empty() {
            out.push(vec![profile.clone(), "-".into(), "-".into(), "-".into()]);
        }
        for img in images {
            out.push(vec![
                profile.clone(),
                field(&img, "name"),
                field(&img, "status"),
                field(&img, "detail"),
            ]);
        }
    }
    if out.is_empty() {
        return "no sandbox status entries\n".to_string();
    }
    table(&["PROFILE_ID", "IMAGE", "STATUS", "DETAIL"], &out)
}

fn str_list(label: &str, v: Option<&Value>) -> String {
    let items: Vec<String> = v
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| cell(Some(x))).collect())
        .unwrap_or_default();
    if items.is_empty() {
        format!("{label}: (none)\n")
    } else {
        format!("{label}: {}\n", items.join(", "))
    }
}

/// A full profile (get / update).
pub fn profile(v: &Value) -> String {
    let mut out = String::new();
    out.push_str(&format!("id:               {}\n", field(v, "id")));
    out.push_str(&format!("name:             {}\n", field(v, "name")));
    out.push_str(&format!(
        "primary_provider: {}\n",
        field(v, "primary_provider")
    ));
    out.push_str(&str_list("fallback_providers", v.get("fallback_providers")));
    out.push_str(&str_list("mcp_servers", v.get("mcp_servers")));
    out.push_str(&str_list("allowed_tools", v.get("allowed_tools")));
    out.push_str(&str_list(
        "available_sandboxes",
        v.get("available_sandboxes"),
    ));
    out.push_str(&format!("created_at:       {}\n", field(v, "created_at")));
    out.push_str(&format!("updated_at:       {}\n", field(v, "updated_at")));
    out
}

/// The `{id, name, created_at}` answer of a profile create.
pub fn profile_created(v: &Value) -> String {
    format!(
        "created profile\n  id:         {}\n  name:       {}\n  created_at: {}\n",
        field(v, "id"),
        field(v, "name"),
        field(v, "created_at")
    )
}

/// The answer of a key create (the only time the plaintext is shown).
pub fn key_created(v: &Value) -> String {
    format!(
        "created key\n  id:         {}\n  name:       {}\n  key:        {}\n  prefix:     {}\n  profile_id: {}\n  created_at: {}\n",
        field(v, "id"),
        field(v, "name"),
        field(v, "key"),
        field(v, "prefix"),
        field(v, "profile_id"),
        field(v, "created_at")
    )
}

/// Flattens an object into `path: value` lines (nested objects use dotted
/// paths; an empty object prints `(none)`).
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) if prefix.ends_with("headers") => {
            out.push((prefix.to_string(), headers(map)))
        }
        Value::Object(map) if map.is_empty() => out.push((prefix.to_string(), "(none)".into())),
        Value::Object(map) => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, child, out);
            }
        }
        other => out.push((prefix.to_string(), cell(Some(other)))),
    }
}

fn headers(map: &serde_json::Map<String, Value>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={}", cell(Some(v))))
        .collect::<Vec<_>>()
        .join(",")
}

/// `GET /admin/v1/config`: providers, MCP servers, telemetry.
pub fn config(v: &Value) -> String {
    let mut out = String::new();
    let providers = v
        .pointer("/providers/entries")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    out.push_str("providers:\n");
    if providers.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let t = table(
            &["NAME", "PROVIDER", "MODEL", "BASE_URL", "AUTH_TOKEN"],
            &rows(
                &providers,
                &["name", "provider", "model", "base_url", "auth_token"],
            ),
        );
        out.push_str(&indent(&t));
    }
    let servers = v
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    out.push_str("mcp servers:\n");
    if servers.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = servers
            .iter()
            .map(|s| {
                let mut command = field(s, "command");
                if let Some(args) = s.get("args").and_then(Value::as_array) {
                    for a in args {
                        command.push(' ');
                        command.push_str(&cell(Some(a)));
                    }
                }
                vec![
                    field(s, "name"),
                    field(s, "transport"),
                    command,
                    field(s, "url"),
                    s.get("headers")
                        .and_then(Value::as_object)
                        .map(headers)
                        .unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        let t = table(&["NAME", "TRANSPORT", "COMMAND", "URL", "HEADERS"], &rows);
        out.push_str(&indent(&t));
    }
    out.push_str("telemetry:\n");
    let mut lines = Vec::new();
    if let Some(t) = v.get("telemetry") {
        flatten("", t, &mut lines);
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, val) in lines {
        out.push_str(&format!("  {k}:{} {val}\n", " ".repeat(width - k.len())));
    }
    out
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// A usage answer (`GET …/{id}/usage`): the window, then one row for the
/// total, one per provider entry and, for a session, one per turn (named
/// by the `seq` of its first event). Cost is `-` where no price is known.
pub fn usage(v: &Value) -> String {
    let (what, id) = [
        ("session", "session_id"),
        ("key", "key_id"),
        ("profile", "profile_id"),
    ]
    .into_iter()
    .find_map(|(w, k)| v.get(k).map(|id| (w, cell(Some(id)))))
    .unwrap_or(("?", "-".into()));
    let mut out = format!(
        "usage of {what} {id} (since {}, until {})\n",
        field(v, "since"),
        field(v, "until")
    );
    const KEYS: [&str; 6] = [
        "calls",
        "input_tokens",
        "output_tokens",
        "cache_write_tokens",
        "cache_read_tokens",
        "cost",
    ];
    let row = |name: String, c: &Value| {
        std::iter::once(name)
            .chain(KEYS.iter().map(|k| field(c, k)))
            .collect::<Vec<_>>()
    };
    let mut rows = vec![row("total".into(), &v["total"])];
    let list = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for p in list("by_provider") {
        rows.push(row(format!("provider {}", field(&p, "provider")), &p));
    }
    for t in list("by_turn") {
        rows.push(row(format!("turn {}", field(&t, "turn_seq")), &t));
    }
    out.push_str(&table(
        &[
            "ROW",
            "CALLS",
            "INPUT",
            "OUTPUT",
            "CACHE_WRITE",
            "CACHE_READ",
            "COST",
        ],
        &rows,
    ));
    out
}

/// `--json` output: pretty-printed, newline-terminated.
pub fn json(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_alignment() {
        let t = table(
            &["ID", "NAME"],
            &[
                vec!["a".into(), "x".into()],
                vec!["long-id".into(), "-".into()],
            ],
        );
        assert_eq!(t, "ID       NAME\na        x\nlong-id  -\n");
    }

    #[test]
    fn lists_and_empty_states() {
        assert_eq!(profiles(&[]), "no profiles found\n");
        assert_eq!(keys(&[]), "no keys found\n");
        let k = keys(&[json!({"id": "key_1", "name": "n", "prefix": "bae_1234",
            "profile_id": "pro_1", "created_at": "t", "last_used_at": null})]);
        assert_eq!(
            k,
            "ID     NAME  PREFIX    PROFILE_ID\nkey_1  n     bae_1234  pro_1\n"
        );
    }

    #[test]
    fn profile_block() {
        let p = profile(
            &json!({"id": "pro_1", "name": "main", "primary_provider": "a",
            "fallback_providers": ["b", "c"], "mcp_servers": [], "allowed_tools": ["t"],
            "available_sandboxes": [], "created_at": "c", "updated_at": "u"}),
        );
        assert_eq!(
            p,
            "id:               pro_1\nname:             main\nprimary_provider: a\n\
             fallback_providers: b, c\nmcp_servers: (none)\nallowed_tools: t\n\
             available_sandboxes: (none)\ncreated_at:       c\nupdated_at:       u\n"
        );
    }

    #[test]
    fn sandbox_rows() {
        let s = sandbox_status(&[json!({"profile_id": "pro_1", "images": [
            {"name": "node:22", "status": "error", "detail": "pull failed"},
            {"name": "python:3.12", "status": "pending"}]})]);
        assert_eq!(
            s,
            "PROFILE_ID  IMAGE        STATUS   DETAIL\n\
             pro_1       node:22      error    pull failed\n\
             pro_1       python:3.12  pending  -\n"
        );
    }

    #[test]
    fn usage_rows() {
        let counters = |calls: u64, cost: Value| {
            json!({"calls": calls, "input_tokens": 10 * calls, "output_tokens": 5,
                "cache_write_tokens": 0, "cache_read_tokens": 900, "cost": cost})
        };
        let mut by_turn = counters(1, json!(0.5));
        by_turn["turn_seq"] = json!(3);
        let mut by_provider = counters(2, json!(null));
        by_provider["provider"] = json!("main");
        let u = usage(
            &json!({"session_id": "ses_1", "since": "2026-01-02T00:00:00.000Z",
            "until": null, "total": counters(2, json!(null)),
            "by_provider": [by_provider], "by_turn": [by_turn]}),
        );
        assert_eq!(
            u,
            "usage of session ses_1 (since 2026-01-02T00:00:00.000Z, until -)\n\
             ROW            CALLS  INPUT  OUTPUT  CACHE_WRITE  CACHE_READ  COST\n\
             total          2      20     5       0            900         -\n\
             provider main  2      20     5       0            900         -\n\
             turn 3         1      10     5       0            900         0.5\n"
        );
        let k = usage(&json!({"key_id": "key_1", "since": null, "until": null,
            "total": counters(0, json!(0.0)), "by_provider": []}));
        assert!(
            k.starts_with("usage of key key_1 (since -, until -)\n"),
            "{k}"
        );
        assert!(
            k.ends_with("total  0      0      5       0            900         0.0\n"),
            "{k}"
        );
    }

    #[test]
    fn config_sections() {
        let c = config(&json!({
            "mcp": {"servers": [{"name": "fs", "transport": "stdio", "command": "npx",
                "args": ["-y", "srv"], "url": null, "headers": {}}]},
            "providers": {"entries": [{"name": "main", "provider": "anthropic", "model": "m",
                "base_url": "https://api.anthropic.com", "auth_token": "••••••••"}]},
            "telemetry": {"enabled": false, "otlp_endpoint": null, "otlp_headers": {},
                "sample_ratio": 1.0, "service_name": "baesrv", "traces": {"enabled": true},
                "metrics": {"enabled": true, "disabled": []}}
        }));
        assert!(
            c.contains("providers:\n  NAME  PROVIDER   MODEL  BASE_URL"),
            "{c}"
        );
        assert!(c.contains("••••••••"), "{c}");
        assert!(c.contains("fs    stdio      npx -y srv"), "{c}");
        assert!(c.contains("  traces.enabled:   true\n"), "{c}");
        assert!(c.contains("  otlp_headers:     -\n"), "{c}");
        assert!(c.contains("  metrics.disabled: -\n"), "{c}");
    }
}
