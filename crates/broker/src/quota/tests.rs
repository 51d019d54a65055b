//! The throttling arithmetic on a simulated clock: rates held, who is throttled, changes of
//! the image, the bound on principals.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tinymq_net::NodeRole;

use super::*;

fn quota(produce: u64, fetch: u64, requests: u64) -> QuotaConfig {
    QuotaConfig {
        produce_bytes_per_sec: produce,
        fetch_bytes_per_sec: fetch,
        requests_per_sec: requests,
    }
}

fn quotas(entries: &[(&str, QuotaConfig)], now: Instant) -> Quotas {
    let q = Quotas::new(QUOTA_PRINCIPALS_MAX_DEFAULT);
    let image: BTreeMap<String, QuotaConfig> =
        entries.iter().map(|(p, c)| (p.to_string(), *c)).collect();
    q.apply(&image, now);
    q
}

/// Produces `bytes` per request as fast as the delays allow for `seconds` of simulated time;
/// returns the achieved rate in bytes per second.
fn produce_rate(q: &Quotas, principal: &str, bytes: u64, start: Instant, seconds: u64) -> f64 {
    let mut now = start;
    let mut sent = 0u64;
    let end = start + Duration::from_secs(seconds);
    while now < end {
        let admission = q.admit(principal, bytes, now);
        now += admission.delay;
        sent += bytes;
    }
    sent as f64 / now.duration_since(start).as_secs_f64()
}

#[test]
fn no_quota_no_throttle() {
    let now = Instant::now();
    let q = quotas(&[], now);
    assert!(!q.enabled());
    let a = q.admit("alice", 1 << 30, now);
    assert!(a.delay.is_zero() && a.throttle.is_none());
    assert_eq!(q.principals(), 0);
}

#[test]
fn only_principals_with_a_quota_are_tracked() {
    let now = Instant::now();
    let q = quotas(&[("User:alice", quota(1000, 0, 0))], now);
    assert!(q.enabled());
    let bob = q.admit("bob", 1 << 30, now);
    assert!(bob.delay.is_zero() && bob.throttle.is_none());
    assert!(q.admit("alice", 10, now).throttle.is_some());
    assert_eq!(q.principals(), 1);
}

#[test]
fn produce_rate_is_held_to_the_quota() {
    let start = Instant::now();
    let q = quotas(&[("User:alice", quota(200 * 1024, 0, 0))], start);
    let rate = produce_rate(&q, "alice", 16 * 1024, start, 60);
    let quota = 200.0 * 1024.0;
    // One second of burst over a minute: within a few percent.
    assert!(rate > quota * 0.95 && rate < quota * 1.05, "rate {rate}");
}

#[test]
fn request_rate_is_held_to_the_quota() {
    let start = Instant::now();
    let q = quotas(&[("User:alice", quota(0, 0, 50))], start);
    let mut now = start;
    let mut requests = 0u64;
    while now < start + Duration::from_secs(20) {
        now += q.admit("alice", 0, now).delay;
        requests += 1;
    }
    let rate = requests as f64 / now.duration_since(start).as_secs_f64();
    assert!(rate > 47.0 && rate < 55.0, "rate {rate}");
}

#[test]
fn default_applies_to_others_and_an_own_zero_entry_exempts() {
    let now = Instant::now();
    let q = quotas(
        &[
            (QUOTA_DEFAULT_PRINCIPAL, quota(100, 0, 0)),
            ("User:root", quota(0, 0, 0)),
        ],
        now,
    );
    assert!(!q.admit("anyone", 1000, now).delay.is_zero());
    let root = q.admit("root", 1000, now);
    assert!(root.delay.is_zero() && root.throttle.is_none());
}

#[test]
fn fetch_is_charged_at_the_response_and_delays_the_next_request() {
    let now = Instant::now();
    let q = quotas(&[("User:alice", quota(0, 1000, 0))], now);
    let admitted = q.admit("alice", 0, now);
    assert!(admitted.delay.is_zero());
    let throttle = admitted.throttle.expect("alice has a quota");
    // 3 s of data past a 1 s burst: the response waits 2 s.
    let held = throttle.fetched(3000, now);
    assert_eq!(held, Duration::from_secs(2));
    // The next request, half a second later, waits for the rest.
    let later = now + Duration::from_millis(500);
    let next = q.admit("alice", 0, later);
    assert_eq!(next.delay, Duration::from_millis(1500));
}

#[test]
fn one_wait_is_capped_and_the_rest_is_paid_later() {
    let now = Instant::now();
    let q = quotas(&[("User:alice", quota(1000, 0, 0))], now);
    let first = q.admit("alice", 21_000, now);
    assert_eq!(first.delay, QUOTA_DELAY_MAX);
    let after = now + QUOTA_DELAY_MAX;
    let second = q.admit("alice", 0, after);
    assert_eq!(second.delay, QUOTA_DELAY_MAX);
    let later = now + Duration::from_secs(20);
    assert!(q.admit("alice", 0, later).delay.is_zero());
}

#[test]
fn changes_of_the_image_apply_to_existing_limiters() {
    let now = Instant::now();
    let q = quotas(&[("User:alice", quota(1000, 0, 0))], now);
    assert!(!q.admit("alice", 5000, now).delay.is_zero());
    // Raised: a fresh bucket at the new rate.
    let mut image = BTreeMap::new();
    image.insert("User:alice".to_string(), quota(1_000_000, 0, 0));
    q.apply(&image, now);
    assert!(q.admit("alice", 5000, now).delay.is_zero());
    // Removed: no limiter at all.
    q.apply(&BTreeMap::new(), now);
    assert!(!q.enabled());
    assert_eq!(q.principals(), 0);
    assert!(q.admit("alice", 1 << 30, now).throttle.is_none());
}

#[test]
fn principals_are_bounded_and_the_idle_go_first() {
    let now = Instant::now();
    let q = Quotas::new(2);
    let mut image = BTreeMap::new();
    image.insert(QUOTA_DEFAULT_PRINCIPAL.to_string(), quota(1000, 0, 0));
    q.apply(&image, now);
    q.admit("a", 1, now);
    q.admit("b", 1, now + Duration::from_secs(1));
    // "a" is idle (and owes nothing) by now; "b" was used a moment ago.
    let later = now + IDLE_FORGET_AFTER + Duration::from_millis(500);
    q.admit("b", 1, later);
    q.admit("c", 1, later);
    assert_eq!(q.principals(), 2);
    let kept: Vec<String> = q.principals.lock().keys().cloned().collect();
    assert!(kept.contains(&"b".to_string()) && kept.contains(&"c".to_string()));
    // Full of busy principals: the least recently used goes.
    q.admit("d", 1, later);
    assert_eq!(q.principals(), 2);
}

#[test]
fn throttling_is_counted_per_principal_and_kind() {
    let now = Instant::now();
    let q = quotas(&[("User:alice", quota(1000, 1000, 0))], now);
    q.admit("alice", 500, now);
    let throttle = q.admit("alice", 1500, now).throttle.expect("quota");
    throttle.fetched(1500, now);
    let stats = q.stats();
    assert_eq!(stats.len(), 2, "{stats:?}");
    assert_eq!(stats[0].principal, "User:alice");
    assert_eq!(stats[0].kind, QuotaKind::Produce);
    assert_eq!(stats[0].throttled_requests, 1);
    assert!((stats[0].throttle_seconds - 1.0).abs() < 1e-6);
    assert_eq!(stats[1].kind, QuotaKind::Fetch);
    assert!((stats[1].throttle_seconds - 0.5).abs() < 1e-6);
}

fn peer(role: NodeRole, principal: tinymq_auth::Principal) -> Peer {
    Peer {
        addr: "127.0.0.1:1".parse().expect("an address"),
        role,
        node_id: 3,
        principal,
        client_id: "quota-test".into(),
        tls_principal: None,
        large_response_gate: Default::default(),
        listener_stats: None,
        connection_tag: Default::default(),
    }
}

/// Only a proven node escapes quotas: a node role claimed in the handshake with `--auth none`
/// and no cluster secret leaves the connection `User:ANONYMOUS`, charged like any client.
#[test]
fn only_proven_nodes_are_exempt() {
    use tinymq_auth::{NodeKind, Principal};
    let claimed = peer(NodeRole::Broker, Principal::anonymous());
    assert_eq!(user_of(&claimed), Some("ANONYMOUS"));
    let proven = peer(NodeRole::Broker, Principal::node(NodeKind::Broker, 3));
    assert_eq!(user_of(&proven), None);
    let meta = peer(NodeRole::Meta, Principal::node(NodeKind::Meta, 1));
    assert_eq!(user_of(&meta), None);
    // A node acting for a user (the REST API's impersonation) is charged as that user.
    let acting = peer(NodeRole::Client, Principal::user("alice"));
    assert_eq!(user_of(&acting), Some("alice"));
}
