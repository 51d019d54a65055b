//! Log output of a real `tinymq server` (issue 12): tinymq's own lifecycle at INFO by default,
//! no openraft internals, no colour codes when stderr is not a terminal, and the level taken
//! from `TINYMQ_LOG`, else `RUST_LOG`.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::BIN;

/// Runs a server with `env` (TINYMQ_LOG and RUST_LOG removed first), creates a topic, stops
/// it with SIGTERM and returns what it wrote to stderr.
fn server_log(env: &[(&str, &str)]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--data"])
        .arg(tmp.path())
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
