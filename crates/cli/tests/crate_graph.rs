//! The crate graph is the layering (ARCHITECTURE.md, "Crate graph invariants"): this test reads
//! the workspace's normal (non-dev) dependencies from `cargo metadata` and fails when an edge
//! the architecture forbids appears, when a crate reaches beyond the crates it may use, or
//! when an edge it relies on goes, so the document cannot go stale again. It also reads the
//! workspace's sources and fails when a replication rule or a leader-epoch cache is defined
//! outside `tinymq-replication` (one set of replication rules).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Crates that hold pure logic or formats: no async runtime, no sockets, no TLS, no Raft.
const PURE: &[&str] = &[
    "tinymq-protocol",
    "tinymq-storage",
    "tinymq-log",
    "tinymq-filter",
    "tinymq-share",
    "tinymq-delay",
    "tinymq-replication",
    "tinymq-auth",
];

/// Third-party crates that mean I/O or networking.
const IO_CRATES: &[&str] = &[
    "tokio",
    "tokio-rustls",
    "rustls",
    "axum",
    "hyper",
    "mio",
    "socket2",
    "openraft",
];

/// `(crate, workspace crates it must never depend on, directly or not)`.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("tinymq-protocol", &["*"]),
    // The one storage layer sits under everything that keeps a durable file.
    ("tinymq-storage", &["*"]),
    ("tinymq-replication", &["*"]),
    ("tinymq-share", &["*"]),
    ("tinymq-tls", &["*"]),
    (
        "tinymq-broker",
        &[
            "tinymq-kafka",
            "tinymq-http",
            "tinymq-node",
            "tinymq-cli",
            "tinymq-bench",
        ],
    ),
    (
        "tinymq-meta",
        &["tinymq-broker", "tinymq-log", "tinymq-kafka", "tinymq-http"],
    ),
    (
        "tinymq-kafka",
        &["tinymq-http", "tinymq-node", "tinymq-cli"],
    ),
    // The node assembles the roles; nothing below it may reach up to it.
    ("tinymq-node", &["tinymq-cli", "tinymq-bench"]),
    (
        "tinymq-net",
        &["tinymq-broker", "tinymq-meta", "tinymq-log"],
    ),
];

/// What a client application links: the client and the crates it brings.
const CLIENT_SIDE: &[&str] = &[
    "tinymq-client",
    "tinymq-protocol",
    "tinymq-auth",
    "tinymq-filter",
    "tinymq-tls",
];

/// `(crate, the only workspace crates it may depend on, directly or not)`.
const ONLY: &[(&str, &[&str])] = &[
    // The log stores replication's leader-epoch cache on the storage layer; nothing else.
    (
        "tinymq-log",
        &["tinymq-protocol", "tinymq-storage", "tinymq-replication"],
    ),
    // The other pure crates sit on the protocol alone.
    ("tinymq-auth", &["tinymq-protocol"]),
    ("tinymq-filter", &["tinymq-protocol"]),
    ("tinymq-delay", &["tinymq-protocol"]),
    // A client application links no server code.
    (
        "tinymq-client",
        &[
            "tinymq-protocol",
            "tinymq-auth",
            "tinymq-filter",
            "tinymq-tls",
        ],
    ),
    // HTTP (the REST API) and the chaos tool reach the cluster as clients do.
    ("tinymq-http", CLIENT_SIDE),
    ("tinymq-chaos", CLIENT_SIDE),
    // `tinymq bench` measures what a client application sees.
    ("tinymq-bench", CLIENT_SIDE),
];

/// The one crate that may depend on `tinymq-node`: the node assembles the roles for the
/// binary, and no role knows how it is assembled.
const NODE_USER: &str = "tinymq-cli";

/// `(crate, workspace crate it must depend on)`: edges the architecture relies on.
const REQUIRED: &[(&str, &str)] = &[
    // One leader-epoch cache: the log persists `tinymq_replication::LeaderEpochCache`
    // rather than keeping a copy of its own.
    ("tinymq-log", "tinymq-replication"),
];

/// Workspace crates and their normal dependencies on other workspace crates, plus every
/// third-party crate each one reaches (transitively, normal dependencies only).
struct Graph {
    workspace: BTreeMap<String, BTreeSet<String>>,
    external: BTreeMap<String, BTreeSet<String>>,
}

/// The host's target triple: the resolved graph is read for it only, so that `cargo metadata`
/// needs no other platform's crates (and no network).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

fn graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host_triple()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let members: BTreeSet<String> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|id| id.as_str().expect("id").to_string())
        .collect();
    let name_of: BTreeMap<String, String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_string(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The resolved graph: for each package, its normal dependencies (dev and build excluded).
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().expect("resolve") {
        let id = node["id"].as_str().unwrap().to_string();
        let normal = node["deps"].as_array().unwrap().iter().filter(|d| {
            d["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null())
        });
        edges.insert(
            id,
            normal
                .map(|d| d["pkg"].as_str().unwrap().to_string())
                .collect(),
        );
    }
    let mut workspace = BTreeMap::new();
    let mut external = BTreeMap::new();
    for member in &members {
        let mut reached = BTreeSet::new();
        let mut stack = vec![member.clone()];
        while let Some(id) = stack.pop() {
            for dep in edges.get(&id).into_iter().flatten() {
                if reached.insert(dep.clone()) {
                    stack.push(dep.clone());
                }
            }
        }
        let (ours, theirs): (Vec<_>, Vec<_>) = reached.iter().partition(|id| members.contains(*id));
        workspace.insert(
            name_of[member].clone(),
            ours.iter().map(|id| name_of[*id].clone()).collect(),
        );
        external.insert(
            name_of[member].clone(),
            theirs.iter().map(|id| name_of[*id].clone()).collect(),
        );
    }
    Graph {
        workspace,
        external,
    }
}

#[test]
fn the_crate_graph_keeps_the_layering() {
    let graph = graph();
    let mut violations = Vec::new();
    for (krate, forbidden) in FORBIDDEN {
        let Some(reached) = graph.workspace.get(*krate) else {
            violations.push(format!(
                "{krate} is not in the workspace (update this test)"
            ));
            continue;
        };
        for dep in reached {
            if forbidden.contains(&"*") || forbidden.contains(&dep.as_str()) {
                violations.push(format!("{krate} depends on {dep}"));
            }
        }
    }
    for (krate, allowed) in ONLY {
        let Some(reached) = graph.workspace.get(*krate) else {
            violations.push(format!(
                "{krate} is not in the workspace (update this test)"
            ));
            continue;
        };
        for dep in reached {
            if !allowed.contains(&dep.as_str()) {
                violations.push(format!(
                    "{krate} depends on {dep} (it may depend only on {})",
                    allowed.join(", ")
                ));
            }
        }
    }
    for (krate, needed) in REQUIRED {
        let reached = graph.workspace.get(*krate);
        if !reached.is_some_and(|deps| deps.contains(*needed)) {
            violations.push(format!("{krate} does not depend on {needed}"));
        }
    }
    for krate in PURE {
        for io in graph.external.get(*krate).into_iter().flatten() {
            if IO_CRATES.contains(&io.as_str()) {
                violations.push(format!("pure crate {krate} depends on {io}"));
            }
        }
    }
    for (krate, reached) in &graph.workspace {
        if reached.contains("tinymq-cli") {
            violations.push(format!("{krate} depends on the binary crate tinymq-cli"));
        }
        if reached.contains("tinymq-node") && krate != NODE_USER {
            violations.push(format!(
                "{krate} depends on tinymq-node (only {NODE_USER} may)"
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "ARCHITECTURE.md's crate graph invariants are broken:\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn the_test_knows_every_workspace_crate() {
    // A new crate must be placed in the layering: named in FORBIDDEN, ONLY or PURE, or one of
    // the crates at the top that may use anything.
    let top = ["tinymq-cli", "tinymq-kafka"];
    let graph = graph();
    for krate in graph.workspace.keys() {
        let placed = FORBIDDEN.iter().any(|(k, _)| k == krate)
            || ONLY.iter().any(|(k, _)| k == krate)
            || PURE.contains(&krate.as_str())
            || top.contains(&krate.as_str());
        assert!(placed, "{krate} has no place in crate_graph.rs's rules");
    }
}

/// Names that only `tinymq-replication` may define: its rules and its leader-epoch cache. A
/// definition anywhere else in the workspace is a second copy of a replication rule (issue
/// 28: the log kept its own epoch cache, the broker its own truncation point). Delegating
/// wrappers keep other names (the broker's `cut_for_divergence`), so the check can be exact;
/// `choose_leader` and `high_watermark` are left out because the MetaServer's adapter and the
/// broker's accessors share those names and only call the rule.
const REPLICATION_ONLY_FNS: &[&str] = &[
    "truncation_point",
    "fetch_divergence",
    "end_offset_for",
    "isr_shrink",
    "isr_expand_candidates",
    "visible_high_watermark",
    "preferred_leader",
    "acks_all_ready",
    "min_insync_check",
];

/// What `line` defines, if it starts a `fn` or `struct` item: `("fn" | "struct", name)`.
fn defined_item(line: &str) -> Option<(&str, &str)> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')')?.1,
            None => after,
        }
        .trim_start();
    }
    for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
        if let Some(after) = rest.strip_prefix(qualifier) {
            rest = after.trim_start();
        }
    }
    let (kind, rest) = rest
        .strip_prefix("fn ")
        .map(|r| ("fn", r))
        .or_else(|| rest.strip_prefix("struct ").map(|r| ("struct", r)))?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some((kind, &rest[..end]))
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn replication_rules_and_the_epoch_cache_are_defined_once() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root");
    let replication = root.join("crates/replication");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("fuzz"), &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("crates/log/src/epoch.rs")),
        "the walk found the log's sources"
    );
    let mut copies = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&replication)) {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (number, line) in text.lines().enumerate() {
            let Some((kind, name)) = defined_item(line) else {
                continue;
            };
            let copy = match kind {
                "fn" => REPLICATION_ONLY_FNS.contains(&name),
                _ => name.contains("EpochCache") || name.contains("EpochFileCache"),
            };
            if copy {
                let at = file.strip_prefix(&root).unwrap_or(file).display();
                copies.push(format!("{at}:{}: {kind} {name}", number + 1));
            }
        }
    }
    assert!(
        copies.is_empty(),
        "replication rules belong in crates/replication only (call them from there):\n  {}",
        copies.join("\n  ")
    );
    // The check itself sees definitions.
    assert_eq!(
        defined_item("pub(crate) fn truncation_point(p: &P)"),
        Some(("fn", "truncation_point"))
    );
    assert_eq!(
        defined_item("    struct EpochCache {"),
        Some(("struct", "EpochCache"))
    );
    assert_eq!(defined_item("let fn_name = 1;"), None);
}
