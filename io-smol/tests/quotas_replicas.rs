//! Quotas across PostgreSQL replicas (docs/scaling.md, "Quotas"): a quota
//! set on one replica reaches the others by the catalogue notices; open
//! sessions opened and closed on any replica count everywhere; a token
//! budget used up on one replica refuses turns on another once its
//! periodic re-read of the usage rows sees it.

mod replica_support;
mod rest_support;

use std::time::Duration;

use replica_support::*;
use serde_json::json;
use testkit::Reply;

#[test]
fn two_replicas_hold_a_keys_open_sessions_and_token_budget() {
    let r = Replicas::start(2);
    let (_profile, kid, key) = profile_and_key(&r, 0);
    let path = format!("/admin/v1/keys/{kid}/quota");
    r.servers[0]
        .admin()
        .put_json(
            &path,
            &json!({"max_open_sessions": 2, "token_budget": 15, "window": "1d"}),
        )
        .assert_status(200);
    assert!(
        wait_until(Duration::from_secs(5), || r.servers[1]
            .admin()
            .get(&path)
            .status
            == 200),
        "the quota never reached replica 1"
    );
    // One session on each replica: the third is refused on either.
    let (c0, c1) = (r.servers[0].client(), r.servers[1].client());
    let (s0, k0) = open(&c0, &key);
    let (s1, k1) = open(&c1, &key);
    // Each replica learns of the other's session by its notice.
    for (i, server) in r.servers.iter().enumerate() {
        let counted = wait_until(Duration::from_secs(5), || {
            let all = server.admin().get("/admin/v1/quotas").json();
            all["quotas"][0]["usage"]["open_sessions"] == 2
        });
        assert!(counted, "replica {i} never counted both sessions");
    }
    for c in [&c0, &c1] {
        let refused = wait_until(Duration::from_secs(5), || {
            let resp = c
                .clone()
                .bearer(&key)
                .post_json("/api/v1/sessions", &json!({}));
            assert_ne!(resp.status, 201, "a third session was opened");
            resp.status == 429
        });
        assert!(refused, "no 429 past two open sessions");
    }
    // The first replica's turn uses the budget (10 + 5 tokens)...
    for (c, s, k) in [(&c0, &s0, &k0), (&c1, &s1, &k1)] {
        let t = rpc(c, s, k, "session.registerDriver", json!({}));
        assert_eq!(t["result"]["registered"], true, "{t}");
    }
    r.mock.push(Reply::anthropic_text("one"));
    let t = send(&c0, &s0, &k0, json!("hi"));
    assert!(t["result"].is_object(), "{t}");
    // ...which the second replica reads back within its refresh interval
    // (`GET /admin/v1/quotas` shows what it holds, without a store read).
    let seen = wait_until(Duration::from_secs(5), || {
        let all = r.servers[1].admin().get("/admin/v1/quotas").json();
        all["quotas"][0]["usage"]["tokens_used"] == 15
    });
    assert!(seen, "replica 1 never counted replica 0's tokens");
    let calls = r.mock.request_count();
    let t = send(&c1, &s1, &k1, json!("refused"));
    assert_eq!(t["error"]["code"], -32025, "{t}");
    assert_eq!(t["error"]["data"]["quota"], "token_budget");
    assert_eq!(r.mock.request_count(), calls);
    // Closing a session on replica 1 frees a slot on replica 0.
    c1.clone()
        .bearer(&k1)
        .delete(&format!("/api/v1/sessions/{s1}"))
        .assert_status(200);
    let freed = wait_until(Duration::from_secs(5), || {
        let resp = c0
            .clone()
            .bearer(&key)
            .post_json("/api/v1/sessions", &json!({}));
        resp.status == 201
    });
    assert!(
        freed,
        "the close on replica 1 never freed a slot on replica 0"
    );
    // Removing the quota on one replica removes it on the other.
    r.servers[1].admin().delete(&path).assert_status(204);
    assert!(wait_until(Duration::from_secs(5), || {
        r.servers[0].admin().get(&path).status == 404
    }));
}
