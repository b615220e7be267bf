//! Issues 13 and 37: the code keeps its shape. No module import cycles in `shared`,
//! `executor`, `executor/shell` (msc-shell), `executor/supervisor` or `gateway`: a module's
//! `crate::…` and `super::…` paths (outside comments; `super::` resolved from the file and
//! inline module it is written in) name the top-level modules it depends on, and that
//! graph must be acyclic, so each layer can be read, tested and moved on its own.

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

/// The module path of `file` under `src` (`docker/exec.rs` → `[docker, exec]`,
/// `docker/mod.rs` → `[docker]`, `lib.rs` and `main.rs` → `[]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        let root = parts.is_empty() && matches!(stem, "lib" | "main");
        if stem != "mod" && !root {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// The top-level modules one line of code names: `crate::x…`, and `super::…` resolved
/// from `here` (the module the line is in), so `super::super::x` in `a/b.rs` is `x`.
fn named_modules(code: &str, here: &[String]) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::`, `shared_crate::`, …
        }
        out.push(ident(&code[i + 7..]));
    }
    for (i, _) in code.match_indices("super::") {
        let before = &code[..i];
        if before.ends_with("super::") {
            continue; // counted from the first `super::` of the chain
        }
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &code[i..];
        let mut path: Vec<String> = here.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            path.pop();
            rest = r;
        }
        let next = ident(rest);
        // `super::x` in a top-level module names top-level `x`; deeper, it stays inside.
        match path.first() {
            Some(top) => out.push(top.clone()),
            None => out.push(next),
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// Module → the top-level modules it names with `crate::` or `super::`. Inline modules
/// (`mod tests { … }`, rustfmt's layout: closed by a `}` at the same indentation) count
/// as one level deeper for `super::`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let file_path = module_path(src, &f);
        let me = file_path
            .first()
            .cloned()
            .unwrap_or_else(|| "lib".to_owned());
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let deps = g.entry(me.clone()).or_default();
        // Open inline modules: their indentation and name.
        let mut inline: Vec<(usize, String)> = Vec::new();
        for line in text.lines() {
            let indent = line.len() - line.trim_start().len();
            if let Some((open, _)) = inline.last()
                && *open == indent
                && line.trim_start().starts_with('}')
            {
                inline.pop();
                continue;
            }
            let code = line.split("//").next().unwrap_or_default();
            let mut here = file_path.clone();
            here.extend(inline.iter().map(|(_, n)| n.clone()));
            for name in named_modules(code, &here) {
                if name != me {
                    deps.insert(name);
                }
            }
            let t = code.trim_start();
            let t = t.strip_prefix("pub ").unwrap_or(t);
            if let Some(rest) = t.strip_prefix("mod ")
                && t.trim_end().ends_with('{')
            {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                inline.push((indent, name));
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
fn super_paths_resolve_from_where_they_are_written() {
    let at = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        named_modules("use super::exec::run;", &at(&["builtins"])),
        ["exec"]
    );
    assert_eq!(
        named_modules("use super::Simple;", &at(&["exec", "simple"])),
        ["exec"]
    );
    assert_eq!(
        named_modules("use super::super::expand::x;", &at(&["exec", "simple"])),
        ["expand"]
    );
    assert_eq!(
        named_modules("use super::*;", &at(&["jobs", "tests"])),
        ["jobs"]
    );
    assert_eq!(
        named_modules("crate::a::b(); $crate::c; my_crate::d", &at(&["x"])),
        ["a"]
    );
    assert_eq!(
        module_path(Path::new("/s"), Path::new("/s/docker/mod.rs")),
        at(&["docker"])
    );
    assert_eq!(
        module_path(Path::new("/s"), Path::new("/s/main.rs")),
        at(&[])
    );
}

#[test]
fn issue_13_no_module_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in [
        "shared",
        "executor",
        "executor/shell",
        "executor/supervisor",
        "gateway",
    ] {
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

#[test]
fn issue_37_every_e2e_module_has_a_line_in_the_table_of_contents() {
    let main = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/main.rs");
    let text = std::fs::read_to_string(&main).unwrap_or_default();
    let modules: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 20, "no modules found in {}", main.display());
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| !text.contains(&format!("//! - `{m}`:")))
        .collect();
    assert!(
        missing.is_empty(),
        "e2e modules without a line in main.rs's table of contents: {missing:?}"
    );
}
