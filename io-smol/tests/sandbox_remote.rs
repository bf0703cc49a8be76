//! Remote sandboxes over the real binary against a real container engine
//! (podman serving the Docker API, the real `docker` CLI): spec 06 §5,
//! checklist C-134–C-152.

mod live_support;
mod sandbox_support;

use live_support::*;
use sandbox_support::*;
use serde_json::{json, Value};
use testkit::containers::{self, BUSYBOX, MISSING};
use testkit::mcp::eventually;
use testkit::Reply;

#[test]
fn c139_start_logs_start_then_running_and_answers_with_the_running_stamp() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let (notes, t) = start(&server, &f, &f.a, BUSYBOX);
    let r = &t["result"];
    let id = r["sandbox_id"].as_str().expect("sandbox_id").to_string();
    assert_eq!(r["image"], BUSYBOX);
    let evs = events(&server, &f.session_id, &f.a.session_key);
    let running = of_type(&evs, "session.sandbox.running");
    assert_eq!(r["started_at"], running[0]["created_at"]);
    assert_eq!(
        of_type(&evs, "session.sandbox.start")[0]["payload"],
        json!({"image": BUSYBOX, "dispatch": "remote"})
    );
    assert_eq!(
        running[0]["payload"],
        json!({"image": BUSYBOX, "sandbox_id": id, "dispatch": "remote", "unsandboxed": false})
    );
    // A single-answer method: one terminal frame, no notifications.
    assert!(notes.is_empty(), "{notes:?}");
    assert!(containers::is_running(&id));
    assert_eq!(session_containers(&f).len(), 1, "labelled with its session");
    // C-140: one per session.
    let (_, t) = start(&server, &f, &f.a, BUSYBOX);
    assert_eq!(t["error"]["code"], -32000);
    assert_eq!(
        t["error"]["message"],
        "a remote sandbox is already running for this session; call session.stopRemoteSandbox first"
    );
    // C-143: stop.
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.stopRemoteSandbox",
        json!({}),
    );
    assert_eq!(
        t["result"],
        json!({"stopped": true, "image": BUSYBOX, "sandbox_id": id})
    );
    let evs = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(
        of_type(&evs, "session.sandbox.stop")[0]["payload"],
        json!({"image": BUSYBOX, "sandbox_id": id, "reason": "explicit", "dispatch": "remote"})
    );
    assert_eq!(
        of_type(&evs, "session.sandbox.stopped")[0]["payload"],
        json!({"image": BUSYBOX, "sandbox_id": id, "reason": "explicit", "dispatch": "remote", "unsandboxed": false})
    );
    assert!(eventually(WAIT, || !containers::is_running(&id)));
    // C-142: nothing left to stop.
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.stopRemoteSandbox",
        json!({}),
    );
    assert_eq!(t["error"]["code"], -32013);
    assert_eq!(
        t["error"]["message"],
        "sandbox_not_running: no remote sandbox is running for this session"
    );
}

#[test]
fn c135_c136_c137_c138_image_checks_come_before_any_container() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let other = open_sandboxed(&server, &["only-elsewhere:1"], &[], json!({}));
    let none = open_sandboxed(&server, &[], &[], json!({}));
    for (fx, image) in [
        (&f, "python:3.12"),
        (&f, "only-elsewhere:1"),
        (&none, BUSYBOX),
    ] {
        let (_, t) = start(&server, fx, &fx.a, image);
        assert_eq!(t["error"]["code"], -32011, "{t}");
        assert_eq!(
            t["error"]["message"],
            format!("sandbox_image_not_allowed: image \"{image}\" is not in this session profile's available_sandboxes")
        );
    }
    let _ = other;
    let (_, t) = start(&server, &f, &f.a, " ");
    assert_eq!(t["error"]["message"], "Invalid params: missing \"image\"");
    let evs = events(&server, &f.session_id, &f.a.session_key);
    assert!(
        of_type(&evs, "session.sandbox.start").is_empty(),
        "no event (C-135)"
    );
    assert!(session_containers(&f).is_empty());
}

#[test]
fn c141_a_missing_image_fails_the_start_with_the_driver_detail() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[MISSING], &[], json!({}));
    let (_, t) = start(&server, &f, &f.a, MISSING);
    assert_eq!(t["error"]["code"], -32012);
    let msg = t["error"]["message"].as_str().unwrap();
    let prefix = format!("sandbox_start_failed: sandbox image \"{MISSING}\" error: ");
    assert!(msg.starts_with(&prefix), "{msg}");
    assert!(msg.len() > prefix.len(), "the CLI's detail follows: {msg}");
    let evs = events(&server, &f.session_id, &f.a.session_key);
    let err = of_type(&evs, "session.sandbox.error");
    assert_eq!(err.len(), 1);
    let p = &err[0]["payload"];
    assert_eq!(p["phase"], "start");
    assert!(
        p.get("sandbox_id").is_none(),
        "no sandbox_id on a start error"
    );
    assert_eq!(
        p["detail"],
        msg.strip_prefix("sandbox_start_failed: ").unwrap()
    );
    // Not stuck: a later start may be tried again.
    let (_, t) = start(&server, &f, &f.a, MISSING);
    assert_eq!(t["error"]["code"], -32012);
}

#[test]
fn c144_c145_c152_manual_exec_from_any_driver_with_nonzero_exits_as_results() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let t = exec(&server, &f, &f.a, "echo hi");
    assert_eq!(t["error"]["code"], -32013, "no sandbox yet");
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.execRemoteSandbox",
        json!({}),
    );
    assert_eq!(t["error"]["message"], "Invalid params: missing \"command\"");
    started(&server, &f, BUSYBOX);
    let before = events(&server, &f.session_id, &f.a.session_key).len();
    let b = f.join_registered(&server, json!({}));
    let t = exec(&server, &f, &b, "echo out; echo err >&2; exit 3");
    assert_eq!(
        t["result"],
        json!({"stdout": "out\n", "stderr": "err\n", "exit_code": 3})
    );
    // Shell syntax reaches `sh -c` verbatim, nothing is run on the host.
    let t = exec(
        &server,
        &f,
        &f.a,
        "printf '%s|' \"$(echo a b)\" '$HOME' `echo c`",
    );
    assert_eq!(t["result"]["stdout"], "a b|$HOME|c|");
    let evs = events(&server, &f.session_id, &f.a.session_key);
    // Only B's join, registration and image list were logged: execs log
    // nothing (C-145).
    assert_eq!(
        types(&evs[before..]),
        [
            "session.join",
            "session.driver.register",
            "session.sandbox.available"
        ]
    );
}

#[test]
fn concurrent_execs_are_serialised_on_the_handle() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    started(&server, &f, BUSYBOX);
    // Each exec appends its start and end; serialised, they never interleave.
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let server_addr = server.client();
            let f = f.clone();
            std::thread::spawn(move || {
                let cmd = format!("echo start{i} >> /tmp/log; sleep 0.2; echo end{i} >> /tmp/log");
                let (_, t) = server_addr.rpc(
                    &f.session_id,
                    &f.a.session_key,
                    "session.execRemoteSandbox",
                    json!({"command": cmd}),
                    testkit::http::next_rpc_id(),
                );
                t
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap()["result"]["exit_code"], 0);
    }
    let log = exec(&server, &f, &f.a, "cat /tmp/log")["result"]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 8);
    for pair in lines.chunks(2) {
        assert_eq!(
            pair[0].replace("start", ""),
            pair[1].replace("end", ""),
            "{log}"
        );
    }
}

#[test]
fn output_is_capped_with_a_marker_and_a_slow_exec_times_out() {
    let Some((_mock, server)) = sandbox_server(&[
        ("BAE_SANDBOX_MAX_OUTPUT_BYTES", "1000"),
        ("BAE_SANDBOX_EXEC_TIMEOUT", "2"),
    ]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    started(&server, &f, BUSYBOX);
    let t = exec(&server, &f, &f.a, "yes | head -c 5000");
    let out = t["result"]["stdout"].as_str().unwrap();
    assert!(out.starts_with(&"y\n".repeat(500)), "{out}");
    assert!(out.ends_with("\n[output truncated at 1000 bytes]"), "{out}");
    let started_at = std::time::Instant::now();
    let t = exec(&server, &f, &f.a, "sleep 30");
    assert!(started_at.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(t["error"]["code"], -32000);
    assert_eq!(
        t["error"]["message"],
        "sandbox exec failed: sandbox runtime error: exec timed out after 2 s"
    );
    let evs = events(&server, &f.session_id, &f.a.session_key);
    let err = of_type(&evs, "session.sandbox.error");
    assert_eq!(err[0]["payload"]["phase"], "exec");
    // The handle is usable again.
    assert_eq!(
        exec(&server, &f, &f.a, "echo ok")["result"]["stdout"],
        "ok\n"
    );
}

/// A turn where the model runs `command` through the Auto tool `sh`.
fn auto_turn(
    server: &testkit::Server,
    mock: &testkit::MockProvider,
    f: &Fixture,
    command: &str,
) -> Vec<Value> {
    mock.push(Reply::tool_use("tu_s", "sh", json!({"command": command})));
    mock.push(Reply::text("done"));
    let (_, t) = send(server, &f.session_id, &f.a, json!("go"));
    result_events(&t)
}

#[test]
fn c146_auto_tools_run_in_the_sandbox_without_pausing_anthropic_and_openai() {
    for kind in ["anthropic", "openai"] {
        let Some((mock, server)) = sandbox_server_with(kind, &[]) else {
            return;
        };
        let f = open_sandboxed(
            &server,
            &[BUSYBOX],
            &[],
            json!({"sandbox_tools": [shell_tool("sh")]}),
        );
        let id = started(&server, &f, BUSYBOX);
        let evs = auto_turn(&server, &mock, &f, "echo hi; echo oops >&2; exit 2");
        assert_eq!(
            types(&evs)[3..7].to_vec(),
            [
                "tool.call",
                "sandbox.request",
                "sandbox.response",
                "tool.result"
            ]
        );
        assert_eq!(evs[3]["payload"]["dispatch"], "sandbox");
        let cmd = "echo hi; echo oops >&2; exit 2";
        assert_eq!(
            evs[4]["payload"],
            json!({"tool": "sh", "input": {"command": cmd}, "command": cmd})
        );
        assert_eq!(
            evs[5]["payload"],
            json!({"sandbox_id": id, "ok": false, "result": {"stdout": "hi\n", "stderr": "oops\n", "exit_code": 2}})
        );
        let result = &evs[6]["payload"];
        assert_eq!(result["dispatch"], "sandbox");
        assert_eq!(result["is_error"], true);
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": "hi\n[stderr]\noops\n[exit_code: 2]"}])
        );
        assert_eq!(types(&evs).last().unwrap(), "server.message.send");
        // A clean run: just stdout, not an error.
        let evs = auto_turn(&server, &mock, &f, "printf ok");
        let result = &of_type(&evs, "tool.result")[0]["payload"];
        assert_eq!(result["content"], json!([{"type": "text", "text": "ok"}]));
        assert_eq!(result["is_error"], false);
    }
}

#[test]
fn c147_auto_tools_without_a_sandbox_or_command_get_the_documented_errors() {
    let Some((mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(
        &server,
        &[BUSYBOX],
        &[],
        json!({"sandbox_tools": [shell_tool("sh")]}),
    );
    let evs = auto_turn(&server, &mock, &f, "echo hi");
    let text = "sandbox error: no remote sandbox is running for tool 'sh'; call session.startRemoteSandbox first";
    assert_eq!(
        of_type(&evs, "sandbox.response")[0]["payload"]["sandbox_id"],
        Value::Null
    );
    assert_eq!(
        of_type(&evs, "tool.result")[0]["payload"]["content"],
        json!([{"type": "text", "text": text}])
    );
    started(&server, &f, BUSYBOX);
    mock.push(Reply::tool_use("tu_s", "sh", json!({"cmd": "nope"})));
    mock.push(Reply::text("done"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("go"));
    let evs = result_events(&t);
    assert_eq!(
        of_type(&evs, "tool.result")[0]["payload"]["content"][0]["text"],
        "sandbox error: sandbox tool 'sh' input is missing the required string \"command\""
    );
}

#[test]
fn c148_delete_stops_the_running_sandbox_with_reason_session_close() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let id = started(&server, &f, BUSYBOX);
    server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    assert!(eventually(WAIT, || {
        let evs = events_admin(&server, &f.session_id);
        !of_type(&evs, "session.sandbox.stopped").is_empty()
    }));
    let evs = events_admin(&server, &f.session_id);
    let stop = &of_type(&evs, "session.sandbox.stop")[0];
    assert_eq!(stop["payload"]["reason"], "session_close");
    assert_eq!(
        stop["client_key_id"], f.a.key_id,
        "attributed to the creator"
    );
    assert!(eventually(WAIT, || !containers::is_running(&id)));
}

fn events_admin(server: &testkit::Server, session_id: &str) -> Vec<Value> {
    let resp = server
        .admin()
        .get(&format!("/admin/v1/sessions/{session_id}/events?limit=200"));
    resp.assert_status(200);
    resp.json()["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn provisioning_status_and_the_available_event_follow_the_driver() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX, MISSING], &[], json!({}));
    assert!(eventually(WAIT, || {
        let v = server.admin().get("/admin/v1/sandbox-status").json();
        let item = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["profile_id"] == f.profile_id)
            .cloned();
        item.is_some_and(|i| {
            i["images"]
                .as_array()
                .unwrap()
                .iter()
                .all(|img| img["status"] != "pending")
        })
    }));
    let v = server.admin().get("/admin/v1/sandbox-status").json();
    let item = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["profile_id"] == f.profile_id)
        .cloned()
        .unwrap();
    let images = item["images"].as_array().unwrap();
    let by_name = |n: &str| images.iter().find(|i| i["name"] == n).cloned().unwrap();
    assert_eq!(
        by_name(BUSYBOX),
        json!({"name": BUSYBOX, "status": "available"})
    );
    assert_eq!(by_name(MISSING)["status"], "error");
    assert!(by_name(MISSING)["detail"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    // A driver registering now sees the statuses, in declared order.
    let b = f.join_registered(&server, json!({}));
    let evs = events(&server, &f.session_id, &b.session_key);
    let avail = of_type(&evs, "session.sandbox.available");
    let last = &avail.last().unwrap()["payload"]["images"];
    assert_eq!(last[0], json!({"name": BUSYBOX, "status": "available"}));
    assert_eq!(last[1]["name"], MISSING);
    assert_eq!(last[1]["status"], "error");
}

#[test]
fn kill_9_then_restart_stops_the_containers_the_crash_left() {
    let Some((_mock, mut server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let id = started(&server, &f, BUSYBOX);
    server.kill9();
    assert!(
        containers::is_running(&id),
        "a crash leaves the container running"
    );
    server.restart();
    assert!(
        eventually(std::time::Duration::from_secs(30), || {
            !containers::is_running(&id)
        }),
        "the restarted server stops what its database's previous run left"
    );
    assert!(eventually(WAIT, || server
        .stderr_log()
        .contains("left by a previous run")));
}

#[test]
fn a_container_that_goes_away_mid_exec_is_a_driver_error_not_a_hang() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let id = started(&server, &f, BUSYBOX);
    let client = server.client();
    let fx = f.clone();
    let running = std::thread::spawn(move || {
        client
            .rpc(
                &fx.session_id,
                &fx.a.session_key,
                "session.execRemoteSandbox",
                json!({"command": "sleep 60"}),
                testkit::http::next_rpc_id(),
            )
            .1
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let started_at = std::time::Instant::now();
    containers::docker(&["stop", "-t", "0", &id]);
    let t = running.join().unwrap();
    assert!(started_at.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(t["error"]["code"], -32000, "{t}");
    let msg = t["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("sandbox exec failed: sandbox runtime error: "),
        "{msg}"
    );
    let evs = events(&server, &f.session_id, &f.a.session_key);
    assert_eq!(
        of_type(&evs, "session.sandbox.error")[0]["payload"]["phase"],
        "exec"
    );
}

#[test]
fn optional_resource_limits_reach_the_container() {
    let Some((_mock, server)) = sandbox_server(&[
        ("BAE_SANDBOX_MEMORY", "64m"),
        ("BAE_SANDBOX_CPUS", "0.5"),
        ("BAE_SANDBOX_NETWORK", "none"),
    ]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let id = started(&server, &f, BUSYBOX);
    let out = containers::docker(&[
        "container",
        "inspect",
        "--format",
        "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.NetworkMode}}",
        &id,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "67108864 500000000 none"
    );
    // Without a network, nothing outside is reachable from the sandbox.
    let t = exec(&server, &f, &f.a, "ls /sys/class/net");
    assert_eq!(t["result"]["stdout"], "lo\n");
}

#[test]
fn bad_resource_limits_are_configuration_errors() {
    for (var, value) in [
        ("BAE_SANDBOX_MEMORY", "lots"),
        ("BAE_SANDBOX_CPUS", "-1"),
        ("BAE_SANDBOX_NETWORK", "host; rm -rf /"),
    ] {
        let out = testkit::Server::run(opts("").env(var, value), WAIT);
        assert_eq!(out.code(), Some(2), "{var}={value}: {}", out.stderr);
        assert!(out.stderr.contains(var), "{}", out.stderr);
    }
}

#[test]
fn revocation_close_stops_the_sandbox_and_cancels_subagents_like_delete() {
    let Some((_mock, server)) = sandbox_server(&[]) else {
        return;
    };
    let f = open_sandboxed(&server, &[BUSYBOX], &[], json!({}));
    let id = started(&server, &f, BUSYBOX);
    server
        .admin()
        .delete(&format!("/admin/v1/keys/{}", f.a.key_id))
        .assert_status(204);
    assert!(eventually(WAIT, || !containers::is_running(&id)));
    let evs = events_admin(&server, &f.session_id);
    let kinds = types(&evs);
    let pos = |t: &str| {
        kinds
            .iter()
            .position(|x| x == t)
            .unwrap_or_else(|| panic!("{t} in {kinds:?}"))
    };
    assert!(pos("session.close") < pos("session.sandbox.stop"));
    assert_eq!(
        of_type(&evs, "session.sandbox.stop")[0]["payload"]["reason"],
        "session_close"
    );
    assert!(eventually(WAIT, || !of_type(
        &events_admin(&server, &f.session_id),
        "session.sandbox.stopped"
    )
    .is_empty()));
}
