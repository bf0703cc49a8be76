//! Shared helpers of the remote sandbox and subagent end-to-end tests
//! (`sandbox_*.rs`, `subagent_*.rs`): a server driving the local container
//! engine (`testkit/container-engine.sh`), sessions on profiles that allow
//! the test images, and the sandbox RPCs.
#![allow(dead_code)]

use serde_json::{json, Value};
use testkit::containers::{self, DOCKER_HOST};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::{MockProvider, Server};

use super::live_support::{open_with_profile, opts, rpc, Client, Fixture};

/// A mock provider of `kind` named `main` and a server using the test
/// container engine; `None` (test skipped) outside CI without an engine.
pub fn sandbox_server_with(kind: &str, env: &[(&str, &str)]) -> Option<(MockProvider, Server)> {
    if !containers::require_engine() {
        return None;
    }
    let mock = MockProvider::start();
    let config = provider_toml(&[("main", kind, &mock.base_url, "mock-model", "tok")]);
    let mut o = opts(&config).env("DOCKER_HOST", DOCKER_HOST);
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    Some((mock, Server::start(o)))
}

pub fn sandbox_server(env: &[(&str, &str)]) -> Option<(MockProvider, Server)> {
    sandbox_server_with("anthropic", env)
}

/// A profile allowing `images` (and `allowed` tools), a key, a session
/// opened with `body`, its creator registered.
pub fn open_sandboxed(server: &Server, images: &[&str], allowed: &[&str], body: Value) -> Fixture {
    let profile = json!({
        "name": unique_name("profile"),
        "primary_provider": "main",
        "allowed_tools": allowed,
        "available_sandboxes": images,
    });
    let f = open_with_profile(server, &profile, body);
    fixtures::register_driver(server, &f.session_id, &f.a.session_key);
    f
}

/// `session.startRemoteSandbox`; returns (notifications, terminal).
#[track_caller]
pub fn start(server: &Server, f: &Fixture, c: &Client, image: &str) -> (Vec<Value>, Value) {
    rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.startRemoteSandbox",
        json!({"image": image}),
    )
}

/// Starts `image` and returns its container id.
#[track_caller]
pub fn started(server: &Server, f: &Fixture, image: &str) -> String {
    let (_, t) = start(server, f, &f.a, image);
    t["result"]["sandbox_id"]
        .as_str()
        .unwrap_or_else(|| panic!("start failed: {t}"))
        .to_string()
}

/// `session.execRemoteSandbox`.
#[track_caller]
pub fn exec(server: &Server, f: &Fixture, c: &Client, command: &str) -> Value {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.execRemoteSandbox",
        json!({"command": command}),
    );
    t
}

/// `{"name": n, "description": …, "input_schema": {command}}` for `sandbox_tools`.
pub fn shell_tool(name: &str) -> Value {
    json!({"name": name, "description": "run a shell command",
           "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}})
}

/// Containers of this session still running.
pub fn session_containers(f: &Fixture) -> Vec<String> {
    containers::running_with_label(&format!("bae.session={}", f.session_id))
}
