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

/// Runs `tinymq ARGS` against `server` (native address) with `stdin`; asserts success.
fn tool(server: &str, args: &[&str], stdin: &[u8]) -> String {
    let mut command = std::process::Command::new(common::BIN);
    command
        .args(args)
        .env("TINYMQ_BOOTSTRAP", server)
        .env("TINYMQ_LOG", "warn");
    let out = common::run_succeeding(&mut command, stdin);
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs `tinymq ARGS`, which must fail; returns its stderr.
fn tool_fails(server: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(common::BIN)
        .args(args)
        .env("TINYMQ_BOOTSTRAP", server)
        .env("TINYMQ_LOG", "warn")
        .output()
        .expect("run tinymq");
    assert!(!out.status.success(), "tinymq {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A topic of one partition with `records` records, read by consumer group `consumer` to
/// its end and by share group `share` once (`consume --share-group G --count 1`).
fn groups_of_two_kinds(server: &str, topic: &str, records: usize, consumer: &str, share: &str) {
    tool(
        server,
        &["topic", "create", topic, "--partitions", "1"],
        b"",
    );
    let input: String = (0..records).map(|i| format!("r{i}\n")).collect();
    tool(server, &["produce", topic], input.as_bytes());
    let count = records.to_string();
    tool(
        server,
        &[
            "consume",
            topic,
            "--group",
            consumer,
            "--from-beginning",
            "--count",
            &count,
        ],
        b"",
    );
    tool(
        server,
        &["consume", topic, "--share-group", share, "--count", "1"],
        b"",
    );
}

/// The row of `group` of `type` in `group list --json`.
fn listed(list: &serde_json::Value, group: &str, group_type: &str) -> serde_json::Value {
    list["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == group && g["type"] == group_type)
        .cloned()
        .unwrap_or_else(|| panic!("no {group_type} group {group} in {list}"))
}

/// Defect 9: `group list` showed consumer-group ids only; share groups (state on the
/// partition leaders) and Kafka-protocol groups (the Kafka listener's coordinator) were
/// missing. Now each is listed with its type, state, members and lag.
#[test]
fn group_list_shows_consumer_share_and_kafka_groups() {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{ConsumerProtocolSubscription, GroupId, JoinGroupRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    let server = common::kafka::KafkaServer::start();
    groups_of_two_kinds(&server.native, "jobs", 5, "readers", "workers");

    // A Kafka-protocol member of group "kafka-readers": its join is answered once the join
    // phase ends; the group has a member from the first join on.
    let mut kafka = server.connect();
    let s = |text: &str| StrBytes::from_string(text.to_string());
    let mut subscription = BytesMut::new();
    subscription.put_i16(0);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![s("jobs")])
        .encode(&mut subscription, 0)
        .unwrap();
    let subscription = subscription.freeze();
    let join = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("kafka-readers")))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription.clone())])
    };
    let first = kafka.call(9, &join(""));
    let member_id = first.member_id.to_string();
    let joined = kafka.call(9, &join(&member_id));
    assert_eq!(joined.error_code, 0, "{joined:?}");

    let list = json_of(&tool(&server.native, &["group", "list", "--json"], b""));
    let readers = listed(&list, "readers", "consumer");
    assert_eq!(readers["state"], "empty", "{list}");
    assert_eq!(readers["members"], 0, "{list}");
    assert_eq!(readers["lag"], 0, "{list}");
    let workers = listed(&list, "workers", "share");
    assert_eq!(workers["state"], "empty", "{list}");
    assert_eq!(workers["members"], 0, "{list}");
    assert_eq!(workers["lag"], 4, "5 records, 1 accepted: {list}");
    let kafka_group = listed(&list, "kafka-readers", "kafka");
    assert_eq!(kafka_group["members"], 1, "{list}");
    assert_ne!(kafka_group["state"], "empty", "{list}");
    assert!(
        !list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group_id"] == "kafka-readers" && g["type"] == "consumer"),
        "a Kafka group is listed once: {list}"
    );

    // The text table: one row per group, with its type.
    let text = tool(&server.native, &["group", "list"], b"");
    let row = |group: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(group))
            .unwrap_or_else(|| panic!("no row for {group}: {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("readers"), ["readers", "consumer", "empty", "0", "0"]);
    assert_eq!(row("workers"), ["workers", "share", "empty", "0", "4"]);
    assert_eq!(row("kafka-readers")[1], "kafka", "{text}");
}

/// Defect 9 through REST: `GET /api/v1/groups` lists the share group with its type and lag,
/// and `GET /api/v1/groups/{id}` describes it (it answered 404).
#[test]
fn rest_lists_and_describes_share_groups() {
    let data = tempfile::tempdir().unwrap();
    let node = Node::server(data.path());
    node.wait_ok("/api/v1/topics");
    groups_of_two_kinds(&node.native, "tasks", 3, "readers", "workers");

    let list = node.get("/api/v1/groups").expect(200);
    assert_eq!(list["truncated"], false);
    assert_eq!(
        list["groups"],
        json!([
            {"group_id": "readers", "type": "consumer", "state": "empty", "members": 0, "lag": 0},
            {"group_id": "workers", "type": "share", "state": "empty", "members": 0, "lag": 2},
        ]),
        "{list}"
    );
    let share = node.get("/api/v1/groups/workers").expect(200);
    assert_eq!(share["type"], "share", "{share}");
    assert_eq!(share["state"], "empty", "{share}");
    assert_eq!(share["members"], json!([]), "{share}");
    let p = &share["partitions"][0];
    assert_eq!(
        (p["topic"].clone(), p["partition"].clone()),
        (json!("tasks"), json!(0))
    );
    assert_eq!(p["high_watermark"], 3, "{share}");
    assert_eq!(
        p["accepted"].as_u64().unwrap() + p["start_offset"].as_u64().unwrap(),
        1,
        "{share}"
    );
    for field in [
        "end_offset",
        "acquired",
        "available",
        "dead_lettered",
        "not_yet_delivered",
        "in_flight",
    ] {
        assert!(!p[field].is_null(), "{field} in {share}");
    }
    // The same fields `group describe --json` prints.
    let described = json_of(&tool(
        &node.native,
        &["group", "describe", "workers", "--json"],
        b"",
    ));
    assert_eq!(described["partitions"], share["partitions"], "{described}");

    let consumer = node.get("/api/v1/groups/readers").expect(200);
    assert_eq!(consumer["type"], "consumer", "{consumer}");
    assert_eq!(consumer["offsets"][0]["lag"], 0, "{consumer}");
    node.get("/api/v1/groups/nobody")
        .expect_problem(404, "GROUP_ID_NOT_FOUND");
}

/// The group's committed offsets of `topic` by partition, from `group describe --json`
/// (`None`: nothing committed).
fn committed(server: &str, group: &str) -> Vec<Option<i64>> {
    let d = json_of(&tool(server, &["group", "describe", group, "--json"], b""));
    d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["committed_offset"].as_i64())
        .collect()
}

/// `group reset-offsets` walks each new flag: without `--execute` it prints the plan and
/// changes nothing; `--partition` (repeated or a list), `--shift-by` (back and forth, kept
/// in the stored range), `--to-datetime`; bad input is refused clearly. And `group
/// describe` of a group without members prints no `strategy ,` (item 10).
#[test]
fn reset_offsets_plans_then_executes_per_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let server = common::Server::start(tmp.path());
    let s = server.addr.as_str();
    tool(s, &["topic", "create", "r", "--partitions", "3"], b"");
    for p in 0..3 {
        let input: String = (0..10).map(|i| format!("p{p}-{i}\n")).collect();
        tool(
            s,
            &["produce", "r", "--partition", &p.to_string()],
            input.as_bytes(),
        );
    }
    tool(
        s,
        &[
            "consume",
            "r",
            "--group",
            "g",
            "--from-beginning",
            "--count",
            "30",
        ],
        b"",
    );
    assert_eq!(committed(s, "g"), [Some(10), Some(10), Some(10)]);
    let describe = tool(s, &["group", "describe", "g"], b"");
    let first = describe.lines().next().unwrap();
    assert!(!first.contains("strategy"), "no strategy: {first}");
    assert!(describe.contains("total lag 0"), "{describe}");

    // A plan: printed, nothing changed.
    let plan = tool(
        s,
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "r",
            "--to-earliest",
        ],
        b"",
    );
    assert!(plan.contains("dry run: nothing changed"), "{plan}");
    let rows: Vec<Vec<&str>> = plan
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cols| cols.len() == 3 && cols[0].parse::<u32>().is_ok())
        .collect();
    assert_eq!(
        rows,
        [["0", "10", "0"], ["1", "10", "0"], ["2", "10", "0"]],
        "{plan}"
    );
    assert_eq!(committed(s, "g"), [Some(10), Some(10), Some(10)]);

    // --execute, one partition.
    let done = tool(
        s,
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "r",
            "--to-earliest",
            "--partition",
            "1",
            "--execute",
        ],
        b"",
    );
    assert!(done.contains("committed"), "{done}");
    assert_eq!(committed(s, "g"), [Some(10), Some(0), Some(10)]);

    // --shift-by back on a list of partitions, and forth past the end (kept at the end).
    let args = ["group", "reset-offsets", "g", "--topic", "r"];
    let run = |extra: &[&str]| tool(s, &[&args[..], extra].concat(), b"");
    run(&["--shift-by", "-3", "--partition", "0,2", "--execute"]);
    assert_eq!(committed(s, "g"), [Some(7), Some(0), Some(7)]);
    run(&[
        "--shift-by",
        "4",
        "--partition",
        "0",
        "--partition",
        "1",
        "--execute",
    ]);
    assert_eq!(committed(s, "g"), [Some(10), Some(4), Some(7)]);
    run(&["--shift-by", "-100", "--execute"]);
    assert_eq!(committed(s, "g"), [Some(0), Some(0), Some(0)]);

    // --to-datetime: a time before every record is each partition's start; one after
    // every record, the end.
    run(&["--to-datetime", "2100-01-01T00:00:00Z", "--execute"]);
    assert_eq!(committed(s, "g"), [Some(10), Some(10), Some(10)]);
    run(&[
        "--to-datetime",
        "2000-01-01T00:00:00+01:00",
        "--partition",
        "2",
        "--execute",
    ]);
    assert_eq!(committed(s, "g"), [Some(10), Some(10), Some(0)]);
    run(&["--to-offset", "5", "--execute"]);
    assert_eq!(committed(s, "g"), [Some(5), Some(5), Some(5)]);
    let lagging = tool(s, &["group", "describe", "g"], b"");
    assert!(lagging.contains("total lag 15"), "{lagging}");

    // Bad input: refused, nothing changed.
    let refused = |extra: &[&str], says: &str| {
        let err = tool_fails(s, &[&args[..], extra].concat());
        assert!(err.contains(says), "{extra:?}: {err}");
    };
    refused(
        &["--to-earliest", "--partition", "3", "--execute"],
        "has no partition 3",
    );
    refused(&["--to-datetime", "yesterday"], "RFC 3339");
    refused(&["--to-earliest", "--shift-by", "1"], "cannot be used with");
    refused(&["--execute"], "say where to");
    let fresh = tool_fails(
        s,
        &[
            "group",
            "reset-offsets",
            "new",
            "--topic",
            "r",
            "--shift-by",
            "1",
        ],
    );
    assert!(fresh.contains("no committed offset"), "{fresh}");
    assert_eq!(committed(s, "g"), [Some(5), Some(5), Some(5)]);
}
