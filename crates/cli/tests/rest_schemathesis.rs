//! The REST API against its own OpenAPI document (issue 15): schemathesis (from PyPI,
//! installed by `scripts/install-python-tools.sh` into `.tools/venv`) generates inputs for
//! every route of a running `tinymq server`, valid and invalid, and checks that no answer is
//! a server error (5xx), that every answer matches the document (status, content type,
//! headers, body schema), that invalid input is refused and unsupported methods get 405.

mod common;

use std::process::Command;

use common::http::{venv_tool, Node};
use serde_json::json;

/// Test cases per operation and phase: enough to reach every route's validation and its
/// happy path, few enough to finish in about a minute on two shared cores.
const EXAMPLES_PER_OPERATION: &str = "100";

#[test]
fn the_api_conforms_to_its_openapi_document() {
    let schemathesis = venv_tool(
        "schemathesis",
        "installs the pinned schemathesis into .tools/venv",
    );
    let data = tempfile::tempdir().unwrap();
    let node = Node::server(&data.path().join("server"));
    node.wait_ok("/api/v1/topics");
    // Something to find: the topic and group the document's examples name, with records and
    // committed offsets.
    node.post(
        "/api/v1/topics",
        &json!({"name": "orders", "partitions": 2}),
    )
    .expect(201);
    for i in 0..3 {
        node.post(
            "/api/v1/topics/orders/messages",
            &json!({"key": format!("k{i}"), "value": "v"}),
        )
        .expect(200);
    }
    node.post(
        "/api/v1/groups/readers/offsets",
        &json!({"topic": "orders", "to": "latest"}),
    )
    .expect(200);

    let work = data.path().join("schemathesis");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(&schemathesis)
        .current_dir(&work)
        .args([
            "run",
            &format!("http://{}/api/v1/openapi.json", node.http),
            // Every check but "valid data is accepted": the cluster refuses some inputs the
            // document cannot describe (more replicas than brokers, a timestamp past
            // message_timestamp_after_max_ms, both `offset` and `timestamp_ms`), with 4xx.
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            EXAMPLES_PER_OPERATION,
            "--workers",
            "2",
            "--generation-database",
            "none",
            "--request-timeout",
            "30",
            "--no-color",
        ])
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found problems (exit {:?}):\n{stdout}\n{stderr}",
        out.status.code()
    );
    // It ran every operation of the document.
    assert!(
        stdout.contains("13 selected / 13 total"),
        "not every operation was tested:\n{stdout}"
    );
}
