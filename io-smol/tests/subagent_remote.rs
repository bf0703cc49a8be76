//! Remote subagents over the real binary against a real container engine
//! (spec 06 §6.3–§6.5; checklist C-153–C-165): a fake CLI in the test
//! image prints its argv and stdin, and sleeps or fails on request.

mod live_support;
mod sandbox_support;

use live_support::*;
use sandbox_support::*;
use serde_json::{json, Value};
use testkit::containers::{BUSYBOX, SUBAGENT};
use testkit::mcp::eventually;
use testkit::{MockProvider, Reply, Server};

fn declaration(image: &str) -> Value {
    json!({
        "name": "launch_subagent",
        "description": "Launch a CLI subagent in the background.",
        "input_schema": {"type": "object", "properties": {"harness": {"type": "string"}, "model": {"type": "string"}, "prompt": {"type": "string"}}, "required": ["harness", "model", "prompt"]},
        "image": image,
        "subagents": [
            {"harness": "claude", "command_template": "claude --model {model} --print", "prompt_via": "stdin"},
            {"harness": "codex", "command_template": "codex exec --model {model} {prompt}", "prompt_via": "arg", "timeout_secs": 2}
        ]
    })
}

fn session(server: &Server, image: &str) -> Fixture {
    open_sandboxed(
        server,
        &[BUSYBOX, SUBAGENT],
        &[],
        json!({"subagent_tools": [declaration(image)]}),
    )
}

/// One turn in which the model calls `tool` with `input`, then answers.
/// Returns the turn's events.
fn call(server: &Server, mock: &MockProvider, f: &Fixture, tool: &str, input: Value) -> Vec<Value> {
    mock.push(Reply::tool_use("tu_1", tool, input));
    mock.push(Reply::text("ok"));
    let (_, t) = send(server, &f.session_id, &f.a, json!("go"));
    result_events(&t)
}

/// The parsed result object of the turn's only `tool.result`.
fn result_of(evs: &[Value]) -> (Value, bool) {
    let r = &of_type(evs, "tool.result")[0]["payload"];
    let text = r["content"][0]["text"].as_str().expect("text result");
    (
        serde_json::from_str(text).expect("compact JSON"),
        r["is_error"] == true,
    )
}

fn launch(
    server: &Server,
    mock: &MockProvider,
    f: &Fixture,
    harness: &str,
    prompt: &str,
) -> (Vec<Value>, Value) {
    let evs = call(
        server,
        mock,
        f,
        "launch_subagent",
        json!({"harness": harness, "model": "m-1", "prompt": prompt}),
    );
    let (r, _) = result_of(&evs);
    (evs, r)
}

/// Waits for a terminal lifecycle event of `id` and returns it.
fn terminal(server: &Server, f: &Fixture, id: &str) -> Value {
    let kinds = [
        "session.subagent.completed",
        "session.subagent.failed",
        "session.subagent.cancelled",
    ];
    let mut found = None;
    assert!(
        eventually(std::time::Duration::from_secs(20), || {
            let evs = events(server, &f.session_id, &f.a.session_key);
            found = evs.into_iter().find(|e| {
                kinds.contains(&e["event_type"].as_str().unwrap_or(""))
                    && e["payload"]["subagent_id"] == id
            });
            found.is_some()
        }),
        "no terminal event for {id}"
    );
    found.unwrap()
}

fn advertised(mock: &MockProvider) -> Vec<Vec<String>> {
    mock.requests()
        .iter()
        .map(|r| {
            r.body["tools"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .map(|x| x["name"].as_str().unwrap_or("?").to_string())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn c153_without_a_sandbox_the_launch_is_an_error_result_and_logs_no_lifecycle() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    let (evs, r) = launch(&server, &mock, &f, "claude", "hi");
    assert_eq!(
        r,
        json!({"error": "no remote sandbox is running for tool 'launch_subagent'; call session.startRemoteSandbox first"})
    );
    assert!(types(&evs)
        .iter()
        .all(|t| !t.starts_with("session.subagent")));
    assert!(result_of(&evs).1);
}

#[test]
fn c154_c155_c156_launch_track_report_once_and_evict() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    started(&server, &f, SUBAGENT);
    let (evs, r) = launch(&server, &mock, &f, "claude", "hello there");
    let id = r["subagent_id"].as_str().expect("subagent_id").to_string();
    assert!(id.starts_with("sba_"));
    assert_eq!(
        r,
        json!({"subagent_id": id, "harness": "claude", "model": "m-1", "status": "started"})
    );
    assert_eq!(
        types(&evs)[3..7].to_vec(),
        [
            "tool.call",
            "session.subagent.start",
            "session.subagent.running",
            "tool.result"
        ]
    );
    let common = json!({"dispatch": "remote", "subagent_id": id, "harness": "claude", "model": "m-1", "detail": null});
    assert_eq!(evs[4]["payload"], common);
    assert_eq!(evs[5]["payload"], common);
    // C-155: offered from the round after the launch, not before.
    let tools = advertised(&mock);
    assert!(!tools[0].contains(&"remote_subagent_status".to_string()));
    assert_eq!(tools[1].last().unwrap(), "remote_subagent_status");
    let done = terminal(&server, &f, &id);
    assert_eq!(done["event_type"], "session.subagent.completed");
    assert_eq!(done["payload"]["exit_code"], 0);
    assert_eq!(
        done["client_key_id"], f.a.key_id,
        "attributed to the launching key"
    );
    // C-156: reported once with its output, then gone.
    let evs = call(&server, &mock, &f, "remote_subagent_status", json!({}));
    let (r, is_error) = result_of(&evs);
    assert!(!is_error);
    let entry = &r["subagents"][0];
    assert_eq!(entry["status"], "completed");
    assert_eq!(entry["exit_code"], 0);
    assert_eq!(entry["truncated"], false);
    assert_eq!(
        entry["stdout"],
        "arg: exec\narg: --model\narg: m-1\narg: --print\nstdin: hello there\n"
            .replace("arg: exec\n", "")
    );
    let evs = call(
        &server,
        &mock,
        &f,
        "remote_subagent_status",
        json!({"subagent_id": id}),
    );
    assert_eq!(
        result_of(&evs),
        (json!({"error": "unknown subagent_id"}), true)
    );
    let tools = advertised(&mock);
    assert!(!tools
        .last()
        .unwrap()
        .contains(&"remote_subagent_status".to_string()));
}

#[test]
fn hostile_prompts_arrive_verbatim_as_an_argument_and_on_stdin() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    started(&server, &f, SUBAGENT);
    let prompt =
        "it's \"quoted\" $(touch /tmp/pwned) `id` ${HOME} \\ back\nsecond line; exit 7 | cat";
    let (_, r) = launch(&server, &mock, &f, "codex", prompt);
    let a = r["subagent_id"].as_str().unwrap().to_string();
    let (_, r) = launch(&server, &mock, &f, "claude", prompt);
    let b = r["subagent_id"].as_str().unwrap().to_string();
    terminal(&server, &f, &a);
    terminal(&server, &f, &b);
    let evs = call(&server, &mock, &f, "remote_subagent_status", json!({}));
    let (r, _) = result_of(&evs);
    let by_id = |id: &str| {
        r["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["subagent_id"] == id)
            .cloned()
            .unwrap()
    };
    let arg = by_id(&a);
    assert_eq!(arg["status"], "completed", "{arg}");
    assert!(
        arg["stdout"]
            .as_str()
            .unwrap()
            .contains(&format!("arg: {prompt}\n")),
        "{arg}"
    );
    let stdin = by_id(&b);
    assert!(
        stdin["stdout"]
            .as_str()
            .unwrap()
            .ends_with(&format!("stdin: {prompt}\n")),
        "{stdin}"
    );
    // Nothing in the prompt ran.
    let t = exec(&server, &f, &f.a, "ls /tmp/pwned 2>&1 || echo absent");
    assert!(
        t["result"]["stdout"].as_str().unwrap().contains("absent"),
        "{t}"
    );
}

#[test]
fn c157_the_running_limit_and_c165_the_image_check() {
    let Some((mock, server)) = sandbox_server(&[("BAE_MAX_SUBAGENTS_PER_SESSION", "1")]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    started(&server, &f, SUBAGENT);
    let (_, first) = launch(&server, &mock, &f, "claude", "SLEEP=30");
    assert_eq!(first["status"], "started");
    let (evs, r) = launch(&server, &mock, &f, "claude", "again");
    assert_eq!(
        r,
        json!({"error": "subagent limit reached (max 1 per session)"})
    );
    assert!(of_type(&evs, "session.subagent.start").is_empty());
    // C-165: a declaration for another image than the running one.
    let g = session(&server, "other/image:1");
    started(&server, &g, SUBAGENT);
    let (_, r) = launch(&server, &mock, &g, "claude", "hi");
    assert_eq!(
        r,
        json!({"error": format!("remote sandbox image mismatch: subagent declared \"other/image:1\" but the running sandbox uses \"{SUBAGENT}\"")})
    );
    // Unknown harness and missing fields, in the documented order.
    let (_, r) = launch(&server, &mock, &g, "nope", "hi");
    assert_eq!(r, json!({"error": "unknown harness \"nope\""}));
    let evs = call(
        &server,
        &mock,
        &g,
        "launch_subagent",
        json!({"harness": "claude"}),
    );
    assert_eq!(
        result_of(&evs).0,
        json!({"error": "launch_subagent requires string \"harness\", \"model\", and \"prompt\""})
    );
}

#[test]
fn c158_timeout_nonzero_exit_and_truncation() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    started(&server, &f, SUBAGENT);
    let (_, r) = launch(&server, &mock, &f, "codex", "SLEEP=30");
    let slow = r["subagent_id"].as_str().unwrap().to_string();
    let (_, r) = launch(&server, &mock, &f, "claude", "EXIT=3");
    let failing = r["subagent_id"].as_str().unwrap().to_string();
    let (_, r) = launch(&server, &mock, &f, "claude", "BIGOUT=100000");
    let big = r["subagent_id"].as_str().unwrap().to_string();
    let ev = terminal(&server, &f, &slow);
    assert_eq!(ev["event_type"], "session.subagent.failed");
    assert_eq!(ev["payload"]["reason"], "timeout");
    assert_eq!(ev["payload"]["exit_code"], Value::Null);
    let ev = terminal(&server, &f, &failing);
    assert_eq!(ev["payload"]["reason"], "nonzero_exit");
    assert_eq!(ev["payload"]["exit_code"], 3);
    terminal(&server, &f, &big);
    let evs = call(&server, &mock, &f, "remote_subagent_status", json!({}));
    let (r, _) = result_of(&evs);
    let by_id = |id: &str| {
        r["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["subagent_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id(&slow)["status"], "timed_out");
    let f3 = by_id(&failing);
    assert_eq!(f3["status"], "failed");
    assert_eq!(f3["stderr"], "failing with 3\n");
    let b = by_id(&big);
    assert_eq!(b["truncated"], true);
    assert_eq!(b["stdout"].as_str().unwrap().len(), 65_536);
}

#[test]
fn c159_c160_c161_c164_cancel_and_close() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = session(&server, SUBAGENT);
    started(&server, &f, SUBAGENT);
    let (_, r) = launch(&server, &mock, &f, "claude", "SLEEP=30");
    let id = r["subagent_id"].as_str().unwrap().to_string();
    let cancel = |id: &str| {
        rpc(
            &server,
            &f.session_id,
            &f.a.session_key,
            "session.cancelSubagent",
            json!({"subagent_id": id}),
        )
        .1
    };
    assert_eq!(
        cancel(&id)["result"],
        json!({"cancelled": true, "subagent_id": id, "was_running": true})
    );
    let ev = terminal(&server, &f, &id);
    assert_eq!(ev["event_type"], "session.subagent.cancelled");
    assert_eq!(ev["payload"]["reason"], "explicit");
    assert_eq!(
        cancel(&id)["result"],
        json!({"cancelled": true, "subagent_id": id, "was_running": false})
    );
    let t = cancel("sba_00000000000000000000000000000000");
    assert_eq!(t["error"]["code"], -32014);
    assert_eq!(
        t["error"]["message"],
        "subagent_not_found: no tracked subagent \"sba_00000000000000000000000000000000\" for this session"
    );
    let (_, r) = launch(&server, &mock, &f, "claude", "SLEEP=30");
    let running = r["subagent_id"].as_str().unwrap().to_string();
    server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    let resp = server.admin().get(&format!(
        "/admin/v1/sessions/{}/events?limit=200",
        f.session_id
    ));
    let evs = resp.json()["items"].as_array().cloned().unwrap();
    let cancelled: Vec<&Value> = evs
        .iter()
        .filter(|e| {
            e["event_type"] == "session.subagent.cancelled"
                && e["payload"]["subagent_id"] == running
        })
        .collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["payload"]["reason"], "session_close");
    // Cancelled before the sandbox stop, both after the close.
    let order: Vec<String> = types(&evs);
    let pos = |t: &str| order.iter().position(|x| x == t).unwrap();
    assert!(pos("session.close") < pos("session.sandbox.stop"));
}
