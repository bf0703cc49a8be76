//! Admin bodies/views (spec 03 §4; C-189..C-201) and pagination
//! (spec 01 §3.3; C-041, C-042).

use proto::wire::admin::*;
use proto::wire::page::*;
use proto::wire::session::SessionState;
use serde_json::{json, Value};

#[test]
fn profile_body_spec_example() {
    let b = ProfileBody::parse(br#"{"name":"main","primary_provider":"anthropic-sonnet","fallback_providers":["openai-gpt"],"mcp_servers":["filesystem"],"allowed_tools":["get_current_time"],"available_sandboxes":["python:3.12"],"unknown":1}"#).unwrap();
    assert_eq!(b.name, "main");
    assert_eq!(b.primary_provider, "anthropic-sonnet");
    assert_eq!(b.fallback_providers, vec!["openai-gpt"]);
    assert_eq!(b.mcp_servers, vec!["filesystem"]);
    assert_eq!(b.allowed_tools, vec!["get_current_time"]);
    assert_eq!(b.available_sandboxes, vec!["python:3.12"]);
    // C-193: omitted arrays default to [].
    let b = ProfileBody::parse(br#"{"name":"m","primary_provider":"p"}"#).unwrap();
    assert!(
        b.fallback_providers.is_empty()
            && b.mcp_servers.is_empty()
            && b.allowed_tools.is_empty()
            && b.available_sandboxes.is_empty()
    );
}

#[test]
fn c191_profile_body_errors() {
    let cases = [
        (r#"{"primary_provider":"p"}"#, "name must not be empty"),
        (
            r#"{"name":"  ","primary_provider":"p"}"#,
            "name must not be empty",
        ),
        (
            r#"{"name":null,"primary_provider":"p"}"#,
            "name must not be empty",
        ),
        (
            r#"{"name":5,"primary_provider":"p"}"#,
            "name must be a string",
        ),
        (r#"{"name":"m"}"#, "primary_provider must not be empty"),
        (
            r#"{"name":"m","primary_provider":""}"#,
            "primary_provider must not be empty",
        ),
        (
            r#"{"name":"m","primary_provider":"p","fallback_providers":"x"}"#,
            "fallback_providers must be an array",
        ),
        (
            r#"{"name":"m","primary_provider":"p","fallback_providers":["a",5]}"#,
            "fallback_providers[1] must be a string (a bae-config.toml registry name)",
        ),
        (
            r#"{"name":"m","primary_provider":"p","mcp_servers":{}}"#,
            "mcp_servers must be an array",
        ),
        (
            r#"{"name":"m","primary_provider":"p","mcp_servers":[null]}"#,
            "mcp_servers[0] must be a string (a bae-config.toml registry name)",
        ),
        (
            r#"{"name":"m","primary_provider":"p","available_sandboxes":1}"#,
            "available_sandboxes must be an array",
        ),
        (
            r#"{"name":"m","primary_provider":"p","available_sandboxes":["a","b",[]]}"#,
            "available_sandboxes[2] must be a string (a bae-config.toml registry name)",
        ),
        (
            r#"{"name":"m","primary_provider":"p","allowed_tools":"get_current_time"}"#,
            "allowed_tools must be an array",
        ),
        (
            r#"{"name":"m","primary_provider":"p","allowed_tools":[1]}"#,
            "allowed_tools[0] must be a string",
        ),
        // Name is checked before the lists.
        (
            r#"{"name":"","primary_provider":"p","fallback_providers":"x"}"#,
            "name must not be empty",
        ),
    ];
    for (body, detail) in cases {
        assert_eq!(
            ProfileBody::parse(body.as_bytes()).unwrap_err(),
            detail,
            "{body}"
        );
    }
    assert!(ProfileBody::parse(b"nope")
        .unwrap_err()
        .starts_with("expected "));
    assert_eq!(
        ProfileBody::parse(b"[]").unwrap_err(),
        "invalid request body: invalid type: sequence, expected a JSON object"
    );
    // null lists read as [].
    assert!(
        ProfileBody::parse(br#"{"name":"m","primary_provider":"p","mcp_servers":null}"#).is_ok()
    );
}

#[test]
fn c189_profile_views_serialize_in_spec_order() {
    let created = ProfileCreated {
        id: "pro_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4".into(),
        name: "main".into(),
        created_at: "2026-07-06T18:26:01.123Z".into(),
    };
    assert_eq!(
        serde_json::to_string(&created).unwrap(),
        r#"{"id":"pro_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4","name":"main","created_at":"2026-07-06T18:26:01.123Z"}"#
    );
    let view = ProfileView {
        id: "pro_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4".into(),
        name: "main".into(),
        primary_provider: "anthropic-sonnet".into(),
        fallback_providers: vec!["openai-gpt".into()],
        mcp_servers: vec!["filesystem".into()],
        allowed_tools: vec!["get_current_time".into()],
        available_sandboxes: vec!["python:3.12".into()],
        created_at: "2026-07-06T18:26:01.123Z".into(),
        updated_at: "2026-07-06T18:26:01.123Z".into(),
    };
    let expected = json!({
      "id": "pro_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4",
      "name": "main",
      "primary_provider": "anthropic-sonnet",
      "fallback_providers": ["openai-gpt"],
      "mcp_servers": ["filesystem"],
      "allowed_tools": ["get_current_time"],
      "available_sandboxes": ["python:3.12"],
      "created_at": "2026-07-06T18:26:01.123Z",
      "updated_at": "2026-07-06T18:26:01.123Z"
    });
    assert_eq!(
        serde_json::to_string(&view).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
}

#[test]
fn c195_c197_keys() {
    let b = CreateKeyBody::parse(br#"{"name":"my-agent","profile_id":"pro_x"}"#).unwrap();
    assert_eq!(
        (b.name.as_str(), b.profile_id.as_str()),
        ("my-agent", "pro_x")
    );
    assert_eq!(
        CreateKeyBody::parse(br#"{"name":" ","profile_id":"pro_x"}"#).unwrap_err(),
        "name must not be empty"
    );
    assert_eq!(
        CreateKeyBody::parse(br#"{"profile_id":"pro_x"}"#).unwrap_err(),
        "name must not be empty"
    );
    assert_eq!(
        CreateKeyBody::parse(br#"{"name":"a"}"#).unwrap_err(),
        "missing field `profile_id`"
    );
    assert_eq!(
        CreateKeyBody::parse(br#"{"name":"a","profile_id":1}"#).unwrap_err(),
        "profile_id must be a string"
    );
    let created = KeyCreated {
        id: "key_0a1b2c3d4e5f60718293a4b5c6d7e8f9".into(),
        name: "my-agent".into(),
        key: "bae_1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f".into(),
        prefix: "bae_1a2b".into(),
        profile_id: "pro_x".into(),
        created_at: "2026-07-06T18:26:05.000Z".into(),
    };
    let v: Value = serde_json::to_value(&created).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["id", "name", "key", "prefix", "profile_id", "created_at"]
    );
    let view = KeyView {
        id: "key_1".into(),
        name: "n".into(),
        prefix: "bae_1a2b".into(),
        profile_id: "pro_x".into(),
        created_at: "t".into(),
        last_used_at: None,
    };
    assert_eq!(
        serde_json::to_string(&view).unwrap(),
        r#"{"id":"key_1","name":"n","prefix":"bae_1a2b","profile_id":"pro_x","created_at":"t","last_used_at":null}"#
    );
}

#[test]
fn c201_sessions_view_and_state_filter() {
    let s = AdminSessionView {
        id: "ses_1".into(),
        profile_id: "pro_1".into(),
        state: SessionState::Error,
        client_version: None,
        created_at: "t".into(),
        closed_at: None,
    };
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        r#"{"id":"ses_1","profile_id":"pro_1","state":"error","client_version":null,"created_at":"t","closed_at":null}"#
    );
    assert_eq!(parse_state_filter(None), Ok(None));
    assert_eq!(parse_state_filter(Some("")), Ok(None));
    assert_eq!(
        parse_state_filter(Some("open")),
        Ok(Some(SessionState::Open))
    );
    assert_eq!(
        parse_state_filter(Some("closed")),
        Ok(Some(SessionState::Closed))
    );
    assert_eq!(
        parse_state_filter(Some("error")),
        Ok(Some(SessionState::Error))
    );
    assert_eq!(
        parse_state_filter(Some("bogus")).unwrap_err(),
        "invalid state filter \"bogus\"; expected one of open, closed, error"
    );
}

#[test]
fn admin_detail_texts() {
    assert_eq!(
        DUPLICATE_NAME_DETAIL,
        "a profile with that name already exists"
    );
    assert_eq!(no_profile_detail("pro_1"), "no profile pro_1");
    assert_eq!(
        profile_in_use_detail(2),
        "profile has 2 active client key(s); revoke them before deleting"
    );
    assert_eq!(no_active_profile_detail("pro_1"), "no active profile pro_1");
    assert_eq!(no_active_key_detail("key_1"), "no active client key key_1");
    let st = ImageStatus {
        name: "node:22".into(),
        status: ImageState::Error,
        detail: Some("pull failed: unauthorized".into()),
    };
    assert_eq!(
        serde_json::to_string(&st).unwrap(),
        r#"{"name":"node:22","status":"error","detail":"pull failed: unauthorized"}"#
    );
    let ok = ImageStatus {
        name: "python:3.12".into(),
        status: ImageState::Available,
        detail: None,
    };
    assert_eq!(
        serde_json::to_string(&ok).unwrap(),
        r#"{"name":"python:3.12","status":"available"}"#
    );
    let items = Items {
        items: vec![McpServerItem {
            name: "filesystem".into(),
            transport: "stdio".into(),
        }],
    };
    assert_eq!(
        serde_json::to_string(&items).unwrap(),
        r#"{"items":[{"name":"filesystem","transport":"stdio"}]}"#
    );
}

#[test]
fn c041_page_query_defaults_and_clamp() {
    assert_eq!(parse_page_query(None, None), Ok((None, 50)));
    assert_eq!(parse_page_query(Some(""), Some("")), Ok((None, 50)));
    assert_eq!(
        parse_page_query(Some("42"), Some("100")),
        Ok((Some(42), 100))
    );
    assert_eq!(parse_page_query(None, Some("200")), Ok((None, 200)));
    assert_eq!(parse_page_query(None, Some("201")), Ok((None, 200)));
    assert_eq!(
        parse_page_query(None, Some("99999999999999999999999")),
        Ok((None, 200))
    );
    assert_eq!(parse_page_query(None, Some("1")), Ok((None, 1)));
}

#[test]
fn c042_page_query_errors() {
    assert_eq!(
        parse_page_query(Some("x"), None).unwrap_err(),
        "invalid cursor: \"x\""
    );
    assert_eq!(
        parse_page_query(Some("-1"), None).unwrap_err(),
        "invalid cursor: \"-1\""
    );
    assert_eq!(
        parse_page_query(Some("1.5"), None).unwrap_err(),
        "invalid cursor: \"1.5\""
    );
    assert_eq!(
        parse_page_query(Some("+1"), None).unwrap_err(),
        "invalid cursor: \"+1\""
    );
    assert!(parse_page_query(Some("99999999999999999999999"), None).is_err());
    for bad in ["0", "-5", "abc", "1.5", " 5"] {
        let e = parse_page_query(None, Some(bad)).unwrap_err();
        assert!(e.starts_with("invalid limit: "), "{bad}: {e}");
    }
}

#[test]
fn page_bodies() {
    let p = Page::from_rows(vec![(1, "a"), (2, "b"), (3, "c")], 2);
    assert_eq!(p.items, vec!["a", "b"]);
    assert_eq!(p.next_cursor.as_deref(), Some("2"));
    let p = Page::from_rows(vec![(1, "a"), (2, "b")], 2);
    assert_eq!(p.next_cursor, None);
    assert_eq!(
        serde_json::to_string(&p).unwrap(),
        r#"{"items":["a","b"],"next_cursor":null}"#
    );
    assert_eq!(
        page_json(&[r#"{"a":1}"#, r#"{"b":2}"#], Some("42")),
        r#"{"items":[{"a":1},{"b":2}],"next_cursor":"42"}"#
    );
    assert_eq!(
        page_json::<&str>(&[], None),
        r#"{"items":[],"next_cursor":null}"#
    );
    let typed: Page<Value> = Page {
        items: vec![json!({"a":1})],
        next_cursor: Some("42".into()),
    };
    assert_eq!(
        serde_json::to_string(&typed).unwrap(),
        page_json(&[r#"{"a":1}"#], Some("42"))
    );
}
