//! The small Rust reader behind the architecture checks: source text with comments, strings and
//! `#[cfg(test)]` items blanked (newlines kept, so line numbers stay true), tokens, the modules a
//! file names, and the length of each function.

use std::collections::{BTreeMap, BTreeSet};

/// `src` with comments, string and character literals replaced by spaces (newlines kept), so
/// nothing inside them reads as code and every line keeps its number.
pub(super) fn code_only(src: &str) -> String {
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
pub(super) fn without_test_items(code: &str) -> String {
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
// Paths
// ---------------------------------------------------------------------------------------------

/// The module paths that file `module` names: through `crate::…`, `super::…`, `self::…` (and
/// `use` groups under them), or a path that begins with one of its child modules. Each path
/// is cut to the longest prefix that is a known module, so `crate::a::Thing` names `["a"]`.
/// A re-export (`pub use child::Thing;`) names nothing: the file only republishes `Thing`, and
/// whoever names it through this file depends on this file, which is counted there.
pub(super) fn named_modules(
    code: &str,
    module: &[String],
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let toks = tokens(code);
    let mut named = BTreeSet::new();
    // `mod x { … }` blocks of this file around the current token, with their brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
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
                    named.extend(
                        paths
                            .iter()
                            .filter_map(|p| longest_known(p, known))
                            .filter(|m| m != module),
                    );
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

// ---------------------------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------------------------

/// `(line of its fn, name, lines)` of each function with a body in `code` (already blanked).
pub(super) fn function_lengths(code: &str) -> Vec<(usize, String, usize)> {
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

// ---------------------------------------------------------------------------------------------
// The reader's own checks
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
    let code = "use crate::{engine::Engine, slots::{self, Slot as S}};\n\
                fn f() { super::x(); state::Counters::new(); }";
    assert_eq!(names(code, &["output"], &k), ["", "engine", "output::state", "slots"]);
    assert_eq!(
        names("use super::Spool; fn g() { self::state::x() }", &["output"], &k),
        ["", "output::state"]
    );
    assert_eq!(
        names("fn f() { super::super::engine::go() }", &["output", "state"], &k),
        ["engine"]
    );
    // A re-export republishes; it is no import.
    assert!(
        names("pub use state::Counters;\npub(crate) use crate::slots::Slot;", &["output"], &k)
            .is_empty()
    );
    // A type's associated path or a method's turbofish is no module.
    assert!(
        names("fn f() { Vec::new(); x.collect::<Vec<_>>(); std::slots::x(); }", &["engine"], &k)
            .is_empty()
    );
}

#[test]
fn parser_skips_comments_strings_and_test_items() {
    let k = known(&[&[], &["a"], &["b"]]);
    let code = "// crate::a::x\n/* crate::a::y /* nested */ crate::a::z */\n\
                const S: &str = \"crate::a::q\";\nconst R: &str = r#\"crate::a::\"q\"#;\n\
                const C: char = '\"';\nfn f<'a>(x: &'a str) {}\n\
                #[cfg(test)]\nmod tests { use crate::a::T; }\nfn g() { crate::b::h() }";
    assert_eq!(names(code, &[], &k), ["b"]);
    // An inline module's `super` is the file's own module, not its parent.
    assert!(names("mod inner { use super::Thing; }", &["a"], &k).is_empty());
}

#[test]
fn function_length_runs_from_fn_to_its_closing_brace() {
    let code = "pub(crate) async fn two(\n    x: [u8; 4],\n) {\n    let s = \"}\";\n}\n\
                fn one() {}\ntrait T { fn decl(&self); }\n";
    // The `}` in the string is no brace, the `;` in `[u8; 4]` ends nothing, and a declaration
    // without a body is no function to measure.
    let found = function_lengths(&code_only(code));
    assert_eq!(found, [(1, "two".to_owned(), 5), (6, "one".to_owned(), 1)]);
}
