//! One data directory, one process: a second `server`, `broker` or `meta` started on a
//! directory that a running process holds fails at start, naming the directory and the
//! holder's pid, and the holder keeps serving everything it acknowledged. The lock dies with
//! its process: after a SIGKILL the same directory starts again at once.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Server, BIN};

/// How long a refused start may take at most before the test calls it a successful start.
const START_WAIT: Duration = Duration::from_secs(30);

/// Runs `tinymq ARGS`, which must exit with an error; returns its stderr. A process still
/// running after [`START_WAIT`] has started: it is killed and the test fails.
fn start_fails(args: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .args(args)
        .env("TINYMQ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tinymq");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > START_WAIT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "tinymq {args:?} started on a directory another process holds: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "tinymq {args:?} exited 0");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that a refusal names the directory and the pid of the process holding it.
fn assert_names_holder(refusal: &str, dir: &Path, pid: u32) {
    let dir = dir.display().to_string();
    assert!(refusal.contains(&dir), "names {dir}: {refusal}");
    assert!(
        refusal.contains(&format!("pid {pid}")),
        "names pid {pid}: {refusal}"
    );
}

fn lines(prefix: &str, count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("{prefix}-{i}")).collect()
}

fn produce(server: &Server, topic: &str, lines: &[String]) {
    let input = lines.join("\n") + "\n";
    server.run_tool(&["produce", topic], input.as_bytes());
}

/// Every value of `topic`, read from the beginning.
fn consume_all(server: &Server, topic: &str, count: usize) -> Vec<String> {
    let count = count.to_string();
    let out = server.run_tool(
        &[
            "consume",
            topic,
            "--from-beginning",
            "--count",
            &count,
            "--timeout-ms",
            "10000",
        ],
        b"",
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_second_server_on_a_held_directory_fails_and_the_first_keeps_its_records() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("shared");
    let mut first = Server::start(&data);
    first.run_tool(&["topic", "create", "kept"], b"");
    let acknowledged = lines("first", 100);
    produce(&first, "kept", &acknowledged);

    let port = format!("127.0.0.1:{}", free_port());
    let d = data.to_str().unwrap();
    let refusal = start_fails(&["server", "--listen", &port, "--data", d]);
    assert_names_holder(&refusal, &data, first.pid());
    // The embedded MetaServer's directory is held too.
    let meta_dir = data.join("__meta");
    let peers = format!("1={port}");
    let m = meta_dir.to_str().unwrap();
    let refusal = start_fails(&[
        "meta", "--id", "1", "--listen", &port, "--peers", &peers, "--data", m,
    ]);
    assert_names_holder(&refusal, &meta_dir, first.pid());

    // The first server still serves, and keeps, everything it acknowledged.
    let more = lines("more", 20);
    produce(&first, "kept", &more);
    let all: Vec<String> = acknowledged.iter().chain(&more).cloned().collect();
    assert_eq!(consume_all(&first, "kept", all.len()), all);

    // A SIGKILL leaves the lock file behind with a dead pid in it: it does not block a
    // restart, and nothing acknowledged is lost.
    first.kill9();
    assert!(data.join(".lock").exists());
    let restarted = Server::start(&data);
    assert_eq!(consume_all(&restarted, "kept", all.len()), all);
}

#[test]
fn a_second_broker_or_meta_node_on_a_held_directory_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let meta_addr = format!("127.0.0.1:{}", free_port());
    let meta_dir = tmp.path().join("meta-1");
    let mut meta = common::start(1, std::slice::from_ref(&meta_addr), tmp.path());
    common::leader(&meta_addr, None);
    let broker_addr = format!("127.0.0.1:{}", free_port());
    let broker_dir = tmp.path().join("b1");
    let mut broker = Server::start_broker(1, &broker_addr, &meta_addr, &broker_dir);
    broker.run_tool(&["topic", "create", "kept"], b"");
    let acknowledged = lines("kept", 50);
    produce(&broker, "kept", &acknowledged);

    // A second broker on the directory, under the same id or another, fails at start.
    let other = format!("127.0.0.1:{}", free_port());
    let d = broker_dir.to_str().unwrap();
    for id in ["1", "2"] {
        let refusal = start_fails(&[
            "broker", "--id", id, "--listen", &other, "--meta", &meta_addr, "--data", d,
        ]);
        assert_names_holder(&refusal, &broker_dir, broker.pid());
    }

    // A second MetaServer node on the node's directory fails at start.
    let peers = format!("1={other}");
    let m = meta_dir.to_str().unwrap();
    let refusal = start_fails(&[
        "meta", "--id", "1", "--listen", &other, "--peers", &peers, "--data", m,
    ]);
    let meta_pid = meta.pid();
    assert_names_holder(&refusal, &meta_dir, meta_pid);

    assert_eq!(
        consume_all(&broker, "kept", acknowledged.len()),
        acknowledged
    );

    // SIGKILL both; each restarts on its directory at once, with its data.
    broker.kill9();
    drop(meta);
    meta = common::start(1, std::slice::from_ref(&meta_addr), tmp.path());
    common::leader(&meta_addr, None);
    let broker = Server::start_broker(1, &broker_addr, &meta_addr, &broker_dir);
    assert_eq!(
        consume_all(&broker, "kept", acknowledged.len()),
        acknowledged
    );
    drop(meta);
}
