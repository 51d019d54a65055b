//! Names and limits a client can see are defined once, in `tinymq_protocol::names`
//! (ARCHITECTURE.md, "Invariants"). This test reads every workspace crate's sources
//! (`crates/*/src`, `crates/*/tests`) and fails when a constant that module owns is defined
//! anywhere else, or when the name alphabet `[A-Za-z0-9._-]` is spelled out as code again
//! (a sign of a copied name check). Re-exports (`pub use … as …`) are fine: they are not copies.

use std::path::{Path, PathBuf};

/// The module that owns the names and limits.
const OWNER: &str = "crates/protocol/src/names.rs";

/// Constants only the owner may define (old names of removed copies included, so that they
/// do not come back under the name they had).
const OWNED: &[&str] = &[
    "TOPIC_NAME_BYTES_MAX",
    "INTERNAL_TOPIC_PREFIX",
    "GROUP_ID_BYTES_MAX",
    "MEMBER_ID_BYTES_MAX",
    "ROUTE_NAME_BYTES_MAX",
    "USER_NAME_BYTES_MAX",
    "ACL_RESOURCE_NAME_BYTES_MAX",
    "TOPIC_PARTITIONS_MIN",
    "TOPIC_PARTITIONS_MAX",
    "REPLICATION_FACTOR_MIN",
    "REPLICATION_FACTOR_MAX",
    "TOPIC_SEGMENT_BYTES_MIN",
    "TOPIC_SEGMENT_BYTES_MAX",
    "TOPIC_MESSAGE_BYTES_MIN",
    "TOPIC_MESSAGE_BYTES_MAX",
    "TOPIC_MESSAGE_BYTES_MAX_LIMIT",
    "MESSAGE_BYTES_MAX_LIMIT",
    "DEAD_LETTER_TOPIC_SUFFIX",
    "SHARE_LOCK_MS_DEFAULT",
    "SHARE_LOCK_MS_MAX",
    "LOCK_MS_MAX",
    "SHARE_FETCH_RECORDS_MAX",
    "MAX_RECORDS_MAX",
];

/// Any constant whose name contains one of these is the owner's too.
const OWNED_FRAGMENTS: &[&str] = &["MAX_DELIVERY_ATTEMPTS"];

/// Code spellings of the name alphabet (a hand-written name check).
const ALPHABET_SPELLINGS: &[&str] = &["b'.' | b'_' | b'-'", "b\"._-\"", "'.' | '_' | '-'"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The identifier after `const ` on this line, if it defines a constant.
fn const_defined(line: &str) -> Option<&str> {
    let code = line.split("//").next().unwrap_or("");
    let at = code.find("const ")?;
    // `const fn` and `const _` are not constant definitions of a name.
    let rest = &code[at + "const ".len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let after = rest[end..].trim_start();
    (!name.is_empty() && name != "_" && after.starts_with(':')).then_some(name)
}

#[test]
fn names_and_limits_are_defined_only_in_the_names_module() {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        rust_files(&krate.path().join("src"), &mut files);
        rust_files(&krate.path().join("tests"), &mut files);
    }
    assert!(
        files.len() > 100,
        "found only {} source files under {}: is the walk broken?",
        files.len(),
        root.display()
    );
    let this_test = Path::new(file!()).file_name().expect("file name");
    let mut copies = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap_or(file);
        let shown = relative.display().to_string().replace('\\', "/");
        if shown == OWNER || file.file_name() == Some(this_test) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(name) = const_defined(line) {
                if OWNED.contains(&name) || OWNED_FRAGMENTS.iter().any(|f| name.contains(f)) {
                    copies.push(format!("{shown}:{}: defines {name}", n + 1));
                }
            }
            for spelling in ALPHABET_SPELLINGS {
                if line.contains(spelling) {
                    copies.push(format!(
                        "{shown}:{}: spells out the name alphabet ({spelling}); use \
                         tinymq_protocol::names",
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        copies.is_empty(),
        "names and limits a client can see are defined once, in {OWNER}; copies:\n  {}",
        copies.join("\n  ")
    );
}

#[test]
fn the_owner_defines_what_this_test_guards() {
    let text = std::fs::read_to_string(workspace_root().join(OWNER)).expect("names.rs");
    let defined: Vec<&str> = text.lines().filter_map(const_defined).collect();
    for name in [
        "TOPIC_NAME_BYTES_MAX",
        "GROUP_ID_BYTES_MAX",
        "MAX_DELIVERY_ATTEMPTS_MAX",
    ] {
        assert!(defined.contains(&name), "{OWNER} no longer defines {name}");
    }
    assert_eq!(const_defined("pub const X_MAX: u32 = 1;"), Some("X_MAX"));
    assert_eq!(
        const_defined("    pub(crate) const Y: usize = 2;"),
        Some("Y")
    );
    assert_eq!(const_defined("pub const fn z() {}"), None);
    assert_eq!(const_defined("const _: () = assert!(true);"), None);
    assert_eq!(const_defined("// const W: u8 = 1;"), None);
}
