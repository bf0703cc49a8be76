//! The engine's modules import each other without cycles (issue 10): each
//! top-level module's `crate::<module>` references, comments left out, form
//! a graph whose only shared node is the crate root (`lib.rs`, which routes);
//! and only the endpoint's named files extend `Engine` (issue 42).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read engine/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level module → the top-level modules it names via `crate::`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let deps = g.entry(module.clone()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    g
}

#[test]
fn modules_import_each_other_without_cycles() {
    let g = graph();
    assert!(g.len() > 20, "found only {:?}", g.keys());
    let nodes: Vec<&String> = g.keys().filter(|m| *m != "lib").collect();
    // A module is on a cycle when it can reach itself without the root.
    for start in &nodes {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = g[*start].iter().collect();
        while let Some(m) = stack.pop() {
            if m == *start {
                panic!("module `{start}` imports itself back through others: {g:?}");
            }
            if m == "lib" || !seen.insert(m.clone()) {
                continue;
            }
            if let Some(next) = g.get(m) {
                stack.extend(next.iter());
            }
        }
    }
}

/// Issue 42: the engine is the endpoint (construction, routing, the HTTP
/// and JSON-RPC front layers, the effects of session cores); behaviour
/// that belongs to one session or one component lives in that component's
/// own `impl`. These are the only files that may extend `Engine`
/// (docs/architecture.md, "The endpoint and the files that extend it"); the list may
/// shrink, and a new file needs a reason there.
const ENGINE_FILES: &[&str] = &[
    "admin_api/mod.rs",
    "client_api.rs",
    "lib.rs",
    "placement.rs",
];

#[test]
fn impl_engine_stays_in_the_named_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .any(|l| l.starts_with("impl Engine ") || l.starts_with("impl Engine{"))
        })
        .map(|f| {
            f.strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    found.sort();
    let extra: Vec<&String> = found
        .iter()
        .filter(|f| !ENGINE_FILES.contains(&f.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "`impl Engine` outside the named files: {extra:?} (put the behaviour in its component, or name the file here and in docs/architecture.md)"
    );
    let stale: Vec<&&str> = ENGINE_FILES
        .iter()
        .filter(|f| !found.iter().any(|g| g == *f))
        .collect();
    assert!(
        stale.is_empty(),
        "named files that no longer extend Engine: {stale:?} (drop them from the list)"
    );
}

/// Issue 42: the MCP and sandbox modules hold one session's part (a
/// `SessionMcp`, a `SessionSandbox`) and the endpoint's routing half; the
/// per-session code reaches only its own part and the hub it is given, so
/// neither may name the sessions table, the live loop or any other engine
/// module, only the shared vocabulary (`ids`, `time`).
#[test]
fn session_parts_name_only_the_vocabulary() {
    let g = graph();
    let allowed: BTreeSet<String> = ["ids", "time"].iter().map(|s| s.to_string()).collect();
    for part in ["mcp", "sandbox"] {
        let deps = g.get(part).unwrap_or_else(|| panic!("no module `{part}`"));
        let extra: Vec<&String> = deps.difference(&allowed).collect();
        assert!(
            extra.is_empty(),
            "`{part}` names {extra:?}: a session's part must not reach other modules"
        );
    }
}
