//! The shape of the code, checked: no two files of `core` or `actors`
//! need each other, directly or through others (see the book's
//! Architecture chapter, The shape of the code).
//!
//! A file *needs* another when it names the other's module by a path:
//! `crate::a::b` or `super::…`, in a `use` or inline (comments and the
//! file's `#[cfg(test)] mod tests` excluded). A parent's `mod child;` and
//! the bare paths by which it reaches its own children are not counted:
//! a module's children are part of it. The cycles are the strongly
//! connected components of more than one file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["master", "state"]`; the crate root is empty).
type Module = Vec<String>;

/// Every `.rs` file under `root`, by the module it defines.
fn modules(root: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().with_extension("");
                let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into()).collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    m.pop();
                }
                out.insert(m, path);
            }
        }
    }
    out
}

/// The source without comments and without a trailing test module.
fn code(path: &Path) -> String {
    let src = std::fs::read_to_string(path).unwrap();
    let src = match src.find("#[cfg(test)]\nmod tests") {
        Some(i) => &src[..i],
        None => &src[..],
    };
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `crate::…` and `super::…` named in `code`, each as its
/// segments after the keyword (a `{a, b::c}` group gives one path each).
fn paths(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    for kw in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(kw) {
            let start = at + i;
            at = start + kw.len();
            let before = code[..start].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[at..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let mut segs: Vec<String> = rest[..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if kw == "super::" {
                segs.insert(0, "super".into());
            }
            if rest[end..].starts_with('{') {
                let close = rest[end..].find('}').map_or(rest.len(), |c| end + c);
                for item in rest[end + 1..close].split(',') {
                    let head = item.trim().split("::").next().unwrap_or("").trim();
                    if !head.is_empty() {
                        let mut p = segs.clone();
                        p.push(head.into());
                        out.push((kw == "crate::", p));
                    }
                }
            } else {
                out.push((kw == "crate::", segs));
            }
        }
    }
    out
}

/// The files each file needs.
fn needs(root: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules(root);
    let mut graph = BTreeMap::new();
    for (m, path) in &files {
        let mut to = BTreeSet::new();
        for (from_root, segs) in paths(&code(path)) {
            let mut full: Module = if from_root { Vec::new() } else { m.clone() };
            let mut segs = segs.as_slice();
            if !from_root {
                // `super` from `a/b.rs` (module a::b) is `a`.
                while let Some(("super", rest)) = segs.split_first().map(|(h, r)| (h.as_str(), r)) {
                    full.pop();
                    segs = rest;
                }
            }
            full.extend(segs.iter().cloned());
            // The longest prefix that is a file of its own.
            let target = (1..=full.len())
                .rev()
                .map(|k| full[..k].to_vec())
                .find(|p| files.contains_key(p));
            if let Some(t) = target.filter(|t| t != m) {
                to.insert(t);
            }
        }
        graph.insert(m.clone(), to);
    }
    graph
}

/// The strongly connected components of more than one file.
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    // Two files are in one component when each reaches the other.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<_, _> = graph.keys().map(|m| (m.clone(), reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if done.contains(m) {
            continue;
        }
        let comp: Vec<Module> = graph
            .keys()
            .filter(|n| *n == m || (reaches[m].contains(*n) && reaches[*n].contains(m)))
            .cloned()
            .collect();
        done.extend(comp.iter().cloned());
        if comp.len() > 1 {
            out.push(comp.iter().map(|c| c.join("/")).collect());
        }
    }
    out
}

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn no_two_files_of_the_runtime_need_each_other() {
    let graph = needs(&crate_dir("actors"));
    assert!(graph.len() > 50, "actors has {} files?", graph.len());
    assert_eq!(cycles(&graph), Vec::<Vec<String>>::new());
}

#[test]
fn no_two_files_of_the_core_need_each_other() {
    let graph = needs(&crate_dir("core"));
    assert!(graph.len() > 30, "core has {} files?", graph.len());
    assert_eq!(cycles(&graph), Vec::<Vec<String>>::new());
}

#[test]
fn the_rule_finds_a_cycle_where_there_is_one() {
    let dir = std::env::temp_dir().join(format!("taskfold-house-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("m")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a; mod b; mod m;").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::B;\npub struct A;").unwrap();
    std::fs::write(dir.join("b.rs"), "pub struct B(crate::a::A);").unwrap();
    std::fs::write(dir.join("m/mod.rs"), "mod x; mod y; pub struct M;").unwrap();
    std::fs::write(dir.join("m/x.rs"), "use super::{y::Y, M};\npub struct X;").unwrap();
    std::fs::write(dir.join("m/y.rs"), "// crate::m::x::X\npub struct Y;").unwrap();
    let found = cycles(&needs(&dir));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, vec![vec!["a".to_string(), "b".to_string()]]);
}
