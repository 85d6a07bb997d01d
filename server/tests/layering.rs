//! The server's files form no import circle: each stands above what it
//! uses (ARCHITECTURE.md draws the layers). A file uses another when it
//! names an item through `crate::`, `super::` or `self::`, glob-imports
//! it, or (a `mod.rs` or `lib.rs`) names one of its own child modules.
//! Comments and a file's trailing `#[cfg(test)] mod tests` do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("" for the crate root, "broker::queue") → source.
type Sources = BTreeMap<String, (bool, String)>;

/// Reads every `.rs` file under `dir`, but test-only ones.
fn read_tree(root: &Path, dir: &Path, out: &mut Sources) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read the source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_tree(root, &path, out);
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || name == "tests.rs" || name == "main.rs" {
            continue;
        }
        let relative = path.strip_prefix(root).expect("under the root");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let is_mod = matches!(parts.last().map(String::as_str), Some("mod" | "lib"));
        if is_mod {
            parts.pop();
        }
        let source = std::fs::read_to_string(&path).expect("read a source file");
        out.insert(parts.join("::"), (is_mod, source));
    }
}

/// The source without comments and without a trailing test module.
fn code(source: &str) -> String {
    let body = match source.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &source[..at],
        None => source,
    };
    body.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The deepest module of `modules` that a path names, from module `from`.
fn resolve(modules: &Sources, from: &str, path: &[&str]) -> Option<String> {
    let mut base: Vec<&str> = from.split("::").filter(|p| !p.is_empty()).collect();
    let mut rest = path;
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"self") => rest = &rest[1..],
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut found = None;
    for n in 0..=rest.len() {
        let candidate: Vec<&str> = base.iter().chain(&rest[..n]).copied().collect();
        let name = candidate.join("::");
        if modules.contains_key(&name) {
            found = Some(name);
        }
    }
    found
}

/// The module a module is declared in; none for the crate root.
fn parent(module: &str) -> Option<&str> {
    match module.rsplit_once("::") {
        Some((parent, _)) => Some(parent),
        None if module.is_empty() => None,
        None => Some(""),
    }
}

/// Every file's uses of other files, by module path.
fn uses(modules: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut graph = BTreeMap::new();
    for (module, (is_mod, source)) in modules {
        let code = code(source);
        let mut to = BTreeSet::new();
        // Paths: crate::a::b, super::super::x, self::y, and the names
        // inside `use super::{a, b::c}`, one level deep.
        let tokens: Vec<&str> = code
            .split(|c: char| !(word(c) || c == ':' || c == '{' || c == ',' || c == '*'))
            .filter(|t| !t.is_empty())
            .collect();
        for token in tokens {
            let (head, group) = match token.split_once("::{") {
                Some((head, group)) => (head, Some(group)),
                None => (token, None),
            };
            let head: Vec<&str> = head.split("::").filter(|p| !p.is_empty()).collect();
            // A path, not `pub(crate)` or `pub(super)`.
            let path = head.len() > 1 || group.is_some();
            if !path || !matches!(head.first(), Some(&("crate" | "super" | "self"))) {
                continue;
            }
            let mut targets = vec![head.clone()];
            for item in group.unwrap_or("").split(',') {
                let first = item.split("::").next().unwrap_or("").trim_matches('{');
                if !first.is_empty() && first != "*" {
                    targets.push(head.iter().copied().chain([first]).collect());
                }
            }
            for path in targets {
                if let Some(target) = resolve(modules, module, &path) {
                    to.insert(target);
                }
            }
        }
        // A mod.rs naming a child module of its own: `child::item`.
        if *is_mod {
            for child in modules
                .keys()
                .filter(|m| parent(m) == Some(module.as_str()))
            {
                let name = child.rsplit("::").next().unwrap_or(child);
                let named = code
                    .match_indices(&format!("{name}::"))
                    .any(|(at, _)| !code[..at].ends_with(|c: char| word(c) || c == ':'));
                if named {
                    to.insert(child.clone());
                }
            }
        }
        to.remove(module);
        graph.insert(module.clone(), to);
    }
    graph
}

/// The circles of a graph: its strongly connected parts of two or more
/// files (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for u in w.graph.get(v).into_iter().flatten() {
            let u = u.as_str();
            if !w.index.contains_key(u) {
                visit(w, u);
                let low = w.low[v].min(w.low[u]);
                w.low.insert(v, low);
            } else if w.stack.contains(&u) {
                let low = w.low[v].min(w.index[u]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut part = Vec::new();
            while let Some(u) = w.stack.pop() {
                part.push(u.to_owned());
                if u == v {
                    break;
                }
            }
            if part.len() > 1 {
                part.sort();
                w.found.push(part);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

#[test]
fn the_servers_files_form_no_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = Sources::new();
    read_tree(&root, &root, &mut modules);
    assert!(modules.len() > 50, "found only {} files", modules.len());
    let graph = uses(&modules);
    let found = circles(&graph);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .map(|m| {
                    let to: Vec<&String> = graph[m].iter().filter(|t| c.contains(t)).collect();
                    format!("  {m} uses {to:?}")
                })
                .collect();
            edges.join("\n")
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", shown.join("\n\n"));
}

#[test]
fn a_circle_through_a_parent_and_its_child_is_found() {
    let mut modules = Sources::new();
    let file = |is_mod: bool, text: &str| (is_mod, text.to_owned());
    modules.insert(
        "".into(),
        file(true, "mod a;\nmod b;\npub(crate) struct R(pub(self) u8);\n"),
    );
    modules.insert(
        "a".into(),
        file(true, "mod child;\nuse child::Thing; // b::ignored\n"),
    );
    modules.insert("a::child".into(), file(false, "use super::{Other, x};\n"));
    modules.insert("b".into(), file(false, "use crate::a::child::*;\n"));
    let graph = uses(&modules);
    assert_eq!(graph["a::child"], BTreeSet::from(["a".to_owned()]));
    assert_eq!(graph["b"], BTreeSet::from(["a::child".to_owned()]));
    assert_eq!(
        graph[""],
        BTreeSet::from([]),
        "comments, declarations and visibilities"
    );
    assert_eq!(
        circles(&graph),
        vec![vec!["a".to_owned(), "a::child".into()]]
    );
}
