//! The group tools of issue 27: `group list` showing every group with its type (consumer,
//! share, kafka), state, members and lag (and `GET /api/v1/groups`, defect 9); the REST
//! offset reset right after a PATCH grew the topic (defect 5); `group reset-offsets`'s plan,
//! `--execute`, `--partition`, `--shift-by` and `--to-datetime`; `group describe` of an empty
//! group and of unknown lags (item 10).

mod common;

use common::http::Node;
use serde_json::json;

/// Defect 5: the HTTP layer's client answered from routes it had cached before the PATCH
/// grew the topic, so the new partitions were "not there".
#[test]
fn rest_offset_reset_sees_partitions_a_patch_just_added() {
    let data = tempfile::tempdir().unwrap();
    let node = Node::server(data.path());
    node.wait_ok("/api/v1/topics");
    node.post("/api/v1/topics", &json!({"name": "grows", "partitions": 1}))
        .expect(201);
    for i in 0..3 {
        node.post(
            "/api/v1/topics/grows/messages",
            &json!({"value": format!("v{i}")}),
        )
        .expect(200);
    }
    // The HTTP client learns the topic's routes (one partition) first.
    node.post(
        "/api/v1/groups/g5/offsets",
        &json!({"topic": "grows", "to": "earliest"}),
    )
    .expect(200);
    for partitions in 2..=6u32 {
        let grown = node
            .patch("/api/v1/topics/grows", &json!({"partitions": partitions}))
            .expect(200);
        assert_eq!(
            grown["partitions"].as_array().unwrap().len(),
            partitions as usize
        );
        let newest = partitions - 1;
        let reset = node
            .post(
                "/api/v1/groups/g5/offsets",
                &json!({"topic": "grows", "to": "latest", "partitions": [newest]}),
            )
            .expect(200);
        assert_eq!(
            reset["offsets"],
            json!([{"partition": newest, "offset": 0}]),
            "{reset}"
        );
        let all = node
            .post(
                "/api/v1/groups/g5/offsets",
                &json!({"topic": "grows", "to": "earliest"}),
            )
            .expect(200);
        assert_eq!(
            all["offsets"].as_array().unwrap().len(),
            partitions as usize,
            "{all}"
        );
    }
}
