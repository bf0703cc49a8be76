//! The body of a fork or rewind (extension; docs/extensions.md, "Forks"):
//! `POST …/sessions/{id}/fork` and `…/rewind` on either port.

use serde_json::Value;

use super::json::invalid_type;

/// Where a fork starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForkPoint {
    /// After the session's last event (a fork's default).
    Last,
    /// After `event_id`.
    Event(String),
    /// After turn `after_turn` ended (`0`: before the first turn).
    AfterTurn(u64),
    /// Right before the user message `before_message`.
    BeforeMessage(String),
}

/// A parsed fork or rewind body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkBody {
    pub at: ForkPoint,
    /// Admin port: the client key that gets the fork.
    pub client_key_id: Option<String>,
    /// Admin port: the profile of the fork.
    pub profile_id: Option<String>,
}

/// Reads a fork (`rewind == false`) or rewind body: a JSON object (an
/// empty body reads as `{}`) with at most one of `event_id`, `after_turn`,
/// `before_message`; a rewind needs `after_turn` or `before_message`.
/// Unknown members are ignored. `Err` is the `400` detail.
pub fn parse_fork(body: &[u8], rewind: bool) -> Result<ForkBody, String> {
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(body).map_err(|e| format!("invalid request body: {e}"))?
    };
    let Value::Object(m) = v else {
        return Err(format!(
            "invalid request body: {}",
            invalid_type(&v, "an object")
        ));
    };
    let text = |key: &str| -> Result<Option<String>, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(format!("{key} must be a non-empty string")),
        }
    };
    let turn = match m.get("after_turn") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or("after_turn must be a non-negative integer")?,
        ),
    };
    let points = [
        text("event_id")?.map(ForkPoint::Event),
        turn.map(ForkPoint::AfterTurn),
        text("before_message")?.map(ForkPoint::BeforeMessage),
    ];
    let mut given = points.into_iter().flatten();
    let at = match (given.next(), given.next()) {
        (Some(_), Some(_)) => {
            return Err("give at most one of event_id, after_turn and before_message".into())
        }
        (Some(ForkPoint::Event(_)), None) if rewind => {
            return Err("a rewind takes after_turn or before_message (fork takes event_id)".into())
        }
        (Some(at), None) => at,
        (None, _) if rewind => return Err("a rewind needs after_turn or before_message".into()),
        (None, _) => ForkPoint::Last,
    };
    Ok(ForkBody {
        at,
        client_key_id: text("client_key_id")?,
        profile_id: text("profile_id")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_and_rewind_bodies() {
        let p = |b: &str, r| parse_fork(b.as_bytes(), r);
        assert_eq!(p("", false).unwrap().at, ForkPoint::Last);
        assert_eq!(p("{}", false).unwrap().at, ForkPoint::Last);
        assert_eq!(
            p(r#"{"event_id":"evt_1","client_key_id":"key_1"}"#, false).unwrap(),
            ForkBody {
                at: ForkPoint::Event("evt_1".into()),
                client_key_id: Some("key_1".into()),
                profile_id: None,
            }
        );
        assert_eq!(
            p(r#"{"after_turn":0}"#, true).unwrap().at,
            ForkPoint::AfterTurn(0)
        );
        assert_eq!(
            p(r#"{"before_message":"evt_2"}"#, true).unwrap().at,
            ForkPoint::BeforeMessage("evt_2".into())
        );
        for (bad, rewind) in [
            ("{}", true),
            (r#"{"event_id":"evt_1"}"#, true),
            (r#"{"after_turn":-1}"#, false),
            (r#"{"after_turn":1,"event_id":"evt_1"}"#, false),
            (r#"{"event_id":7}"#, false),
            ("[1]", false),
            ("{", false),
        ] {
            assert!(p(bad, rewind).is_err(), "{bad}");
        }
    }
}
