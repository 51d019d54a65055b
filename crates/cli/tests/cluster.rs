//! A cluster of separate processes: three MetaServer nodes and three brokers (a fourth joins
//! later). Placement spreads leaders evenly; any broker routes clients to every partition;
//! consumer groups work across brokers; topic changes sent right after the Raft leader's
//! SIGKILL wait out the election and succeed, and the killed node catches up after a restart; a broker killed with SIGKILL is fenced, its partitions go
//! offline, and after a restart it re-registers and serves them with its data intact; a broker
//! that joins later leads partitions of a new topic.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::{free_port, leader, start, MetaProc, RawClient, Server, BIN};
use tinymq_protocol::{messages as m, ErrorCode};

fn tool(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("run tinymq")
}

fn tool_ok(args: &[&str]) -> String {
    let out = tool(args);
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn describe(topic: &str, bootstrap: &str) -> serde_json::Value {
    let out = tool_ok(&[
        "topic",
        "describe",
        topic,
        "--json",
        "--bootstrap",
        bootstrap,
    ]);
    serde_json::from_str(&out).expect("describe prints JSON")
}

/// Partition index → leader id (0 here for offline: `null` in the JSON).
fn leaders(topic: &str, bootstrap: &str) -> Vec<u64> {
    describe(topic, bootstrap)["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| match &p["leader"] {
            serde_json::Value::Null => 0,
            id => id.as_u64().expect("a leader id or null"),
        })
        .collect()
}

fn leader_counts(leaders: &[u64]) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for l in leaders {
        *counts.entry(*l).or_insert(0) += 1;
    }
    counts
}

fn produce(topic: &str, bootstrap: &str, lines: &[String]) {
    let mut child = Command::new(BIN)
        .args([
            "produce",
            topic,
            "--key-separator",
            ":",
            "--bootstrap",
            bootstrap,
        ])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn produce");
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, lines.join("\n").as_bytes()).expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("produce");
    assert!(
        out.status.success(),
        "produce: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `count` keyed lines `k<i>:<prefix>-<i>` for `produce`, and their values sorted as
/// `consume_all` returns them.
fn keyed_lines(prefix: &str, count: usize) -> (Vec<String>, Vec<String>) {
    let values: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:04}")).collect();
    let lines = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("k{i}:{v}"))
        .collect();
    let mut sorted = values;
    sorted.sort();
    (lines, sorted)
}

/// Every value of the topic, sorted (the order across partitions is not defined).
fn consume_all(topic: &str, bootstrap: &str, count: usize, group: Option<&str>) -> Vec<String> {
    let count_arg = count.to_string();
    let mut args = vec![
        "consume",
        topic,
        "--from-beginning",
        "--count",
        &count_arg,
        "--bootstrap",
        bootstrap,
    ];
    if let Some(g) = group {
        args.extend(["--group", g]);
    }
    let mut values: Vec<String> = tool_ok(&args).lines().map(String::from).collect();
    values.sort();
    values
}

fn broker_live(meta: &str, id: u64) -> Option<bool> {
    let out = tool(&["cluster", "status", "--json", "--bootstrap", meta]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    status["brokers"]
        .as_array()?
        .iter()
        .find(|b| b["id"].as_u64() == Some(id))
        .and_then(|b| b["live"].as_bool())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..150 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn three_metaservers_and_three_brokers_place_route_fail_over_and_grow() {
    let tmp = tempfile::tempdir().unwrap();
    let meta_addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut metas: Vec<Option<MetaProc>> = (1..=3)
        .map(|id| Some(start(id, &meta_addrs, tmp.path())))
        .collect();
    let meta_list = meta_addrs.join(",");
    let broker_addrs: Vec<String> = (0..4)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let broker_dir = |id: usize| tmp.path().join(format!("broker-{id}"));
    let mut brokers: Vec<Server> = (1..=3)
        .map(|id| {
            Server::start_broker(
                id as u32,
                &broker_addrs[id - 1],
                &meta_list,
                &broker_dir(id),
            )
        })
        .collect();
    let (b1, b2, b3) = (&broker_addrs[0], &broker_addrs[1], &broker_addrs[2]);

    // Placement: six partitions, two leaders per broker, seen the same through any broker.
    // One copy each (the default is three): the failover below checks that a partition whose
    // only copy is down stays offline.
    tool_ok(&[
        "topic",
        "create",
        "orders",
        "--partitions",
        "6",
        "--replicas",
        "1",
        "--bootstrap",
        b1,
    ]);
    let placed = leaders("orders", b3);
    assert_eq!(leader_counts(&placed), [(1, 2), (2, 2), (3, 2)].into());
    let described = describe("orders", b2);
    for p in described["partitions"].as_array().unwrap() {
        assert_eq!(p["replicas"], serde_json::json!([p["leader"]]));
        assert_eq!(p["isr"], serde_json::json!([p["leader"]]));
    }

    // A broker that does not lead a partition says so and names the leader.
    let (index, led_by) = placed
        .iter()
        .enumerate()
        .find(|(_, l)| **l != 3)
        .map(|(i, l)| (i as u32, *l))
        .unwrap();
    let answer = RawClient::handshaken(b3).call(&m::ListOffsetsRequest {
        partitions: vec![m::ListOffsetsPartition {
            topic: "orders".into(),
            partition: index,
            timestamp: -1,
        }],
        isolation_level: 0,
    });
    let result = &answer.partitions[0];
    assert_eq!(
        result.error.as_ref().map(|e| e.code),
        Some(u32::from(ErrorCode::NOT_LEADER.code()))
    );
    assert_eq!(u64::from(result.current_leader), led_by);

    // Replica lists of the requested length on distinct brokers; the ISR starts as the
    // leader alone and grows as followers catch up. More replicas than live brokers is
    // refused.
    tool_ok(&[
        "topic",
        "create",
        "copies",
        "--partitions",
        "3",
        "--replicas",
        "3",
        "--bootstrap",
        b2,
    ]);
    for p in describe("copies", b1)["partitions"].as_array().unwrap() {
        let mut replicas: Vec<u64> = p["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect();
        assert_eq!(p["replicas"][0], p["leader"], "the preferred leader leads");
        let isr = p["isr"].as_array().unwrap();
        assert!(isr.contains(&p["leader"]), "{p}");
        assert!(
            isr.iter()
                .all(|r| p["replicas"].as_array().unwrap().contains(r)),
            "{p}"
        );
        replicas.sort_unstable();
        assert_eq!(replicas, vec![1, 2, 3]);
    }
    assert!(!tool(&[
        "topic",
        "create",
        "too-many",
        "--replicas",
        "4",
        "--bootstrap",
        b2
    ])
    .status
    .success());

    // Routing: produced through broker 1, consumed through broker 3 (and a group through 2).
    let lines: Vec<String> = (0..600)
        .map(|i| format!("key-{}:value-{i:04}", i % 37))
        .collect();
    produce("orders", b1, &lines);
    let mut expected: Vec<String> = (0..600).map(|i| format!("value-{i:04}")).collect();
    expected.sort();
    assert_eq!(consume_all("orders", b3, 600, None), expected);
    assert_eq!(consume_all("orders", b2, 600, Some("billing")), expected);

    // SIGKILL the Raft leader and create topics through two brokers, one at once and one a
    // second later (as the field report did), with one try each: both wait out the election
    // instead of failing with "cannot reach leader".
    let first_leader = leader(&meta_addrs[0], None);
    metas[first_leader as usize - 1] = None;
    let creates: Vec<_> = [("after-failover", b2, 0), ("during-election", b1, 1000)]
        .into_iter()
        .map(|(name, broker, delay_ms)| {
            let args: Vec<String> = ["topic", "create", name, "--partitions", "3"]
                .into_iter()
                .chain(["--bootstrap", broker])
                .map(str::to_string)
                .collect();
            std::thread::spawn(move || {
                // Not a wait: the second create is sent while the election is under way.
                std::thread::sleep(Duration::from_millis(delay_ms));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                tool_ok(&args)
            })
        })
        .collect();
    for create in creates {
        create
            .join()
            .expect("topic create succeeded during the election");
    }
    let survivor = &meta_addrs[first_leader as usize % 3];
    let second_leader = leader(survivor, Some(first_leader));
    assert_ne!(second_leader, first_leader);
    // `cluster status` pointed at a broker asks the MetaServer: every node with its state,
    // the killed one down, and the new leader.
    let status: serde_json::Value = serde_json::from_str(&tool_ok(&[
        "cluster",
        "status",
        "--json",
        "--bootstrap",
        b3,
    ]))
    .expect("status JSON");
    assert_eq!(status["leader"].as_u64(), Some(second_leader), "{status}");
    let nodes = status["meta_nodes"].as_array().expect("meta_nodes");
    assert_eq!(nodes.len(), 3, "{status}");
    for node in nodes {
        let down = node["id"].as_u64() == Some(first_leader);
        assert_eq!(node["up"].as_bool(), Some(!down), "{node}");
    }
    // Each is described through the broker that created it (which answered once it saw it).
    assert_eq!(leaders("after-failover", b2).len(), 3);
    assert_eq!(leaders("during-election", b1).len(), 3);

    // The killed node restarts from its data directory and catches up.
    metas[first_leader as usize - 1] = Some(start(first_leader, &meta_addrs, tmp.path()));
    let restarted = &meta_addrs[first_leader as usize - 1];
    wait_for("the restarted MetaServer to catch up", || {
        tool(&["topic", "list", "--bootstrap", restarted])
            .stdout
            .split(|b| *b == b'\n')
            .any(|l| l == b"after-failover")
    });

    // SIGKILL broker 2: it is fenced after its session and its partitions go offline (only
    // it holds their data); restarted, it registers again and serves them, data intact.
    brokers[1].kill9();
    wait_for("broker 2 to be fenced", || {
        broker_live(survivor, 2) == Some(false)
    });
    let offline = leaders("orders", b1);
    assert_eq!(
        offline.iter().filter(|l| **l == 0).count(),
        2,
        "broker 2's partitions are offline, not moved to a replica without the data: {offline:?}"
    );
    brokers[1] = Server::start_broker(2, b2, &meta_list, &broker_dir(2));
    wait_for("broker 2 to be live again", || {
        broker_live(survivor, 2) == Some(true)
    });
    wait_for("broker 2 to lead its partitions again", || {
        leaders("orders", b3) == placed
    });
    assert_eq!(consume_all("orders", b2, 600, None), expected);

    // A broker that joins later leads partitions of a new topic.
    brokers.push(Server::start_broker(
        4,
        &broker_addrs[3],
        &meta_list,
        &broker_dir(4),
    ));
    tool_ok(&[
        "topic",
        "create",
        "late",
        "--partitions",
        "4",
        "--bootstrap",
        b1,
    ]);
    let late = leaders("late", b3);
    assert!(late.contains(&4), "broker 4 leads some of {late:?}");
    let (late_lines, late_expected) = keyed_lines("late", 40);
    produce("late", &broker_addrs[3], &late_lines);
    assert_eq!(consume_all("late", b1, 40, None), late_expected);

    // Growing a topic adds partitions, placed on live brokers, and never shrinks it.
    tool_ok(&[
        "topic",
        "alter",
        "orders",
        "--partitions",
        "8",
        "--bootstrap",
        b3,
    ]);
    assert_eq!(leaders("orders", b1).len(), 8);
    assert!(!tool(&[
        "topic",
        "alter",
        "orders",
        "--partitions",
        "4",
        "--bootstrap",
        b3
    ])
    .status
    .success());
}

/// Runs a broker that must fail to start; returns what it printed on stderr.
fn broker_fails(id: u32, listen: &str, meta: &str, data: &std::path::Path) -> String {
    let id = id.to_string();
    let data = data.to_str().expect("utf-8 path");
    let out = tool(&[
        "broker", "--id", &id, "--listen", listen, "--meta", meta, "--data", data,
    ]);
    assert!(!out.status.success(), "broker {id} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_broker_id_cannot_be_served_twice_or_from_another_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let meta_addr = format!("127.0.0.1:{}", free_port());
    let _meta = start(1, std::slice::from_ref(&meta_addr), tmp.path());
    let addr = format!("127.0.0.1:{}", free_port());
    let mut first = Server::start_broker(1, &addr, &meta_addr, &tmp.path().join("b1"));

    // The same id from another address while the first is live: refused (after waiting a
    // session's length for the id to be released).
    let other = format!("127.0.0.1:{}", free_port());
    let refusal = broker_fails(1, &other, &meta_addr, &tmp.path().join("dup"));
    assert!(refusal.contains("broker id 1 is registered"), "{refusal}");

    // Broker 1 dies. Its data directory under another id: refused before registering.
    first.kill9();
    let refusal = broker_fails(2, &other, &meta_addr, &tmp.path().join("b1"));
    assert!(refusal.contains("belongs to broker 1"), "{refusal}");

    // Broker 1 comes back at another address (moved machines): it waits until its old
    // registration is fenced, then takes the id over.
    let moved = Server::start_broker(1, &other, &meta_addr, &tmp.path().join("b1"));
    let status = tool_ok(&["cluster", "status", "--json", "--bootstrap", &meta_addr]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let port = other.rsplit_once(':').unwrap().1.parse::<u64>().unwrap();
    assert_eq!(status["brokers"][0]["port"].as_u64(), Some(port));
    assert_eq!(status["brokers"][0]["live"], serde_json::json!(true));
    drop(moved);
}

#[test]
fn a_standalone_server_grows_into_a_cluster_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("server"));
    let s = server.addr.as_str();
    tool_ok(&["topic", "create", "before", "--bootstrap", s]);
    let (lines, before) = keyed_lines("before", 20);
    produce("before", s, &lines);

    // A broker joins the standalone server's embedded MetaServer.
    let joined_addr = format!("127.0.0.1:{}", free_port());
    let mut joined = Server::start_broker(2, &joined_addr, s, &tmp.path().join("broker-2"));
    let status = tool_ok(&["cluster", "status", "--bootstrap", s]);
    assert!(status.contains("broker 2"), "{status}");

    // New partitions go to the new, least-loaded broker; both brokers route every partition.
    // One copy each, so that only broker 2 holds the partitions it leads.
    tool_ok(&[
        "topic",
        "create",
        "after",
        "--partitions",
        "4",
        "--replicas",
        "1",
        "--bootstrap",
        s,
    ]);
    assert!(
        leaders("after", s).contains(&2),
        "{:?}",
        leaders("after", s)
    );
    let (after, expected) = keyed_lines("after", 40);
    produce("after", s, &after);
    assert_eq!(consume_all("after", &joined_addr, 40, None), expected);
    assert_eq!(consume_all("before", &joined_addr, 20, None), before);

    // While broker 2 is down, "after" is deleted and created again (on broker 2 again: it is
    // not fenced yet). Restarted, broker 2 drops the old topic's data instead of serving it.
    joined.kill9();
    tool_ok(&["topic", "delete", "after", "--bootstrap", s]);
    tool_ok(&[
        "topic",
        "create",
        "after",
        "--partitions",
        "4",
        "--replicas",
        "1",
        "--bootstrap",
        s,
    ]);
    assert!(leaders("after", s).contains(&2));
    let _joined = Server::start_broker(2, &joined_addr, s, &tmp.path().join("broker-2"));
    let (fresh, expected) = keyed_lines("fresh", 8);
    produce("after", s, &fresh);
    assert_eq!(consume_all("after", &joined_addr, 8, None), expected);
}
