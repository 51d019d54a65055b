//! Issue 27's tool flags, each used against a real `tinymq server` and its output checked:
//! `topic create --config/--if-not-exists`, `topic delete --if-exists`, `topic list
//! --long/--json`, the share-group settings in `topic describe` and `topic alter`,
//! `produce --print-offsets`, `consume --print` and `consume --from-time`.

mod common;

use std::process::Output;

use common::{run_with_input, Server};
use serde_json::Value;

/// 2026-01-01T00:00:00Z in ms since the epoch: records of the --from-time test are stamped
/// minute by minute from here.
const NEW_YEAR_MS: i64 = 1_767_225_600_000;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(server: &Server, args: &[&str], stdin: &[u8]) -> String {
    stdout(&server.run_tool(args, stdin))
}

/// Runs a tool that must fail; returns its stderr.
fn refused(server: &Server, args: &[&str]) -> String {
    let out = run_with_input(&mut server.tool(args), b"");
    assert!(
        !out.status.success(),
        "{args:?} succeeded: {}",
        stdout(&out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn describe(server: &Server, topic: &str) -> Value {
    let out = ok(server, &["topic", "describe", topic, "--json"], b"");
    serde_json::from_str(&out).expect("describe --json prints JSON")
}

fn topics(server: &Server) -> Vec<String> {
    ok(server, &["topic", "list"], b"")
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn topic_create_config_if_not_exists_and_delete_if_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());

    // --config takes alter's names, share-group ones included, applied at creation.
    let created = ok(
        &server,
        &[
            "topic",
            "create",
            "q",
            "--partitions",
            "2",
            "--config",
            "max_delivery_attempts=3",
            "--config",
            "dead_letter_topic=q.failed",
            "--config",
            "retention_ms=60000",
            "--config",
            "flush=os",
        ],
        b"",
    );
    assert!(
        created.contains("created topic q with 2 partitions"),
        "{created}"
    );
    assert!(created.contains("max_delivery_attempts 3"), "{created}");
    let d = describe(&server, "q");
    let c = &d["config"];
    assert_eq!(c["max_delivery_attempts"], 3, "{d}");
    assert_eq!(c["dead_letter_topic"], "q.failed", "{d}");
    assert_eq!(c["retention_ms"], 60000, "{d}");
    assert_eq!(c["flush"], "os", "{d}");

    // The text describe shows every setting too.
    let text = ok(&server, &["topic", "describe", "q"], b"");
    let first = text.lines().next().unwrap_or_default();
    for shown in [
        "max_delivery_attempts 3",
        "dead_letter_topic q.failed",
        "retention_ms 60000",
        "segment_ms 0",
        "message_timestamp_after_max_ms",
        "message_timestamp_before_max_ms",
    ] {
        assert!(first.contains(shown), "{shown:?} missing from {first}");
    }

    // A topic never given them shows the defaults in force.
    ok(&server, &["topic", "create", "plain"], b"");
    let plain = describe(&server, "plain");
    assert_eq!(plain["config"]["max_delivery_attempts"], 5, "{plain}");
    assert_eq!(plain["config"]["dead_letter_topic"], "plain.dlq", "{plain}");
    let c = &plain["config"];
    assert_eq!(c["cleanup_policy"], "delete", "{plain}");
    assert_eq!(c["delete_retention_ms"], 86_400_000, "{plain}");
    assert_eq!(c["min_compaction_lag_ms"], 0, "{plain}");
    assert_eq!(c["max_compaction_lag_ms"], -1, "{plain}");
    assert_eq!(c["min_cleanable_dirty_ratio"], 0.5, "{plain}");

    // The compaction settings go through --config like the others, in Kafka's spellings too.
    let created = ok(
        &server,
        &[
            "topic",
            "create",
            "latest",
            "--config",
            "cleanup_policy=delete,compact",
            "--config",
            "min_cleanable_dirty_ratio=0.1",
            "--config",
            "delete_retention_ms=0",
        ],
        b"",
    );
    assert!(
        created.contains("cleanup_policy compact,delete,"),
        "{created}"
    );
    let c = &describe(&server, "latest")["config"];
    assert_eq!(c["cleanup_policy"], "compact,delete", "{c}");
    assert_eq!(c["min_cleanable_dirty_ratio"], 0.1, "{c}");
    assert_eq!(c["delete_retention_ms"], 0, "{c}");

    // Alter's checks apply, naming the key, and a refused create leaves no topic behind.
    for (bad, key) in [
        ("max_delivery_attempts=0", "max_delivery_attempts"),
        ("dead_letter_topic=__internal", "dead_letter_topic"),
        ("colour=blue", "colour"),
        ("retention_ms=soon", "retention_ms"),
        ("cleanup_policy=shred", "cleanup_policy"),
        ("max_compaction_lag_ms=0", "max_compaction_lag_ms"),
    ] {
        let why = refused(&server, &["topic", "create", "wrong", "--config", bad]);
        assert!(why.contains(key), "{bad}: {why}");
        assert!(!topics(&server).contains(&"wrong".to_string()), "{bad}");
    }
    let why = refused(&server, &["topic", "create", "wrong", "--config", "nokey"]);
    assert!(why.contains("KEY=VALUE"), "{why}");

    // --if-not-exists: an existing topic is left as it is, --config included.
    let again = ok(
        &server,
        &[
            "topic",
            "create",
            "q",
            "--if-not-exists",
            "--config",
            "max_delivery_attempts=9",
        ],
        b"",
    );
    assert!(again.contains("exists already"), "{again}");
    assert_eq!(describe(&server, "q")["config"]["max_delivery_attempts"], 3);
    let why = refused(&server, &["topic", "create", "q"]);
    assert!(why.contains("TOPIC_ALREADY_EXISTS"), "{why}");
    // ...and a topic that does not exist is created.
    ok(
        &server,
        &["topic", "create", "fresh", "--if-not-exists"],
        b"",
    );
    assert!(topics(&server).contains(&"fresh".to_string()));

    // --if-exists: a missing topic is no error; an existing one is deleted.
    let gone = ok(&server, &["topic", "delete", "nope", "--if-exists"], b"");
    assert!(gone.contains("nothing deleted"), "{gone}");
    let why = refused(&server, &["topic", "delete", "nope"]);
    assert!(why.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{why}");
    ok(&server, &["topic", "delete", "fresh", "--if-exists"], b"");
    assert!(!topics(&server).contains(&"fresh".to_string()));
}

#[test]
fn topic_alter_shows_and_sets_the_share_group_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let help = ok(&server, &["topic", "alter", "--help"], b"");
    assert!(
        help.contains("max_delivery_attempts") && help.contains("dead_letter_topic"),
        "{help}"
    );
    ok(&server, &["topic", "create", "q"], b"");
    let altered = ok(
        &server,
        &[
            "topic",
            "alter",
            "q",
            "--set",
            "max_delivery_attempts=7",
            "--set",
            "dead_letter_topic=q.dead",
        ],
        b"",
    );
    // Every setting is echoed, the changed ones with their new values.
    for shown in [
        "max_delivery_attempts 7",
        "dead_letter_topic q.dead",
        "retention_ms",
        "message_bytes_max",
    ] {
        assert!(altered.contains(shown), "{shown:?} missing from {altered}");
    }
    let altered = ok(
        &server,
        &["topic", "alter", "q", "--unset", "max_delivery_attempts"],
        b"",
    );
    assert!(altered.contains("max_delivery_attempts 5"), "{altered}");
    let d = describe(&server, "q");
    assert_eq!(d["config"]["max_delivery_attempts"], 5, "{d}");
    assert_eq!(d["config"]["dead_letter_topic"], "q.dead", "{d}");
}

#[test]
fn topic_list_long_and_json_show_partitions_replicas_and_size() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    ok(
        &server,
        &["topic", "create", "full", "--partitions", "3"],
        b"",
    );
    ok(&server, &["topic", "create", "empty"], b"");
    let input: String = (0..30).map(|i| format!("record-{i}\n")).collect();
    ok(&server, &["produce", "full"], input.as_bytes());

    // Plain: the names only, one a line (for scripts).
    assert_eq!(topics(&server), ["empty", "full"]);

    let json: Value =
        serde_json::from_str(&ok(&server, &["topic", "list", "--json"], b"")).expect("JSON");
    let listed = json["topics"].as_array().expect("topics");
    assert_eq!(listed.len(), 2, "{json}");
    let full = listed.iter().find(|t| t["name"] == "full").expect("full");
    assert_eq!(
        (&full["partitions"], &full["replication_factor"]),
        (&3.into(), &1.into())
    );
    // The size is the partitions' bytes on disk, as describe reports them.
    let d = describe(&server, "full");
    let on_disk: u64 = d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["size_bytes"].as_u64().expect("known"))
        .sum();
    assert!(on_disk > 0, "{d}");
    assert_eq!(full["size_bytes"], on_disk, "{json}");
    let empty = listed.iter().find(|t| t["name"] == "empty").expect("empty");
    assert_eq!(empty["size_bytes"], 0, "{json}");

    let long = ok(&server, &["topic", "list", "--long"], b"");
    let lines: Vec<Vec<&str>> = long
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "PARTITIONS", "REPLICAS", "BYTES"],
        "{long}"
    );
    let row = lines.iter().find(|l| l[0] == "full").expect("full row");
    assert_eq!(row[1..], ["3", "1", &on_disk.to_string()], "{long}");
    assert_eq!(ok(&server, &["topic", "list", "-l"], b""), long);
}

#[test]
fn produce_print_offsets_and_consume_print_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    ok(&server, &["topic", "create", "t", "--partitions", "2"], b"");
    // Records alternating between the partitions, in input order.
    let input = "0:a\n1:b\n0:c\n1:d\n0:e\n";
    let offsets = ok(
        &server,
        &[
            "produce",
            "t",
            "--key-separator",
            ":",
            "--header",
            "h=v",
            "--print-offsets",
        ],
        input.as_bytes(),
    );
    // Keys "0" and "1" may hash to either partition, but each key always to the same one.
    let lines: Vec<(String, String)> = offsets
        .lines()
        .map(|l| {
            let (p, o) = l.split_once('\t').expect("PARTITION<TAB>OFFSET");
            (p.to_string(), o.to_string())
        })
        .collect();
    assert_eq!(lines.len(), 5, "one line per input record: {offsets}");
    let (even, odd) = (&lines[0].0, &lines[1].0);
    for (i, (p, _)) in lines.iter().enumerate() {
        assert_eq!(p, if i % 2 == 0 { even } else { odd }, "{offsets}");
    }

    // consume --print shows where each landed: the same partition and offset per value.
    let printed = ok(
        &server,
        &[
            "consume",
            "t",
            "--from-beginning",
            "--timeout-ms",
            "0",
            "--print",
            "key,partition,offset,timestamp,headers",
        ],
        b"",
    );
    let mut by_value = std::collections::BTreeMap::new();
    for line in printed.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 6, "value last when not named: {line:?}");
        assert!(
            f[3].parse::<i64>().expect("timestamp ms") > NEW_YEAR_MS,
            "{line}"
        );
        assert_eq!(f[4], "h=v", "{line}");
        by_value.insert(
            f[5].to_string(),
            (f[0].to_string(), f[1].to_string(), f[2].to_string()),
        );
    }
    for (i, value) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let (key, partition, offset) = &by_value[*value];
        assert_eq!(key, if i % 2 == 0 { "0" } else { "1" }, "{printed}");
        assert_eq!(
            (partition, offset),
            (&lines[i].0, &lines[i].1),
            "{value}: {printed}"
        );
    }

    // The value can be placed anywhere; an unknown field or JSON output is refused.
    let one = ok(
        &server,
        &[
            "consume",
            "t",
            "--from-beginning",
            "--timeout-ms",
            "0",
            "--partition",
            even,
            "--print",
            "value,offset",
        ],
        b"",
    );
    assert_eq!(one.lines().next(), Some("a\t0"), "{one}");
    let why = refused(&server, &["consume", "t", "--print", "colour"]);
    assert!(why.contains("colour"), "{why}");
    let why = refused(
        &server,
        &[
            "consume",
            "t",
            "--print",
            "key",
            "--format",
            "json",
            "--timeout-ms",
            "0",
        ],
    );
    assert!(why.contains("--print"), "{why}");

    // --acks 0 gives no offset; a line that cannot be a record gets `-` for both.
    let unacked = ok(
        &server,
        &[
            "produce",
            "t",
            "--acks",
            "0",
            "--partition",
            "1",
            "--print-offsets",
        ],
        b"x\n",
    );
    assert_eq!(unacked, "1\t-\n");
    let out = run_with_input(
        &mut server.tool(&["produce", "t", "--input-format", "json", "--print-offsets"]),
        b"{\"value\":\"ok\"}\nnot json\n{\"value\":\"ok2\"}\n",
    );
    assert!(!out.status.success(), "a bad line fails the produce");
    let lines: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[1], "-\t-", "{lines:?}");
    assert!(lines[0] != "-\t-" && lines[2] != "-\t-", "{lines:?}");
}

#[test]
fn consume_from_time_starts_each_partition_at_the_first_record_that_recent() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    ok(&server, &["topic", "create", "t", "--partitions", "2"], b"");
    // Ten records a minute apart from 2026-01-01T00:00Z, spread over both partitions.
    let input: String = (0..10)
        .map(|i| {
            let at = NEW_YEAR_MS + i * 60_000;
            format!("{{\"key\":\"k{i}\",\"value\":\"m{i}\",\"timestamp\":{at}}}\n")
        })
        .collect();
    ok(
        &server,
        &["produce", "t", "--input-format", "json"],
        input.as_bytes(),
    );
    let from = |time: &str| -> Vec<String> {
        let out = ok(
            &server,
            &["consume", "t", "--from-time", time, "--timeout-ms", "0"],
            b"",
        );
        let mut values: Vec<String> = out.lines().map(String::from).collect();
        values.sort();
        values
    };
    let later: Vec<String> = (6..10).map(|i| format!("m{i}")).collect();
    assert_eq!(from("2026-01-01T00:06:00Z"), later);
    // The same time with an offset, and as ms; a time between records starts at the next.
    assert_eq!(from("2026-01-01T01:06:00+01:00"), later);
    assert_eq!(from(&(NEW_YEAR_MS + 6 * 60_000).to_string()), later);
    assert_eq!(from(&(NEW_YEAR_MS + 5 * 60_000 + 1).to_string()), later);
    assert_eq!(from("2025-12-31T23:00:00Z").len(), 10);
    // After every record: nothing now (each partition starts at its end).
    assert!(from("2026-06-01T00:00:00Z").is_empty());

    // In a group: where it has no committed offset.
    let group = ok(
        &server,
        &[
            "consume",
            "t",
            "--group",
            "g",
            "--from-time",
            "2026-01-01T00:08:00Z",
            "--timeout-ms",
            "0",
        ],
        b"",
    );
    let mut values: Vec<&str> = group.lines().collect();
    values.sort();
    assert_eq!(values, ["m8", "m9"], "{group}");

    let why = refused(&server, &["consume", "t", "--from-time", "yesterday"]);
    assert!(why.contains("RFC 3339"), "{why}");
    let why = refused(
        &server,
        &["consume", "t", "--from-time", "1", "--from-beginning"],
    );
    assert!(why.contains("--from-beginning"), "{why}");
}
