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

/// The largest set of files allowed to import each other in a cycle: a module and its
/// helper (a parent and the child it re-exports) may, nothing larger.
const CYCLE_FILES_MAX: usize = 2;

/// `(module, modules it must never reach, directly or not)`; a name covers its submodules.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // The partition is replication's subject, not its client.
    ("partition", &["replica", "service", "handlers", "state"]),
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

/// Strongly connected components (Tarjan, iterative), largest first.
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
    let large: Vec<_> = cycles(&graph)
        .into_iter()
        .filter(|c| c.len() > CYCLE_FILES_MAX)
        .collect();
    assert!(
        large.is_empty(),
        "files in one import cycle (at most {CYCLE_FILES_MAX} may be): {large:?}"
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
