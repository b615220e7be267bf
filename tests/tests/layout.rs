//! Issue 13: the code keeps its shape. No module import cycles in `shared`, `executor`,
//! `executor/shell` (msc-shell) or `gateway`: a module's `crate::…` paths (outside comments)
//! name the top-level modules it depends on, and that graph must be acyclic, so each layer
//! can be read, tested and moved on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module of `file` under `src` (`docker/exec.rs` → `docker`, `lib.rs` → `lib`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    first.unwrap_or_default().trim_end_matches(".rs").to_owned()
}

/// Module → the top-level modules it names with `crate::`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let me = top_module(src, &f);
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let deps = g.entry(me.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue; // `$crate::`, `shared_crate::`, …
                }
                let name: String = code[i + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != me {
                    deps.insert(name);
                }
            }
        }
    }
    g
}

/// A cycle in `g`, if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn cycle_detection_works() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn issue_13_no_module_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["shared", "executor", "executor/shell", "gateway"] {
        let src = root.join(krate).join("src");
        let g = graph(&src);
        assert!(
            g.len() > 3,
            "{krate}: no modules found under {}",
            src.display()
        );
        if let Some(c) = cycle(&g) {
            panic!("{krate}: modules import each other: {}", c.join(" -> "));
        }
    }
}
