//! Issue 17's conformance suites against `tinymq server --kafka-listen`: a subset of
//! librdkafka's own test suite (`scripts/kafka-conformance-librdkafka.sh`) and franz-go's kgo
//! client tests (`scripts/kafka-conformance-go.sh`), each limited to the allow-list checked in
//! under tests/kafka-conformance/. The scripts fetch and build what they need (cached under
//! .tools/), so the first run on a fresh machine is the slow one. A test fails when any
//! allow-listed suite test does not pass, and prints the script's per-test lines and counts.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use common::http::workspace_root;
use common::kafka::KafkaServer;

/// The suites are CPU-heavy (a C build, a Go build, many clients); running both at once on a
/// small CI machine only makes their timeouts likelier. One at a time.
static ONE_SUITE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `scripts/SCRIPT KAFKA_ADDR` against a fresh server (started with `server_extra`) and
/// returns (passed, of) from its "NAME tests: P passed, F failed of N" line, after checking
/// that nothing failed.
fn run_suite(script: &str, server_extra: &[&str], counts_prefix: &str) -> (u32, u32) {
    let _one = ONE_SUITE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Topics are auto-created: both suites produce to topics they never create (as against
    // a default Kafka broker).
    let server = KafkaServer::start_with(&[&["--kafka-auto-create-topics"], server_extra].concat());
    let root: PathBuf = workspace_root();
    let output = Command::new(root.join("scripts").join(script))
        .arg(&server.kafka)
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("run scripts/{script}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}");
    let counts = stdout
        .lines()
        .find_map(|line| line.strip_prefix(counts_prefix))
        .unwrap_or_else(|| panic!("scripts/{script} printed no {counts_prefix:?} line"));
    let (passed, failed, of) = parse_counts(counts)
        .unwrap_or_else(|| panic!("unreadable counts {counts:?} from scripts/{script}"));
    assert!(
        output.status.success() && failed == 0,
        "scripts/{script}: allow-listed tests failed ({counts}); per-test lines above"
    );
    assert_eq!(passed, of, "{counts}");
    assert!(of > 0, "scripts/{script} ran no tests: {counts}");
    (passed, of)
}

/// "P passed, F failed of N" -> (P, F, N).
fn parse_counts(counts: &str) -> Option<(u32, u32, u32)> {
    let words: Vec<&str> = counts.split_whitespace().collect();
    match words.as_slice() {
        [passed, "passed,", failed, "failed", "of", of] => {
            Some((passed.parse().ok()?, failed.parse().ok()?, of.parse().ok()?))
        }
        _ => None,
    }
}

#[test]
fn librdkafka_allow_listed_tests_pass() {
    // The suite's default scenario: auto-created topics get 4 partitions (its tests produce to
    // partitions 0..3 of topics they never create).
    let (passed, of) = run_suite(
        "kafka-conformance-librdkafka.sh",
        &["--partitions", "4"],
        "librdkafka tests: ",
    );
    eprintln!("librdkafka: {passed} of {of} allow-listed tests passed");
}

#[test]
fn franz_go_allow_listed_tests_pass() {
    let (passed, of) = run_suite("kafka-conformance-go.sh", &[], "franz-go tests: ");
    eprintln!("franz-go: {passed} of {of} allow-listed tests passed");
}

#[test]
fn counts_lines_are_read_as_the_scripts_print_them() {
    assert_eq!(parse_counts("12 passed, 0 failed of 12"), Some((12, 0, 12)));
    assert_eq!(parse_counts("3 passed, 2 failed of 5"), Some((3, 2, 5)));
    assert_eq!(parse_counts("3 passed of 5"), None);
}
