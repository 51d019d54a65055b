//! The web console in a real browser (issues 15 and 27): headless Chromium, driven by
//! `web/tests/console.test.mjs`, opens the console of a real `tinymq server`, creates a topic
//! through the form, watches the throughput chart move while the CLI produces, reads the
//! messages back in the message browser (cards and the compact table, binary values marked),
//! edits topic settings in place (a refused one shows the server's error), marks and links the
//! dead-letter topic, adds partitions, produces through the form, sees a consumer group's type,
//! lag, a live member and the lag at 0, resets its offsets through the plan and its
//! confirmation, opens a share group's page and the routes page. A screenshot of every page
//! goes to a temporary directory, kept (and named in the output) when the test fails or when
//! `TINYMQ_KEEP_SCREENSHOTS` is set.
//!
//! The browser test and the check that the committed assets are what `web/` builds need
//! Debian's `chromium` and `web/node_modules`: `scripts/install-browser-tools.sh` installs both.
//! Without them those tests fail and say so. The headers test needs neither.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::http::{workspace_root, Node};
use common::BIN;

const CHROMIUM: &str = "/usr/bin/chromium";

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
    let server = Node::start(&[]);
    // A directory of this run's own: screenshots of an earlier run cannot stand in for these.
    let shots_dir = tempfile::Builder::new()
        .prefix("tinymq-console-screenshots-")
        .tempdir()
        .expect("a temporary screenshot directory");
    let screenshots = shots_dir.path().to_path_buf();
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
        Duration::from_secs(450),
    );
    println!("{printed}");
    if !ok || std::env::var_os("TINYMQ_KEEP_SCREENSHOTS").is_some() {
        let kept = shots_dir.keep();
        println!("screenshots kept in {}", kept.display());
    }
    assert!(ok, "the browser test failed:\n{printed}");
    for page in [
        "overview",
        "topics",
        "topic-detail",
        "topic-settings",
        "topic-setting-refused",
        "topics-dead-letters",
        "topic-produce",
        "messages",
        "messages-binary",
        "messages-table",
        "messages-table-expanded",
        "groups",
        "group-detail",
        "group-live",
        "group-reset-plan",
        "group-reset",
        "group-share",
        "routes",
        "overview-end",
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

/// One GET on its own connection: the status, the headers (names lower-cased), the body.
fn get(http: &str, path: &str, extra: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = TcpStream::connect(http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole response");
    let head = String::from_utf8(response[..split].to_vec()).unwrap();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)?.parse().ok());
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (
        status.expect("a status"),
        headers,
        response[split + 4..].to_vec(),
    )
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} header in {headers:?}"))
}

#[test]
fn the_console_is_served_embedded_with_its_types_an_etag_and_a_same_origin_policy() {
    let server = Node::start(&[]);
    let root = workspace_root();
    for (path, file, content_type) in [
        ("/", "index.html", "text/html"),
        ("/console/app.js", "app.js", "text/javascript"),
        ("/console/style.css", "style.css", "text/css"),
    ] {
        let (status, headers, body) = get(&server.http, path, "");
        assert_eq!(status, 200, "{path}");
        assert!(header(&headers, "content-type").starts_with(content_type));
        let committed = std::fs::read(root.join("crates/http/console").join(file)).unwrap();
        assert!(body == committed, "{path} is not the committed {file}");
        let csp = header(&headers, "content-security-policy");
        assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
        assert!(!csp.contains("http"), "no remote origin is allowed: {csp}");
        let etag = header(&headers, "etag").to_string();
        let (again, _, body) = get(&server.http, path, &format!("If-None-Match: {etag}\r\n"));
        assert_eq!((again, body.len()), (304, 0), "{path} revalidated");
    }
    let (status, _, _) = get(&server.http, "/console/missing.js", "");
    assert_eq!(status, 404);
}
