//! The CLI as a careful tool (issue 12): any bytes round-trip through `consume --format json`
//! and `produce --input-format json`; listings end quietly when their reader goes away; flag
//! values that would mean nothing are refused; `--timeout-ms 0` prints what is there; every
//! flag of every command is described, with at most one default.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use common::{Server, BIN};
use serde_json::{json, Value};

/// A deterministic xorshift generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Random bytes, often empty, often not UTF-8.
    fn bytes(&mut self) -> Vec<u8> {
        let len = [0, 1, 3, 17, 200][self.below(5) as usize];
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// Bytes, empty or null.
    fn maybe(&mut self) -> Option<Vec<u8>> {
        (self.below(5) != 0).then(|| self.bytes())
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Record {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn unbase64(text: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        acc = acc << 6 | A.iter().position(|&a| a == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// A JSON text field back to bytes, by its encoding field.
fn decoded(text: &Value, encoding: &Value) -> Option<Vec<u8>> {
    let text = text.as_str()?;
    Some(match encoding.as_str().unwrap() {
        "utf8" => text.as_bytes().to_vec(),
        "base64" => unbase64(text),
        "hex" => unhex(text),
        other => panic!("unknown encoding {other}"),
    })
}

fn parse_consumed(stdout: &[u8]) -> Vec<Record> {
    String::from_utf8(stdout.to_vec())
        .expect("JSON lines are UTF-8")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Record {
                key: decoded(&v["key"], &v["key_encoding"]),
                value: decoded(&v["value"], &v["value_encoding"]),
                headers: v["headers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| {
                        let key = h["key"].as_str().unwrap().to_string();
                        (key, decoded(&h["value"], &h["value_encoding"]))
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A record as a `produce --input-format json` line, with fields in hex (or as text when the
/// bytes are UTF-8 and `text` is set).
fn input_line(r: &Record, text: bool) -> String {
    let field = |b: &Option<Vec<u8>>| match b {
        None => (Value::Null, "hex"),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) if text => (json!(s), "utf8"),
            _ => (json!(hex(b)), "hex"),
        },
    };
    let (key, key_encoding) = field(&r.key);
    let (value, value_encoding) = field(&r.value);
    let headers: Vec<Value> = r
        .headers
        .iter()
        .map(|(k, v)| {
            let (value, enc) = field(v);
            json!({"key": k, "value": value, "value_encoding": enc})
        })
        .collect();
    json!({"key": key, "key_encoding": key_encoding, "value": value,
        "value_encoding": value_encoding, "headers": headers})
    .to_string()
}

fn consume_json(server: &Server, topic: &str, extra: &[&str]) -> Vec<Record> {
    let mut args = vec![
        "consume",
        topic,
        "--from-beginning",
        "--timeout-ms",
        "0",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    parse_consumed(&server.run_tool(&args, b"").stdout)
}

#[test]
fn random_binary_records_round_trip_byte_identical_through_json() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let records: Vec<Record> = (0..150)
        .map(|_| Record {
            key: rng.maybe(),
            value: rng.maybe(),
            // Few names, so duplicate keys are common; their order must be kept.
            headers: (0..rng.below(5))
                .map(|_| {
                    (
                        ["a", "b", "é"][rng.below(3) as usize].to_string(),
                        rng.maybe(),
                    )
                })
                .collect(),
        })
        .collect();
    assert!(records.iter().any(|r| r.value.as_deref() == Some(b"")));
    assert!(records.iter().any(|r| r.value.is_none()));
    assert!(records.iter().any(|r| r
        .value
        .as_ref()
        .is_some_and(|v| std::str::from_utf8(v).is_err())));
    let input: String = records
        .iter()
        .enumerate()
        .map(|(i, r)| input_line(r, i % 2 == 0) + "\n")
        .collect();
    // One partition, so the order read is the order sent.
    for topic in ["src", "copy"] {
        server.run_tool(&["topic", "create", topic, "--partitions", "1"], b"");
    }
    server.run_tool(
        &["produce", "src", "--input-format", "json"],
        input.as_bytes(),
    );
    for format in ["utf8", "base64", "hex"] {
        let got = consume_json(&server, "src", &["--value-format", format]);
        assert_eq!(got, records, "--value-format {format}");
    }
    // What consume prints, produce reads: the copy holds the same records.
    let printed = server.run_tool(
        &[
            "consume",
            "src",
            "--from-beginning",
            "--timeout-ms",
            "0",
            "--format",
            "json",
        ],
        b"",
    );
    server.run_tool(
        &["produce", "copy", "--input-format", "json"],
        &printed.stdout,
    );
    assert_eq!(consume_json(&server, "copy", &[]), records);
}

#[test]
fn produce_takes_any_bytes_and_names_the_line_it_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "t", "--partitions", "1"], b"");
    // Lines: a line that is not UTF-8 is a value like any other.
    server.run_tool(&["produce", "t"], b"plain\n\xff\xfe bytes\r\nk:v\n");
    let got = consume_json(&server, "t", &[]);
    let values: Vec<_> = got.iter().map(|r| r.value.clone().unwrap()).collect();
    assert_eq!(
        values,
        [
            b"plain".to_vec(),
            b"\xff\xfe bytes".to_vec(),
            b"k:v".to_vec()
        ]
    );
    // Binary: the whole input is one record, newlines and all.
    server.run_tool(&["topic", "create", "b", "--partitions", "1"], b"");
    let blob = b"\x00\n\xff\n\r\nend".to_vec();
    server.run_tool(&["produce", "b", "--input-format", "binary"], &blob);
    let text = server.run_tool(
        &["consume", "b", "--from-beginning", "--timeout-ms", "0"],
        b"",
    );
    assert_eq!(
        text.stdout,
        [blob.as_slice(), b"\n"].concat(),
        "text mode prints raw bytes"
    );
    // JSON: a bad line is named and skipped; the others are produced; the exit is non-zero.
    server.run_tool(&["topic", "create", "j", "--partitions", "1"], b"");
    let mut child = server
        .tool(&["produce", "j", "--input-format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let input = b"{\"value\":\"one\"}\n{\"value\":\"zz\",\"value_encoding\":\"hex\"}\n\n{\"value\":\"three\"}\n";
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2:"), "{stderr}");
    let got = consume_json(&server, "j", &[]);
    let values: Vec<_> = got.iter().map(|r| r.value.clone().unwrap()).collect();
    assert_eq!(values, [b"one".to_vec(), b"three".to_vec()]);
}

/// Runs a tool with stdout a pipe whose reader is already gone; returns (status, stderr).
fn with_closed_stdout(server: &Server, args: &[&str]) -> (Option<i32>, String) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array; each is owned exactly once.
    let (reader, writer) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(reader);
    let out = server
        .tool(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_listing_exits_quietly_when_its_reader_goes_away() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    for t in ["a", "b", "c"] {
        server.run_tool(&["topic", "create", t], b"");
    }
    server.run_tool(&["produce", "a"], b"x\ny\n");
    server.run_tool(
        &[
            "consume",
            "a",
            "--group",
            "g",
            "--from-beginning",
            "--timeout-ms",
            "0",
        ],
        b"",
    );
    let listings: [&[&str]; 10] = [
        &["topic", "list"],
        &["topic", "describe", "a"],
        &["topic", "describe", "a", "--json"],
        &["group", "list"],
        &["group", "describe", "g"],
        &["group", "describe", "g", "--json"],
        &["cluster", "status"],
        &["cluster", "status", "--json"],
        &["consume", "a", "--from-beginning", "--timeout-ms", "0"],
        &["info"],
    ];
    for args in listings {
        let (code, stderr) = with_closed_stdout(&server, args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} printed {stderr}");
    }
}

#[test]
fn values_that_mean_nothing_are_refused_while_parsing() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let refused: [&[&str]; 9] = [
        &["topic", "create", "z", "--partitions", "0"],
        &["topic", "create", "z", "--replicas", "0"],
        &["topic", "create", "z", "--retention-ms", "0"],
        &["topic", "create", "z", "--retention-bytes", "0"],
        &["topic", "create", "z", "--segment-bytes", "0"],
        &["topic", "create", "z", "--message-bytes-max", "0"],
        &["topic", "alter", "z", "--partitions", "0"],
        &["consume", "z", "--count", "0"],
        &["produce", "z", "--batch-bytes", "0"],
    ];
    for args in refused {
        let out = server.tool(args).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} is a usage error: {stderr}"
        );
        let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(stderr.contains("at least 1"), "{args:?}: {stderr}");
    }
    let list = server.run_tool(&["topic", "list"], b"");
    assert!(list.stdout.is_empty(), "nothing was created");
    // -1 is the documented "no bound" and is taken.
    let out = server.run_tool(
        &[
            "topic",
            "create",
            "z",
            "--partitions",
            "1",
            "--retention-ms",
            "-1",
        ],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "created topic z with 1 partition, 1 replica (min_insync_replicas 1, flush always)"
    );
}

#[test]
fn timeout_zero_prints_what_is_there_and_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "t", "--partitions", "3"], b"");
    server.run_tool(&["topic", "create", "empty", "--partitions", "2"], b"");
    let input: String = (0..60).map(|i| format!("k{i}:v{i}\n")).collect();
    server.run_tool(&["produce", "t", "--key-separator", ":"], input.as_bytes());
    let mut want: Vec<String> = (0..60).map(|i| format!("v{i}")).collect();
    want.sort();
    for extra in [&[][..], &["--group", "g"][..]] {
        let mut args = vec!["consume", "t", "--from-beginning", "--timeout-ms", "0"];
        args.extend_from_slice(extra);
        let out = server.run_tool(&args, b"");
        let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        got.sort();
        assert_eq!(got, want, "{args:?}");
    }
    // The group committed what it printed: a second run has nothing left to print.
    let again = server.run_tool(&["consume", "t", "--group", "g", "--timeout-ms", "0"], b"");
    assert!(again.stdout.is_empty());
    // Nothing stored: it exits with nothing printed rather than waiting.
    let out = server.run_tool(
        &["consume", "empty", "--from-beginning", "--timeout-ms", "0"],
        b"",
    );
    assert!(out.stdout.is_empty());
}

/// The subcommands listed under `Commands:` in a help text.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Each argument entry of the `Arguments:` and `Options:` sections: its spec (`--name <X>`)
/// and its description, from the long help (descriptions on the lines below the spec).
fn entries(help: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_section = false;
    for line in help.lines() {
        if line.starts_with("Arguments:") || line.starts_with("Options:") {
            in_section = true;
            continue;
        }
        if !line.starts_with(' ') && !line.trim().is_empty() {
            in_section = false;
            continue;
        }
        if !in_section || line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if indent <= 6
            && (trimmed.starts_with('-') || trimmed.starts_with('<') || trimmed.starts_with('['))
        {
            // A spec, maybe followed by its description after two spaces (short form).
            let (spec, rest) = trimmed.split_once("  ").unwrap_or((trimmed, ""));
            out.push((spec.to_string(), rest.trim().to_string()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(' ');
            last.1.push_str(trimmed);
        }
    }
    out
}

#[test]
fn every_flag_of_every_command_is_described_with_at_most_one_default() {
    let mut queue: Vec<Vec<String>> = vec![vec![]];
    let (mut seen, mut faults) = (0, Vec::new());
    while let Some(path) = queue.pop() {
        let out = Command::new(BIN)
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{path:?} --help");
        let help = String::from_utf8(out.stdout).unwrap();
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
        for (spec, description) in entries(&help) {
            seen += 1;
            // What is left once clap's own notes ([default: …], [env: …], …) are removed.
            let mut words = description.clone();
            while let (Some(a), Some(b)) = (words.find('['), words.find(']')) {
                if b < a {
                    break;
                }
                words.replace_range(a..=b, "");
            }
            let command = format!("tinymq {} {spec}", path.join(" "));
            if !words.chars().any(char::is_alphabetic) {
                faults.push(format!("{command} has no description"));
            }
            if description.matches("[default:").count() > 1 {
                faults.push(format!("{command} states two defaults: {description}"));
            }
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
    assert!(seen > 50, "the walk found only {seen} arguments");
}

#[test]
fn errors_say_each_cause_once_and_listen_takes_a_host_name() {
    let tmp = tempfile::tempdir().unwrap();
    // A host name is resolved, as clients accept one.
    let mut child = Command::new(BIN)
        .args(["server", "--listen", "localhost:0", "--data"])
        .arg(tmp.path().join("a"))
        .env("TINYMQ_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let taken = line
        .trim()
        .strip_prefix("tinymq listening on ")
        .unwrap()
        .to_string();
    let created = Command::new(BIN)
        .args(["topic", "create", "t", "--bootstrap", &taken])
        .output()
        .unwrap();
    assert!(created.status.success(), "the server on localhost answers");
    let out = Command::new(BIN)
        .args(["server", "--listen", &taken, "--data"])
        .arg(tmp.path().join("b"))
        .env("TINYMQ_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&taken), "names the address: {stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "said once: {stderr}");
    // SAFETY: kill only signals the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn bench_deletes_the_topic_it_created_unless_asked_to_keep_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "produce", "--count", "50", "--json", "--topic"];
        args.extend_from_slice(extra);
        server.run_tool(&args, b"")
    };
    run(&["gone"]);
    run(&["kept", "--keep-topic"]);
    server.run_tool(&["topic", "create", "mine"], b"");
    run(&["mine"]);
    let list = server.run_tool(&["topic", "list"], b"");
    assert_eq!(String::from_utf8_lossy(&list.stdout), "kept\nmine\n");
}
