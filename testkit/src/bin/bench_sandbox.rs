//! `bench_sandbox`: what the server adds to the container engine (never run
//! by tests). Against the local engine of `testkit/container-engine.sh`:
//!
//! * the bare `docker` CLI timed alone: `run -d --rm … sleep infinity`,
//!   `exec … sh -c true`, `stop`;
//! * the same through `baesrv`: `startRemoteSandbox`, `execRemoteSandbox`
//!   (`true`), `stopRemoteSandbox`, each request timed end to end;
//! * 20 sessions at once, each with its own sandbox, each running one turn
//!   with an Auto sandbox tool.
//!
//! ```text
//! bash testkit/container-engine.sh
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_sandbox [--n 30]
//! ```

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::containers::{docker, BUSYBOX, DOCKER_HOST};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::http::next_rpc_id;
use testkit::{MockProvider, Reply, Server, ServerOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    assert!(testkit::containers::require_engine(), "no container engine");

    // Bare CLI.
    let (mut run, mut exec, mut stop) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let out = docker(&["run", "-d", "--rm", BUSYBOX, "sleep", "infinity"]);
        run.push(t.elapsed());
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let t = Instant::now();
        docker(&["exec", &id, "sh", "-c", "true"]);
        exec.push(t.elapsed());
        let t = Instant::now();
        docker(&["stop", &id]);
        stop.push(t.elapsed());
    }

    let mock = MockProvider::start();
    let config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "tok")]);
    let bin = Server::binary_path();
    let server = Server::start(
        ServerOptions::new()
            .bin(&bin)
            .config(&config)
            .env("DOCKER_HOST", DOCKER_HOST),
    );
    let profile = fixtures::create_profile_json(
        &server,
        &json!({"name": unique_name("bench"), "primary_provider": "main", "available_sandboxes": [BUSYBOX]}),
    );
    let (_, key) = fixtures::create_key(&server, &profile);
    let tool = json!({"name": "sh", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}});
    let open = || {
        let (sid, skey) =
            fixtures::open_session(&server, &key, json!({"sandbox_tools": [tool.clone()]}));
        fixtures::register_driver(&server, &sid, &skey);
        (sid, skey)
    };
    let call = |sid: &str, skey: &str, method: &str, params: Value| -> Value {
        server
            .client()
            .rpc(sid, skey, method, params, next_rpc_id())
            .1
    };

    let (mut s_run, mut s_exec, mut s_stop) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (sid, skey) = open();
        let t = Instant::now();
        let r = call(
            &sid,
            &skey,
            "session.startRemoteSandbox",
            json!({"image": BUSYBOX}),
        );
        s_run.push(t.elapsed());
        assert!(r.get("result").is_some(), "{r}");
        let t = Instant::now();
        call(
            &sid,
            &skey,
            "session.execRemoteSandbox",
            json!({"command": "true"}),
        );
        s_exec.push(t.elapsed());
        let t = Instant::now();
        call(&sid, &skey, "session.stopRemoteSandbox", json!({}));
        s_stop.push(t.elapsed());
    }

    println!("| operation ({n} each, sequential) | bare docker CLI p50 | through baesrv p50 | added p50 |");
    println!("|---|---|---|---|");
    for (label, bare, ours) in [
        ("start (run -d --rm … sleep infinity)", &mut run, &mut s_run),
        ("exec (sh -c true)", &mut exec, &mut s_exec),
        ("stop", &mut stop, &mut s_stop),
    ] {
        let b = p50(bare);
        let o = p50(ours);
        println!("| {label} | {b:.1} ms | {o:.1} ms | {:.1} ms |", o - b);
    }

    // 20 sessions at once, each a turn with one Auto tool call.
    let sessions: Vec<(String, String)> = (0..20)
        .map(|_| {
            let (sid, skey) = open();
            let r = call(
                &sid,
                &skey,
                "session.startRemoteSandbox",
                json!({"image": BUSYBOX}),
            );
            assert!(r.get("result").is_some(), "{r}");
            (sid, skey)
        })
        .collect();
    mock.set_default(Reply::text("done"));
    for _ in 0..20 {
        mock.push(Reply::tool_use("tu", "sh", json!({"command": "echo hi"})));
    }
    let t = Instant::now();
    let threads: Vec<_> = sessions
        .iter()
        .cloned()
        .map(|(sid, skey)| {
            let client = server.client();
            std::thread::spawn(move || {
                let t = Instant::now();
                let (_, r) = client.rpc(
                    &sid,
                    &skey,
                    "session.sendMessage",
                    json!({"message": {"role": "user", "content": "go"}}),
                    next_rpc_id(),
                );
                assert!(r.get("result").is_some(), "{r}");
                t.elapsed()
            })
        })
        .collect();
    let mut turns: Vec<Duration> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let wall = t.elapsed();
    turns.sort();
    println!(
        "\n20 concurrent sessions, one Auto sandbox tool turn each: wall {:.0} ms, turn p50 {:.0} ms, max {:.0} ms",
        wall.as_secs_f64() * 1e3,
        p50(&mut turns),
        turns.last().unwrap().as_secs_f64() * 1e3
    );
    for (sid, skey) in &sessions {
        call(sid, skey, "session.stopRemoteSandbox", json!({}));
    }
}

fn p50(times: &mut [Duration]) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}
