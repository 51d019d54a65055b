//! The web console in a real browser (issue 15): headless Chromium, driven by
//! `web/tests/console.test.mjs`, opens the console of a real `tinymq server`, creates a topic
//! through the form, watches the throughput chart move while the CLI produces, reads the
//! messages back in the message browser, and sees a consumer group's lag. Screenshots of every
//! page go to `target/console-screenshots/`.
//!
//! Needs Debian's `chromium` and `web/node_modules`: `scripts/install-browser-tools.sh`
//! installs both. Without them the test fails and says so.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::BIN;

const CHROMIUM: &str = "/usr/bin/chromium";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// Fails, naming the script that installs them, when the browser tools are missing.
fn browser_tools(root: &Path) {
    let missing: Vec<String> = [
        (PathBuf::from(CHROMIUM), "Debian's chromium"),
        (
            root.join("web/node_modules/playwright-core/package.json"),
            "web/node_modules (playwright-core)",
        ),
        (
            root.join("web/node_modules/typescript/package.json"),
            "web/node_modules (typescript)",
        ),
    ]
    .into_iter()
    .filter(|(path, _)| !path.exists())
    .map(|(path, what)| format!("{what} at {}", path.display()))
    .collect();
    assert!(
        missing.is_empty(),
        "the browser test needs {}: run scripts/install-browser-tools.sh",
        missing.join(" and ")
    );
}

/// `tinymq server` with its HTTP listener on a free port.
struct Node {
    child: Child,
    native: String,
    http: String,
    _data: tempfile::TempDir,
}

impl Node {
    fn start() -> Node {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .args(["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .arg("--data")
            .arg(data.path())
            .env("TINYMQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                .to_string()
        };
        let native = line("tinymq listening on ");
        let http = line("tinymq http listening on ");
        Node {
            child,
            native,
            http,
            _data: data,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `node ARGS` in `web/`, waiting at most `limit`; the exit status and all it printed.
fn node(root: &Path, args: &[&str], env: &[(&str, String)], limit: Duration) -> (bool, String) {
    let mut child = Command::new("node")
        .args(args)
        .current_dir(root.join("web"))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs (Debian's nodejs; see scripts/install-browser-tools.sh)");
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if waited >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    };
    let printed = format!("{}{}", out.join().unwrap(), err.join().unwrap());
    match status {
        Some(status) => (status.success(), printed),
        None => (false, format!("{printed}\n(killed after {limit:?})")),
    }
}

#[test]
fn the_console_shows_topics_throughput_messages_and_group_lag_in_chromium() {
    let root = workspace_root();
    browser_tools(&root);
    let server = Node::start();
    let screenshots = root.join("target/console-screenshots");
    // Screenshots of an earlier run must not stand in for this one's.
    let _ = std::fs::remove_dir_all(&screenshots);
    let env = [
        ("CONSOLE_URL", format!("http://{}", server.http)),
        ("TINYMQ_BIN", BIN.to_string()),
        ("TINYMQ_BOOTSTRAP", server.native.clone()),
        ("SCREENSHOT_DIR", screenshots.display().to_string()),
    ];
    let (ok, printed) = node(
        &root,
        &["tests/console.test.mjs"],
        &env,
        Duration::from_secs(180),
    );
    println!("{printed}");
    assert!(ok, "the browser test failed:\n{printed}");
    for page in [
        "overview",
        "topics",
        "topic-detail",
        "messages",
        "groups",
        "group-detail",
    ] {
        let png = screenshots.join(format!("{page}.png"));
        let len = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "no screenshot at {}", png.display());
    }
}

#[test]
fn the_committed_console_assets_are_what_web_builds() {
    let root = workspace_root();
    browser_tools(&root);
    let (ok, printed) = node(
        &root,
        &["build.mjs", "--check"],
        &[],
        Duration::from_secs(120),
    );
    assert!(ok, "{printed}");
}
