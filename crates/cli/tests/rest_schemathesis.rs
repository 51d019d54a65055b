//! The REST API against its own OpenAPI document (issue 15): schemathesis (from PyPI,
//! installed by `scripts/install-python-tools.sh` into `.tools/venv`) generates inputs for
//! every route of a running `tinymq server`, valid and invalid, and checks that no answer is
//! a server error (5xx), that every answer matches the document (status, content type,
//! headers, body schema), that invalid input is refused and unsupported methods get 405.
//! A second run does the same against a server with `--auth scram`, with the admin's Basic
//! credentials (issue 16), where requests without them must be refused.

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
    let schema = format!("http://{}/api/v1/openapi.json", node.http);
    run_schemathesis(&schemathesis, &work, &[&schema]);
}

/// The same with `--auth scram`: every request carries the admin's Basic credentials, and
/// schemathesis's `ignored_auth` check sends some without them (which must be refused). The
/// document itself needs credentials too, so it is read first and handed over as a file.
#[test]
fn the_api_with_authentication_conforms_too() {
    let schemathesis = venv_tool(
        "schemathesis",
        "installs the pinned schemathesis into .tools/venv",
    );
    let data = tempfile::tempdir().unwrap();
    let mut server = Killed(
        Command::new(common::BIN)
            .args(["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--auth", "scram", "--data"])
            .arg(data.path().join("server"))
            .env("TINYMQ_ADMIN_PASSWORD", "admin-secret-1")
            .env("TINYMQ_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(server.0.stdout.take().unwrap());
    let mut lines = (String::new(), String::new());
    std::io::BufRead::read_line(&mut out, &mut lines.0).unwrap();
    std::io::BufRead::read_line(&mut out, &mut lines.1).unwrap();
    let http = lines
        .1
        .trim()
        .strip_prefix("tinymq http listening on ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_string();
    let basic = "Basic YWRtaW46YWRtaW4tc2VjcmV0LTE="; // admin:admin-secret-1
    let get = format!(
        "GET /api/v1/openapi.json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Authorization: {basic}\r\n\r\n"
    );
    let doc = common::retry(150, std::time::Duration::from_millis(100), || {
        let r = common::http::raw(&http, &get);
        (r.status == 200).then_some(r.body)
    })
    .expect("the OpenAPI document, with the admin's credentials");
    let work = data.path().join("schemathesis");
    std::fs::create_dir_all(&work).unwrap();
    let schema = work.join("openapi.json");
    std::fs::write(&schema, doc).unwrap();
    let base = format!("http://{http}");
    let schema = schema.to_str().unwrap();
    run_schemathesis(
        &schemathesis,
        &work,
        &[schema, "--url", &base, "--auth", "admin:admin-secret-1"],
    );
}

/// A process killed when the test ends, passed or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs schemathesis on `target` (the document and how to reach the API) with every check
/// but "valid data is accepted": the cluster refuses some inputs the document cannot
/// describe (more replicas than brokers, a timestamp past message_timestamp_after_max_ms,
/// both `offset` and `timestamp_ms`), with 4xx; and but "deleted resource still available"
/// (ST301): a deleted group comes back as soon as offsets are committed for it (`POST
/// /groups/{g}/offsets`), which its stateful phase may do between the DELETE and the GET.
fn run_schemathesis(schemathesis: &std::path::Path, work: &std::path::Path, target: &[&str]) {
    std::fs::create_dir_all(work).unwrap();
    let out = Command::new(schemathesis)
        .current_dir(work)
        .arg("run")
        .args(target)
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance,use_after_free",
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
    // It ran every operation of the document (14 with `GET /routes`; counted from its line,
    // so that a route added later needs no change here).
    let selected = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Operations:"))
        .and_then(|l| l.split_once(" selected / "))
        .map(|(sel, total)| {
            (
                sel.trim().to_string(),
                total.trim_end_matches(" total").trim().to_string(),
            )
        });
    assert!(
        selected
            .as_ref()
            .is_some_and(|(sel, total)| sel == total && sel.parse::<u32>().is_ok_and(|n| n >= 14)),
        "not every operation was tested ({selected:?}):\n{stdout}"
    );
}
