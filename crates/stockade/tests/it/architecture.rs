//! `docs/architecture.md` against the code. The document promises a layering — a table of the
//! crates, each on a layer, "no crate depends on one above it; no file imports from a file that
//! imports it back" — and size rules a reader relies on; this module checks each of them from the
//! repository's files, with plain std, so the promise cannot drift from the code unnoticed:
//!
//! - the workspace members of the root `Cargo.toml` are exactly the crates of the table;
//! - each crate's `[dependencies]` on workspace crates point to a lower layer only (a crate
//!   "beside" the layers may use any layered crate, and no layered crate may depend on it);
//! - inside each crate, the graph of which file names something of which other file has no cycle;
//! - no `.rs` file under `crates/*/src` is over 800 lines, no function outside `#[cfg(test)]`
//!   items over 100.
//!
//! The Rust "parser" here is deliberately small: comments, strings and `#[cfg(test)]` items are
//! blanked (newlines kept, so line numbers stay true), the rest is split into tokens, and paths
//! are read where they start (`crate::`, `super::`, `self::`, or a child module's name). Its own
//! tests at the end show what it reads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_FILE_LINES: usize = 800;
/// The longest a function outside `#[cfg(test)]` items may be, from its `fn` line to its `}`.
const MAX_FN_LINES: usize = 100;

/// The repository's root: this crate is `crates/stockade`.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The crate table of docs/architecture.md and the workspace's Cargo.toml files
// ---------------------------------------------------------------------------------------------

/// Where the document puts a crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// Layer N: may depend on crates of layers below N only.
    Level(u32),
    /// Beside the layers (tests, the bench harness): may use any layered crate, none uses it.
    Beside,
}

/// The rows of the first table under "## The crates" whose header names `crate` and `layer`.
fn documented_layers(doc: &str) -> BTreeMap<String, Layer> {
    let section = doc
        .split("\n## The crates")
        .nth(1)
        .expect("docs/architecture.md has a section \"## The crates\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rows = section.lines().filter(|l| l.trim_start().starts_with('|'));
    let header =
        rows.find(|l| cells(l).first().is_some_and(|c| c == "crate")).expect("a crate table");
    assert_eq!(
        cells(header).get(1).map(String::as_str),
        Some("layer"),
        "the crate table's second column is the layer: {header}"
    );
    let mut layers = BTreeMap::new();
    for row in rows.filter(|l| !l.contains("---")) {
        let cells = cells(row);
        let (Some(name), Some(layer)) = (cells.first(), cells.get(1)) else { continue };
        let name = name.trim_matches('`').to_owned();
        let layer = match layer.as_str() {
            "beside" => Layer::Beside,
            n => Layer::Level(n.parse().unwrap_or_else(|_| {
                panic!("layer of {name} is neither a number nor \"beside\": {n:?}")
            })),
        };
        assert!(layers.insert(name.clone(), layer).is_none(), "{name} is in the crate table twice");
    }
    layers
}

/// The cells of one Markdown table row, trimmed.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.split('|').map(|c| c.trim().to_owned()).collect()
}

/// `[section]` → its lines, in order, for a small TOML file (what Cargo.toml files here use).
fn toml_sections(text: &str) -> Vec<(String, Vec<String>)> {
    let mut sections = vec![(String::new(), Vec::new())];
    for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((header.trim_matches(|c| c == '[' || c == ']').to_owned(), Vec::new()));
        } else if !line.is_empty() {
            sections.last_mut().expect("one section at least").1.push(line.to_owned());
        }
    }
    sections
}

/// The workspace members of the root Cargo.toml: package name → its directory.
fn workspace_members() -> BTreeMap<String, PathBuf> {
    let text = read(&repo().join("Cargo.toml"));
    let start = text.find("members").expect("the root Cargo.toml lists members");
    let list = &text[start..];
    let list =
        &list[list.find('[').expect("members = [")..list.find(']').expect("members = [...]")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(|dir| {
            let dir = repo().join(dir);
            (package_name(&read(&dir.join("Cargo.toml"))), dir)
        })
        .collect()
}

fn package_name(manifest: &str) -> String {
    let sections = toml_sections(manifest);
    let package = sections.iter().find(|(h, _)| h == "package").expect("a [package] section");
    package
        .1
        .iter()
        .find_map(|l| {
            l.strip_prefix("name")
                .map(|v| v.trim_start().trim_start_matches('=').trim().trim_matches('"').to_owned())
        })
        .expect("a package name")
}

/// The names a manifest depends on in `[dependencies]`, `[build-dependencies]` and their
/// `[target.….dependencies]` forms; dev-dependencies are the tests' business and left out.
fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (header, lines) in toml_sections(manifest) {
        let last = header.rsplit('.').next().unwrap_or(&header);
        if header.starts_with("dependencies.") {
            names.insert(header["dependencies.".len()..].to_owned());
        } else if last == "dependencies" || last == "build-dependencies" {
            for line in lines {
                let key = line.split(['=', '.']).next().unwrap_or("").trim().trim_matches('"');
                names.insert(key.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_crate_table_names_every_workspace_member_once() {
    let layers = documented_layers(&read(&repo().join("docs/architecture.md")));
    let members = workspace_members();
    let documented: BTreeSet<_> = layers.keys().cloned().collect();
    let built: BTreeSet<_> = members.keys().cloned().collect();
    let missing: Vec<_> = built.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&built).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's crate table and the workspace members differ:\n  members not in the table: {missing:?}\n  table rows that are no member: {extra:?}"
    );
}

#[test]
fn every_dependency_points_down_the_layers() {
    let layers = documented_layers(&read(&repo().join("docs/architecture.md")));
    let mut offenders = Vec::new();
    for (name, dir) in workspace_members() {
        let Some(&layer) = layers.get(&name) else { continue }; // reported by the table test
        let deps = normal_dependencies(&read(&dir.join("Cargo.toml")));
        for dep in deps.iter().filter(|d| layers.contains_key(*d)) {
            let to = layers[dep];
            let allowed = match (layer, to) {
                (Layer::Level(from), Layer::Level(to)) => to < from,
                (Layer::Level(_), Layer::Beside) => false,
                (Layer::Beside, _) => true,
            };
            if !allowed {
                offenders.push(format!("{name} ({layer:?}) depends on {dep} ({to:?})"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "dependencies that do not point to a lower layer:\n  {}",
        offenders.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Source text: comments, strings and test items blanked; tokens
// ---------------------------------------------------------------------------------------------

/// `src` with comments, string and character literals replaced by spaces (newlines kept), so
/// nothing inside them reads as code and every line keeps its number.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for ch in &mut out[from..to.min(c.len())] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let ident = |i: usize| i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        let end = if c[i] == '/' && next == Some('/') {
            c[i..].iter().position(|&ch| ch == '\n').map_or(c.len(), |p| i + p)
        } else if c[i] == '/' && next == Some('*') {
            block_comment_end(&c, i)
        } else if c[i] == '"' {
            quoted_end(&c, i + 1, '"')
        } else if (c[i] == 'r' || c[i] == 'b' || c[i] == 'c')
            && !ident(i)
            && raw_string_start(&c, i).is_some()
        {
            raw_string_start(&c, i).expect("checked")
        } else if c[i] == '\'' && char_literal_end(&c, i).is_some() {
            char_literal_end(&c, i).expect("checked")
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end.max(i + 1);
    }
    out.into_iter().collect()
}

/// The index after a (nested) `/* … */` comment starting at `i`.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i + 1 < c.len() {
        if c[i] == '/' && c[i + 1] == '*' {
            depth += 1;
            i += 2;
        } else if c[i] == '*' && c[i + 1] == '/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    c.len()
}

/// The index after the closing `close` of a literal whose content starts at `i` (`\` escapes).
fn quoted_end(c: &[char], mut i: usize, close: char) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            ch if ch == close => return i + 1,
            _ => i += 1,
        }
    }
    c.len()
}

/// For `r"…"`, `r#"…"#`, `b"…"`, `br#"…"#`, `c"…"` starting at `i`: the index after it.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if c[j] == 'b' || c[j] == 'c' {
        j += 1;
    }
    let raw = c.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = c[j.min(c.len())..].iter().take_while(|&&ch| ch == '#').count();
    if j == i || c.get(j + hashes) != Some(&'"') || (!raw && hashes > 0) {
        return None;
    }
    if !raw {
        return Some(quoted_end(c, j + 1, '"'));
    }
    let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let body = j + hashes + 1;
    Some(
        (body..c.len())
            .find(|&k| c[k..].starts_with(&closing))
            .map_or(c.len(), |k| k + closing.len()),
    )
}

/// For a character literal (`'x'`, `'\n'`, `'\u{1F600}'`) at `i`: the index after it; `None` for
/// a lifetime or a label (`'a`, `'outer:`).
fn char_literal_end(c: &[char], i: usize) -> Option<usize> {
    match (c.get(i + 1), c.get(i + 2)) {
        (Some('\\'), _) => Some(quoted_end(c, i + 1, '\'')),
        (Some(_), Some('\'')) => Some(i + 3),
        _ => None,
    }
}

/// `code` (already [`code_only`]) with every item under `#[cfg(test)]` blanked: from the
/// attribute to the `}` that closes the item's first `{` (or to its `;`).
fn without_test_items(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= c.len() {
        if c[i..].starts_with(&marker) {
            let end = item_end(&c, i + marker.len());
            for ch in &mut c[i..end] {
                if *ch != '\n' {
                    *ch = ' ';
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    c.into_iter().collect()
}

/// The index after the item that starts at `i`: its first `;` outside brackets, or the `}`
/// matching its first `{`.
fn item_end(c: &[char], i: usize) -> usize {
    let mut nesting = 0i32; // ( and [
    let mut braces = 0i32;
    for (k, &ch) in c.iter().enumerate().skip(i) {
        match ch {
            '(' | '[' => nesting += 1,
            ')' | ']' => nesting -= 1,
            ';' if nesting == 0 && braces == 0 => return k + 1,
            '{' => braces += 1,
            '}' => {
                braces -= 1;
                if braces == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    c.len()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Open,
    Close,
    Comma,
    Other(char),
}

fn tokens(code: &str) -> Vec<Tok> {
    let c: Vec<char> = code.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_alphabetic() || ch == '_' {
            let len = c[i..].iter().take_while(|ch| ch.is_alphanumeric() || **ch == '_').count();
            toks.push(Tok::Ident(c[i..i + len].iter().collect()));
            i += len;
            continue;
        }
        toks.push(match ch {
            ':' if c.get(i + 1) == Some(&':') => {
                i += 1;
                Tok::Path
            }
            '{' => Tok::Open,
            '}' => Tok::Close,
            ',' => Tok::Comma,
            ch if ch.is_whitespace() => {
                i += 1;
                continue;
            }
            ch => Tok::Other(ch),
        });
        i += 1;
    }
    toks
}

// ---------------------------------------------------------------------------------------------
// The file-level import graph of one crate
// ---------------------------------------------------------------------------------------------

/// Every `.rs` file under `src`, by module path (`lib.rs`/`main.rs` → `[]`, `a/mod.rs` and
/// `a.rs` → `["a"]`, `a/b.rs` → `["a", "b"]`).
fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut files = BTreeMap::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).expect("under src");
        let mut path: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let last = path.pop().expect("a file name");
        match last.trim_end_matches(".rs") {
            "mod" => {}
            "lib" | "main" if path.is_empty() => {}
            stem => path.push(stem.to_owned()),
        }
        files.insert(path, file);
    }
    files
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The module paths that file `module` names: through `crate::…`, `super::…`, `self::…` (and
/// `use` groups under them), or a path that begins with one of its child modules. Each path
/// is cut to the longest prefix that is a known module, so `crate::a::Thing` names `["a"]`.
/// A re-export (`pub use child::Thing;`) names nothing: the file only republishes `Thing`, and
/// whoever names it through this file depends on this file, which is counted there.
fn named_modules(
    code: &str,
    module: &[String],
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let toks = tokens(code);
    let mut named = BTreeSet::new();
    let mut inline: Vec<(String, usize)> = Vec::new(); // `mod x { … }` in this file, with its depth
    let mut depth = 0usize;
    let mut reexport = false; // inside `pub use …;`, which republishes and imports nothing
    let mut i = 0;
    while i < toks.len() {
        let current: Vec<String> =
            module.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).collect();
        match &toks[i] {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(u) if u == "use" => reexport = is_public(&toks, i),
            Tok::Other(';') => reexport = false,
            Tok::Ident(m) if m == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(first) if toks.get(i + 1) == Some(&Tok::Path) && starts_path(&toks, i) => {
                if let Some((base, next)) = path_base(&toks, i, first, &current, known) {
                    let mut paths = Vec::new();
                    i = use_tree(&toks, next, base, &mut paths);
                    if reexport {
                        continue;
                    }
                    named.extend(paths.iter().filter_map(|p| longest_known(p, known)).filter(|m| m != module));
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    named
}

/// Whether the item keyword at `i` is `pub` (`pub use`, `pub(crate) use`, `pub(super) use`).
fn is_public(toks: &[Tok], i: usize) -> bool {
    let pub_ = Tok::Ident("pub".into());
    match i.checked_sub(1).map(|j| &toks[j]) {
        Some(t) if *t == pub_ => true,
        Some(Tok::Other(')')) => i.checked_sub(4).is_some_and(|j| toks[j] == pub_),
        _ => false,
    }
}

/// Whether the identifier at `i` begins a path (it does not follow `::`, `.`, or `pub(in`).
fn starts_path(toks: &[Tok], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).and_then(|j| toks.get(j));
    let after_in =
        before(1) == Some(&Tok::Ident("in".into())) && before(2) == Some(&Tok::Other('('));
    !matches!(before(1), Some(Tok::Path | Tok::Other('.'))) && !after_in
}

/// The module a path starting at `toks[i]` (= `first`, followed by `::`) is relative to, and
/// where the rest of it starts; `None` for paths into other crates, types and the like.
fn path_base(
    toks: &[Tok],
    mut i: usize,
    first: &str,
    current: &[String],
    known: &BTreeSet<Vec<String>>,
) -> Option<(Vec<String>, usize)> {
    match first {
        "crate" => Some((Vec::new(), i + 2)),
        "self" => Some((current.to_vec(), i + 2)),
        "super" => {
            let mut base = current.to_vec();
            while toks.get(i) == Some(&Tok::Ident("super".into()))
                && toks.get(i + 1) == Some(&Tok::Path)
            {
                base.pop();
                i += 2;
            }
            Some((base, i))
        }
        child => {
            let mut path = current.to_vec();
            path.push(child.to_owned());
            known.contains(&path).then_some((current.to_vec(), i))
        }
    }
}

/// Reads the path or `use` tree at `toks[i]` under `prefix` into `out` (one full path per leaf;
/// `self` in a group names the prefix itself); returns the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match toks.get(i) {
            Some(Tok::Ident(segment)) => {
                if segment != "self" {
                    path.push(segment.clone());
                }
                i += 1;
                if toks.get(i) == Some(&Tok::Path) {
                    i += 1;
                    continue;
                }
            }
            Some(Tok::Open) => {
                i += 1;
                while !matches!(toks.get(i), Some(Tok::Close) | None) {
                    i = use_tree(toks, i, path.clone(), out);
                    if toks.get(i) == Some(&Tok::Ident("as".into())) {
                        i += 2;
                    }
                    if toks.get(i) == Some(&Tok::Comma) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => {}
        }
        out.push(path);
        return i;
    }
}

fn longest_known(path: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains(p))
}

/// File → the files it names, for the crate whose sources are in `src` (paths relative to the
/// repository, for messages).
///
/// The crate root (`lib.rs`, `main.rs`) is left out of the graph: it is the crate's module tree
/// and public face — it declares every module, re-exports what others may name, and (in a
/// binary) hands control to them — so every file may use what it defines, and what it names of
/// its modules is wiring, not an import between peers. The circles this check is about are
/// between the files that do the work.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = module_files(src);
    let known: BTreeSet<_> = files.keys().cloned().collect();
    let name = |p: &Path| p.strip_prefix(repo()).unwrap_or(p).display().to_string();
    let mut graph = BTreeMap::new();
    for (module, file) in &files {
        let code = without_test_items(&code_only(&read(file)));
        if module.is_empty() {
            continue; // the crate root: see the comment on `import_graph`
        }
        let targets = named_modules(&code, module, &known)
            .into_iter()
            .filter(|m| !m.is_empty())
            .map(|m| name(&files[&m]))
            .collect();
        graph.insert(name(file), targets);
    }
    graph
}

/// Every strongly connected group of more than one file, each shown as one cycle through it
/// (`a → b → a`) followed by the group's other files if there are more.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for start in graph.keys() {
        if seen.contains(start) {
            continue;
        }
        let group: BTreeSet<String> =
            reachable(graph, start).intersection(&reaching(graph, start)).cloned().collect();
        seen.extend(group.iter().cloned());
        if group.len() < 2 {
            continue;
        }
        let mut cycle = shortest_cycle(graph, start);
        cycle.push(start.clone());
        let mut line = cycle.join(" → ");
        let rest: Vec<_> = group.iter().filter(|f| !cycle.contains(f)).cloned().collect();
        if !rest.is_empty() {
            line.push_str(&format!("\n      (in the same circle: {})", rest.join(", ")));
        }
        found.push(line);
    }
    found
}

fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::from([start.to_owned()]);
    let mut queue = VecDeque::from([start.to_owned()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(&node).into_iter().flatten() {
            if seen.insert(next.clone()) {
                queue.push_back(next.clone());
            }
        }
    }
    seen
}

fn reaching(graph: &BTreeMap<String, BTreeSet<String>>, target: &str) -> BTreeSet<String> {
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    reachable(&reversed, target)
}

/// The files of a shortest cycle from `start` back to it (breadth first), `start` first.
fn shortest_cycle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Vec<String> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([start.to_owned()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut path = vec![node.clone()];
                while let Some(prev) = came_from.get(path.last().expect("non-empty")) {
                    path.push(prev.clone());
                }
                path.reverse();
                return path;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    vec![start.to_owned()]
}

#[test]
fn no_file_imports_from_a_file_that_imports_it_back() {
    let mut found = Vec::new();
    for (name, dir) in workspace_members() {
        for cycle in cycles(&import_graph(&dir.join("src"))) {
            found.push(format!("{name}: {cycle}"));
        }
    }
    assert!(
        found.is_empty(),
        "import circles between files ({}):\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

/// Every `crates/*/src` directory.
fn source_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<_> = fs::read_dir(repo().join("crates"))
        .expect("crates/ is readable")
        .filter_map(Result::ok)
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn relative(path: &Path) -> String {
    let root = repo();
    path.strip_prefix(&root).unwrap_or(path).display().to_string()
}

#[test]
fn no_source_file_is_over_800_lines() {
    let mut offenders = Vec::new();
    for file in source_dirs().iter().flat_map(|d| rust_files(d)) {
        let lines = read(&file).lines().count();
        if lines > MAX_FILE_LINES {
            offenders.push(format!("{}: {lines} lines", relative(&file)));
        }
    }
    assert!(
        offenders.is_empty(),
        "files over {MAX_FILE_LINES} lines:\n  {}",
        offenders.join("\n  ")
    );
}

/// `(line of its fn, name, lines)` of each function with a body in `code` (already blanked).
fn function_lengths(code: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let offsets: Vec<usize> =
        lines.iter().scan(0, |at, l| Some(std::mem::replace(at, *at + l.len() + 1))).collect();
    let chars: Vec<char> = code.chars().collect();
    let bytes_to_char: BTreeMap<usize, usize> =
        code.char_indices().enumerate().map(|(n, (b, _))| (b, n)).collect();
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let start = bytes_to_char[&(offsets[n] + line.find("fn ").expect("an fn line"))];
        let end = item_end(&chars, start);
        if chars[..end].last() != Some(&'}') {
            continue; // a declaration without a body
        }
        let end_line = chars[..end].iter().filter(|&&c| c == '\n').count();
        found.push((n + 1, name, end_line - n + 1));
    }
    found
}

/// The function's name if `line` begins one (`pub(crate) async fn name…`).
fn fn_name(line: &str) -> Option<String> {
    const QUALIFIERS: [&str; 7] = ["pub", "const", "async", "unsafe", "extern", "default", "safe"];
    let mut words =
        line.split_whitespace().skip_while(|w| QUALIFIERS.contains(w) || w.starts_with("pub("));
    (words.next() == Some("fn"))
        .then(|| words.next())
        .flatten()
        .map(|w| w.split(['(', '<']).next().unwrap_or(w).to_owned())
}

#[test]
fn no_function_outside_tests_is_over_100_lines() {
    let mut offenders = Vec::new();
    for file in source_dirs().iter().flat_map(|d| rust_files(d)) {
        let code = without_test_items(&code_only(&read(&file)));
        for (line, name, len) in function_lengths(&code) {
            if len > MAX_FN_LINES {
                offenders.push(format!("{}:{line} fn {name}: {len} lines", relative(&file)));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n  {}",
        offenders.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// The parser's own checks
// ---------------------------------------------------------------------------------------------

fn known(paths: &[&[&str]]) -> BTreeSet<Vec<String>> {
    paths.iter().map(|p| p.iter().map(|s| s.to_string()).collect()).collect()
}

fn names(code: &str, module: &[&str], known: &BTreeSet<Vec<String>>) -> Vec<String> {
    let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
    let code = without_test_items(&code_only(code));
    named_modules(&code, &module, known).into_iter().map(|m| m.join("::")).collect()
}

#[test]
fn parser_reads_crate_super_self_and_child_paths() {
    let k = known(&[&[], &["output"], &["output", "state"], &["slots"], &["engine"]]);
    let code = "use crate::{engine::Engine, slots::{self, Slot as S}};\nfn f() { super::x(); state::Counters::new(); }";
    assert_eq!(names(code, &["output"], &k), ["", "engine", "output::state", "slots"]);
    assert_eq!(
        names("use super::Spool; fn g() { self::state::x() }", &["output", "state"], &k),
        ["output", "output::state"]
    );
    // A re-export republishes; it is no import.
    assert!(names("pub use state::Counters;\npub(crate) use crate::slots::Slot;", &["output"], &k).is_empty());
    // A type's associated path or a method's turbofish is no module.
    assert!(
        names("fn f() { Vec::new(); x.collect::<Vec<_>>(); std::slots::x(); }", &["engine"], &k)
            .is_empty()
    );
}

#[test]
fn parser_skips_comments_strings_and_test_items() {
    let k = known(&[&[], &["a"], &["b"]]);
    let code = "// crate::a::x\n/* crate::a::y /* nested */ crate::a::z */\nconst S: &str = \"crate::a::q\";\n\
                const R: &str = r#\"crate::a::\"q\"#;\nconst C: char = '\"';\nfn f<'a>(x: &'a str) {}\n\
                #[cfg(test)]\nmod tests { use crate::a::T; }\nfn g() { crate::b::h() }";
    assert_eq!(names(code, &[], &k), ["b"]);
    // An inline module's `super` is the file's own module, not its parent.
    assert!(names("mod inner { use super::Thing; }", &["a"], &k).is_empty());
}

#[test]
fn parser_finds_every_file_of_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("engine.rs", vec!["others.rs"]),
        ("others.rs", vec!["recovery.rs"]),
        ("recovery.rs", vec!["retention.rs", "lib.rs"]),
        ("retention.rs", vec!["engine.rs"]),
        ("lib.rs", vec![]),
    ]
    .into_iter()
    .map(|(f, t)| (f.to_owned(), t.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), ["engine.rs → others.rs → recovery.rs → retention.rs → engine.rs"]);
}

#[test]
fn function_length_runs_from_fn_to_its_closing_brace() {
    let code = "pub(crate) async fn two(\n    x: [u8; 4],\n) {\n    let s = \"}\";\n}\nfn one() {}\ntrait T { fn decl(&self); }\n";
    let code = code_only(code);
    let found: Vec<_> =
        function_lengths(&code).into_iter().map(|(line, name, len)| (line, name, len)).collect();
    assert_eq!(found, [(1, "two".to_owned(), 5), (6, "one".to_owned(), 1)]);
}
