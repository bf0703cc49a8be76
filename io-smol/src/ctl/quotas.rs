//! `baectl quotas list|get|set|delete` (extension; docs/extensions.md,
//! "Quotas"): the admin API's quotas of client keys and profiles, with
//! their consumption now.

use serde_json::{json, Value};

use super::args::{Command, QuotaOf};
use super::client::{encode, AdminClient};
use super::render::{self, cell, table};
use super::CtlError;

fn path(of: QuotaOf, id: &str) -> String {
    let collection = match of {
        QuotaOf::Key => "keys",
        QuotaOf::Profile => "profiles",
    };
    format!("/admin/v1/{collection}/{}/quota", encode(id))
}

/// Runs one of the `quotas` commands.
pub fn run(client: &AdminClient, command: &Command, json: bool) -> Result<String, CtlError> {
    let out = |v: &Value| {
        if json {
            render::json(v)
        } else {
            rows(std::slice::from_ref(v))
        }
    };
    Ok(match command {
        Command::QuotasList => {
            let v = client.json("GET", "/admin/v1/quotas", None)?;
            if json {
                return Ok(render::json(&v));
            }
            let items = v["quotas"].as_array().cloned().unwrap_or_default();
            let mut text = rows(&items);
            let refused: Vec<String> = (v["refused"].as_object().into_iter().flatten())
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            text.push_str(&format!("refused: {}\n", refused.join(" ")));
            text
        }
        Command::QuotasGet { of, id } => out(&client.json("GET", &path(*of, id), None)?),
        Command::QuotasSet { of, id, body } => {
            out(&client.json("PUT", &path(*of, id), Some(body))?)
        }
        Command::QuotasDelete { of, id } => {
            client.request("DELETE", &path(*of, id), None)?;
            let what = match of {
                QuotaOf::Key => "key",
                QuotaOf::Profile => "profile",
            };
            if json {
                render::json(&json!({"scope": what, "id": id, "deleted": true}))
            } else {
                format!("deleted the quota of {what} {id}\n")
            }
        }
        _ => return Err(CtlError::usage("not a quotas command")),
    })
}

/// One row per quota: each limit with its consumption (`used/limit`).
fn rows(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|q| {
            let (l, u) = (&q["quota"], &q["usage"]);
            let of = |used: &Value, limit: &Value| match limit {
                Value::Null => "-".to_string(),
                _ => format!("{}/{}", cell(Some(used)), cell(Some(limit))),
            };
            let rate = match &l["requests_per_second"] {
                Value::Null => "-".to_string(),
                r => format!("{}/s", cell(Some(r))),
            };
            vec![
                cell(q.get("scope")),
                cell(q.get("id")),
                of(&u["open_sessions"], &l["max_open_sessions"]),
                rate,
                cell(l.get("burst")),
                cell(u.get("requests_available")),
                of(&u["tokens_used"], &l["token_budget"]),
                cell(l.get("window")),
            ]
        })
        .collect();
    table(
        &[
            "SCOPE",
            "ID",
            "OPEN_SESSIONS",
            "RATE",
            "BURST",
            "REQUESTS_LEFT",
            "TOKENS",
            "WINDOW",
        ],
        &rows,
    )
}
