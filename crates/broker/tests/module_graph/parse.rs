//! Reads a crate's `src/` into its module graph: one node per file (`a/b.rs` and `a/b/mod.rs`
//! are module `a::b`; `lib.rs` is `""`), an edge for each other module the file's code names.
//! Comments, literals and `#[cfg(test)]` code are dropped first; files that only hold tests
//! (`tests.rs`, `…/tests/…`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the modules its file names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

pub fn module_graph(src: &Path) -> Graph {
    let mut files = BTreeMap::new();
    collect(src, src, &mut files);
    // Modules declared under `#[cfg(test)]` (`#[cfg(test)] mod sim;`) are test code, with
    // everything under them.
    let test_only: Vec<String> = files
        .iter()
        .flat_map(|(module, path)| {
            let text = std::fs::read_to_string(path).expect("readable source");
            test_modules(&strip(&text))
                .into_iter()
                .map(|child| {
                    if module.is_empty() {
                        child
                    } else {
                        format!("{module}::{child}")
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let is_test = |m: &str| {
        test_only
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    };
    files.retain(|module, _| !is_test(module));
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, path)| {
            let text = std::fs::read_to_string(path).expect("readable source");
            let code = drop_test_code(&strip(&text));
            let uses = names(&code, module, &modules)
                .into_iter()
                .filter(|m| m != module && !m.is_empty())
                .collect();
            (module.clone(), uses)
        })
        .collect()
}

fn collect(src: &Path, dir: &Path, files: &mut BTreeMap<String, std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                collect(src, &path, files);
            }
            continue;
        }
        let Some(rel) = path.strip_prefix(src).ok().and_then(|p| p.to_str()) else {
            continue;
        };
        let Some(rel) = rel.strip_suffix(".rs") else {
            continue;
        };
        let mut parts: Vec<&str> = rel.split('/').collect();
        if parts.last() == Some(&"tests") {
            continue;
        }
        if matches!(parts.last(), Some(&"mod") | Some(&"lib")) {
            parts.pop();
        }
        files.insert(parts.join("::"), path);
    }
}

/// The source with comments, string and char literals blanked out (lifetimes kept).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && is_raw_start(&chars, i) {
            i = skip_raw_string(&chars, i);
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && is_char_literal(&chars, i) {
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_raw_start(chars: &[char], i: usize) -> bool {
    let before_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    before_ok && chars.get(j) == Some(&'"')
}

fn skip_raw_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

/// `'x'` or `'\n'`-like, not a lifetime `'a`.
fn is_char_literal(chars: &[char], i: usize) -> bool {
    matches!(
        (chars.get(i + 1), chars.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The modules `code` declares under `#[cfg(test)]` with a file of their own (`mod x;`).
fn test_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        rest = &rest[at + "#[cfg(test)]".len()..];
        let item = rest.trim_start();
        let item = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item);
        if let Some(after) = item.strip_prefix("mod ") {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if after[name.len()..].trim_start().starts_with(';') {
                found.push(name);
            }
        }
    }
    found
}

/// The code without the items under `#[cfg(test)]` (a `mod … { … }`, a `mod …;`, a `fn`, an
/// `impl`): from the attribute to the end of the item's braces or semicolon.
fn drop_test_code(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices().skip("#[cfg(test)]".len()) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The modules `code` (of `module`) names, resolved to the longest existing module prefix:
/// paths from `crate`, `super` (any number of them), `self`, a child module's name, or a
/// module a `use` brought in by name (`use crate::a::b;` then `b::f()`).
fn names(code: &str, module: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let children: BTreeMap<String, String> = modules
        .iter()
        .filter_map(|m| {
            let rest = if module.is_empty() {
                Some(m.as_str())
            } else {
                m.strip_prefix(module)?.strip_prefix("::")
            };
            rest.filter(|r| !r.is_empty() && !r.contains("::"))
                .map(|r| (r.to_string(), m.clone()))
        })
        .collect();
    // Modules named whole by a path (a `use` of a module): their last segment is an alias.
    let mut aliases = children.clone();
    for path in paths(code, module, &children) {
        let path = path.strip_suffix("::self").unwrap_or(&path).to_string();
        if let (true, Some(last)) = (modules.contains(&path), path.rsplit("::").next()) {
            aliases.entry(last.to_string()).or_insert(path.clone());
        }
    }
    paths(code, module, &aliases)
        .iter()
        .filter_map(|path| longest_module(path, modules))
        .collect()
}

/// Every path in `code` that starts at `crate`, `super`, `self` or a name in `names`
/// (a module's local name → the module), made absolute.
fn paths(code: &str, module: &str, names: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]);
        if !starts_word || !is_ident(bytes[i]) {
            i += 1;
            continue;
        }
        let word_end = (i..bytes.len())
            .find(|&j| !is_ident(bytes[j]))
            .unwrap_or(bytes.len());
        let word = &code[i..word_end];
        let follows_path = code[word_end..].starts_with("::");
        let preceded_by_path = i >= 2 && &code[i - 2..i] == "::";
        if follows_path && !preceded_by_path {
            let base = match word {
                "crate" => Some(String::new()),
                "super" | "self" => Some(format!("{module}::{word}")),
                w => names.get(w).cloned(),
            };
            if let Some(base) = base {
                for path in use_tree(&code[word_end + 2..]) {
                    found.push(absolute(&format!("{base}::{path}")));
                }
            }
        }
        i = word_end;
    }
    found
}

/// A path with its `super` segments taken as steps up and `self` dropped (`a::b::super::c`
/// is `a::c`), and no empty segments.
fn absolute(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for segment in path.split("::") {
        match segment {
            "" | "self" => {}
            "super" => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    out.join("::")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths a use tree (or an expression path) starting at `s` names: `a::b`, `{a, b::c}`.
fn use_tree(s: &str) -> Vec<String> {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        let mut depth = 1;
        let mut end = inner.len();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        return split_top(&inner[..end])
            .into_iter()
            .flat_map(use_tree)
            .collect();
    }
    let mut path = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        path.push(&rest[..end]);
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(after) if after.trim_start().starts_with('{') => {
                let prefix = path.join("::");
                return use_tree(after)
                    .into_iter()
                    .map(|p| {
                        if p.is_empty() {
                            prefix.clone()
                        } else {
                            format!("{prefix}::{p}")
                        }
                    })
                    .collect();
            }
            Some(after) => rest = after,
            None => break,
        }
    }
    vec![path.join("::")]
}

fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(s[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn longest_module(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| *s != "self").collect();
    (0..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
}
