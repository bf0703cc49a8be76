//! `baectl sessions fork|rewind|export|import|lineage` end to end: the real
//! `baectl` binary against the real `baesrv` (docs/extensions.md, "Forks,
//! exports and imports"; docs/baectl.md).

mod live_support;
mod transfer_support;

use std::process::Command;

use live_support::*;
use serde_json::{json, Value};
use testkit::{Reply, Server};
use transfer_support::*;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "stdout {:?} stderr {:?}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }
}

/// Runs baectl against `s` with a clean `BAE_*` environment.
fn baectl(s: &Server, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baectl"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    let out = cmd
        .env("BAE_ADMIN_ADDR", s.admin_addr.to_string())
        .env("BAE_ADMIN_KEY_FILE", s.admin_key_file())
        .args(args)
        .output()
        .expect("run baectl");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn export_import_fork_rewind_and_lineage_through_baectl() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    for (q, a) in [("first", "one"), ("second", "two")] {
        mock.push(Reply::text(a));
        send(&server, &f.session_id, &f.a, json!(q));
    }
    let log = admin_events(&server, &f.session_id);

    // Export to a file: the document, byte for byte what the API streams.
    let dir = std::env::temp_dir().join(format!("baectl-transfer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("session.bae.jsonl");
    let file_arg = file.display().to_string();
    let run = baectl(
        &server,
        &["sessions", "export", &f.session_id, "-o", &file_arg],
    )
    .ok();
    assert_eq!(run.stdout, format!("{file_arg}\n"));
    assert!(
        run.stderr.contains(&format!(
            "exported {} events of {}",
            log.len(),
            f.session_id
        )),
        "{}",
        run.stderr
    );
    let doc = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = doc
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "header");
    assert_eq!(lines[0]["session"]["id"], f.session_id.as_str());
    assert_eq!(lines.last().unwrap()["events"], log.len());
    let from_api = export(&server, &f.session_id);
    assert_eq!(strip_exported_at(&doc), strip_exported_at(&from_api));

    // Without -o the document goes to stdout.
    let run = baectl(&server, &["sessions", "export", &f.session_id]).ok();
    assert_eq!(strip_exported_at(&run.stdout), strip_exported_at(&doc));

    // Import it back for the creator: a new session with the same events.
    let run = baectl(
        &server,
        &[
            "--json",
            "sessions",
            "import",
            &file_arg,
            "--client-key-id",
            &f.a.key_id,
        ],
    )
    .ok();
    let imported = run.json();
    assert_eq!(imported["source_session_id"], f.session_id.as_str());
    assert_eq!(imported["events"], log.len());
    assert!(!imported["session_key"].as_str().unwrap().is_empty());
    let copy = admin_events(&server, imported["session_id"].as_str().unwrap());
    assert_eq!(
        copy.iter().map(kept).collect::<Vec<_>>(),
        log.iter().map(kept).collect::<Vec<_>>()
    );

    // A truncated document is refused with the server's problem.
    let cut: String = doc.lines().take(3).map(|l| format!("{l}\n")).collect();
    let cut_file = dir.join("cut.bae.jsonl");
    std::fs::write(&cut_file, cut).unwrap();
    let run = baectl(
        &server,
        &[
            "sessions",
            "import",
            &cut_file.display().to_string(),
            "--client-key-id",
            &f.a.key_id,
        ],
    );
    assert_eq!(run.code, Some(1), "{:?}", run.stderr);
    assert!(run.stderr.contains("cut short"), "{}", run.stderr);

    // Fork after turn 1, rewind before the second message.
    let run = baectl(
        &server,
        &[
            "--json",
            "sessions",
            "fork",
            &f.session_id,
            "--after-turn",
            "1",
        ],
    )
    .ok();
    let fork = run.json();
    assert_eq!(fork["parent"]["session_id"], f.session_id.as_str());
    let second = of_type(&log, "client.message.send")[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = baectl(
        &server,
        &[
            "sessions",
            "rewind",
            &f.session_id,
            "--before-message",
            &second,
        ],
    )
    .ok();
    assert!(
        run.stdout.starts_with("created session ses_"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\"second\""), "{}", run.stdout);
    let usage = baectl(&server, &["sessions", "rewind", &f.session_id]);
    assert_eq!(usage.code, Some(2), "{:?}", usage.stderr);

    // The family tree: two forks, one import elsewhere.
    let run = baectl(&server, &["--json", "sessions", "lineage", &f.session_id]).ok();
    let tree = run.json();
    assert_eq!(tree["origin"], Value::Null);
    assert_eq!(tree["children"].as_array().unwrap().len(), 2);
    let fid = fork["session_id"].as_str().unwrap();
    let run = baectl(&server, &["sessions", "lineage", fid]).ok();
    assert!(
        run.stdout
            .contains(&format!("origin: fork of {} after ", f.session_id)),
        "{}",
        run.stdout
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The document without its `exported_at` (the only member that differs
/// between two exports of an unchanged session).
fn strip_exported_at(doc: &str) -> String {
    let mut lines = doc.lines();
    let mut header: Value = serde_json::from_str(lines.next().unwrap_or("{}")).unwrap();
    header["exported_at"] = Value::Null;
    let mut out = header.to_string();
    for l in lines {
        out.push('\n');
        out.push_str(l);
    }
    out
}
