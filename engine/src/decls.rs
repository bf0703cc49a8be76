//! Per-client tool declarations of a session (`client_tools`,
//! `sandbox_tools`, `subagent_tools`: `{"<client key id>": [tool, …]}`),
//! interned.
//!
//! Every open session holds three of these maps, and the sessions of one
//! harness usually declare the same tools: a [`ToolMap`] is a pointer to a
//! shared, immutable [`Decls`] (its stored JSON text and the parsed
//! entries), so an idle session pays 8 bytes per map, a turn reads its
//! driver's tools without parsing, and a row write splices stored text.
//! The [`DeclPool`] hands out one `Decls` per distinct text.

use proto::wire::json;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use serde_json::Value;

/// One session's declarations of one kind. `None` is `{}` (no client
/// declared any: most sessions' sandbox and subagent maps before a join).
#[derive(Debug, Clone, Default)]
pub struct ToolMap(Option<Arc<Decls>>);

/// The parsed entries of one distinct map text, shared by every session
/// holding that text.
#[derive(Debug)]
pub struct Decls {
    /// The stored form: compact JSON object text.
    text: Box<str>,
    /// `(client key id, declarations)` in the text's order.
    entries: Vec<(Box<str>, Vec<Value>)>,
}

impl PartialEq for ToolMap {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl ToolMap {
    /// The map of a stored column's text. A legacy non-object value (or
    /// text that is not JSON) reads as empty, so the next write of the
    /// row replaces it with an object (spec 08 §3).
    pub fn from_text(pool: &mut DeclPool, text: &str) -> Self {
        pool.intern(text.to_string())
    }

    /// The stored column text (`{}` when empty).
    pub fn text(&self) -> &str {
        self.0.as_ref().map_or("{}", |d| &d.text)
    }

    /// The declarations of one client (empty when it declared none).
    pub fn get(&self, key_id: &str) -> &[Value] {
        let Some(d) = &self.0 else {
            return &[];
        };
        (d.entries.iter())
            .find(|(k, _)| &**k == key_id)
            .map_or(&[], |(_, v)| v.as_slice())
    }

    /// Whether `key_id` declared a tool named `name`.
    pub fn declares(&self, key_id: &str, name: &str) -> bool {
        (self.get(key_id).iter()).any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    }

    /// Replaces one client's declarations; other clients' stay untouched
    /// and keep their place (a new client goes last).
    pub fn set(&mut self, pool: &mut DeclPool, key_id: &str, tools: &[Value]) {
        let list = json::text(&Value::Array(tools.to_vec()));
        let mut text = String::with_capacity(self.text().len() + key_id.len() + list.len() + 4);
        text.push('{');
        let mut replaced = false;
        let entries = self.0.as_ref().map_or(&[][..], |d| d.entries.as_slice());
        for (k, v) in entries {
            if text.len() > 1 {
                text.push(',');
            }
            proto::wire::json::push_str(&mut text, k);
            text.push(':');
            if &**k == key_id {
                text.push_str(&list);
                replaced = true;
            } else {
                text.push_str(&json::text(&Value::Array(v.clone())));
            }
        }
        if !replaced {
            if text.len() > 1 {
                text.push(',');
            }
            proto::wire::json::push_str(&mut text, key_id);
            text.push(':');
            text.push_str(&list);
        }
        text.push('}');
        *self = pool.intern(text);
    }
}

/// One [`Decls`] per distinct map text. Entries whose sessions are all
/// gone are swept when the pool has doubled since the last sweep, so its
/// size stays proportional to the distinct texts in use.
#[derive(Debug, Default)]
pub struct DeclPool {
    by_text: HashMap<Box<str>, Weak<Decls>>,
    swept_at: usize,
}

impl DeclPool {
    /// The shared map of `text` (JSON object text), parsing it only when
    /// no session holds it yet. Held texts are compact: text from elsewhere
    /// (another server's rows) is re-serialised once, as it was read.
    pub fn intern(&mut self, text: String) -> ToolMap {
        if text == "{}" {
            return ToolMap::default();
        }
        if let Some(d) = self.by_text.get(text.as_str()).and_then(Weak::upgrade) {
            return ToolMap(Some(d));
        }
        let map = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) if !m.is_empty() => m,
            _ => return ToolMap::default(),
        };
        let compact = json::text(&Value::Object(map.clone()));
        if compact != text {
            return self.intern(compact);
        }
        let entries = map
            .into_iter()
            .map(|(k, v)| {
                let tools = match v {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                (k.into_boxed_str(), tools)
            })
            .collect();
        let text = text.into_boxed_str();
        let d = Arc::new(Decls {
            text: text.clone(),
            entries,
        });
        self.by_text.insert(text, Arc::downgrade(&d));
        if self.by_text.len() >= 2 * self.swept_at.max(64) {
            self.by_text.retain(|_, w| w.strong_count() > 0);
            self.swept_at = self.by_text.len();
        }
        ToolMap(Some(d))
    }

    /// Distinct texts held (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_texts_share_one_parse() {
        let mut pool = DeclPool::default();
        let t = vec![json!({"name": "get_time", "description": null, "input_schema": {}})];
        let (mut a, mut b) = (ToolMap::default(), ToolMap::default());
        a.set(&mut pool, "key_1", &t);
        b.set(&mut pool, "key_1", &t);
        let (Some(x), Some(y)) = (&a.0, &b.0) else {
            panic!("both maps hold declarations");
        };
        assert!(Arc::ptr_eq(x, y));
        assert_eq!(pool.len(), 1);
        assert_eq!(a.get("key_1"), t.as_slice());
        assert!(a.declares("key_1", "get_time"));
        assert!(!a.declares("key_2", "get_time"));
    }

    #[test]
    fn set_replaces_one_client_in_place_and_appends_new_ones() {
        let mut pool = DeclPool::default();
        let mut m = ToolMap::default();
        m.set(&mut pool, "key_a", &[json!({"name": "x"})]);
        m.set(&mut pool, "key_b", &[]);
        m.set(&mut pool, "key_a", &[json!({"name": "y"})]);
        assert_eq!(m.text(), r#"{"key_a":[{"name":"y"}],"key_b":[]}"#);
        let reparsed = ToolMap::from_text(&mut pool, m.text());
        assert_eq!(reparsed, m);
        let spaced =
            ToolMap::from_text(&mut pool, r#"{ "key_a": [ {"name": "y"} ], "key_b": [] }"#);
        assert_eq!(spaced.text(), m.text());
        assert_eq!(m.get("key_b"), &[] as &[Value]);
    }

    #[test]
    fn empty_and_legacy_columns_read_as_empty() {
        let mut pool = DeclPool::default();
        for v in ["{}", "[1,2]", "\"x\"", "null", "not json", ""] {
            let m = ToolMap::from_text(&mut pool, v);
            assert_eq!(m.text(), "{}");
            assert!(m.get("key_a").is_empty());
        }
        assert_eq!(pool.len(), 0);
    }

    #[test]
    fn unused_texts_are_swept() {
        let mut pool = DeclPool::default();
        let mut keep = Vec::new();
        for i in 0..1000 {
            let mut m = ToolMap::default();
            m.set(&mut pool, &format!("key_{i}"), &[]);
            if i % 100 == 0 {
                keep.push(m);
            }
        }
        assert!(pool.len() < 200, "{} texts held", pool.len());
        assert_eq!(keep[3].get("key_300"), &[] as &[Value]);
    }
}
