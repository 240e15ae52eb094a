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
//! are read where they start (`crate::`, `super::`, `self::`, or a child module's name). It is in
//! `architecture/source.rs`, whose own tests show what it reads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

mod source;

use source::{code_only, function_lengths, named_modules, without_test_items};

/// The longest a source file may be.
const MAX_FILE_LINES: usize = 800;
/// The longest a function outside `#[cfg(test)]` items may be, from its `fn` line to its `}`.
const MAX_FN_LINES: usize = 100;

/// The repository's root: this crate is `crates/stockade`.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `path` as the repository names it (`crates/…`), for messages.
fn relative(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap_or(path).display().to_string()
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

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layer::Level(n) => write!(f, "layer {n}"),
            Layer::Beside => f.write_str("beside the layers"),
        }
    }
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
    let start = text.find("\nmembers").expect("the root Cargo.toml lists members");
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
        if let Some(name) = header.strip_prefix("dependencies.") {
            names.insert(name.to_owned());
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
        "docs/architecture.md's crate table and the workspace members differ:\n  \
         members not in the table: {missing:?}\n  table rows that are no member: {extra:?}"
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
                offenders.push(format!("{name} ({layer}) depends on {dep} ({to})"));
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
    let mut graph = BTreeMap::new();
    for (module, file) in files.iter().filter(|(module, _)| !module.is_empty()) {
        let code = without_test_items(&code_only(&read(file)));
        let targets = named_modules(&code, module, &known)
            .into_iter()
            .filter(|m| !m.is_empty())
            .map(|m| relative(&files[&m]))
            .collect();
        graph.insert(relative(file), targets);
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

/// Fails listing every offender `offenders_of` finds in any source file, under `what`.
fn assert_no_offender(what: &str, offenders_of: impl Fn(&Path, &str) -> Vec<String>) {
    let offenders: Vec<String> = source_dirs()
        .iter()
        .flat_map(|d| rust_files(d))
        .flat_map(|file| offenders_of(&file, &read(&file)))
        .collect();
    assert!(offenders.is_empty(), "{what}:\n  {}", offenders.join("\n  "));
}

#[test]
fn no_source_file_is_over_800_lines() {
    assert_no_offender(&format!("files over {MAX_FILE_LINES} lines"), |file, text| {
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            vec![format!("{}: {lines} lines", relative(file))]
        } else {
            vec![]
        }
    });
}

#[test]
fn no_function_outside_tests_is_over_100_lines() {
    assert_no_offender(&format!("functions over {MAX_FN_LINES} lines"), |file, text| {
        let code = without_test_items(&code_only(text));
        function_lengths(&code)
            .into_iter()
            .filter(|(_, _, len)| *len > MAX_FN_LINES)
            .map(|(line, name, len)| format!("{}:{line} fn {name}: {len} lines", relative(file)))
            .collect()
    });
}

// ---------------------------------------------------------------------------------------------
// The circle finder's own check
// ---------------------------------------------------------------------------------------------

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
    let circle = "engine.rs → others.rs → recovery.rs → retention.rs → engine.rs";
    assert_eq!(cycles(&graph), [circle]);
}
