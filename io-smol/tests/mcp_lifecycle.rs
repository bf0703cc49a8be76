//! MCP connection lifecycle over the real binary (spec 06 §4.1, 03 §4.2):
//! children are spawned at create, killed **and reaped** on DELETE, on
//! revocation-close and on shutdown; nothing (process, zombie, fd) is left
//! behind after many sessions.

mod live_support;
mod mcp_support;

use std::time::Duration;

use live_support::*;
use mcp_support::*;
use serde_json::json;
use testkit::fixtures::unique_name;
use testkit::mcp::{self, children_of, eventually, processes_matching, stdio_toml};

/// A raw stdio server tagged with a marker that finds it (and anything it
/// forked) in `/proc` even after it is orphaned.
fn tagged_raw(name: &str, marker: &str) -> String {
    let raw = mcp::fixture("raw_server.py");
    stdio_toml(name, "python3", &[&raw, "normal", marker])
}

/// A server launched through a shell wrapper that forks python (the `npx`
/// pattern): killing the wrapper alone would orphan the real server.
fn wrapped_raw(name: &str, marker: &str) -> String {
    let raw = mcp::fixture("raw_server.py");
    let script = format!("python3 '{raw}' normal {marker}; true");
    stdio_toml(name, "sh", &["-c", &script])
}

#[test]
fn delete_kills_and_reaps_every_child_including_forked_ones() {
    let marker = unique_name("mcp-marker");
    let toml = format!("{}{}", tagged_raw("a", &marker), wrapped_raw("b", &marker));
    let (_mock, server) = server(&toml, &[]);
    let pid = server.pid().unwrap();
    let f = open_mcp(&server, &["a", "b"], &[], json!({}));
    assert_eq!(children_of(pid).0.len(), 2, "one child per server");
    assert!(processes_matching(&marker).len() >= 2);
    let resp = server
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id));
    resp.assert_status(200);
    assert!(
        eventually(WAIT, || {
            let (live, zombies) = children_of(pid);
            live.is_empty() && zombies.is_empty()
        }),
        "children left: {:?}",
        children_of(pid)
    );
    assert!(
        eventually(WAIT, || processes_matching(&marker).is_empty()),
        "orphans left: {:?}",
        processes_matching(&marker)
    );
}

#[test]
fn revocation_close_tears_the_connections_down() {
    let marker = unique_name("mcp-marker");
    let (_mock, server) = server(&tagged_raw("a", &marker), &[]);
    let pid = server.pid().unwrap();
    let f = open_mcp(&server, &["a"], &[], json!({}));
    assert_eq!(children_of(pid).0.len(), 1);
    server
        .admin()
        .delete(&format!("/admin/v1/keys/{}", f.a.key_id))
        .assert_status(204);
    assert!(eventually(WAIT, || children_of(pid) == (vec![], vec![])));
    assert!(processes_matching(&marker).is_empty());
}

#[test]
fn graceful_shutdown_reaps_the_children() {
    let marker = unique_name("mcp-marker");
    let (_mock, mut server) = server(&wrapped_raw("a", &marker), &[]);
    let _f = open_mcp(&server, &["a"], &[], json!({}));
    assert!(!processes_matching(&marker).is_empty());
    server.stop();
    assert!(
        eventually(WAIT, || processes_matching(&marker).is_empty()),
        "left after shutdown: {:?}",
        processes_matching(&marker)
    );
}

#[test]
fn a_hundred_sessions_opened_and_closed_leave_no_process_or_fd_behind() {
    let marker = unique_name("mcp-marker");
    let (_mock, server) = server(&tagged_raw("a", &marker), &[]);
    let pid = server.pid().unwrap();
    // Warm up (first-use allocations, the SQLite WAL), then measure.
    let f = open_mcp(&server, &["a"], &[], json!({}));
    let client = server.client().bearer(&f.a.session_key);
    client
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    assert!(eventually(WAIT, || children_of(pid) == (vec![], vec![])));
    let baseline = mcp::fd_count(pid);
    for _ in 0..100 {
        let f = open_mcp(&server, &["a"], &[], json!({}));
        server
            .client()
            .bearer(&f.a.session_key)
            .delete(&format!("/api/v1/sessions/{}", f.session_id))
            .assert_status(200);
    }
    assert!(
        eventually(Duration::from_secs(20), || children_of(pid)
            == (vec![], vec![])),
        "children left: {:?}",
        children_of(pid)
    );
    assert!(processes_matching(&marker).is_empty());
    // Keep-alive client sockets may differ by a few; pipes would be 300.
    assert!(
        eventually(WAIT, || mcp::fd_count(pid) <= baseline + 4),
        "fds: {} now, {baseline} before",
        mcp::fd_count(pid)
    );
}

#[test]
fn kill_9_of_the_server_takes_its_mcp_children_down() {
    let marker = unique_name("mcp-marker");
    let raw = mcp::fixture("raw_server.py");
    // `--linger`: this server ignores stdin EOF, so only the kernel's
    // parent-death signal can stop it once baesrv is gone.
    let toml = stdio_toml("a", "python3", &[&raw, "normal", &marker, "--linger"]);
    let (_mock, mut server) = server(&toml, &[]);
    let _f = open_mcp(&server, &["a"], &[], json!({}));
    assert_eq!(processes_matching(&marker).len(), 1);
    server.kill9();
    assert!(
        eventually(WAIT, || processes_matching(&marker).is_empty()),
        "left after kill -9: {:?}",
        processes_matching(&marker)
    );
}
