//! The quotas in virtual time: buckets, windows, open sessions, refusals.

use super::*;

fn q(v: serde_json::Value) -> Quota {
    parse(&v).unwrap()
}

fn key(id: &str) -> Scope {
    Scope::Key(id.into())
}

#[test]
fn rate_bucket_refuses_past_burst_then_refills() {
    let mut qs = Quotas::default();
    let quota = q(serde_json::json!({"requests_per_second": 2, "burst": 3}));
    qs.set(key("k1"), quota, MonoMs(0));
    for _ in 0..3 {
        assert_eq!(qs.admit_request("k1", None, MonoMs(0)), Ok(()));
    }
    let r = qs.admit_request("k1", None, MonoMs(0)).unwrap_err();
    assert_eq!(r.kind, Kind::Rate);
    assert_eq!(r.limit, 2);
    assert_eq!(r.retry_after_ms, Some(500), "one request at 2/s");
    assert_eq!(r.retry_after_s(), Some(1), "whole seconds, at least one");
    assert_eq!(r.data()["window"], "1s");
    // Another key is not limited; the refused one passes after 500 ms.
    assert_eq!(qs.admit_request("k2", None, MonoMs(0)), Ok(()));
    assert!(qs.admit_request("k1", None, MonoMs(499)).is_err());
    assert_eq!(qs.admit_request("k1", None, MonoMs(500)), Ok(()));
    assert_eq!(qs.refused(), [2, 0, 0]);
}

#[test]
fn key_and_profile_quotas_both_apply_and_a_refusal_takes_nothing() {
    let mut qs = Quotas::default();
    qs.set(
        key("k1"),
        q(serde_json::json!({"requests_per_second": 10})),
        MonoMs(0),
    );
    let profile = Scope::Profile("p".into());
    qs.set(
        profile.clone(),
        q(serde_json::json!({"requests_per_second": 1})),
        MonoMs(0),
    );
    assert_eq!(qs.admit_request("k1", Some("p"), MonoMs(0)), Ok(()));
    let r = qs.admit_request("k2", Some("p"), MonoMs(0)).unwrap_err();
    assert_eq!(
        r.scope, profile,
        "the profile's bucket is shared by its keys"
    );
    // k1's own bucket gave one token only: the refused request took none.
    let s = qs.status_of(&key("k1"), MonoMs(0), UnixMs(0)).unwrap();
    assert_eq!(s.requests_available, Some(9));
}

#[test]
fn open_sessions_counted_from_restore_and_released_on_close() {
    let rows = [crate::store::QuotaRow {
        scope: key("k1"),
        quota: r#"{"max_open_sessions":2}"#.into(),
        updated_at: String::new(),
    }];
    let open = [OpenCount {
        client_key_id: "k1".into(),
        profile_id: "p".into(),
        open: 1,
    }];
    let mut qs = Quotas::restore(&rows, &open, MonoMs(0));
    assert_eq!(qs.admit_session("k1", Some("p")), Ok(()));
    qs.session_opened("k1", "p");
    let r = qs.admit_session("k1", Some("p")).unwrap_err();
    assert_eq!(
        (r.kind, r.limit, r.retry_after_ms),
        (Kind::OpenSessions, 2, None)
    );
    assert_eq!(r.retry_after_s(), None);
    qs.session_closed("k1", "p");
    assert_eq!(qs.admit_session("k1", Some("p")), Ok(()));
    // A profile quota set later starts from the true count.
    qs.set(
        Scope::Profile("p".into()),
        q(serde_json::json!({"max_open_sessions": 1})),
        MonoMs(0),
    );
    assert!(qs.admit_session("k9", Some("p")).is_err());
}

#[test]
fn token_budget_windows_are_epoch_aligned_and_roll_over() {
    let mut qs = Quotas::default();
    let hour = 3_600_000;
    qs.set(
        key("k1"),
        q(serde_json::json!({"token_budget": 100, "window": "1h"})),
        MonoMs(0),
    );
    let t = UnixMs(10 * hour + 60_000);
    assert_eq!(qs.window_start(&key("k1"), t), Some(10 * hour));
    // The store said 60 were used in this window before the start.
    qs.seed(&key("k1"), 10 * hour, 60);
    assert_eq!(qs.admit_turn("k1", Some("p"), t), Ok(()));
    qs.credit("k1", "p", 40, t);
    let r = qs.admit_turn("k1", Some("p"), t).unwrap_err();
    assert_eq!(r.kind, Kind::TokenBudget);
    assert_eq!(
        r.retry_after_ms,
        Some(hour - 60_000),
        "until the window ends"
    );
    assert_eq!(r.data()["window"], "1h");
    assert_eq!(r.data()["limit"], 100);
    // Another key is unaffected; the next window starts empty.
    assert_eq!(qs.admit_turn("k2", Some("p"), t), Ok(()));
    assert_eq!(qs.admit_turn("k1", Some("p"), UnixMs(11 * hour)), Ok(()));
    let s = qs
        .status_of(&key("k1"), MonoMs(0), UnixMs(11 * hour))
        .unwrap();
    assert_eq!(
        (s.tokens_used, s.window_start_ms),
        (Some(0), Some(11 * hour))
    );
}

#[test]
fn a_stale_seed_never_lowers_the_count() {
    let mut qs = Quotas::default();
    qs.set(
        key("k1"),
        q(serde_json::json!({"token_budget": 100, "window": "1d"})),
        MonoMs(0),
    );
    let t = UnixMs(5);
    qs.window_start(&key("k1"), t);
    qs.credit("k1", "p", 30, t);
    qs.seed(&key("k1"), 0, 20);
    let s = qs.status_of(&key("k1"), MonoMs(0), t).unwrap();
    assert_eq!(s.tokens_used, Some(30));
}

#[test]
fn off_by_default_nothing_refuses() {
    let mut qs = Quotas::default();
    assert!(!qs.is_on());
    for _ in 0..1000 {
        assert_eq!(qs.admit_request("k", Some("p"), MonoMs(0)), Ok(()));
        qs.session_opened("k", "p");
    }
    assert_eq!(qs.admit_session("k", Some("p")), Ok(()));
    assert_eq!(qs.admit_turn("k", Some("p"), UnixMs(0)), Ok(()));
    assert_eq!(qs.refused(), [0, 0, 0]);
}

#[test]
fn bad_values_name_the_field_and_range() {
    let bad = |v: serde_json::Value| parse(&v).unwrap_err().to_string();
    assert_eq!(
        bad(serde_json::json!({"requests_per_second": 0})),
        "requests_per_second: expected an integer from 1 to 1000000, or null"
    );
    assert!(bad(serde_json::json!({"max_open_sessions": -1})).starts_with("max_open_sessions:"));
    assert!(bad(serde_json::json!({"max_open_sessions": "3"})).starts_with("max_open_sessions:"));
    assert!(bad(serde_json::json!({"burst": 3})).starts_with("burst: needs"));
    assert!(bad(serde_json::json!({"token_budget": 5})).starts_with("token_budget and window"));
    assert!(bad(serde_json::json!({"token_budget": 5, "window": "2w"})).starts_with("window:"));
    assert!(bad(serde_json::json!({"token_budget": 5, "window": "30s"})).starts_with("window:"));
    assert!(bad(serde_json::json!({"rps": 5})).starts_with("rps: unknown field"));
    assert!(bad(serde_json::json!({})).starts_with("set at least one"));
    assert!(bad(serde_json::json!([1])).starts_with("expected a JSON object"));
    let ok = q(serde_json::json!({"token_budget": 5, "window": "90m", "max_open_sessions": null}));
    assert_eq!(ok.window_ms, Some(90 * 60_000));
    assert_eq!(ok.to_json()["window"], "90m");
    assert_eq!(q(ok.to_json()), ok, "the stored form reads back");
}

/// The admin API's `400` details, byte for byte.
#[test]
fn each_quota_error_renders_its_wire_text() {
    use crate::quotas::QuotaError as E;
    let fields = "max_open_sessions, requests_per_second, burst, token_budget, window";
    let texts = [
        (E::NotAnObject, "expected a JSON object".to_string()),
        (
            E::UnknownField("rps".into()),
            format!("rps: unknown field (expected {fields})"),
        ),
        (
            E::OutOfRange {
                field: "burst",
                max: 1_000_000,
            },
            "burst: expected an integer from 1 to 1000000, or null".into(),
        ),
        (
            E::WindowRange,
            "window: expected a duration from 1m to 366d such as \"1h\" or \"1d\" (units s, m, h, d)"
                .into(),
        ),
        (
            E::WindowType,
            "window: expected a string such as \"1h\" or \"1d\"".into(),
        ),
        (E::BurstWithoutRate, "burst: needs requests_per_second".into()),
        (
            E::BudgetWithoutWindow,
            "token_budget and window: set both or neither".into(),
        ),
        (
            E::Empty,
            format!("set at least one of {fields} (DELETE removes a quota)"),
        ),
    ];
    for (e, text) in texts {
        assert_eq!(e.to_string(), text);
    }
    assert_eq!(
        parse(&serde_json::json!({"token_budget": 1, "window": 5})),
        Err(E::WindowType)
    );
}
