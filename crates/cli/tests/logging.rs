//! Log output of a real `tinymq server` (issues 12 and 15): tinymq's own lifecycle at INFO by
//! default, no openraft internals, no colour codes when stderr is not a terminal, the level
//! taken from `--log-level`, else `TINYMQ_LOG`, else `RUST_LOG`; every line names the node;
//! `--log-format json` writes one JSON object per line; a steady produce/consume run is quiet.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::BIN;

/// Runs a server with `env` (TINYMQ_LOG and RUST_LOG removed first), creates a topic, stops
/// it with SIGTERM and returns what it wrote to stderr.
fn server_log(env: &[(&str, &str)]) -> String {
    server_log_with(&[], env, |_| {})
}

/// [`server_log`] with extra server flags, and `work` run with the server's address after the
/// topic `logged` is created.
fn server_log_with(flags: &[&str], env: &[(&str, &str)], work: impl FnOnce(&str)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "off",
            "--data",
        ])
        .arg(tmp.path())
        .args(flags)
        .env_remove("TINYMQ_LOG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain stderr from the start: at debug level the server logs more than a pipe holds, and
    // a full pipe would block it mid-request.
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut stderr = String::new();
        stderr_pipe.read_to_string(&mut stderr).unwrap();
        stderr
    });
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("tinymq listening on ")
        .unwrap()
        .to_string();
    let out = Command::new(BIN)
        .args(["topic", "create", "logged", "--bootstrap", &addr])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    work(&addr);
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let stderr = stderr_reader.join().unwrap();
    assert!(status.success(), "{stderr}");
    stderr
}

#[test]
fn the_default_log_is_tinymqs_own_lifecycle_in_plain_text() {
    let log = server_log(&[]);
    for event in [
        "broker started",
        "this node is the MetaServer leader",
        "topic created",
        "stopping",
        "shut down",
    ] {
        assert!(log.contains(event), "no {event:?} in:\n{log}");
    }
    assert!(
        !log.contains("openraft"),
        "openraft internals at the default level:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "colour codes written to a pipe:\n{log}"
    );
    assert!(!log.contains(" DEBUG "), "{log}");
    assert!(
        log.lines().all(|l| l.contains(" INFO node=server-1 ")),
        "every line has its level and node:\n{log}"
    );
}

#[test]
fn the_level_comes_from_tinymq_log_else_rust_log() {
    let log = server_log(&[("RUST_LOG", "debug")]);
    assert!(
        log.contains(" DEBUG "),
        "RUST_LOG=debug is honoured:\n{log}"
    );
    let log = server_log(&[("RUST_LOG", "debug"), ("TINYMQ_LOG", "warn")]);
    assert!(
        !log.contains(" INFO ") && !log.contains(" DEBUG "),
        "TINYMQ_LOG wins:\n{log}"
    );
}

#[test]
fn the_log_level_flag_wins_over_the_variables() {
    let log = server_log_with(&["--log-level", "debug"], &[("TINYMQ_LOG", "warn")], |_| {});
    assert!(log.contains(" DEBUG "), "--log-level debug:\n{log}");
    assert!(
        !log.contains("openraft"),
        "a bare level is for tinymq's own crates:\n{log}"
    );
}

/// Runs `tinymq ARGS` against `addr` with `stdin`, and checks it succeeded.
fn tool(args: &[&str], addr: &str, stdin: &[u8]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .args(["--bootstrap", addr])
        .env_remove("TINYMQ_LOG")
        .env_remove("RUST_LOG");
    let out = common::run_with_input(&mut cmd, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_lines_name_the_node_and_a_steady_run_logs_no_warning() {
    let lines: String = (0..500).map(|i| format!("message {i}\n")).collect();
    let log = server_log_with(&["--log-format", "json"], &[], |addr| {
        for round in 0..3 {
            tool(&["produce", "logged"], addr, lines.as_bytes());
            let out = tool(
                &[
                    "consume",
                    "logged",
                    "--group",
                    "steady",
                    "--from-beginning",
                    "--count",
                    "500",
                    "--timeout-ms",
                    "30000",
                ],
                addr,
                b"",
            );
            assert_eq!(out.lines().count(), 500, "round {round}");
        }
    });
    let mut levels = std::collections::BTreeSet::new();
    let mut messages = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\nin:\n{log}"));
        let ts = v["timestamp"].as_str().unwrap_or_else(|| panic!("{line}"));
        assert!(
            ts.ends_with('Z') && ts.contains('T'),
            "RFC 3339 UTC: {line}"
        );
        let level = v["level"].as_str().unwrap_or_else(|| panic!("{line}"));
        assert!(v["fields"]["message"].is_string(), "fields.message: {line}");
        assert!(v["target"].is_string(), "{line}");
        assert_eq!(v["node"], "server-1", "every line names the node: {line}");
        levels.insert(level.to_string());
        messages.push(v["fields"]["message"].as_str().unwrap().to_string());
    }
    for event in [
        "broker started",
        "topic created",
        "member joined",
        "shut down",
    ] {
        assert!(
            messages.iter().any(|m| m == event),
            "no {event:?} in:\n{log}"
        );
    }
    assert_eq!(
        levels,
        ["INFO".to_string()].into(),
        "a steady produce/consume run logs at INFO only:\n{log}"
    );
}
