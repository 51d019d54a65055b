//! Half messages against a real server process: the CLI's `tinymq half send|commit|rollback|
//! list|check` as docs/transactions.md shows them, and what `kill -9` may not lose — a stored
//! half stays stored (and resolvable), a committed one appears exactly once, and commits in
//! flight at the kill each land exactly once when retried after the restart.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every value of `topic` with how often it appears: polls until three polls in a row bring
/// nothing.
async fn read(addr: &str, topic: &str) -> BTreeMap<String, usize> {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(topic, None).await.unwrap();
    let mut values = BTreeMap::new();
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            *values.entry(value).or_default() += 1;
        }
    }
    values
}

async fn create(addr: &str, topic: &str, partitions: u32) {
    let admin = Admin::new(ClientConfig::new(addr)).unwrap();
    let config = TopicConfig {
        partitions,
        ..TopicConfig::default()
    };
    admin.create_topic(topic, config).await.unwrap();
}

#[test]
fn the_cli_stores_commits_rolls_back_and_answers_checks() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(data.path(), &["--half-check-interval-ms", "200"]);
    server.run_tool(&["topic", "create", "orders", "--partitions", "1"], b"");
    let send = |input: &[u8], after: &str| {
        let out = server.run_tool(
            &[
                "half",
                "send",
                "orders",
                "--group",
                "shop",
                "--key",
                "o-1",
                "--check-after-ms",
                after,
            ],
            input,
        );
        lines(&out)[0].parse::<i64>().unwrap()
    };
    let a = send(b"a1\na2\n", "3600000");
    let b = send(b"b\n", "3600000");
    let listed = lines(&server.run_tool(&["half", "list", "--group", "shop"], b""));
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(
        listed[1].starts_with(&format!("shop\t{a}\torders\t0\t2\tpending")),
        "{listed:?}"
    );
    let offset = lines(&server.run_tool(
        &[
            "half",
            "commit",
            "orders",
            &a.to_string(),
            "--group",
            "shop",
        ],
        b"",
    ));
    assert_eq!(offset, ["0"]);
    server.run_tool(
        &[
            "half",
            "rollback",
            "orders",
            &b.to_string(),
            "--group",
            "shop",
        ],
        b"",
    );

    // Two halves left to the checks: the command commits the one whose flag file exists.
    let flags = tempfile::tempdir().unwrap();
    std::fs::write(flags.path().join("yes"), b"").unwrap();
    let yes = send(b"checked-yes\n", "100");
    let no = send(b"checked-no\n", "100");
    let command = format!(
        "if grep -q yes; then test -e {0}/yes; else test -e {0}/$TINYMQ_HALF_ID; fi",
        flags.path().display()
    );
    let mut checker = common::consume::Consume::start({
        let mut c = server.tool(&["half", "check", "--group", "shop", "--command", &command]);
        c.stdin(std::process::Stdio::null());
        c
    });
    common::cluster::wait_for("the checks answered", || {
        lines(&server.run_tool(&["half", "list", "--group", "shop"], b"")).len() == 1
    });
    checker.signal(libc::SIGINT);
    let said = checker.stderr();
    assert!(
        said.contains(&format!("half {yes} of orders (check 1): commit")),
        "{said}"
    );
    assert!(
        said.contains(&format!("half {no} of orders (check 1): roll back")),
        "{said}"
    );
    let consumed = lines(&server.run_tool(
        &["consume", "orders", "--from-beginning", "--timeout-ms", "0"],
        b"",
    ));
    assert_eq!(consumed, ["a1", "a2", "checked-yes"]);
    // A commit of a rolled-back half is refused, saying why.
    let refused = server
        .tool(&[
            "half",
            "commit",
            "orders",
            &no.to_string(),
            "--group",
            "shop",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("rolled back (check)"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_and_committed_halves_survive_a_sigkill() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path());
    create(&server.addr, "kept", 2).await;
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let hour = Duration::from_secs(3600);
    let mut halves = Vec::new();
    for i in 0..60 {
        let record = ProducerRecord::value(format!("v{i}")).with_key(format!("k{i}"));
        halves.push(
            producer
                .send_half("crash", "kept", vec![record], hour)
                .await
                .unwrap(),
        );
    }
    let mut committed = BTreeMap::new();
    for half in &halves[..30] {
        committed.insert(half.id, half.commit().await.unwrap());
    }
    drop(producer);
    server.kill9();

    let server = Server::start(data.path());
    let values = read(&server.addr, "kept").await;
    let expected: BTreeMap<String, usize> = (0..30).map(|i| (format!("v{i}"), 1)).collect();
    assert_eq!(values, expected);
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    let pending: Vec<i64> = admin
        .list_halves(Some("crash"))
        .await
        .unwrap()
        .iter()
        .map(|h| h.half_id)
        .collect();
    let ids: Vec<i64> = halves[30..].iter().map(|h| h.id).collect();
    assert_eq!(pending, ids);
    // Resolved after the restart by a new client, knowing only the ids.
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    for (n, id) in ids.iter().enumerate() {
        producer
            .end_half("crash", "kept", *id, n % 2 == 0)
            .await
            .unwrap();
    }
    // A commit made before the kill is still answered with its offset.
    let (id, offset) = committed.iter().next().unwrap();
    assert_eq!(
        producer.end_half("crash", "kept", *id, true).await.unwrap(),
        *offset
    );
    let values = read(&server.addr, "kept").await;
    assert_eq!(values.len(), 45, "{values:?}");
    assert!(values.values().all(|n| *n == 1), "{values:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_in_flight_at_a_sigkill_each_land_exactly_once() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path());
    create(&server.addr, "flight", 3).await;
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let hour = Duration::from_secs(3600);
    let mut halves = Vec::new();
    for i in 0..300 {
        let record = ProducerRecord::value(format!("f{i}")).with_key(format!("k{i}"));
        halves.push(
            producer
                .send_half("flight", "flight", vec![record], hour)
                .await
                .unwrap(),
        );
    }
    // Sixteen committers at once; the kill comes once a third are acknowledged.
    let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let chunks: Vec<Vec<i64>> = halves
        .chunks(19)
        .map(|c| c.iter().map(|h| h.id).collect())
        .collect();
    let mut tasks = Vec::new();
    for ids in chunks {
        let (p, acked) = (producer.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            for id in ids {
                if p.end_half("flight", "flight", id, true).await.is_ok() {
                    acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(std::sync::atomic::Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "commits too slow");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9();
    for t in tasks {
        t.abort();
    }
    drop(producer);

    let server = Server::start(data.path());
    // Every commit retried (by a new client): each is done, or finished by the coordinator's
    // recovery, and answered done.
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    for half in &halves {
        producer
            .end_half("flight", "flight", half.id, true)
            .await
            .unwrap();
    }
    let values = read(&server.addr, "flight").await;
    assert_eq!(values.len(), 300);
    let twice: Vec<_> = values.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "appended more than once: {twice:?}");
}
