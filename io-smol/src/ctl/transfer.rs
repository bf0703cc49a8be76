//! `baectl sessions fork|rewind|export|import|lineage`: the admin API's
//! forks, exports and imports (extension; docs/extensions.md, "Forks,
//! exports and imports"). An export is streamed to its file line by line,
//! with progress on stderr; an import sends the file as it is.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::args::ForkOpts;
use super::client::{encode, with_query, AdminClient};
use super::{render, CtlError, Io};

/// Event lines between two progress reports.
const PROGRESS_EVERY: u64 = 1_000;

/// `sessions fork` / `sessions rewind`.
pub fn fork(
    client: &AdminClient,
    id: &str,
    rewind: bool,
    at: &ForkOpts,
    json: bool,
    io: &mut Io<'_>,
) -> Result<String, CtlError> {
    let mut body = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.into(), v);
        }
    };
    put("event_id", at.event_id.clone().map(Value::from));
    put("after_turn", at.after_turn.map(Value::from));
    put("before_message", at.before_message.clone().map(Value::from));
    put("client_key_id", at.client_key_id.clone().map(Value::from));
    put("profile_id", at.profile_id.clone().map(Value::from));
    let verb = if rewind { "rewind" } else { "fork" };
    let path = format!("/admin/v1/sessions/{}/{verb}", encode(id));
    let v = client.json("POST", &path, Some(&Value::Object(body)))?;
    let _ = writeln!(
        io.err,
        "baectl: copy the session key now; it cannot be retrieved again"
    );
    if json {
        return Ok(render::json(&v));
    }
    let mut out = format!(
        "created session {}\n  session_key:   {}\n  client_key_id: {}\n  profile_id:    {}\n  parent:        {} after {}\n  events:        {}\n",
        text(&v["session_id"]),
        text(&v["session_key"]),
        text(&v["client_key_id"]),
        text(&v["profile_id"]),
        text(&v["parent"]["session_id"]),
        text(&v["parent"]["event_id"]),
        v["events"],
    );
    if let Some(m) = v.get("message") {
        out.push_str(&format!("  message:       {m}\n"));
    }
    Ok(out)
}

/// `sessions export ID [-o FILE]`: the document to the file (or stdout),
/// checked to end with its end line.
pub fn export(
    client: &AdminClient,
    id: &str,
    output: Option<&Path>,
    json: bool,
    io: &mut Io<'_>,
) -> Result<String, CtlError> {
    let path = format!("/admin/v1/sessions/{}/export", encode(id));
    let mut file = match output {
        Some(p) => Some(
            std::fs::File::create(p)
                .map(std::io::BufWriter::new)
                .map_err(|e| {
                    CtlError::runtime("io", format!("cannot create {}: {e}", p.display()))
                })?,
        ),
        None => None,
    };
    let (mut events, mut ended) = (0u64, false);
    let err = &mut *io.err;
    let mut count = |line: &str| {
        if line.starts_with("{\"kind\":\"event\"") {
            events += 1;
            if events % PROGRESS_EVERY == 0 {
                let _ = writeln!(err, "baectl: {events} events exported");
            }
        }
        ended = line.starts_with("{\"kind\":\"end\"");
        Ok::<(), CtlError>(())
    };
    match file.as_mut() {
        Some(f) => client.stream_lines(&path, f, &mut count)?,
        None => client.stream_lines(&path, &mut *io.out, &mut count)?,
    }
    if let Some(mut f) = file {
        f.flush()
            .map_err(|e| CtlError::runtime("io", format!("writing the document failed: {e}")))?;
    }
    if !ended {
        return Err(CtlError::runtime(
            "export_cut_short",
            format!("the export of {id} ended without its end line ({events} events received)"),
        ));
    }
    let _ = writeln!(io.err, "baectl: exported {events} events of {id}");
    Ok(match output {
        Some(p) if json => render::json(
            &json!({"session_id": id, "events": events, "file": p.display().to_string()}),
        ),
        Some(p) => format!("{}\n", p.display()),
        // The document itself went to stdout.
        None => String::new(),
    })
}

/// `sessions import FILE --client-key-id KEY [--profile-id P] [--keep-id]`.
pub fn import(
    client: &AdminClient,
    file: &str,
    query: Vec<(&str, String)>,
    json: bool,
    io: &mut Io<'_>,
) -> Result<String, CtlError> {
    let doc = if file == "-" {
        let mut doc = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut doc)
            .map_err(|e| CtlError::runtime("io", format!("reading stdin failed: {e}")))?;
        doc
    } else {
        std::fs::read(PathBuf::from(file))
            .map_err(|e| CtlError::runtime("io", format!("cannot read {file}: {e}")))?
    };
    let _ = writeln!(
        io.err,
        "baectl: sending {} bytes ({} lines)",
        doc.len(),
        doc.iter().filter(|b| **b == b'\n').count()
    );
    let path = with_query("/admin/v1/sessions/import", &query);
    let v = client.post_bytes(&path, "application/x-ndjson", &doc)?;
    let _ = writeln!(
        io.err,
        "baectl: copy the session key now; it cannot be retrieved again"
    );
    if json {
        return Ok(render::json(&v));
    }
    Ok(format!(
        "imported session {}\n  session_key:       {}\n  client_key_id:     {}\n  profile_id:        {}\n  source_session_id: {}\n  events:            {}\n",
        text(&v["session_id"]),
        text(&v["session_key"]),
        text(&v["client_key_id"]),
        text(&v["profile_id"]),
        text(&v["source_session_id"]),
        v["events"],
    ))
}

/// `sessions lineage ID`.
pub fn lineage(client: &AdminClient, id: &str, json: bool) -> Result<String, CtlError> {
    let path = format!("/admin/v1/sessions/{}/lineage", encode(id));
    let v = client.json("GET", &path, None)?;
    if json {
        return Ok(render::json(&v));
    }
    let o = &v["origin"];
    let origin = match o["kind"].as_str() {
        Some("fork") => format!(
            "fork of {} after {}",
            text(&o["parent_session_id"]),
            text(&o["parent_event_id"])
        ),
        Some("import") => format!("import of {}", text(&o["source_session_id"])),
        _ => "created by a client".into(),
    };
    let mut out = format!("session {}\n  origin: {origin}\n", text(&v["session_id"]));
    let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    for a in list("ancestors") {
        out.push_str(&format!("  ancestor: {}\n", text(&a)));
    }
    for c in list("children") {
        out.push_str(&format!(
            "  fork: {} after {}\n",
            text(&c["session_id"]),
            text(&c["parent_event_id"])
        ));
    }
    Ok(out)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
