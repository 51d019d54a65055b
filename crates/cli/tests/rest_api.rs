//! The REST admin API (`/api/v1`, issue 15) of real `tinymq` processes: share settings and
//! routes made by the CLI, and the API on a MetaServer node, which goes through the brokers
//! (one of them killed). Every route's happy path and its main errors, and groups, run in
//! process (`in_process/rest_api.rs`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::http::Node;
use common::BIN;
use serde_json::json;

#[test]
fn a_meta_node_serves_the_api_through_the_brokers() {
    let data = tempfile::tempdir().unwrap();
    let meta = Node::meta(&data.path().join("meta"));
    let meta_addr = meta.native.clone();
    // With no broker yet: the cluster view answers, the rest is unavailable.
    let cluster = meta.wait_ok("/api/v1/cluster").json();
    assert_eq!(cluster["brokers"], json!([]), "{cluster}");
    meta.get("/api/v1/topics")
        .expect_problem(503, "CLUSTER_UNAVAILABLE");

    let mut broker = Node::broker(&data.path().join("broker"), &meta_addr);
    // The meta node's API, through the broker: create, produce, read.
    let created = common::retry(150, Duration::from_millis(100), || {
        let r = meta.post("/api/v1/topics", &json!({"name": "m", "partitions": 1}));
        (r.status == 201).then(|| r.json())
    });
    assert!(
        created.is_some(),
        "the meta node's API never created the topic"
    );
    meta.post("/api/v1/topics/m/messages", &json!({"value": "via meta"}))
        .expect(200);
    let page = meta.messages("m", 0, "offset=0");
    assert_eq!(page["messages"][0]["value"], "via meta", "{page}");
    // The broker's own API sees the same.
    let page = broker.messages("m", 0, "offset=0");
    assert_eq!(page["messages"][0]["value"], "via meta", "{page}");
    let cluster = broker.get("/api/v1/cluster").expect(200);
    assert_eq!(cluster["meta"]["nodes"][0]["address"], meta_addr.as_str());
    assert_eq!(cluster["brokers"][0]["address"], broker.native.as_str());

    // The only broker gone: the meta node's API says the cluster is unavailable (503).
    broker.kill();
    let r = meta.get("/api/v1/topics/m");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.content_type, "application/problem+json");
}

/// `tinymq ARGS` against `node`, which must succeed.
fn tool(node: &Node, args: &[&str]) {
    common::run_succeeding(
        Command::new(BIN)
            .args(args)
            .env("TINYMQ_BOOTSTRAP", &node.native)
            .env("TINYMQ_LOG", "warn"),
        b"",
    );
}

/// Issue 27, defect 8: the share-group settings are shown in the topic and the list, a PATCH
/// of them echoes every setting after the change (and refuses a bad one as `topic alter`
/// does), and the routes are listed with their progress.
#[test]
fn share_settings_are_shown_and_echoed_and_routes_are_listed() {
    let data = tempfile::tempdir().unwrap();
    let node = Node::server(data.path());
    node.wait_ok("/api/v1/cluster");
    for name in ["jobs", "jobs-failed", "jobs-eu"] {
        node.post("/api/v1/topics", &json!({"name": name}))
            .expect(201);
    }
    let described = node.get("/api/v1/topics/jobs").expect(200);
    assert_eq!(
        described["config"]["max_delivery_attempts"], 5,
        "{described}"
    );
    assert_eq!(described["config"]["dead_letter_topic"], "jobs.dlq");

    let changed = node
        .patch(
            "/api/v1/topics/jobs",
            &json!({"config": {"max_delivery_attempts": 9, "dead_letter_topic": "jobs-failed",
                               "retention_ms": 86400000}}),
        )
        .expect(200);
    let config = &changed["config"];
    assert_eq!(config["max_delivery_attempts"], 9, "{changed}");
    assert_eq!(config["dead_letter_topic"], "jobs-failed", "{changed}");
    assert_eq!(config["retention_ms"], 86400000, "{changed}");
    // Every other setting is echoed too.
    for key in ["segment_bytes", "message_bytes_max", "min_insync_replicas"] {
        assert!(config[key].is_number(), "{key} missing from {changed}");
    }
    // The description reads the same once the node's image has the change.
    let settled = (0..100).find_map(|_| {
        let d = node.get("/api/v1/topics/jobs").expect(200);
        if d["config"]["dead_letter_topic"] == "jobs-failed" {
            return Some(d);
        }
        std::thread::sleep(Duration::from_millis(50));
        None
    });
    let settled = settled.expect("the description shows the new dead-letter topic");
    assert_eq!(settled["config"]["max_delivery_attempts"], 9, "{settled}");

    // The same checks as `topic alter`: out of range, a bad name, the topic itself.
    for bad in [
        json!({"max_delivery_attempts": 0}),
        json!({"max_delivery_attempts": 101}),
        json!({"dead_letter_topic": "no spaces"}),
    ] {
        let detail = node
            .patch("/api/v1/topics/jobs", &json!({ "config": bad }))
            .expect_problem(400, "INVALID_CONFIG");
        assert!(detail.contains("max_delivery_attempts") || detail.contains("dead_letter_topic"));
    }
    // Removing a setting brings the default back, echoed at once.
    let removed = node
        .patch(
            "/api/v1/topics/jobs",
            &json!({"config": {"max_delivery_attempts": null}}),
        )
        .expect(200);
    assert_eq!(removed["config"]["max_delivery_attempts"], 5, "{removed}");
    assert_eq!(removed["config"]["dead_letter_topic"], "jobs-failed");

    // The list marks the dead-letter topic with its source.
    let list = node.get("/api/v1/topics").expect(200);
    let failed = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "jobs-failed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(failed["dead_letter_of"], json!(["jobs"]), "{list}");

    // Routes: none, then the one the CLI adds, with its progress per source partition.
    assert_eq!(
        node.get("/api/v1/routes").expect(200),
        json!({"routes": []})
    );
    tool(
        &node,
        &[
            "route",
            "add",
            "eu",
            "--from",
            "jobs",
            "--to",
            "jobs-eu",
            "--filter",
            "header.region = 'eu'",
        ],
    );
    let routes = node.get("/api/v1/routes").expect(200);
    let route = &routes["routes"][0];
    assert_eq!(route["name"], "eu", "{routes}");
    assert_eq!(route["from_topic"], "jobs");
    assert_eq!(route["to_topic"], "jobs-eu");
    assert_eq!(route["filter"], "header.region = 'eu'");
}
