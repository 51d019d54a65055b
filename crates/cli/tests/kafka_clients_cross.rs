//! Cross-protocol (issue 17): a record produced by a Kafka client (confluent-kafka) is what
//! `tinymq consume` prints, with the same key, value, headers (repeated and null-valued ones
//! included), timestamp and offset; and a record written by `tinymq produce` is what kcat and
//! confluent-kafka read; and a group's committed offsets are one set, resumed from by members
//! of either protocol. Clients from `scripts/install-kafka-tools.sh`.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{json_lines, kcat, native_records, python_script, run_ok};
use serde_json::{json, Value};

#[test]
fn a_record_from_confluent_kafka_is_the_same_through_tinymq_consume() {
    let server = KafkaServer::start();
    server.create_topic("crossing", 1);
    // A native record first, so the Kafka producer's lands at offset 1, not the trivial 0.
    run_ok(server.tool(&["produce", "crossing"]), b"native first\n");

    let mut produce = python_script("confluent_clients.py", "confluent_kafka");
    produce.args(["produce-one", &server.kafka, "crossing"]);
    let acked = json_lines(&run_ok(produce, b""));
    let acked = acked.last().expect("delivery report");
    assert_eq!(acked["partition"], 0, "{acked}");
    assert_eq!(acked["offset"], 1, "{acked}");

    let native = native_records(&server, "crossing");
    assert_eq!(native.len(), 2, "{native:?}");
    let record = &native[1];
    assert_eq!(record["offset"], 1, "{record}");
    assert_eq!(record["timestamp"], 1_717_000_000_123_i64, "{record}");
    assert_eq!(record["timestamp"], acked["timestamp"], "{record}");
    assert_eq!(record["key"], "ck", "{record}");
    assert_eq!(record["value"], "cv", "{record}");
    assert_eq!(
        record["headers"],
        json!([
            {"key": "h1", "value": "x", "value_encoding": "utf8"},
            {"key": "h2", "value": null, "value_encoding": "utf8"},
            {"key": "h1", "value": "y", "value_encoding": "utf8"},
        ]),
        "{record}"
    );
}

#[test]
fn a_record_from_tinymq_produce_is_the_same_through_kcat_and_confluent_kafka() {
    let server = KafkaServer::start();
    server.create_topic("outbound", 1);
    let lines = concat!(
        r#"{"timestamp":1717000000456,"key":"nk1","value":"nv1","headers":[{"key":"a","value":"1"},{"key":"b","value":null}]}"#,
        "\n",
        r#"{"timestamp":1717000000789,"key":"nk2","value":"nv2","headers":[{"key":"a","value":"2"}]}"#,
        "\n",
    );
    let mut produce = server.tool(&["produce", "outbound", "--input-format", "json"]);
    produce.env("TINYMQ_LOG", "warn");
    run_ok(produce, lines.as_bytes());
    let native = native_records(&server, "outbound");
    assert_eq!(native.len(), 2, "{native:?}");

    let mut kcat_consume = kcat();
    kcat_consume.args([
        "-b",
        &server.kafka,
        "-C",
        "-t",
        "outbound",
        "-o",
        "beginning",
    ]);
    kcat_consume.args(["-e", "-J"]);
    let by_kcat = json_lines(&run_ok(kcat_consume, b""));
    assert_eq!(by_kcat.len(), 2, "{by_kcat:?}");

    let mut confluent_consume = python_script("confluent_clients.py", "confluent_kafka");
    confluent_consume.args(["consume", &server.kafka, "outbound", "2"]);
    let by_confluent = json_lines(&run_ok(confluent_consume, b""));
    assert_eq!(by_confluent.len(), 2, "{by_confluent:?}");

    let expected_headers = [json!([["a", "1"], ["b", null]]), json!([["a", "2"]])];
    for (i, stored) in native.iter().enumerate() {
        let (k, c) = (&by_kcat[i], &by_confluent[i]);
        for (theirs, value, timestamp) in [(k, "payload", "ts"), (c, "value", "timestamp")] {
            assert_eq!(theirs["offset"], stored["offset"], "{theirs} vs {stored}");
            assert_eq!(theirs["key"], stored["key"], "{theirs} vs {stored}");
            assert_eq!(theirs[value], stored["value"], "{theirs} vs {stored}");
            assert_eq!(
                theirs[timestamp], stored["timestamp"],
                "{theirs} vs {stored}"
            );
        }
        assert_eq!(c["headers"], expected_headers[i], "{c}");
        // kcat prints headers as one flat list: name, value, name, value...
        let flat: Vec<Value> = expected_headers[i]
            .as_array()
            .expect("pairs")
            .iter()
            .flat_map(|pair| pair.as_array().expect("pair").clone())
            .collect();
        assert_eq!(k["headers"], Value::Array(flat), "{k}");
    }
}

/// One set of committed offsets: a native group member's commit is where a confluent-kafka
/// member of the same group starts, and its commit is where the next native member starts
/// (members of one protocol at a time: each leaves before the other joins).
#[test]
fn a_group_resumes_across_protocols_from_one_set_of_committed_offsets() {
    let server = KafkaServer::start();
    server.create_topic("handover", 1);
    let lines: String = (0..10).map(|i| format!("m{i}\n")).collect();
    run_ok(server.tool(&["produce", "handover"]), lines.as_bytes());

    let native_member = [
        "consume",
        "handover",
        "--group",
        "relay",
        "--from-beginning",
    ];
    let mut first = server.tool(&native_member);
    first.args(["--count", "4"]);
    assert_eq!(run_ok(first, b""), "m0\nm1\nm2\nm3\n");

    let mut kafka_member = python_script("confluent_clients.py", "confluent_kafka");
    kafka_member.args(["group-consume", &server.kafka, "handover", "relay", "3"]);
    let read = json_lines(&run_ok(kafka_member, b""));
    let offsets: Vec<&Value> = read.iter().map(|r| &r["offset"]).collect();
    assert_eq!(offsets, [4, 5, 6], "{read:?}");
    assert_eq!(read[0]["value"], "m4", "{read:?}");

    let described = run_ok(server.tool(&["group", "describe", "relay", "--json"]), b"");
    let described: Value = serde_json::from_str(&described).expect("group describe --json");
    assert_eq!(
        described["partitions"][0]["committed_offset"], 7,
        "{described}"
    );
    assert_eq!(described["members"], json!([]), "{described}");

    let mut last = server.tool(&native_member);
    last.args(["--count", "3"]);
    assert_eq!(run_ok(last, b""), "m7\nm8\nm9\n");
}
