//! Replica mode: catalogue changes from the other replicas
//! (docs/scaling.md, "Catalogue changes"). Catalogue writes `NOTIFY
//! bae_catalog` in their own transaction (`replica::notify`); the listener
//! thread here re-reads the rows each batch of notices names and hands
//! them to the engine.

use std::collections::BTreeSet;
use std::time::Duration;

use engine::store::CatalogUpdate;
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use super::pg_text;
use super::replica::{connect, CHANNEL, KEY_COLS, PROFILE_COLS, SESSION_COLS};
use crate::config::DatabaseUrl;
use crate::store::rows::{read_key, read_profile, read_session};
use crate::store::{Result, StoreError};

/// Reads catalogue rows: those the notices name, or every one (`None`,
/// after `LISTEN` starts, so nothing committed meanwhile is missed).
fn read_rows(
    c: &mut Client,
    names: Option<&BTreeSet<String>>,
) -> std::result::Result<Result<CatalogUpdate>, postgres::Error> {
    let pick = |prefix: &str| -> Vec<String> {
        names
            .map(|n| {
                n.iter()
                    .filter_map(|s| s.strip_prefix(prefix))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (profiles, keys, sessions) = match names {
        None => (
            c.query(
                &format!("SELECT {PROFILE_COLS} FROM profiles ORDER BY ord"),
                &[],
            )?,
            c.query(&format!("SELECT {KEY_COLS} FROM keys ORDER BY ord"), &[])?,
            c.query(
                &format!("SELECT {SESSION_COLS} FROM sessions ORDER BY ord"),
                &[],
            )?,
        ),
        Some(_) => (
            c.query(
                &format!("SELECT {PROFILE_COLS} FROM profiles WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("p:")],
            )?,
            c.query(
                &format!("SELECT {KEY_COLS} FROM keys WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("k:")],
            )?,
            c.query(
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = ANY($1) ORDER BY ord"),
                &[&pick("s:")],
            )?,
        ),
    };
    // Quotas: `q:<scope>:<id>`; a named one no longer stored was removed.
    let quota_names = pick("q:");
    let quotas = match names {
        None => c.query(
            "SELECT scope, id, quota, updated_at FROM bae_quotas ORDER BY scope, id",
            &[],
        )?,
        Some(_) => c.query(
            "SELECT scope, id, quota, updated_at FROM bae_quotas \
             WHERE scope || ':' || id = ANY($1) ORDER BY scope, id",
            &[&quota_names],
        )?,
    };
    Ok((|| {
        let mut u = CatalogUpdate {
            full: names.is_none(),
            ..CatalogUpdate::default()
        };
        for r in &quotas {
            u.quotas.extend(crate::store::rows::read_quota(r)?);
        }
        for name in &quota_names {
            let Some((kind, id)) = name.split_once(':') else {
                continue;
            };
            let scope = engine::store::QuotaScope::from_columns(kind, id.to_string());
            if let Some(scope) = scope.filter(|s| !u.quotas.iter().any(|q| &q.scope == s)) {
                u.quotas_removed.push(scope);
            }
        }
        for r in &profiles {
            u.profiles.push(read_profile(r)?);
        }
        for r in &keys {
            let k = read_key(r)?;
            match k.deleted_at {
                Some(_) => u.revoked.push(k),
                None => u.keys.push(k),
            }
        }
        for r in &sessions {
            u.sessions.push(read_session(r)?);
        }
        Ok(u)
    })())
}

/// `LISTEN`s for catalogue notices on its own connection and hands each
/// batch's rows to `deliver` (within a few milliseconds of the commit);
/// everything once after `LISTEN` starts. A lost connection exits the
/// process (crash-only): without notices a revoked key could keep working
/// here past the documented bound.
pub fn start_listener(
    url: DatabaseUrl,
    deliver: impl Fn(CatalogUpdate) -> bool + Send + 'static,
) -> Result<()> {
    let mut client = connect(&url, "baesrv-listen")?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| StoreError::Postgres(pg_text(&url, &e)))?;
    let fatal = |url: &DatabaseUrl, e: &dyn std::fmt::Display| -> ! {
        tracing::error!(
            database = %url,
            error = %url.scrub(&e.to_string()),
            "catalogue notices lost; exiting (crash-only: the restarted replica re-reads \
             the catalogue)"
        );
        std::process::exit(1)
    };
    match read_rows(&mut client, None) {
        Ok(Ok(all)) => {
            deliver(all);
        }
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(StoreError::Postgres(pg_text(&url, &e))),
    }
    std::thread::Builder::new()
        .name("bae-listen".into())
        .spawn(move || loop {
            let mut names = BTreeSet::new();
            {
                let mut n = client.notifications();
                let first = n.timeout_iter(Duration::from_secs(5)).next();
                match first {
                    Ok(Some(first)) => {
                        names.insert(first.payload().to_string());
                    }
                    Ok(None) => {}
                    Err(e) => fatal(&url, &e),
                }
                // Everything already received rides along.
                let mut rest = n.iter();
                loop {
                    match rest.next() {
                        Ok(Some(more)) => {
                            names.insert(more.payload().to_string());
                        }
                        Ok(None) => break,
                        Err(e) => fatal(&url, &e),
                    }
                }
            }
            if names.is_empty() {
                if let Err(e) = client.simple_query("SELECT 1") {
                    fatal(&url, &e);
                }
                continue;
            }
            match read_rows(&mut client, Some(&names)) {
                Ok(Ok(update)) => {
                    if !deliver(update) {
                        return;
                    }
                }
                Ok(Err(e)) => fatal(&url, &e),
                Err(e) => fatal(&url, &e),
            }
        })
        .map(|_| ())
        .map_err(|e| StoreError::Postgres(format!("cannot start the notice listener: {e}")))
}
