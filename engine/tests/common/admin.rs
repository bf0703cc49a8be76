//! Admin-port helpers shared by the admin flow files (`use common::admin::*`).

use engine::Listener;
use serde_json::{json, Value};

use super::{Harness, Reply, ADMIN_KEY};

/// A well-formed profile id no profile has.
pub const UNKNOWN_PRO: &str = "pro_0123456789abcdef0123456789abcdef";

/// One admin-port request with `token`; a `Null` body sends none.
pub fn send(h: &mut Harness, token: Option<&str>, method: &str, path: &str, body: &Value) -> Reply {
    let body = (!body.is_null()).then_some(body);
    h.reply(Listener::Admin, method, path, token, body)
}

/// One admin-port request with the admin key.
pub fn adm(h: &mut Harness, method: &str, path: &str, body: Value) -> Reply {
    send(h, Some(ADMIN_KEY), method, path, &body)
}

pub fn admin_list(h: &mut Harness, path: &str) -> Vec<Value> {
    h.all_pages(Listener::Admin, path, ADMIN_KEY)
}

pub fn profile_body(name: &str) -> Value {
    json!({"name": name, "primary_provider": "main"})
}

pub fn create_profile(h: &mut Harness, body: Value) -> String {
    let r = adm(h, "POST", "/admin/v1/profiles", body);
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["id"].as_str().unwrap().to_string()
}

pub fn open(h: &mut Harness, ck: &str) -> (String, String) {
    let (s, o) = h.client("POST", "/api/v1/sessions", ck, Some(&json!({})));
    assert_eq!(s, 201, "{o}");
    (
        o["session_id"].as_str().unwrap().into(),
        o["session_key"].as_str().unwrap().into(),
    )
}
