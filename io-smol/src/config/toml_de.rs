//! Runs the serde-derived `bae-config.toml` schema (`file.rs`) over a parsed
//! [`toml::Table`] with an error type of our own, so schema errors keep the
//! wording docs/configuration.md documents (`mcp.servers[0].args[0]:
//! expected a string, found integer`, `unknown key "env" in
//! mcp.servers[0]`) instead of serde's (`invalid type: integer `1`,
//! expected a string`).
//!
//! Why not `toml::from_str`: the `toml` crate's deserializer fixes its error
//! type to a message string; serde's own error hooks (`missing_field`,
//! `unknown_field`, `invalid_type`) carry the facts we word, and
//! `serde_path_to_error` supplies where in the file they happened.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, Deserialize, Expected, IntoDeserializer, Unexpected, Visitor};
use serde_path_to_error::Segment;
use toml::Value;

/// Deserializes `T` from a parsed document; the error is the schema
/// detail shown after `invalid config file "<path>": `.
pub(super) fn from_table<T: de::DeserializeOwned>(table: toml::Table) -> Result<T, String> {
    let node = Node::<Schema>(Value::Table(table), PhantomData);
    serde_path_to_error::deserialize(node).map_err(|e| {
        let segments: Vec<&Segment> = e.path().iter().collect();
        describe(e.inner(), &segments)
    })
}

/// One schema mistake, as serde reports it.
#[derive(Debug)]
enum Schema {
    UnknownKey(String),
    Missing(&'static str),
    Type {
        expected: String,
        found: &'static str,
    },
    OutOfRange(i64),
    Other(String),
}

fn describe(e: &Schema, path: &[&Segment]) -> String {
    match e {
        // The path ends at the unknown key; name the table holding it, in
        // brackets unless it is an array element (`[telemetry.traces]`,
        // `mcp.servers[0]`).
        Schema::UnknownKey(k) => {
            let table = &path[..path.len().saturating_sub(1)];
            match table.last() {
                Some(Segment::Seq { .. }) => format!("unknown key \"{k}\" in {}", dotted(table)),
                _ => format!("unknown key \"{k}\" in [{}]", dotted(table)),
            }
        }
        Schema::Missing(f) => format!("{}: missing required field \"{f}\"", dotted(path)),
        Schema::Type { expected, found } => {
            format!("{}: expected {expected}, found {found}", dotted(path))
        }
        Schema::OutOfRange(n) => format!(
            "{}: {n} is out of range for an unsigned 32-bit integer",
            dotted(path)
        ),
        Schema::Other(m) => format!("{}: {m}", dotted(path)),
    }
}

/// `mcp.servers[0].headers.A`: keys as written, no quoting (as before).
fn dotted(path: &[&Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

/// The TOML name of what was found.
fn toml_type(u: &Unexpected<'_>) -> &'static str {
    match u {
        Unexpected::Bool(_) => "boolean",
        Unexpected::Signed(_) | Unexpected::Unsigned(_) => "integer",
        Unexpected::Float(_) => "float",
        Unexpected::Str(_) | Unexpected::Char(_) => "string",
        Unexpected::Seq => "array",
        Unexpected::Map => "table",
        Unexpected::Other("datetime") => "datetime",
        _ => "value",
    }
}

/// What was expected, in TOML words: serde's primitive visitors name Rust
/// types; the schema's own visitors already speak TOML (`a table`).
fn toml_expected(exp: &dyn Expected) -> String {
    match exp.to_string().as_str() {
        "f64" => "a float".into(),
        "u32" | "i64" => "an integer".into(),
        other => other.into(),
    }
}

impl de::Error for Schema {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Schema::Other(msg.to_string())
    }
    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        Schema::Type {
            expected: toml_expected(exp),
            found: toml_type(&unexp),
        }
    }
    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        match unexp {
            // The only ranged integer in the schema is `max_tokens` (u32).
            Unexpected::Signed(n) => Schema::OutOfRange(n),
            u => Schema::Other(format!("invalid value {u}, expected {exp}")),
        }
    }
    fn missing_field(field: &'static str) -> Self {
        Schema::Missing(field)
    }
    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Schema::UnknownKey(field.to_string())
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(self, &[]))
    }
}

impl std::error::Error for Schema {}

/// A [`toml::Value`] as a self-describing serde deserializer generic over
/// the error type (the `toml` crate's own is fixed to its error).
struct Node<E>(Value, PhantomData<E>);

impl<'de, E: de::Error> de::Deserializer<'de> for Node<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        match self.0 {
            Value::String(s) => v.visit_string(s),
            Value::Integer(i) => v.visit_i64(i),
            Value::Float(f) => v.visit_f64(f),
            Value::Boolean(b) => v.visit_bool(b),
            Value::Datetime(_) => Err(E::invalid_type(Unexpected::Other("datetime"), &v)),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Node::<E>::new));
                let out = v.visit_seq(&mut seq)?;
                seq.end().map(|()| out)
            }
            Value::Table(t) => {
                let mut map =
                    MapDeserializer::new(t.into_iter().map(|(k, x)| (k, Node::<E>::new(x))));
                let out = v.visit_map(&mut map)?;
                map.end().map(|()| out)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<E> Node<E> {
    fn new(v: Value) -> Self {
        Node(v, PhantomData)
    }
}

impl<'de, E: de::Error> IntoDeserializer<'de, E> for Node<E> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// Field helpers whose type errors name the TOML shape.
pub(super) fn tables<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: de::Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_seq(SeqOf("an array of tables", PhantomData))
}

pub(super) fn strings<'de, D: de::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(SeqOf("an array of strings", PhantomData))
}

pub(super) fn string_map<'de, D: de::Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    struct StrMap;
    impl<'de> Visitor<'de> for StrMap {
        type Value = std::collections::BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of strings")
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            let mut out = Self::Value::new();
            while let Some((k, v)) = a.next_entry()? {
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(StrMap)
}

struct SeqOf<T>(&'static str, PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqOf<T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::new();
        while let Some(x) = a.next_element()? {
            out.push(x);
        }
        Ok(out)
    }
}
