//! Which database backs the store: the SQLite file at `BAE_DB_PATH`
//! (default) or PostgreSQL at `BAE_DATABASE_URL` (docs/scaling.md).
//!
//! The URL carries credentials, so it only ever leaves this module through
//! [`DatabaseUrl::expose`] (to connect) or in its redacted form.

use std::fmt;

use super::redact::REDACTED;
use super::ConfigError;

/// Default `BAE_DATABASE_POOL_SIZE`: one writer and three readers.
pub const DEFAULT_POOL_SIZE: usize = 4;
/// Largest accepted `BAE_DATABASE_POOL_SIZE`.
pub const MAX_POOL_SIZE: usize = 64;

/// A `postgres://` URL. `Debug` and `Display` show it with the password
/// (in the user info or a `password=` parameter) replaced by [`REDACTED`].
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// The URL with its credentials, for connecting only: never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The password the URL carries, if any (to scrub it from a client
    /// library's error text). Read by hand, not by the `url` crate: it must
    /// also find the password in a URL the parser refuses (a bad port, a
    /// foreign scheme), whose error is shown, and as written (not decoded).
    pub fn password(&self) -> Option<&str> {
        let (_, rest) = self.0.split_once("://")?;
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let userinfo = authority.rsplit_once('@').map(|(u, _)| u);
        if let Some(pass) = userinfo.and_then(|u| u.split_once(':')).map(|(_, p)| p) {
            return Some(pass).filter(|p| !p.is_empty());
        }
        let query = rest.split_once('?').map(|(_, q)| q)?;
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix("password="))
            .filter(|p| !p.is_empty())
    }

    /// `text` with every occurrence of the password replaced.
    pub fn scrub(&self, text: &str) -> String {
        match self.password() {
            Some(p) => text.replace(p, REDACTED),
            None => text.to_string(),
        }
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.scrub(&self.0))
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// The store's database.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Database {
    /// The SQLite file at `BAE_DB_PATH`.
    #[default]
    Sqlite,
    /// PostgreSQL at `BAE_DATABASE_URL` with `pool_size` connections (one
    /// writer, the rest answer reads).
    Postgres { url: DatabaseUrl, pool_size: usize },
}

/// Reads `BAE_DATABASE_URL` and `BAE_DATABASE_POOL_SIZE` through `get`. An
/// empty URL counts as unset. Errors never contain the URL's password.
pub fn parse_database(get: &impl Fn(&str) -> Option<String>) -> Result<Database, ConfigError> {
    let Some(raw) = get("BAE_DATABASE_URL").filter(|v| !v.trim().is_empty()) else {
        return Ok(Database::Sqlite);
    };
    let url = DatabaseUrl(raw.trim().to_string());
    let text = url.expose();
    if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
        return Err(ConfigError::InvalidDatabaseUrl {
            shown: url.to_string(),
            detail: "expected a postgres:// or postgresql:// URL".into(),
        });
    }
    if let Err(e) = text.parse::<postgres::Config>() {
        return Err(ConfigError::InvalidDatabaseUrl {
            shown: url.to_string(),
            detail: url.scrub(&e.to_string()),
        });
    }
    let pool_size = match get("BAE_DATABASE_POOL_SIZE") {
        None => DEFAULT_POOL_SIZE,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_POOL_SIZE).contains(&n) && !v.trim().starts_with('+') => n,
            _ => {
                return Err(ConfigError::InvalidValue {
                    var: "BAE_DATABASE_POOL_SIZE",
                    value: v,
                    expected: "a whole number from 1 to 64",
                })
            }
        },
    };
    Ok(Database::Postgres { url, pool_size })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Database, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_database(&|k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn unset_or_empty_is_sqlite() {
        assert_eq!(parse(&[]).unwrap(), Database::Sqlite);
        assert_eq!(
            parse(&[("BAE_DATABASE_URL", " ")]).unwrap(),
            Database::Sqlite
        );
    }

    #[test]
    fn a_url_selects_postgres_and_never_shows_its_password() {
        let db = parse(&[(
            "BAE_DATABASE_URL",
            "postgres://bae:s3cr3t-pw@127.0.0.1:5433/bae",
        )])
        .unwrap();
        let Database::Postgres { url, pool_size } = db else {
            panic!("not postgres")
        };
        assert_eq!(pool_size, DEFAULT_POOL_SIZE);
        assert_eq!(url.password(), Some("s3cr3t-pw"));
        assert_eq!(
            url.to_string(),
            format!("postgres://bae:{REDACTED}@127.0.0.1:5433/bae")
        );
        assert!(!format!("{url:?}").contains("s3cr3t"));
        let q = parse(&[(
            "BAE_DATABASE_URL",
            "postgresql://bae@localhost/bae?password=qq-secret&sslmode=disable",
        )])
        .unwrap();
        let Database::Postgres { url, .. } = q else {
            panic!()
        };
        assert!(!url.to_string().contains("qq-secret"), "{url}");
    }

    #[test]
    fn bad_urls_and_pool_sizes_are_configuration_errors_without_secrets() {
        let e = parse(&[("BAE_DATABASE_URL", "mysql://u:topsecret@h/db")]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(!e.to_string().contains("topsecret"), "{e}");
        assert!(e.to_string().contains("BAE_DATABASE_URL"), "{e}");
        let e = parse(&[("BAE_DATABASE_URL", "postgres://u:topsecret@h:notaport/db")]).unwrap_err();
        assert!(!e.to_string().contains("topsecret"), "{e}");
        for bad in ["0", "65", "x", "-1", "+3"] {
            let e = parse(&[
                ("BAE_DATABASE_URL", "postgres://h/db"),
                ("BAE_DATABASE_POOL_SIZE", bad),
            ])
            .unwrap_err();
            assert!(e.to_string().contains("BAE_DATABASE_POOL_SIZE"), "{e}");
        }
        let ok = parse(&[
            ("BAE_DATABASE_URL", "postgres://h/db"),
            ("BAE_DATABASE_POOL_SIZE", "1"),
        ])
        .unwrap();
        assert!(matches!(ok, Database::Postgres { pool_size: 1, .. }));
    }
}
