//! Hostile input on the Kafka port (`--kafka-listen`), over raw sockets: bad size prefixes,
//! truncated frames, garbage, unknown API keys, versions out of range, lying array counts,
//! random and mutated request bodies for every API and version served, floods of pipelined
//! requests, and more connections than `connections_max`. Each case gets
//! the answer Kafka's protocol gives (ApiVersions' UNSUPPORTED_VERSION with the table) or a
//! close; after each, the server is alive, answers a fresh ApiVersions and serves native
//! clients.

mod common;
#[path = "kafka_hostile/mutants.rs"]
mod mutants;
#[path = "kafka_hostile/server.rs"]
mod server;
#[path = "kafka_hostile/wire.rs"]
mod wire;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::retry;
use kafka_protocol::messages::{ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Decodable;
use mutants::{mutate, seed};
use server::{start_server, start_server_with_admin, Healthy};
use tinymq_kafka::api_versions::SUPPORTED;
use wire::*;

// ---- the cases ------------------------------------------------------------------------------

#[test]
fn bad_sizes_truncation_garbage_and_unknown_apis_are_closed_and_the_server_keeps_serving() {
    let frame_bytes_max: usize = 1 << 20;
    let mut server = start_server(&["--frame-bytes-max", &frame_bytes_max.to_string()]);
    server.assert_healthy("start");

    // A request of exactly frame_bytes_max is read (ApiVersions ignores its body) ...
    let mut c = server.connect_raw();
    let header_bytes = request(API_VERSIONS, 0, 1, false, &[]).len() - 4;
    let padded = request(
        API_VERSIONS,
        0,
        1,
        false,
        &vec![0; frame_bytes_max - header_bytes],
    );
    c.write_all(&padded).unwrap();
    let answer = parse_api_versions(&read_frame(&mut c).expect("answered"), 0);
    assert_eq!((answer.correlation_id, answer.error_code), (1, 0));
    // ... one byte more is refused from its size alone: nothing sent after the prefix.
    let mut c = server.connect_raw();
    c.write_all(&((frame_bytes_max + 1) as u32).to_be_bytes())
        .unwrap();
    assert_closed_silently(&mut c, "size frame_bytes_max + 1");
    server.assert_healthy("size frame_bytes_max + 1");

    // The largest size a prefix can say: refused before anything is allocated.
    let rss_before = server.rss_kib();
    let mut c = server.connect_raw();
    c.write_all(&i32::MAX.to_be_bytes()).unwrap();
    assert_closed_silently(&mut c, "size i32::MAX");
    assert!(
        server.rss_kib() < rss_before + 16 * 1024,
        "no 2 GiB allocation"
    );
    server.assert_healthy("size i32::MAX");

    // Negative sizes, and sizes too small to hold a request header.
    for size in [-1i32, i32::MIN, -8, 0, 1, 4, 7] {
        let mut c = server.connect_raw();
        let mut bytes = size.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        c.write_all(&bytes).unwrap();
        assert_closed_silently(&mut c, &format!("size {size}"));
        server.assert_healthy(&format!("size {size}"));
    }

    // Truncated: a size prefix cut short, and a frame cut short, then end of input.
    let whole = request(API_VERSIONS, 0, 3, false, &[0; 100]);
    for cut in [1, 2, 3, 4, 5, 12, whole.len() - 1] {
        let mut c = server.connect_raw();
        send_then_half_close(&mut c, &whole[..cut]);
        assert_closed_silently(&mut c, &format!("frame cut after {cut} bytes"));
    }
    // The same, with the socket closed outright (nothing to read back).
    for cut in [2, 20] {
        let mut c = server.connect_raw();
        c.write_all(&whole[..cut]).unwrap();
        drop(c);
    }
    server.assert_healthy("truncated frames");

    // Other protocols on the Kafka port: HTTP, a TLS ClientHello, a native tinymq handshake.
    let native_frame = {
        let mut out = bytes::BytesMut::new();
        tinymq_protocol::frame::FrameHeader::request(
            tinymq_protocol::OpCode::Handshake.code(),
            1,
            0,
        )
        .encode(&mut out);
        out.to_vec()
    };
    let tls_hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    let others: [(&str, &[u8]); 3] = [
        ("HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("TLS ClientHello", &tls_hello),
        ("native handshake", &native_frame),
    ];
    for (what, bytes) in others {
        let mut c = server.connect_raw();
        send_then_half_close(&mut c, bytes);
        assert_closed_silently(&mut c, what);
        server.assert_healthy(what);
    }

    // Random garbage, of many lengths.
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for len in [1, 3, 8, 64, 1000, 4096, 65536, 300_000] {
        let mut c = server.connect_raw();
        let garbage = rng.bytes(len);
        send_then_half_close(&mut c, &garbage);
        drain_until_closed(&mut c, &format!("{len} bytes of garbage"));
    }
    server.assert_healthy("garbage");

    // Unknown API keys: Kafka's protocol cannot answer them (the header's shape depends on
    // the key), so the connection is closed.
    for api_key in [-1i16, 99, 9999, i16::MAX, i16::MIN] {
        let mut c = server.connect_raw();
        c.write_all(&request(api_key, 0, 5, false, &[])).unwrap();
        assert_closed_silently(&mut c, &format!("API key {api_key}"));
    }
    server.assert_healthy("unknown API keys");

    // An API Kafka defines but this listener does not serve: answered (with its correlation
    // id) or closed, never left hanging.
    let mut c = server.connect_raw();
    c.write_all(&request(DELETE_RECORDS, 0, 6, false, &[0; 16]))
        .unwrap();
    let sent = drain_until_closed_or_answered(&mut c, 6);
    eprintln!("DeleteRecords v0: {sent}");
    server.assert_healthy("an API not served");

    // ApiVersions of a version above ours: version 0 answer, UNSUPPORTED_VERSION and the whole
    // table, and the connection stays open for the retry at a version we serve.
    let mut c = server.connect_raw();
    c.write_all(&request(API_VERSIONS, 99, 7, true, &[1, 2, 3]))
        .unwrap();
    let answer = parse_api_versions(&read_frame(&mut c).expect("ApiVersions v99 answered"), 0);
    assert_eq!(answer.correlation_id, 7);
    assert_eq!(answer.error_code, UNSUPPORTED_VERSION);
    assert_eq!(answer.apis, supported_table());
    let retry_answer = api_versions(&mut c, 0, 8).expect("the retry is answered");
    assert_eq!(
        (retry_answer.correlation_id, retry_answer.error_code),
        (8, 0)
    );
    // A negative version is just as unknown.
    let mut c = server.connect_raw();
    let answer = api_versions(&mut c, -1, 9).expect("ApiVersions v-1 answered");
    assert_eq!(
        (answer.correlation_id, answer.error_code),
        (9, UNSUPPORTED_VERSION)
    );
    assert_eq!(answer.apis, supported_table());
    server.assert_healthy("ApiVersions out of range");

    // Any other API at a version no Kafka defines: its response could not be written at that
    // version, so the connection is closed.
    let mut c = server.connect_raw();
    c.write_all(&request(METADATA, 99, 10, true, &[0; 8]))
        .unwrap();
    assert_closed_silently(&mut c, "Metadata v99");
    server.assert_healthy("Metadata v99");
}

/// Array counts far larger than the bytes that follow them. kafka-protocol 0.18 reserves
/// `count` elements before reading any; without a guard that is an allocation of many GiB
/// and the process aborts.
#[test]
fn huge_array_counts_do_not_crash_the_server() {
    let mut server = start_server(&[]);
    server.assert_healthy("start");
    let huge = i32::MAX.to_be_bytes();
    let mut produce_one_topic = Vec::new();
    produce_one_topic.extend_from_slice(&(-1i16).to_be_bytes()); // transactional_id: null
    produce_one_topic.extend_from_slice(&1i16.to_be_bytes()); // acks
    produce_one_topic.extend_from_slice(&5000i32.to_be_bytes()); // timeout_ms
    produce_one_topic.extend_from_slice(&1i32.to_be_bytes()); // one topic ...
    produce_one_topic.extend_from_slice(&4i16.to_be_bytes());
    produce_one_topic.extend_from_slice(b"good");
    produce_one_topic.extend_from_slice(&huge); // ... with i32::MAX partitions
    let mut fetch = Vec::new();
    for field in [-1i32, 500, 1, 1 << 20] {
        // replica_id, max_wait_ms, min_bytes, max_bytes
        fetch.extend_from_slice(&field.to_be_bytes());
    }
    fetch.push(0); // isolation_level
    fetch.extend_from_slice(&huge); // topics
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("Metadata v1 topics", request(METADATA, 1, 1, false, &huge)),
        ("Metadata v4 topics", request(METADATA, 4, 2, false, &huge)),
        (
            "Metadata v1 one million topics",
            request(METADATA, 1, 3, false, &(1i32 << 20).to_be_bytes()),
        ),
        // Flexible: a compact array's length is an unsigned varint, here 2^32 - 2 elements.
        (
            "Metadata v12 topics",
            request(METADATA, 12, 4, true, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ),
        (
            "Produce v3 topics",
            request(
                PRODUCE,
                3,
                5,
                false,
                &[&produce_one_topic[..8], &huge[..]].concat(),
            ),
        ),
        (
            "Produce v3 partitions",
            request(PRODUCE, 3, 6, false, &produce_one_topic),
        ),
        ("Fetch v4 topics", request(FETCH, 4, 7, false, &fetch)),
    ];
    for (case, bytes) in cases {
        let mut c = server.connect_raw();
        send_then_half_close(&mut c, &bytes);
        let sent = drain_until_closed(&mut c, case);
        // A request that cannot be parsed is closed without an answer.
        assert!(sent.is_empty(), "{case}: answered {sent:?}");
        server.assert_healthy(case);
    }
}

/// Random request bodies behind a valid header, for every API and version served: each is
/// answered (with its correlation id) or closed, and the server survives them all.
#[test]
fn random_bodies_for_every_supported_api_and_version_do_not_crash_the_server() {
    let mut server = start_server(&[]);
    server.assert_healthy("start");
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut answered = 0;
    let mut closed = 0;
    let mut waiting = 0;
    for (api_key, min, max) in SUPPORTED {
        let key = *api_key as i16;
        for version in *min..=*max {
            let flexible = api_key.request_header_version(version) >= 2;
            for _ in 0..3 {
                let len = (rng.next() % 200) as usize;
                let body = rng.bytes(len);
                let correlation_id = (rng.next() & 0x7fff_ffff) as i32;
                let mut c = server.connect_raw();
                // Requests that may legally wait (a long poll, a rebalance) are not waited for.
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                send_then_half_close(
                    &mut c,
                    &request(key, version, correlation_id, flexible, &body),
                );
                match read_or_wait(&mut c) {
                    Outcome::Closed => closed += 1,
                    Outcome::Waiting => {
                        eprintln!("random {api_key:?} v{version}: still waiting after 2 s");
                        waiting += 1;
                    }
                    Outcome::Answered(frame) => {
                        let id = i32::from_be_bytes(frame[..4].try_into().unwrap());
                        assert_eq!(id, correlation_id, "{api_key:?} v{version}");
                        answered += 1;
                    }
                }
            }
            if let Some(status) = server.try_wait() {
                panic!("the server exited after random {api_key:?} v{version} bodies: {status}");
            }
        }
        server.assert_healthy(&format!("random {api_key:?} bodies"));
    }
    eprintln!(
        "random bodies: {answered} answered, {closed} closed, {waiting} still waiting after 2 s"
    );
    assert!(
        answered + closed > 0,
        "random bodies are answered or closed"
    );
    assert!(
        waiting <= (answered + closed) / 10,
        "{waiting} random bodies still waiting after 2 s ({answered} answered, {closed} closed)"
    );
}

/// 10,000 pipelined requests (8 KiB each) from one connection that reads its answers
/// slowly: the server reads no faster than it can answer (`requests_in_flight_max`), so its
/// memory stays flat, every answer comes back in order, and other clients are served
/// meanwhile.
#[test]
fn a_flood_of_pipelined_requests_read_slowly_keeps_memory_bounded() {
    const REQUESTS: usize = 10_000;
    const CLIENT_ID_BYTES: usize = 8 * 1024;
    let mut server = start_server(&[]);
    server.assert_healthy("start");
    let rss_before = server.rss_kib();

    let flood = connect_with_small_receive_buffer(&server.kafka);
    let mut writer = flood.try_clone().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let writing = {
        let written = written.clone();
        std::thread::spawn(move || {
            let client_id = vec![b'f'; CLIENT_ID_BYTES];
            for i in 0..REQUESTS {
                let frame = request_as(API_VERSIONS, 0, i as i32, &client_id, false, &[]);
                writer.write_all(&frame).expect("the server keeps reading");
                written.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Until the writer stops making progress (the server stopped reading) or is done.
    let mut last = usize::MAX;
    let stalled = retry(600, Duration::from_millis(100), || {
        let now = written.load(Ordering::Relaxed);
        let same = now == last || now == REQUESTS;
        last = now;
        same.then_some(now)
    })
    .expect("the writer settles");
    eprintln!("flood: {stalled} of {REQUESTS} requests written before anything was read");
    let rss_stalled = server.rss_kib();

    // Another client is served while the flooding one reads nothing.
    let mut other = server.connect_raw();
    let answer = api_versions(&mut other, 2, 77).expect("the other client is answered");
    assert_eq!((answer.correlation_id, answer.error_code), (77, 0));
    let listed = server.tool(&["topic", "list"]).output().unwrap();
    assert!(listed.status.success(), "{listed:?}");

    // Now read, slowly, every answer in order, sampling the server's memory on the way.
    let mut reader = flood;
    let mut rss_peak = rss_stalled;
    for i in 0..REQUESTS {
        let frame = read_frame(&mut reader).unwrap_or_else(|| panic!("closed after {i} answers"));
        let answer = parse_api_versions(&frame, 0);
        assert_eq!((answer.correlation_id, answer.error_code), (i as i32, 0));
        if i % 500 == 0 {
            rss_peak = rss_peak.max(server.rss_kib());
            // Not a wait: a slow reader, so the server holds answers while the flood goes on.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    writing.join().expect("all requests written");
    let total_mib = (REQUESTS * CLIENT_ID_BYTES) >> 20;
    let grown_mib = rss_peak.saturating_sub(rss_before) / 1024;
    eprintln!("flood: {total_mib} MiB sent; server RSS {rss_before} KiB before, {rss_stalled} KiB stalled, {rss_peak} KiB peak");
    assert!(
        grown_mib < 24,
        "the server's memory grew {grown_mib} MiB for a {total_mib} MiB flood"
    );
    server.assert_healthy("a flood");
}

/// Twice `connections_max` connections: the first `connections_max` are served, the rest
/// closed; once the first ones go, new connections are served again.
#[test]
fn connections_over_connections_max_are_closed_and_the_listener_recovers() {
    const CONNECTIONS_MAX: usize = 8;
    let mut server = start_server(&["--connections-max", &CONNECTIONS_MAX.to_string()]);
    let mut open = Vec::new();
    let mut served = Vec::new();
    for i in 0..2 * CONNECTIONS_MAX {
        let mut c = server.connect_raw();
        if let Some(answer) = api_versions(&mut c, 0, i as i32) {
            assert_eq!((answer.correlation_id, answer.error_code), (i as i32, 0));
            served.push(i);
            open.push(c);
        }
    }
    assert_eq!(served, (0..CONNECTIONS_MAX).collect::<Vec<_>>());
    // The held connections are still served.
    for (i, c) in open.iter_mut().enumerate() {
        let answer = api_versions(c, 1, 1000 + i as i32).expect("a held connection is served");
        assert_eq!(answer.correlation_id, 1000 + i as i32);
    }
    drop(open);
    // The server frees a slot when it sees the close, which takes a moment: until
    // connections_max new ones are served at once.
    let again = retry(100, Duration::from_millis(100), || {
        let mut held = Vec::new();
        for i in 0..CONNECTIONS_MAX {
            let mut c = server.connect_raw();
            let answer = api_versions(&mut c, 0, 2000 + i as i32)?;
            assert_eq!(answer.correlation_id, 2000 + i as i32);
            held.push(c);
        }
        Some(held)
    });
    let held = again.expect("served again once the first connections were closed");
    assert!(server.try_wait().is_none(), "still running");
    // The native port has its own connections_max: it serves while the Kafka port is full.
    let listed = server.tool(&["topic", "list"]).output().unwrap();
    assert!(listed.status.success(), "{listed:?}");
    drop(held);
}

/// docs/kafka.md's table of APIs and versions is the one ApiVersions advertises.
#[test]
fn the_docs_list_exactly_the_apis_and_versions_served() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/kafka.md");
    let page = std::fs::read_to_string(path).expect("docs/kafka.md");
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with("Supported APIs and versions"))
        .expect("a section 'Supported APIs and versions'");
    let mut documented: Vec<(i16, i16, i16)> = section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let key = cells.get(2)?.parse().ok()?;
            let (min, max) = cells.get(3)?.split_once('–')?;
            Some((key, min.parse().ok()?, max.parse().ok()?))
        })
        .collect();
    let mut served = supported_table();
    documented.sort_unstable();
    served.sort_unstable();
    assert_eq!(
        documented, served,
        "docs/kafka.md vs api_versions::SUPPORTED"
    );
}

/// Valid requests of every API and version served, each mutated many times: every mutant is
/// answered with its correlation id and a response that decodes at its version, or the
/// connection is closed; the server survives them all and keeps serving.
#[test]
fn mutated_valid_requests_are_answered_coherently_or_closed() {
    const MUTANTS_PER_VERSION: usize = 12;
    let mut server = start_server(&[]);
    server.assert_healthy("start");
    let mut rng = XorShift(0x5851_f42d_4c95_7f2d);
    let (mut answered, mut closed, mut waiting, mut seeds) = (0, 0, 0, 0);
    for (api_key, min, max) in SUPPORTED {
        for version in *min..=*max {
            let Some(seeded) = seed(*api_key, version) else {
                continue;
            };
            let mut body = bytes::BytesMut::new();
            seeded
                .encode(&mut body, version)
                .unwrap_or_else(|e| panic!("seed {api_key:?} v{version}: {e}"));
            seeds += 1;
            let flexible = api_key.request_header_version(version) >= 2;
            for _ in 0..MUTANTS_PER_VERSION {
                let mutant = mutate(&mut rng, &body);
                let correlation_id = (rng.next() & 0x7fff_ffff) as i32;
                let mut c = server.connect_raw();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let frame = request(*api_key as i16, version, correlation_id, flexible, &mutant);
                send_then_half_close(&mut c, &frame);
                match read_or_wait(&mut c) {
                    Outcome::Closed => closed += 1,
                    Outcome::Waiting => {
                        eprintln!("{api_key:?} v{version}: still waiting after 2 s");
                        waiting += 1;
                    }
                    Outcome::Answered(frame) => {
                        let mut frame = bytes::Bytes::from(frame);
                        let header = ResponseHeader::decode(
                            &mut frame,
                            api_key.response_header_version(version),
                        )
                        .unwrap_or_else(|e| panic!("{api_key:?} v{version} header: {e}"));
                        assert_eq!(
                            header.correlation_id, correlation_id,
                            "{api_key:?} v{version}"
                        );
                        ResponseKind::decode(*api_key, &mut frame, version).unwrap_or_else(|e| {
                            panic!("{api_key:?} v{version}: the answer does not decode: {e}")
                        });
                        answered += 1;
                    }
                }
            }
            if let Some(status) = server.try_wait() {
                panic!("the server exited after mutants of {api_key:?} v{version}: {status}");
            }
        }
        server.assert_healthy(&format!("mutated {api_key:?} requests"));
    }
    eprintln!("mutants of {seeds} seeds: {answered} answered, {closed} closed, {waiting} still waiting after 2 s");
    assert!(answered > 0, "some mutants reach the handlers");
}

/// With `--auth scram`, a connection that has not logged in may send only ApiVersions and
/// SASL requests, of at most 64 KiB each, and must log in by the handshake deadline.
#[test]
fn before_a_sasl_login_only_small_login_requests_are_taken() {
    let pre_login_frame_bytes_max = tinymq_kafka::KAFKA_PRE_AUTH_FRAME_BYTES_MAX as usize;
    let mut server = start_server_with_admin(
        &["--auth", "scram", "--handshake-timeout-ms", "5000"],
        "hostile-admin-password",
    );
    server.assert_healthy("start");

    // Any other API before the login: closed without an answer.
    let mut c = server.connect_raw();
    c.write_all(&request(METADATA, 1, 1, false, &(-1i32).to_be_bytes()))
        .unwrap();
    assert_closed_silently(&mut c, "Metadata before the login");

    // A request of exactly the pre-login limit is read; one byte more is refused by its size.
    let mut c = server.connect_raw();
    let header_bytes = request(API_VERSIONS, 0, 2, false, &[]).len() - 4;
    let padding = vec![0; pre_login_frame_bytes_max - header_bytes];
    c.write_all(&request(API_VERSIONS, 0, 2, false, &padding))
        .unwrap();
    let answer = parse_api_versions(&read_frame(&mut c).expect("answered"), 0);
    assert_eq!((answer.correlation_id, answer.error_code), (2, 0));
    // The same complete request, one padding byte longer: a server without the size check
    // would answer it (it is whole, and valid but for its size); it is closed unanswered.
    let mut c = server.connect_raw();
    let padding = vec![0; pre_login_frame_bytes_max + 1 - header_bytes];
    let over = request(API_VERSIONS, 0, 3, false, &padding);
    assert_eq!(over.len() - 4, pre_login_frame_bytes_max + 1);
    send_then_half_close(&mut c, &over);
    assert_closed_silently(&mut c, "a request over the pre-login limit");

    // Nothing at all, or half a request: closed at the handshake deadline.
    let mut silent = server.connect_raw();
    let mut half = server.connect_raw();
    half.write_all(&request(API_VERSIONS, 0, 3, false, &[])[..6])
        .unwrap();
    assert_closed_silently(&mut silent, "a silent connection");
    assert_closed_silently(&mut half, "half a request");
    server.assert_healthy("requests before the login");
}

/// A client that pipelines requests and never reads an answer: once the server has waited
/// `idle_timeout` to write to it, it is disconnected, and what it sent is not kept.
#[test]
fn a_client_that_never_reads_its_answers_is_disconnected() {
    const REQUESTS_MAX: usize = 10_000_000;
    let mut server = start_server(&["--idle-timeout-ms", "1000"]);
    server.assert_healthy("start");
    let rss_before = server.rss_kib();
    let mut c = connect_with_small_receive_buffer(&server.kafka);
    let frame = request(API_VERSIONS, 0, 1, false, &[]);
    let mut written = 0;
    let error = loop {
        if let Err(e) = c.write_all(&frame) {
            break e;
        }
        written += 1;
        assert!(
            written < REQUESTS_MAX,
            "the server read {written} requests it could not answer"
        );
    };
    assert!(
        matches!(
            error.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ),
        "after {written} requests: {error} (the server neither read on nor closed)"
    );
    let grown_mib = server.rss_kib().saturating_sub(rss_before) / 1024;
    eprintln!("never-reading client: closed after {written} requests; RSS +{grown_mib} MiB");
    assert!(grown_mib < 24, "the server's memory grew {grown_mib} MiB");
    server.assert_healthy("a client that never reads");
}
