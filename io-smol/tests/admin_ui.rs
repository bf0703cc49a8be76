//! The web console on the admin port (`/admin/ui`, an extension): its files
//! and headers over the real binary, then the page itself in headless
//! Chromium (testkit/ui/console.spec.mjs, driven through playwright-core):
//! sign-in, the session list and its filters, a timeline with a paused and
//! resumed client tool, a turn that arrives while the page is open, a tool
//! call's raw JSON, a phone-sized viewport, the quotas and provider traffic views, and a
//! refused key.
//!
//! Needs Debian's `chromium` and `playwright-core` in testkit/ui/node_modules
//! (`testkit/scripts/install-test-deps.sh` installs both); without them the
//! test fails, it is never skipped. Screenshots go to `target/ui-artifacts/`.

mod live_support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use live_support::*;
use serde_json::json;
use testkit::fixtures::provider_toml;
use testkit::http::HttpClient;
use testkit::{MockProvider, Reply, Server};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The Chromium binary: `BAE_CHROMIUM`, else Debian's.
fn chromium() -> PathBuf {
    if let Ok(p) = std::env::var("BAE_CHROMIUM") {
        return PathBuf::from(p);
    }
    ["/usr/bin/chromium", "/usr/lib/chromium/chromium"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("chromium is not installed: run testkit/scripts/install-test-deps.sh (Debian package `chromium`)")
        })
}

/// Kills and reaps the script (and so its browser) if the test panics.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let dir = target.join("ui-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/ui-artifacts");
    dir
}

#[test]
fn the_console_files_need_no_key_and_carry_strict_headers() {
    let (_mock, server) = anthropic_server(&[]);
    let anon = HttpClient::new(server.admin_addr);
    let page = anon.get("/admin/ui");
    page.assert_status(200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let csp = page.header("content-security-policy").unwrap_or_default();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert!(page.text().contains("/admin/ui/app.js"));
    for (path, ct) in [
        ("/admin/ui/app.js", "text/javascript; charset=utf-8"),
        ("/admin/ui/timeline.js", "text/javascript; charset=utf-8"),
        ("/admin/ui/dom.js", "text/javascript; charset=utf-8"),
        ("/admin/ui/app.css", "text/css; charset=utf-8"),
    ] {
        let r = anon.get(path);
        r.assert_status(200);
        assert_eq!(r.header("content-type"), Some(ct), "{path}");
        assert!(r.header("content-security-policy").is_some(), "{path}");
    }
    let missing = anon.get("/admin/ui/secrets.json");
    missing.assert_status(404);
    assert_eq!(missing.problem_type().as_deref(), Some("not_found"));
    anon.post_json("/admin/ui", &json!({})).assert_status(405);
    // The data stays behind the key, and the client port has no console.
    anon.get("/admin/v1/sessions").assert_status(401);
    server.client().get("/admin/ui").assert_status(404);
}

#[test]
fn the_console_shows_sessions_and_a_live_timeline_in_chromium() {
    let exe = chromium();
    let ui = workspace().join("testkit/ui");
    let script = ui.join("console.spec.mjs");
    assert!(
        ui.join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is not installed in testkit/ui: run testkit/scripts/install-test-deps.sh"
    );
    let node_ok = Command::new("node").arg("--version").output();
    assert!(
        node_ok.is_ok_and(|o| o.status.success()),
        "node is not on PATH"
    );

    // The entry has a `limits` table, for the traffic view (an extension).
    let mock = MockProvider::start();
    let mut config = provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "tok-main",
    )]);
    config.push_str(
        "\n[providers.entries.limits]\nmax_concurrent = 4\nrequests_per_minute = 600\nmax_wait_ms = 60000\n",
    );
    let server = Server::start(opts(&config));
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    // Turn 1 pauses on a client tool; turn 2 returns its result. The
    // provider's latency and usage show on the attempts.
    mock.push(
        Reply::tool_use("tu_ui_1", "get_time", json!({"zone": "UTC"}))
            .with_usage(11, 7)
            .delayed(Duration::from_millis(120)),
    );
    let (_, t) = send(&server, &f.session_id, &f.a, json!("what time is it?"));
    assert_eq!(
        t["result"]["message"]["content"][0]["type"], "tool_use",
        "{t}"
    );
    // Text that would be markup if the page parsed event data as HTML.
    mock.push(Reply::text("It is noon <img src=x onerror=alert(1)>"));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_ui_1", "12:00 UTC")]),
    );
    assert!(t.get("result").is_some(), "{t}");
    // A second profile's session whose only provider fails: state `error`.
    let g = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::status(503, "overloaded"));
    send(&server, &g.session_id, &g.a, json!("hello?"));
    assert_eq!(admin_state(&server, &g.session_id), "error");
    // A fork of the first session, for the family tree (an extension).
    let fork = server.admin().request(
        "POST",
        &format!("/admin/v1/sessions/{}/fork", f.session_id),
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(fork.status, 201, "{:?}", fork.try_json());
    let fork_id = fork.json()["session_id"].as_str().unwrap().to_string();

    // A quota on the first key, for the quotas view (an extension).
    server
        .admin()
        .put_json(
            &format!("/admin/v1/keys/{}/quota", f.a.key_id),
            &json!({"max_open_sessions": 5, "requests_per_second": 50,
                    "token_budget": 100000, "window": "1d"}),
        )
        .assert_status(200);

    let out_dir = artifacts();
    let child = Command::new("node")
        .arg(&script)
        .current_dir(&ui)
        .env("BAE_UI_BASE", format!("http://{}", server.admin_addr))
        .env("BAE_UI_ADMIN_KEY", &server.admin_key)
        .env("BAE_UI_SESSION", &f.session_id)
        .env("BAE_UI_PROFILE", &f.profile_id)
        .env("BAE_UI_KEY", &f.a.key_id)
        .env("BAE_UI_OTHER_SESSION", &g.session_id)
        .env("BAE_UI_FORK", &fork_id)
        .env("BAE_UI_ARTIFACTS", &out_dir)
        .env("BAE_CHROMIUM", &exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let mut child = Reap(child);
    let mut stdin = child.0.stdin.take().expect("stdin");
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.0.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = child.0.stderr.take().expect("stderr");
    let err_log = std::thread::spawn(move || {
        let mut s = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            s.push_str(&line);
            s.push('\n');
        }
        s
    });

    let mut log = Vec::new();
    let mut done = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        eprintln!("console.spec: {line}");
        log.push(line.clone());
        if line == "WAITING live" {
            // While the page shows the session: a turn it must pick up by
            // polling, without a reload.
            mock.push(Reply::text("second answer"));
            let (_, t) = send(
                &server,
                &f.session_id,
                &f.a,
                json!("live message from the test"),
            );
            assert!(t.get("result").is_some(), "{t}");
            writeln!(stdin, "SENT").expect("write to the script");
        } else if line == "DONE" {
            done = true;
        }
    }
    drop(stdin);
    if !done {
        let _ = child.0.kill();
    }
    let status = child.0.wait().expect("wait for node");
    let errors = err_log.join().unwrap_or_default();
    assert!(
        done && status.success(),
        "the console script failed ({status}); screenshots in {}\nstdout:\n{}\nstderr:\n{errors}",
        out_dir.display(),
        log.join("\n")
    );
    for name in [
        "01-sessions",
        "02-timeline",
        "03-tool-call",
        "04-phone-timeline",
        "05-phone-sessions",
        "07-quotas",
        "08-traffic",
    ] {
        assert!(
            out_dir.join(format!("{name}.png")).exists(),
            "no screenshot {name}"
        );
    }
}
