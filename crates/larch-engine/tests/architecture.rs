//! The engine's shape, checked on its source (ARCHITECTURE.md's invariants): no module
//! that defines a part names `Engine`, and the crate's modules import one another without
//! a cycle. A module's imports are the `crate::` and `super::` paths of its code outside
//! its test module; a module is a file, `foo/mod.rs` and `foo.rs` being `foo`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules that define the engine's parts, and what they share.
const PARTS: &[&str] = &[
    "arc",
    "arc::flight",
    "arc::install",
    "arc::sizing",
    "read",
    "l2",
    "l2::feed",
    "l2::read",
    "l2::rebuild",
    "l2::index",
    "l2::purge",
    "l2::uring",
    "txg",
    "txg::syncer",
    "txg::throttle",
    "txg::zil",
    "txg::partial",
    "txg::partial::table",
    "coherence",
    "volumes",
    "volumes::info",
    "run",
    "files",
    "system",
    "error",
    "lock",
    "stats",
    "tunables",
    "backing",
    "latency",
];

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/l2/mod.rs` → `l2`, `src/txg/partial/table.rs` → `txg::partial::table`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|c| c != "mod")
        .collect();
    match parts.join("::").as_str() {
        "lib" => "crate".to_string(),
        name => name.to_string(),
    }
}

/// The file's code outside its test module, comment lines dropped.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("read a source file");
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `prefix` in `code` (`crate::l2::index::X` → `l2::index::X`).
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .map(|(at, _)| {
            let rest = &code[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The longest module of `modules` that `path` starts with.
fn resolve(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn import_graph() -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let code: BTreeMap<String, String> = files
        .iter()
        .map(|f| (module_of(&src, f), code_of(f)))
        .collect();
    let modules: BTreeSet<String> = code.keys().cloned().collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &code {
        let mut to = BTreeSet::new();
        for path in paths_after(text, "crate::") {
            to.extend(resolve(&modules, path));
        }
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        for path in paths_after(text, "super::") {
            let full = if parent.is_empty() {
                path.to_string()
            } else {
                format!("{parent}::{path}")
            };
            to.extend(
                resolve(&modules, &full)
                    .or_else(|| Some(parent.to_string()).filter(|p| modules.contains(p))),
            );
        }
        to.remove(module);
        edges.insert(module.clone(), to);
    }
    (edges, code)
}

/// A cycle of `edges`, if there is one (depth-first search).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_import_one_another_without_a_cycle() {
    let (edges, _) = import_graph();
    assert!(edges.len() > 20, "found only {} modules", edges.len());
    assert!(
        edges["engine"].contains("txg") && edges["txg::syncer"].contains("l2"),
        "the graph misses known imports: {edges:?}"
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!("an import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn no_part_names_the_engine() {
    let (_, code) = import_graph();
    for part in PARTS {
        let text = code
            .get(*part)
            .unwrap_or_else(|| panic!("no module {part}: update PARTS"));
        let named = text.match_indices("Engine").any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + "Engine".len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !word(before) && !word(after)
        });
        assert!(!named, "the part {part} names Engine");
    }
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let edge = |a: &str, b: &[&str]| (a.to_string(), b.iter().map(|s| s.to_string()).collect());
    let edges: BTreeMap<String, BTreeSet<String>> = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &[]),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let edges: BTreeMap<String, BTreeSet<String>> =
        [edge("a", &["b"]), edge("b", &[]), edge("c", &["a", "b"])]
            .into_iter()
            .collect();
    assert_eq!(find_cycle(&edges), None);
}
