//! The broker's module graph is its layering (ARCHITECTURE.md, "The broker, top-down"): this
//! test reads the crate's sources, finds which file's code names which other file's module
//! (`crate::…`, `super::…`, `self::…` and a parent's bare `child::…`, outside comments, string
//! literals and `#[cfg(test)]` code), and fails when files form an import cycle of more than
//! two, or when an edge the layering forbids appears. Run with `-- --nocapture` to print the
//! graph.

mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use parse::{module_graph, Graph};

/// The largest set of files allowed to import each other in a cycle.
const CYCLE_FILES_MAX: usize = 2;

/// The two-file cycles there are, each with why; any other cycle fails the test.
const CYCLES_ALLOWED: &[(&str, &str, &str)] = &[
    (
        "route::progress",
        "route::runner",
        "a runner and its checkpoint and recovery scan",
    ),
    (
        "share::answer",
        "share::fetch",
        "ShareFetch's piggy-backed acknowledgements and ShareAcknowledge share their checks",
    ),
    (
        "partition",
        "partition::txn",
        "the partition and its transaction half share the producer-state lock and the write path",
    ),
    (
        "group::offsets",
        "group::txn_offsets",
        "the offsets store and the commits it holds pending for a transaction's marker share the commit types",
    ),
    (
        "fuzzing",
        "fuzzing::seed",
        "the harness and the seeds written from its scenarios",
    ),
];

/// `(module, modules it must never reach, directly or not)`; a name covers its submodules.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // The partition is replication's subject, not its client.
    ("partition", &["replica", "service", "handlers", "state"]),
    // The role a partition holds is data: it names no part that moves it.
    ("role", &["replica", "partition", "state", "service"]),
    // The state holds the features' registries, never their logic.
    (
        "state",
        &[
            "service",
            "handlers",
            "connection",
            "share::lookup",
            "share::fetch",
            "share::answer",
            "share::acquire",
            "share::dead_letter",
            "delay::scheduler",
            "route::runner",
            "route::admin",
            "half::ops",
            "half::deliver",
            "filtered_fetch",
            "replica::serve",
            "replica::isr",
            "replica::fetcher",
        ],
    ),
    // The partition service layer sits below the request handlers and every feature.
    (
        "service",
        &[
            "handlers",
            "connection",
            "group_handlers",
            "topic_handlers",
            "server",
        ],
    ),
    // Features use the partition service layer, never the request handlers.
    ("share", &["handlers", "connection"]),
    ("delay", &["handlers", "connection"]),
    ("route", &["handlers", "connection"]),
    ("group", &["handlers", "connection", "state"]),
    ("offsets_partitions", &["handlers", "connection"]),
    ("filtered_fetch", &["handlers", "connection"]),
    ("replica", &["handlers", "connection"]),
    ("authorize", &["handlers", "connection"]),
    ("txn", &["handlers", "connection"]),
    ("half", &["handlers", "connection"]),
];

fn graph() -> Graph {
    module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn covers(name: &str, module: &str) -> bool {
    module == name || module.starts_with(&format!("{name}::"))
}

/// Every module reachable from `from`.
fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(m) = todo.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// Strongly connected components (Tarjan), largest first, each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                component.sort();
                self.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    let mut found = walk.found;
    found.sort_by_key(|c| std::cmp::Reverse(c.len()));
    found
}

#[test]
fn no_import_cycle_is_larger_than_two_files() {
    let graph = graph();
    for (module, uses) in &graph {
        if !uses.is_empty() {
            let names: Vec<&str> = uses.iter().map(String::as_str).collect();
            println!("{} -> {}", display(module), names.join(", "));
        }
    }
    let found = cycles(&graph);
    let large: Vec<_> = found.iter().filter(|c| c.len() > CYCLE_FILES_MAX).collect();
    assert!(
        large.is_empty(),
        "files in one import cycle (at most {CYCLE_FILES_MAX} may be): {large:?}"
    );
    let unexplained: Vec<_> = found
        .iter()
        .filter(|c| c.len() == 2)
        .filter(|c| !CYCLES_ALLOWED.iter().any(|(a, b, _)| c[..] == [*a, *b]))
        .collect();
    assert!(
        unexplained.is_empty(),
        "two-file cycles not in CYCLES_ALLOWED (break them, or add them with why): {unexplained:?}"
    );
}

#[test]
fn the_layers_reach_only_down() {
    let graph = graph();
    let mut broken = Vec::new();
    for (name, never) in FORBIDDEN {
        let modules: Vec<&String> = graph.keys().filter(|m| covers(name, m)).collect();
        assert!(!modules.is_empty(), "no module {name}: update FORBIDDEN");
        for module in modules {
            for reached in reach(&graph, module) {
                if let Some(n) = never.iter().find(|n| covers(n, &reached)) {
                    broken.push(format!("{module} reaches {reached} (under {n})"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
}

/// A made-up crate in a temporary directory: `(path under src, contents)`.
fn fixture(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("the directory");
        std::fs::write(&path, text).expect("the file");
    }
    let graph = module_graph(dir.path());
    (dir, graph)
}

#[test]
fn the_parser_follows_module_aliases_repeated_supers_and_skips_test_code() {
    let (_dir, graph) = fixture(&[
        ("lib.rs", "mod a; mod b; mod svc; mod c;"),
        ("a.rs", "use crate::svc;\nfn f() { svc::fetch::g() }"),
        ("svc/mod.rs", "pub mod fetch;"),
        ("svc/fetch.rs", "pub fn g() { crate::b::h() }"),
        (
            "b.rs",
            "pub fn h() {}\nuse crate::a as _unused; // crate::c in a comment\n#[cfg(test)]\nmod tests { use crate::c; }",
        ),
        ("c/mod.rs", "mod d;"),
        ("c/d/mod.rs", "mod e;"),
        ("c/d/e.rs", "fn k() { super::super::super::a::f() } const S: &str = \"crate::b\";"),
    ]);
    assert!(graph["a"].contains("svc::fetch"), "{graph:?}");
    assert!(graph["svc::fetch"].contains("b"), "{graph:?}");
    assert!(graph["b"].contains("a"), "{graph:?}");
    assert!(
        !graph["b"].contains("c"),
        "comments and cfg(test) code are not imports: {graph:?}"
    );
    assert_eq!(
        graph["c::d::e"].iter().collect::<Vec<_>>(),
        ["a"],
        "{graph:?}"
    );
    let three = cycles(&graph).into_iter().find(|c| c.len() == 3);
    assert_eq!(
        three,
        Some(vec!["a".to_string(), "b".into(), "svc::fetch".into()])
    );
}

#[test]
fn the_parser_sees_every_form_of_import() {
    let graph = graph();
    // Spot checks that the parser follows `crate::{a, b::c}`, `super::` and bare children.
    let connection = &graph["connection"];
    assert!(connection.contains("handlers") && connection.contains("authorize"));
    assert!(graph["share::fetch"].contains("share::registry"));
    assert!(graph["replica"].contains("role::leader"));
}

fn display(module: &str) -> &str {
    if module.is_empty() {
        "<lib>"
    } else {
        module
    }
}
