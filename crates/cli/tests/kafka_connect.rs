//! Kafka Connect in distributed mode (connect-runtime and connect-file 4.1.2, the released jars
//! from Maven Central installed by `scripts/install-kafka-tools.sh` into
//! `.tools/apache-kafka/libs`), unchanged, against a real `tinymq server --kafka-listen`: two
//! workers keep their configs, offsets and statuses in compacted tinymq topics they create
//! themselves; a FileStreamSource connector moves a file of 100,000 lines into a tinymq topic,
//! and a FileStreamSink connector (a task per partition) writes the topic out to another file.
//! While lines flow, the worker running the source task is killed with SIGKILL; the other
//! takes over its tasks, and then the output file holds every input line and no other, the
//! repeats at-least-once allows only of lines read before the kill. Once with the workers'
//! `exactly.once.source.support` off, once on (Kafka transactions, zombie fencing): then a
//! read_committed reader of the topic sees every line exactly once (the killed source task's
//! open transaction was aborted, none of it committed).

mod common;
mod kafka_clients;

use std::collections::{BTreeMap, HashSet};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::free_port;
use common::http::{raw, Response};
use common::kafka::{KafkaServer, Launch};
use kafka_clients::{apache_kafka_java, committed_values, native_records, LogsOnFailure};
use serde_json::{json, Value};

/// Lines of the input file; the first half is written before the kill, the rest after.
const LINES: usize = 100_000;
/// The tinymq topic between the two connectors.
const TOPIC: &str = "lines";
/// Far above what a loaded 2-core machine needs for any one step (a JVM's start, a rebalance
/// after a session timeout, 100,000 lines through both connectors); only there to fail a test
/// that is stuck instead of hanging it.
const STEP_LIMIT: Duration = Duration::from_secs(300);

/// One `ConnectDistributed` worker process, logging to `DIR/NAME.log`; killed when dropped.
struct Worker {
    name: String,
    /// The REST listener, `127.0.0.1:PORT`: also the worker id statuses name.
    rest: String,
    log: PathBuf,
    child: Child,
}

impl Worker {
    fn start(dir: &Path, name: &str, kafka: &str, exactly_once: bool) -> Worker {
        // Connect's listeners cannot take port 0 (the worker advertises the port it is given
        // to the other workers, which forward requests to the leader through it).
        let port = free_port();
        let rest = format!("127.0.0.1:{port}");
        let log = dir.join(format!("{name}.log"));
        let log4j = dir.join(format!("{name}-log4j2.properties"));
        std::fs::write(
            &log4j,
            format!(
                "appender.file.type=File\n\
                 appender.file.name=file\n\
                 appender.file.fileName={}\n\
                 appender.file.layout.type=PatternLayout\n\
                 appender.file.layout.pattern=[%d] %p %m (%c)%n\n\
                 rootLogger.level=INFO\n\
                 rootLogger.appenderRef.file.ref=file\n\
                 logger.clients.name=org.apache.kafka.clients\n\
                 logger.clients.level=WARN\n\
                 logger.reflections.name=org.reflections\n\
                 logger.reflections.level=ERROR\n",
                log.display()
            ),
        )
        .expect("write log4j2 properties");
        let properties = dir.join(format!("{name}.properties"));
        let config = worker_properties(kafka, port, exactly_once);
        std::fs::write(&properties, config).expect("write properties");
        let out = std::fs::File::create(dir.join(format!("{name}.out"))).expect("stdout file");
        let jvm_options = [
            "-Xms64m".to_string(),
            "-Xmx512m".to_string(),
            "-XX:+UseSerialGC".to_string(),
            format!("-Dlog4j2.configurationFile={}", log4j.display()),
        ];
        let properties = properties.to_str().expect("UTF-8 path");
        let child = apache_kafka_java(
            &jvm_options,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            &[properties],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone().expect("stdout file")))
        .stderr(Stdio::from(out))
        .spawn()
        .expect("start a Connect worker (java)");
        Worker {
            name: name.to_string(),
            rest,
            log,
            child,
        }
    }

    /// One REST request, or `None` while nothing listens on the port yet. HTTP/1.0, so that
    /// Jetty answers with a plain body (no chunks) and closes the connection.
    fn rest(&self, method: &str, path: &str, body: Option<&Value>) -> Option<Response> {
        TcpStream::connect(&self.rest).ok()?;
        let head = match body {
            Some(body) => {
                let body = body.to_string();
                format!(
                    "{method} {path} HTTP/1.0\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
            None => format!("{method} {path} HTTP/1.0\r\n\r\n"),
        };
        Some(raw(&self.rest, &head))
    }

    /// Kills the process with SIGKILL and reaps it.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A distributed worker of group `tinymq-connect`, with exactly-once source support or
/// without. Short session timeouts and a short `scheduled.rebalance.max.delay.ms` so that a
/// killed worker's tasks move within seconds (by default Connect waits five minutes for the
/// worker to come back), but not so short that a worker or sink consumer starved of CPU on a
/// loaded machine is taken for dead. The sink's consumer reads committed records only, as it
/// must under exactly-once sources (else it would copy the records of the killed task's aborted
/// transaction).
fn worker_properties(kafka: &str, port: u16, exactly_once: bool) -> String {
    let support = if exactly_once { "enabled" } else { "disabled" };
    format!(
        "bootstrap.servers={kafka}\n\
         group.id=tinymq-connect\n\
         key.converter=org.apache.kafka.connect.storage.StringConverter\n\
         value.converter=org.apache.kafka.connect.storage.StringConverter\n\
         config.storage.topic=connect-configs\n\
         offset.storage.topic=connect-offsets\n\
         status.storage.topic=connect-status\n\
         config.storage.replication.factor=1\n\
         offset.storage.replication.factor=1\n\
         status.storage.replication.factor=1\n\
         offset.storage.partitions=3\n\
         status.storage.partitions=3\n\
         listeners=http://127.0.0.1:{port}\n\
         rest.advertised.host.name=127.0.0.1\n\
         rest.advertised.port={port}\n\
         offset.flush.interval.ms=1000\n\
         exactly.once.source.support={support}\n\
         scheduled.rebalance.max.delay.ms=3000\n\
         session.timeout.ms=10000\n\
         heartbeat.interval.ms=1000\n\
         consumer.session.timeout.ms=10000\n\
         consumer.heartbeat.interval.ms=1000\n\
         consumer.isolation.level=read_committed\n"
    )
}

/// Polls `probe` every 200 ms until it gives a value, for at most [`STEP_LIMIT`]; fails the
/// test naming `what` and the last thing `last` says otherwise.
fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>, last: impl Fn() -> String) -> T {
    let deadline = Instant::now() + STEP_LIMIT;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {STEP_LIMIT:?}; last: {}",
            last()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Input line `i`.
fn line(i: usize) -> String {
    format!("line {i:06} of the FileStreamSource input")
}

/// Appends lines `range` to `file`.
fn append_lines(file: &Path, range: std::ops::Range<usize>) {
    use std::io::Write;
    let text: String = range.map(|i| line(i) + "\n").collect();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("open the input file");
    f.write_all(text.as_bytes()).expect("append input lines");
}

/// The complete lines of `file` so far (a line still being written is left out).
fn lines_of(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete.lines().map(str::to_string).collect()
}

/// A connector's status as `worker` reports it.
fn status(worker: &Worker, connector: &str) -> Value {
    let path = format!("/connectors/{connector}/status");
    match worker.rest("GET", &path, None) {
        Some(response) if response.status == 200 => response.json(),
        Some(response) => json!({"status": response.status, "body": response.body}),
        None => json!({"error": "not listening"}),
    }
}

/// Whether `status` says the connector and every one of its tasks (at least one) run on
/// `worker_id`.
fn all_running_on(status: &Value, worker_id: &str) -> bool {
    let on = |v: &Value| v["state"] == "RUNNING" && v["worker_id"] == worker_id;
    let tasks = status["tasks"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    on(&status["connector"]) && !tasks.is_empty() && tasks.iter().all(on)
}

/// Each test runs two JVM workers: one test at a time, so that two of them together do not
/// starve each other's heartbeats on a 2-core machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn connect_moves_a_file_through_tinymq_at_least_once_across_a_kill_9_of_a_worker() {
    move_a_file_across_a_kill_9(false);
}

#[test]
fn connect_moves_a_file_through_tinymq_exactly_once_across_a_kill_9_of_a_worker() {
    move_a_file_across_a_kill_9(true);
}

/// The scenario of this file's doc; with `exactly_once`, the workers' sources are exactly-once
/// (transactions) and the topic is checked to hold every line once, read committed.
fn move_a_file_across_a_kill_9(exactly_once: bool) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("temporary directory");
    let server_log = dir.path().join("tinymq.log");
    let server: KafkaServer = Launch::server().log_to(&server_log).start();
    server.create_topic(TOPIC, 3);
    let input = dir.path().join("input.txt");
    let output = dir.path().join("output.txt");
    append_lines(&input, 0..LINES / 2);

    let mut workers = [
        Worker::start(dir.path(), "worker-a", &server.kafka, exactly_once),
        Worker::start(dir.path(), "worker-b", &server.kafka, exactly_once),
    ];
    let _logs = LogsOnFailure(
        workers
            .iter()
            .map(|w| w.log.clone())
            .chain([server_log.clone()])
            .collect(),
    );
    for worker in &workers {
        wait_for(
            &format!("{}'s REST API answering", worker.name),
            || worker.rest("GET", "/", None).filter(|r| r.status == 200),
            || format!("{:?}", worker.rest("GET", "/", None)),
        );
    }

    // PUT of a connector's config is idempotent, so it is simply retried while the workers are
    // still forming their group (409 "rebalance in progress", 5xx while the leader is unknown).
    // The sink has a task per partition, so that the killed worker most likely runs one of
    // them too; they share the output file, which FileStreamSink appends to a line per write.
    let connectors = [
        (
            "file-source",
            json!({
                "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max": "1",
                "file": input.display().to_string(),
                "topic": TOPIC,
                // Creating the connector fails unless it runs exactly-once.
                "exactly.once.support": if exactly_once { "required" } else { "requested" },
            }),
        ),
        (
            "file-sink",
            json!({
                "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max": "3",
                "file": output.display().to_string(),
                "topics": TOPIC,
            }),
        ),
    ];
    for (name, config) in &connectors {
        let path = format!("/connectors/{name}/config");
        let put = || workers[0].rest("PUT", &path, Some(config));
        wait_for(
            &format!("creating connector {name}"),
            || put().filter(|r| r.status == 200 || r.status == 201),
            || format!("{:?}", put()),
        );
    }

    // Lines are flowing once some have come out the far end.
    wait_for(
        "the first lines through both connectors",
        || (lines_of(&output).len() >= 1_000).then_some(()),
        || format!("{} output lines", lines_of(&output).len()),
    );
    let source = status(&workers[0], "file-source");
    let victim = workers
        .iter()
        .position(|w| source["tasks"][0]["worker_id"] == w.rest.as_str())
        .unwrap_or_else(|| panic!("the source task runs on no worker we started: {source}"));
    let survivor = 1 - victim;
    let sink = status(&workers[0], "file-sink");
    let sink_tasks: Vec<String> = sink["tasks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter(|t| t["worker_id"] == workers[victim].rest.as_str())
        .map(|t| t["id"].to_string())
        .collect();
    println!(
        "killing {} (the source task, sink tasks {sink_tasks:?}), {} lines out",
        workers[victim].name,
        lines_of(&output).len()
    );
    workers[victim].kill9();
    let killed = Instant::now();
    append_lines(&input, LINES / 2..LINES);

    // The survivor runs everything once the dead worker's session is over and the scheduled
    // rebalance delay has passed.
    let survivor_id = workers[survivor].rest.clone();
    let survivor_status = |connector: &str| status(&workers[survivor], connector);
    wait_for(
        "the survivor running both connectors and their tasks",
        || {
            let all = ["file-source", "file-sink"]
                .iter()
                .all(|c| all_running_on(&survivor_status(c), &survivor_id));
            all.then_some(())
        },
        || {
            format!(
                "source {} sink {}",
                survivor_status("file-source"),
                survivor_status("file-sink")
            )
        },
    );
    println!(
        "{} took over every task {:.1} s after the kill",
        workers[survivor].name,
        killed.elapsed().as_secs_f64()
    );

    let expected: BTreeMap<String, usize> = (0..LINES).map(|i| (line(i), i)).collect();
    let out = wait_for(
        "every input line in the sink's file",
        || {
            // Done when every line is there, or when one never written is (checked below).
            let out = lines_of(&output);
            let distinct: HashSet<&str> = out.iter().map(String::as_str).collect();
            let stranger = distinct.iter().any(|l| !expected.contains_key(*l));
            (distinct.len() >= LINES || stranger).then_some(out)
        },
        || format!("{} output lines", lines_of(&output).len()),
    );
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for l in &out {
        *seen.entry(l.as_str()).or_default() += 1;
    }
    let strangers: Vec<&&str> = seen
        .keys()
        .filter(|l| !expected.contains_key(**l))
        .collect();
    assert!(strangers.is_empty(), "lines never written: {strangers:?}");
    let missing: Vec<&String> = expected
        .keys()
        .filter(|l| !seen.contains_key(l.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} lines missing: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    let repeated: Vec<(&str, u32)> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(l, n)| (*l, *n))
        .collect();
    println!(
        "{} output lines, {} distinct; {} lines repeated",
        out.len(),
        seen.len(),
        repeated.len()
    );
    // Lines repeat only because of the kill: a killed sink task's successor re-reads what it
    // wrote after its last commit (tasks that live on commit when their partitions move), and
    // without exactly-once a killed source task's successor re-reads the lines after its last
    // committed file position. All of them were read before the kill: lines appended after it
    // were read by the survivor alone. Each at most once again per stage.
    let most = if exactly_once { 2 } else { 4 };
    for (l, n) in &repeated {
        assert!(*n <= most, "{l:?} written {n} times");
        assert!(
            expected[*l] < LINES / 2,
            "{l:?}, appended after the kill, written {n} times"
        );
    }

    // The topic, read committed: every line, exactly once with exactly-once sources (though
    // the killed task's open transaction had some of them too).
    let committed = committed_values(&server, TOPIC);
    let wrong: Vec<(&String, &u32)> = committed
        .iter()
        .filter(|(l, n)| !expected.contains_key(*l) || exactly_once && **n != 1)
        .take(20)
        .collect();
    assert_eq!(
        committed.len(),
        LINES,
        "distinct committed records; wrong: {wrong:?}"
    );
    assert!(wrong.is_empty(), "committed records: {wrong:?}");
    let repeated = committed.values().filter(|n| **n > 1).count();
    // What the log holds besides: the killed task's aborted records.
    println!(
        "{} records stored in {TOPIC}, {} committed, {repeated} lines committed more than once",
        native_records(&server, TOPIC).len(),
        committed.values().sum::<u32>()
    );
}
