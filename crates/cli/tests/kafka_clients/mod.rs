//! Shared by the `kafka_clients_*` tests, which drive REAL Kafka clients (kcat,
//! confluent-kafka, kafka-python, the Java client) against `tinymq server --kafka-listen`:
//! reading a server's records natively, finding each installed client (a missing one fails
//! the test naming `scripts/install-kafka-tools.sh`, which CI runs), running a client with a
//! bound on its run time so a client stuck on an unanswered request fails instead of hanging,
//! and reading the JSON lines the clients and `tinymq consume --format json` print.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::http::workspace_root;
use crate::common::kafka::KafkaServer;

/// What to run when a client is missing.
pub const INSTALL: &str = "scripts/install-kafka-tools.sh";

/// A client that runs longer than this is killed and its test fails with what it printed. Not
/// a performance bound: far above what any of these runs needs, only there to stop a hang.
pub const CLIENT_RUN_LIMIT: Duration = Duration::from_secs(180);

/// Every stored record of `topic`, as `tinymq consume --format json` prints them.
pub fn native_records(server: &KafkaServer, topic: &str) -> Vec<Value> {
    let mut command = server.tool(&["consume", topic, "--from-beginning"]);
    command.args(["--timeout-ms", "0", "--format", "json"]);
    json_lines(&run_ok(command, b""))
}

/// The values of `topic` a read-committed consumer reads now (`tinymq consume --isolation
/// read-committed`), with how often each appears.
pub fn committed_values(server: &KafkaServer, topic: &str) -> BTreeMap<String, u32> {
    let args = ["consume", topic, "--from-beginning", "--timeout-ms", "0"];
    let mut command = server.tool(&args);
    command.args(["--isolation", "read-committed"]);
    let out = run_ok(command, b"");
    let mut values = BTreeMap::new();
    for line in out.lines() {
        *values.entry(line.to_string()).or_default() += 1;
    }
    values
}

/// `kcat`, or a failure naming the install script.
pub fn kcat() -> Command {
    let found = Command::new("kcat").arg("-V").output();
    assert!(
        found.is_ok_and(|out| out.status.success()),
        "kcat is missing: run {INSTALL} (it installs Debian's kcat)"
    );
    Command::new("kcat")
}

/// The venv's Python with `module` importable, or a failure naming the install script.
pub fn python_with(module: &str) -> Command {
    let python = workspace_root().join(".tools/venv/bin/python");
    let imports = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output();
    assert!(
        imports.is_ok_and(|out| out.status.success()),
        "{} cannot import {module}: run {INSTALL} (it installs confluent-kafka and \
         kafka-python into .tools/venv)",
        python.display()
    );
    Command::new(python)
}

/// `python tests/kafka-python/SCRIPT` with the venv's Python (confluent-kafka and kafka-python).
pub fn python_script(script: &str, module: &str) -> Command {
    let mut command = python_with(module);
    command
        .arg(workspace_root().join("tests/kafka-python").join(script))
        .env("PYTHONUNBUFFERED", "1");
    command
}

/// The Java program of tests/kafka-java with ARGS, or a failure naming the install script.
pub fn java(args: &[&str]) -> Command {
    let dir = workspace_root().join("tests/kafka-java/target");
    let jar = dir.join("kafka-java.jar");
    assert!(
        jar.exists(),
        "{} is missing: run {INSTALL} (it builds tests/kafka-java with Maven)",
        jar.display()
    );
    let classpath = format!("{}:{}/lib/*", jar.display(), dir.display());
    let mut command = Command::new("java");
    command
        .args(["-cp", &classpath, "tinymq.kafkajava.Main"])
        .args(args);
    command
}

/// The jars of Apache Kafka's released server and tools (scripts/install-apache-kafka.sh).
pub fn apache_kafka_libs() -> PathBuf {
    let libs = workspace_root().join(".tools/apache-kafka/libs");
    assert!(
        libs.join("kafka-tools-4.1.2.jar").exists(),
        "{} has no kafka-tools jar: run {INSTALL}",
        libs.display()
    );
    libs
}

/// `java JVM_OPTIONS -cp .tools/apache-kafka/libs/* CLASS ARGS`: a class of Apache Kafka's
/// jars (a tool, MirrorMaker 2), a small heap and the quick JIT tier (these runs are short or
/// light).
pub fn apache_kafka_java(jvm_options: &[String], class: &str, args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1"])
        .args(jvm_options)
        .arg("-cp")
        .arg(format!("{}/*", apache_kafka_libs().display()))
        .arg(class)
        .args(args);
    command
}

/// Apache Kafka's tool `class` with `--bootstrap-server BOOTSTRAP ARGS` (tinymq's Kafka
/// listener or a real Kafka broker).
pub fn kafka_tool_at(bootstrap: &str, class: &str, args: &[&str]) -> Command {
    let mut command = apache_kafka_java(&[], class, &["--bootstrap-server", bootstrap]);
    command.args(args);
    command
}

/// Kafka's console producer to `topic` at `bootstrap`, reading `key:value` lines (as
/// [`keyed_lines`] writes them), each acknowledged by every in-sync replica.
pub fn keyed_console_producer(bootstrap: &str, topic: &str) -> Command {
    kafka_tool_at(
        bootstrap,
        PRODUCER,
        &[
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--producer-property",
            "acks=all",
        ],
    )
}

/// `key:value` lines `k{i}:v{i}` for `range`, for [`keyed_console_producer`].
pub fn keyed_lines(range: std::ops::Range<u32>) -> Vec<u8> {
    range
        .map(|i| format!("k{i}:v{i}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Apache Kafka's command-line tools, by class.
pub const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
pub const CONFIGS: &str = "kafka.admin.ConfigCommand";
pub const GROUPS: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
pub const GET_OFFSETS: &str = "org.apache.kafka.tools.GetOffsetShell";
pub const PRODUCER: &str = "org.apache.kafka.tools.ConsoleProducer";
pub const CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";
pub const ACLS: &str = "org.apache.kafka.tools.AclCommand";
pub const DELETE_RECORDS: &str = "org.apache.kafka.tools.DeleteRecordsCommand";

/// While alive, prints the last lines of each log if the test panics (on drop while
/// panicking): what Kafka, Connect, MirrorMaker 2 or tinymq was doing when it failed.
pub struct LogsOnFailure(pub Vec<PathBuf>);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for log in &self.0 {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(80)..].join("\n");
            eprintln!("==== last lines of {} ====\n{tail}", log.display());
        }
    }
}

/// What a client run printed.
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Both streams, for a failure message.
    pub fn printed(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs `command` with `stdin` to its end, killing it after [`CLIENT_RUN_LIMIT`].
pub fn run(mut command: Command, stdin: &[u8]) -> Ran {
    let described = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {described}: {e}; run {INSTALL}"));
    let mut input = child.stdin.take().expect("stdin");
    let stdin = stdin.to_vec();
    std::thread::spawn(move || input.write_all(&stdin));
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for client") {
            break Some(status);
        }
        if started.elapsed() > CLIENT_RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ran = Ran {
        status: status.unwrap_or_else(ExitStatus::default),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    assert!(
        status.is_some(),
        "{described} still ran after {CLIENT_RUN_LIMIT:?}, killed; {}",
        ran.printed()
    );
    ran
}

fn drain(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// [`run`], failing the test (with everything printed) unless the command exits 0; stdout.
pub fn run_ok(command: Command, stdin: &[u8]) -> String {
    let described = format!("{command:?}");
    let ran = run(command, stdin);
    assert!(
        ran.status.success(),
        "{described} failed ({}); {}",
        ran.status,
        ran.printed()
    );
    ran.stdout
}

/// Each non-blank line of `text` as JSON.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect()
}

/// The path of a script or file in the repository, for messages.
pub fn repo_path(relative: &str) -> PathBuf {
    workspace_root().join(relative)
}
