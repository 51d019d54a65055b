//! The REST admin API (`/api/v1`, issue 15) of a node in this process: every route's happy
//! path and its main errors, answered as RFC 9457 problem documents with the native error
//! code; groups described, reset and deleted.

use std::time::Duration;

use crate::common::http::{raw, request, Endpoints, Response};
use crate::node::{HttpNode, NativeMember};
use serde_json::json;
use tinymq_client::{Consumer, ConsumerConfig, StartFrom};

#[test]
fn topics_and_messages_round_trip() {
    let node = HttpNode::start(|_, _| {});
    let cluster = node.wait_ok("/api/v1/cluster").json();
    assert!(
        !cluster["cluster_id"].as_str().unwrap().is_empty(),
        "{cluster}"
    );
    assert_eq!(cluster["meta"]["nodes"][0]["up"], true, "{cluster}");
    assert_eq!(cluster["meta"]["nodes"][0]["leader"], true, "{cluster}");
    assert_eq!(cluster["meta"]["leader"], cluster["meta"]["nodes"][0]["id"]);
    assert_eq!(cluster["brokers"][0]["alive"], true, "{cluster}");
    assert_eq!(cluster["brokers"][0]["address"], node.native.as_str());

    // Create → describe.
    let created = node
        .post(
            "/api/v1/topics",
            &json!({"name": "orders", "partitions": 2, "config": {"retention_ms": 3600000}}),
        )
        .expect(201);
    assert_eq!(created["name"], "orders");
    assert_eq!(created["config"]["retention_ms"], 3600000);
    assert_eq!(created["partitions"].as_array().unwrap().len(), 2);
    node.post("/api/v1/topics", &json!({"name": "orders"}))
        .expect_problem(409, "TOPIC_ALREADY_EXISTS");
    let list = node.get("/api/v1/topics").expect(200);
    assert_eq!(
        list["topics"],
        json!([{"name": "orders", "partitions": 2, "replication_factor": 1,
                 "dead_letter_topic": "orders.dlq", "dead_letter_of": []}])
    );
    let described = node.get("/api/v1/topics/orders").expect(200);
    let p0 = &described["partitions"][0];
    assert_eq!(p0["leader"], cluster["brokers"][0]["id"], "{described}");
    assert_eq!(p0["replicas"], json!([cluster["brokers"][0]["id"]]));
    assert_eq!(p0["isr"], p0["replicas"]);
    assert_eq!(p0["log_end_offset"], 0);

    // Produce: UTF-8 with headers, then bytes that are not UTF-8 (sent as base64).
    let first = node
        .post(
            "/api/v1/topics/orders/messages",
            &json!({"key": "customer-7", "value": "{\"total\": 12}", "partition": 0,
                    "headers": [{"key": "trace", "value": "abc"},
                                {"key": "raw", "value": "/wA=", "value_encoding": "base64"},
                                {"key": "none", "value": null}]}),
        )
        .expect(200);
    assert_eq!(first, json!({"partition": 0, "offset": 0}));
    let second = node
        .post(
            "/api/v1/topics/orders/messages",
            &json!({"value": "//79", "value_encoding": "base64", "partition": 0}),
        )
        .expect(200);
    assert_eq!(second, json!({"partition": 0, "offset": 1}));

    // Read them back.
    let page = node.messages("orders", 0, "offset=0");
    assert_eq!(page["high_watermark"], 2, "{page}");
    assert_eq!(page["next_offset"], 2, "{page}");
    let m = page["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2, "{page}");
    assert_eq!(m[0]["offset"], 0);
    assert_eq!(m[0]["key"], "customer-7");
    assert_eq!(m[0]["key_encoding"], "utf8");
    assert_eq!(m[0]["value"], "{\"total\": 12}");
    assert_eq!(m[0]["value_encoding"], "utf8");
    assert_eq!(
        m[0]["headers"],
        json!([{"key": "trace", "value": "abc", "value_encoding": "utf8"},
               {"key": "raw", "value": "/wA=", "value_encoding": "base64"},
               {"key": "none", "value": null, "value_encoding": "utf8"}])
    );
    assert!(m[0]["timestamp_ms"].as_i64().unwrap() > 0);
    assert_eq!(m[1]["key"], serde_json::Value::Null);
    assert_eq!(m[1]["value"], "//79", "not UTF-8: base64");
    assert_eq!(m[1]["value_encoding"], "base64");

    // Forced encodings, a limit, a start by time.
    let b64 = node.messages("orders", 0, "offset=0&limit=1&encoding=base64");
    assert_eq!(b64["messages"].as_array().unwrap().len(), 1);
    assert_eq!(b64["next_offset"], 1);
    assert_eq!(b64["messages"][0]["key"], "Y3VzdG9tZXItNw==");
    assert_eq!(b64["messages"][0]["key_encoding"], "base64");
    let from_second = node.messages("orders", 0, "offset=1");
    assert_eq!(from_second["messages"][0]["offset"], 1);
    let by_time = node.messages("orders", 0, "timestamp_ms=0");
    assert_eq!(by_time["messages"].as_array().unwrap().len(), 2);
    let future = node.messages("orders", 0, "timestamp_ms=99999999999999");
    assert_eq!(future["messages"], json!([]));
    assert_eq!(future["next_offset"], 2);
    let empty = node.messages("orders", 1, "");
    assert_eq!(empty["messages"], json!([]));
    assert_eq!(empty["high_watermark"], 0);
    let described = node.get("/api/v1/topics/orders").expect(200);
    assert_eq!(described["partitions"][0]["high_watermark"], 2);

    // Alter: grow, refuse shrinking and unknown settings (alter_topic_config.rs tests the rest).
    let grown = node
        .patch("/api/v1/topics/orders", &json!({"partitions": 3}))
        .expect(200);
    assert_eq!(grown["partitions"].as_array().unwrap().len(), 3);
    node.patch("/api/v1/topics/orders", &json!({"partitions": 1}))
        .expect_problem(400, "INVALID_PARTITIONS");
    let detail = node
        .patch(
            "/api/v1/topics/orders",
            &json!({"config": {"retention_period": 1}}),
        )
        .expect_problem(400, "INVALID_CONFIG");
    assert!(detail.contains("retention_period"), "{detail}");
    node.patch("/api/v1/topics/nope", &json!({"partitions": 3}))
        .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");

    // Delete.
    let deleted = node.delete("/api/v1/topics/orders");
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    node.get("/api/v1/topics/orders")
        .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    node.delete("/api/v1/topics/orders")
        .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(node.get("/api/v1/topics").expect(200)["topics"], json!([]));
}

#[test]
fn bad_input_is_refused_with_problem_documents() {
    let node = HttpNode::start(|_, _| {});
    node.wait_ok("/api/v1/topics");
    node.post("/api/v1/topics", &json!({"name": "t", "partitions": 1}))
        .expect(201);
    let post = |path: &str, body: &str| request(&node.http, "POST", path, Some(body));

    // Bodies.
    post("/api/v1/topics", "{not json").expect_problem(400, "MALFORMED_BODY");
    post("/api/v1/topics", "[\"t2\", 1]").expect_problem(400, "MALFORMED_BODY");
    post("/api/v1/topics", "{\"name\": 7}").expect_problem(400, "MALFORMED_BODY");
    post("/api/v1/topics", "{\"name\": \"t2\", \"colour\": 1}")
        .expect_problem(400, "MALFORMED_BODY");
    let no_type = raw(
        &node.http,
        "POST /api/v1/topics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Length: 12\r\n\r\n{\"name\":\"x\"}",
    );
    no_type.expect_problem(415, "INVALID_REQUEST");
    post("/api/v1/topics", "{\"name\": \"bad name\"}").expect_problem(400, "INVALID_TOPIC");
    post("/api/v1/topics", "{\"name\": \"t2\", \"partitions\": 0}")
        .expect_problem(400, "INVALID_PARTITIONS");
    post("/api/v1/topics", "{\"name\": \"t2\", \"partitions\": -1}")
        .expect_problem(400, "MALFORMED_BODY");
    post(
        "/api/v1/topics",
        "{\"name\": \"t2\", \"replication_factor\": 5}",
    )
    .expect_problem(400, "NOT_ENOUGH_REPLICAS");
    post(
        "/api/v1/topics/t/messages",
        "{\"value\": \"***\", \"value_encoding\": \"base64\"}",
    )
    .expect_problem(400, "INVALID_REQUEST");
    post(
        "/api/v1/topics/t/messages",
        "{\"value\": \"v\", \"partition\": 9}",
    )
    .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    post("/api/v1/topics/nope/messages", "{\"value\": \"v\"}")
        .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    post(
        "/api/v1/topics/t/messages",
        "{\"value\": \"v\", \"timestamp_ms\": -5}",
    )
    .expect_problem(400, "INVALID_TIMESTAMP");

    // Path and query parameters.
    node.get("/api/v1/topics/bad%20name")
        .expect_problem(400, "INVALID_TOPIC");
    let read = |query: &str| node.get(&format!("/api/v1/topics/t/partitions/0/messages?{query}"));
    read("limit=0").expect_problem(400, "INVALID_REQUEST");
    read("limit=1001").expect_problem(400, "INVALID_REQUEST");
    read("limit=many").expect_problem(400, "INVALID_REQUEST");
    read("offset=-1").expect_problem(400, "INVALID_REQUEST");
    read("offset=1&timestamp_ms=1").expect_problem(400, "INVALID_REQUEST");
    read("encoding=hex").expect_problem(400, "INVALID_REQUEST");
    read("offset=5").expect_problem(400, "OFFSET_OUT_OF_RANGE");
    node.get("/api/v1/topics/t/partitions/x/messages")
        .expect_problem(400, "INVALID_REQUEST");
    node.get("/api/v1/topics/t/partitions/7/messages")
        .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    node.get("/api/v1/groups/bad%2Fid")
        .expect_problem(400, "INVALID_GROUP_ID");
    node.get("/api/v1/no-such-route")
        .expect_problem(404, "INVALID_REQUEST");
    request(&node.http, "PUT", "/api/v1/topics/t", Some("{}"))
        .expect_problem(405, "INVALID_REQUEST");
    // A declared body over http_body_bytes_max: refused by the listener before it is read.
    raw(
        &node.http,
        "POST /api/v1/topics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{",
    )
    .expect_problem(413, "LIMIT_EXCEEDED");

    // The OpenAPI document describes every route.
    let doc = node.get("/api/v1/openapi.json").expect(200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    for path in [
        "/api/v1/cluster",
        "/api/v1/topics",
        "/api/v1/topics/{name}",
        "/api/v1/topics/{name}/messages",
        "/api/v1/topics/{name}/partitions/{partition}/messages",
        "/api/v1/groups",
        "/api/v1/groups/{id}",
        "/api/v1/groups/{id}/offsets",
        "/api/v1/routes",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
}

/// A member of `group` reads `count` records of `topic` from the beginning, commits and
/// leaves (as `tinymq consume --group GROUP --from-beginning --count N` does).
fn read_and_leave(bootstrap: &str, topic: &str, group: &str, count: usize) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let mut config = ConsumerConfig::new(bootstrap);
        config.start_from = StartFrom::Earliest;
        let mut consumer = Consumer::new(config).unwrap();
        consumer.subscribe(group, &[topic]).await.unwrap();
        let mut read = 0;
        for _ in 0..300 {
            read += consumer
                .poll(Duration::from_millis(100))
                .await
                .unwrap()
                .len();
            if read >= count {
                break;
            }
        }
        assert_eq!(read, count, "the member read the topic");
        consumer.commit().await.unwrap();
        consumer.close().await.unwrap();
    });
}

fn reset(node: &Endpoints, group: &str, to: serde_json::Value) -> Response {
    node.post(
        &format!("/api/v1/groups/{group}/offsets"),
        &json!({"topic": "events", "to": to}),
    )
}

#[test]
fn groups_describe_reset_and_delete() {
    let node = HttpNode::start(|_, _| {});
    node.wait_ok("/api/v1/topics");
    node.post(
        "/api/v1/topics",
        &json!({"name": "events", "partitions": 1}),
    )
    .expect(201);
    for i in 0..5 {
        node.post(
            "/api/v1/topics/events/messages",
            &json!({"value": format!("e{i}")}),
        )
        .expect(200);
    }
    node.get("/api/v1/groups/readers")
        .expect_problem(404, "GROUP_ID_NOT_FOUND");
    read_and_leave(&node.native, "events", "readers", 5);

    let list = node.get("/api/v1/groups").expect(200);
    assert_eq!(list["groups"][0]["group_id"], "readers", "{list}");
    assert_eq!(list["groups"][0]["members"], 0, "{list}");
    let group = node.get("/api/v1/groups/readers").expect(200);
    assert_eq!(group["members"], json!([]));
    assert_eq!(
        group["offsets"],
        json!([{"topic": "events", "partition": 0, "committed_offset": 5,
                "high_watermark": 5, "lag": 0}])
    );

    // Reset while empty: each target.
    let earliest = reset(&node, "readers", json!("earliest")).expect(200);
    assert_eq!(earliest["offsets"], json!([{"partition": 0, "offset": 0}]));
    let lagging = node.get("/api/v1/groups/readers").expect(200);
    assert_eq!(lagging["offsets"][0]["lag"], 5, "{lagging}");
    let at = reset(&node, "readers", json!({"offset": 2})).expect(200);
    assert_eq!(at["offsets"][0]["offset"], 2);
    let clamped = reset(&node, "readers", json!({"offset": 99})).expect(200);
    assert_eq!(clamped["offsets"][0]["offset"], 5, "past the end: the end");
    let by_time = reset(&node, "readers", json!({"timestamp_ms": 0})).expect(200);
    assert_eq!(by_time["offsets"][0]["offset"], 0);
    let latest = reset(&node, "readers", json!("latest")).expect(200);
    assert_eq!(latest["offsets"][0]["offset"], 5);
    reset(&node, "readers", json!("middle")).expect_problem(400, "MALFORMED_BODY");
    node.post(
        "/api/v1/groups/readers/offsets",
        &json!({"topic": "nope", "to": "earliest"}),
    )
    .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    node.post(
        "/api/v1/groups/readers/offsets",
        &json!({"topic": "events", "to": "earliest", "partitions": [3]}),
    )
    .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");

    // A group with a member: described with its assignment; reset and delete refused.
    let member = NativeMember::start(&node.native, "busy", "events");
    let mut described = serde_json::Value::Null;
    for _ in 0..150 {
        described = node.get("/api/v1/groups/busy").json();
        if described["members"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
            && described["state"] == "stable"
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        described["members"][0]["assignment"],
        json!([{"topic": "events", "partitions": [0]}]),
        "{described}"
    );
    reset(&node, "busy", json!("earliest")).expect_problem(409, "GROUP_NOT_EMPTY");
    node.delete("/api/v1/groups/busy")
        .expect_problem(409, "GROUP_NOT_EMPTY");
    drop(member);

    // Delete.
    assert_eq!(node.delete("/api/v1/groups/readers").status, 204);
    node.get("/api/v1/groups/readers")
        .expect_problem(404, "GROUP_ID_NOT_FOUND");
    node.delete("/api/v1/groups/readers")
        .expect_problem(404, "GROUP_ID_NOT_FOUND");
}
