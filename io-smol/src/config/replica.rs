//! Replica mode (docs/scaling.md): `BAE_REPLICA_ADVERTISE`, `BAE_REPLICA_ID`,
//! `BAE_LEASE_MS` and `BAE_FORWARD_TIMEOUT_MS`. Only with the PostgreSQL
//! store.

use super::ConfigError;

/// Default `BAE_LEASE_MS`.
pub const DEFAULT_LEASE_MS: u64 = 5_000;
/// Accepted `BAE_LEASE_MS` range.
pub const LEASE_MS_RANGE: std::ops::RangeInclusive<u64> = 500..=600_000;
/// Default `BAE_FORWARD_TIMEOUT_MS`: an owner answers a forwarded request's
/// head in milliseconds (NDJSON streams send theirs before any turn runs),
/// so a silent owner is a frozen or partitioned one.
pub const DEFAULT_FORWARD_TIMEOUT_MS: u64 = 5_000;
/// Accepted `BAE_FORWARD_TIMEOUT_MS` range.
pub const FORWARD_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=600_000;

/// The replica settings of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaEnv {
    /// `host:port` at which the other replicas reach this one's client
    /// listener.
    pub advertise: String,
    /// Lease owner name; `None`: derived at start (advertise address and
    /// start time), so a restarted replica never inherits its old leases.
    pub id: Option<String>,
    /// How long a lease lasts without renewal.
    pub lease_ms: u64,
    /// How long a relayed request waits for the owner's response head
    /// before the client gets a `503` (docs/scaling.md, "Forwarding").
    pub forward_timeout_ms: u64,
}

/// A whole number of milliseconds in `range`, or `default` when unset.
fn millis(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    expected: &'static str,
) -> Result<u64, ConfigError> {
    match get(var) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if range.contains(&n) && !v.trim().starts_with('+') => Ok(n),
            _ => Err(ConfigError::InvalidValue {
                var,
                value: v,
                expected,
            }),
        },
    }
}

/// Reads the replica variables; `None` when `BAE_REPLICA_ADVERTISE` is
/// unset or empty (a lone server).
pub fn parse_replica(
    get: &impl Fn(&str) -> Option<String>,
    postgres: bool,
) -> Result<Option<ReplicaEnv>, ConfigError> {
    let Some(advertise) = get("BAE_REPLICA_ADVERTISE").filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let advertise = advertise.trim().to_string();
    if !postgres {
        return Err(ConfigError::InvalidValue {
            var: "BAE_REPLICA_ADVERTISE",
            value: advertise,
            expected: "to be set only with BAE_DATABASE_URL: replicas share a PostgreSQL store",
        });
    }
    let valid_addr = advertise.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host
                .chars()
                .any(|c| c.is_whitespace() || c == '/' || c == '@')
            && port.parse::<u16>().is_ok_and(|p| p > 0)
            && !port.starts_with('+')
    });
    if !valid_addr {
        return Err(ConfigError::InvalidValue {
            var: "BAE_REPLICA_ADVERTISE",
            value: advertise,
            expected: "host:port of this replica's client listener, e.g. 10.0.0.5:8080",
        });
    }
    let id = match get("BAE_REPLICA_ID").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) if (1..=128).contains(&v.len()) && v.chars().all(|c| c.is_ascii_graphic()) => {
            Some(v)
        }
        Some(v) => {
            return Err(ConfigError::InvalidValue {
                var: "BAE_REPLICA_ID",
                value: v,
                expected: "1 to 128 printable ASCII characters without spaces",
            })
        }
    };
    let lease_ms = millis(
        get,
        "BAE_LEASE_MS",
        DEFAULT_LEASE_MS,
        LEASE_MS_RANGE,
        "a whole number of milliseconds from 500 to 600000",
    )?;
    let forward_timeout_ms = millis(
        get,
        "BAE_FORWARD_TIMEOUT_MS",
        DEFAULT_FORWARD_TIMEOUT_MS,
        FORWARD_TIMEOUT_MS_RANGE,
        "a whole number of milliseconds from 100 to 600000",
    )?;
    Ok(Some(ReplicaEnv {
        advertise,
        id,
        lease_ms,
        forward_timeout_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)], pg: bool) -> Result<Option<ReplicaEnv>, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        parse_replica(&get, pg)
    }

    #[test]
    fn unset_is_a_lone_server_and_defaults_apply() {
        assert_eq!(parse(&[], true).unwrap(), None);
        assert_eq!(
            parse(&[("BAE_REPLICA_ADVERTISE", " ")], false).unwrap(),
            None
        );
        let r = parse(&[("BAE_REPLICA_ADVERTISE", "10.0.0.5:8080")], true)
            .unwrap()
            .unwrap();
        assert_eq!(r.advertise, "10.0.0.5:8080");
        assert_eq!((r.id, r.lease_ms), (None, DEFAULT_LEASE_MS));
        assert_eq!(r.forward_timeout_ms, DEFAULT_FORWARD_TIMEOUT_MS);
        let r = parse(
            &[
                ("BAE_REPLICA_ADVERTISE", "replica-a.internal:9000"),
                ("BAE_REPLICA_ID", "a-1"),
                ("BAE_LEASE_MS", "2000"),
                ("BAE_FORWARD_TIMEOUT_MS", "750"),
            ],
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.id.as_deref(), r.lease_ms), (Some("a-1"), 2000));
        assert_eq!(r.forward_timeout_ms, 750);
    }

    #[test]
    fn bad_values_are_configuration_errors() {
        let e = parse(&[("BAE_REPLICA_ADVERTISE", "h:1")], false).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("BAE_DATABASE_URL"), "{e}");
        for bad in ["nohost", ":80", "h:0", "h:99999", "h:x", "a b:1", "h:+1"] {
            let e = parse(&[("BAE_REPLICA_ADVERTISE", bad)], true).unwrap_err();
            assert!(
                e.to_string().contains("BAE_REPLICA_ADVERTISE"),
                "{bad}: {e}"
            );
        }
        for bad in ["0", "499", "600001", "x", "-5", "+900"] {
            let e = parse(
                &[("BAE_REPLICA_ADVERTISE", "h:1"), ("BAE_LEASE_MS", bad)],
                true,
            )
            .unwrap_err();
            assert!(e.to_string().contains("BAE_LEASE_MS"), "{bad}: {e}");
        }
        for bad in ["99", "600001", "x", "+900"] {
            let e = parse(
                &[
                    ("BAE_REPLICA_ADVERTISE", "h:1"),
                    ("BAE_FORWARD_TIMEOUT_MS", bad),
                ],
                true,
            )
            .unwrap_err();
            let text = e.to_string();
            assert!(text.contains("BAE_FORWARD_TIMEOUT_MS"), "{bad}: {e}");
        }
        let long = "x".repeat(129);
        for bad in ["a b", long.as_str()] {
            let e = parse(
                &[("BAE_REPLICA_ADVERTISE", "h:1"), ("BAE_REPLICA_ID", bad)],
                true,
            )
            .unwrap_err();
            assert!(e.to_string().contains("BAE_REPLICA_ID"), "{e}");
        }
    }
}
