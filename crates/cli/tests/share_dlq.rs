//! Dead letters end to end (issue 18, must-show): a record a share-group member rejects, and
//! a record that fails five times (released three times, then its lock left to expire twice),
//! land in the dead-letter topic `<topic>.dlq` with their origin headers and their own
//! headers kept; `tinymq dlq replay` moves them back to their topic without the
//! `tinymq.dlq.*` headers (once: a second replay finds nothing new), where a
//! `tinymq consume --share-group` member gets them again; `group describe` shows the counts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Server;
use tinymq_client::share::{describe_share_group, AckKind, ShareConsumer, ShareConsumerConfig};
use tinymq_client::ClientConfig;

fn tool(server: &Server, args: &[&str], stdin: &[u8]) -> String {
    String::from_utf8(server.run_tool(args, stdin).stdout).expect("utf-8")
}

/// Every record of `topic` as (value, headers), read from the start up to its end now.
fn read_topic(server: &Server, topic: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let out = tool(
        server,
        &[
            "consume",
            topic,
            "--from-beginning",
            "--format",
            "json",
            "--timeout-ms",
            "0",
        ],
        b"",
    );
    out.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let headers = v["headers"]
                .as_array()
                .expect("headers")
                .iter()
                .map(|h| {
                    let value = h["value"].as_str().unwrap_or_default().to_string();
                    (h["key"].as_str().expect("key").to_string(), value)
                })
                .collect();
            (v["value"].as_str().expect("value").to_string(), headers)
        })
        .collect()
}

/// Acts as the failing worker until both bad records are dead-lettered: accepts `ok`,
/// rejects `reject-me`, releases `fail-me` on its first three deliveries and leaves the next
/// ones to expire. Returns the delivery counts `fail-me` was seen with.
async fn failing_worker(addr: &str) -> Vec<u32> {
    let mut config = ShareConsumerConfig::new(addr, "g");
    config.lock_ms = 1_000;
    let mut member = ShareConsumer::new(config).unwrap();
    member.subscribe(&["jobs"]).await.unwrap();
    let mut fail_me = Vec::new();
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "gave up: {fail_me:?}"
        );
        for job in member.poll(Duration::from_millis(500)).await.unwrap() {
            let value = job.record.value.clone().unwrap_or_default();
            match &value[..] {
                b"ok" => member.acknowledge(&job, AckKind::Accept).unwrap(),
                b"reject-me" => member.acknowledge(&job, AckKind::Reject).unwrap(),
                b"fail-me" => {
                    fail_me.push(job.delivery_count);
                    if job.delivery_count <= 3 {
                        member.acknowledge(&job, AckKind::Release).unwrap();
                    } // else: its lock expires
                }
                other => panic!("unexpected record {other:?}"),
            }
        }
        let failures = member.flush_acknowledgements().await.unwrap();
        assert!(failures.is_empty(), "{failures:?}");
        let d = describe_share_group(ClientConfig::new(addr), "g")
            .await
            .unwrap();
        if d.partitions
            .iter()
            .map(|p| p.dead_lettered_total)
            .sum::<u64>()
            == 2
        {
            break;
        }
    }
    // Nothing held is left: the expired record was dead-lettered, so its release fails.
    let _ = member.close().await.unwrap();
    fail_me
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_and_failing_records_are_dead_lettered_and_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    tool(&server, &["topic", "create", "jobs"], b"");
    tool(
        &server,
        &["produce", "jobs", "--header", "origin=test"],
        b"ok\nreject-me\nfail-me\n",
    );

    let fail_me = failing_worker(&server.addr).await;
    assert_eq!(
        fail_me,
        vec![1, 2, 3, 4, 5],
        "delivered five times, counted"
    );

    let dlq = read_topic(&server, "jobs.dlq");
    assert_eq!(dlq.len(), 2, "{dlq:?}");
    let by_value: BTreeMap<&str, &BTreeMap<String, String>> =
        dlq.iter().map(|(v, h)| (v.as_str(), h)).collect();
    for (value, offset, attempts, reason) in [
        ("reject-me", "1", "1", "rejected"),
        ("fail-me", "2", "5", "max-attempts"),
    ] {
        let h = by_value
            .get(value)
            .unwrap_or_else(|| panic!("{value} not in {dlq:?}"));
        assert_eq!(h["tinymq.dlq.topic"], "jobs", "{h:?}");
        assert_eq!(h["tinymq.dlq.partition"], "0", "{h:?}");
        assert_eq!(h["tinymq.dlq.offset"], offset, "{h:?}");
        assert_eq!(h["tinymq.dlq.group"], "g", "{h:?}");
        assert_eq!(h["tinymq.dlq.attempts"], attempts, "{h:?}");
        assert_eq!(h["tinymq.dlq.reason"], reason, "{h:?}");
        assert_eq!(
            h["origin"], "test",
            "the record's own headers are kept: {h:?}"
        );
    }

    let described = tool(&server, &["group", "describe", "g", "--json"], b"");
    let d: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(d["partitions"][0]["dead_lettered"], 2, "{described}");
    assert_eq!(d["partitions"][0]["start_offset"], 3, "{described}");
    let text = tool(&server, &["group", "describe", "g"], b"");
    assert!(text.starts_with("share group g"), "{text}");

    let replayed = tool(
        &server,
        &["dlq", "replay", "jobs.dlq", "--timeout-ms", "2000"],
        b"",
    );
    assert!(
        replayed.contains("replayed 2 records from jobs.dlq"),
        "{replayed}"
    );
    let again = tool(
        &server,
        &["dlq", "replay", "jobs.dlq", "--timeout-ms", "1000"],
        b"",
    );
    assert!(
        again.contains("replayed 0 records"),
        "the group resumes: {again}"
    );

    let jobs = read_topic(&server, "jobs");
    let values: Vec<&str> = jobs.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(values[..3], ["ok", "reject-me", "fail-me"]);
    let mut back: Vec<&str> = values[3..].to_vec();
    back.sort_unstable();
    assert_eq!(back, ["fail-me", "reject-me"], "{values:?}");
    for (_, headers) in &jobs[3..] {
        assert!(
            headers.keys().all(|k| !k.starts_with("tinymq.dlq.")),
            "{headers:?}"
        );
        assert_eq!(headers["origin"], "test");
    }

    // The share group resumes past what it finished: a member gets the two replayed records.
    let out = tool(
        &server,
        &[
            "consume",
            "jobs",
            "--share-group",
            "g",
            "--count",
            "2",
            "--format",
            "json",
        ],
        b"",
    );
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    for line in &lines {
        assert_eq!(line["delivery_count"], 1, "{line}");
        assert!(line["offset"].as_i64().unwrap() >= 3, "{line}");
    }
}
