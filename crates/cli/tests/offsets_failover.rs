//! Committed offsets survive losing the group coordinator's broker (issue 13): the offsets
//! topic is replicated, so after the coordinator is killed with SIGKILL, a consumer of the same
//! group (bootstrapped from a surviving broker) reads exactly the records after the committed
//! offsets: none of those the group consumed before, none skipped.

mod common;

use std::collections::BTreeSet;

use common::cluster::{tool_ok, tool_ok_with_input, wait_all_in_sync, wait_for, Cluster};
use common::RawClient;
use tinymq_protocol::messages as m;

/// The broker `bootstrap` names as the coordinator of `group`, if it names one.
fn coordinator(bootstrap: &str, group: &str) -> Option<u32> {
    let mut client = RawClient::handshaken(bootstrap);
    let found = client.call(&m::FindCoordinatorRequest {
        group_id: group.into(),
        key_type: 0,
    });
    found.error.is_none().then_some(found.node_id)
}

/// The values a `consume --group` process printed; it must exit successfully, which it does
/// only after its final commit was acknowledged.
fn consume_group(bootstrap: &str, group: &str, count: usize) -> Vec<String> {
    let count = count.to_string();
    let out = tool_ok(&[
        "consume",
        "events",
        "--group",
        group,
        "--from-beginning",
        "--count",
        &count,
        "--timeout-ms",
        "30000",
        "--bootstrap",
        bootstrap,
    ]);
    out.lines().map(String::from).collect()
}

#[test]
fn a_group_resumes_at_its_committed_offsets_after_its_coordinator_is_killed() {
    let mut cluster = Cluster::start(3);
    let first_broker = cluster.addrs[0].clone();
    let create = [
        "topic",
        "create",
        "events",
        "--partitions",
        "3",
        "--replicas",
        "3",
        "--bootstrap",
        &first_broker,
    ];
    tool_ok(&create);
    wait_all_in_sync("events", &first_broker);
    let all: Vec<String> = (0..300).map(|i| format!("v{i:03}")).collect();
    tool_ok_with_input(
        &["produce", "events", "--bootstrap", &first_broker],
        (all.join("\n") + "\n").as_bytes(),
    );

    // The first member consumes a third, commits it (acknowledged by the in-sync replicas of
    // the group's offsets partition) and leaves.
    let first = consume_group(&first_broker, "g", 100);
    assert_eq!(first.len(), 100);
    let dead = coordinator(&first_broker, "g").expect("the group has a coordinator");
    cluster.kill9(dead);

    // The MetaServer fences the dead broker and a surviving in-sync replica of the offsets
    // partition becomes the group's coordinator.
    let survivor = cluster.live_other_than(dead).to_string();
    wait_for("a surviving broker to coordinate the group", || {
        coordinator(&survivor, "g").is_some_and(|id| id != dead)
    });
    let second = consume_group(&survivor, "g", 200);

    let first: BTreeSet<String> = first.into_iter().collect();
    let unique: BTreeSet<String> = second.iter().cloned().collect();
    assert_eq!(unique.len(), second.len(), "no record is read twice");
    let again: Vec<&String> = unique.intersection(&first).take(5).collect();
    assert!(
        again.is_empty(),
        "records consumed and committed before the kill were read again, e.g. {again:?}"
    );
    let everything: BTreeSet<String> = first.union(&unique).cloned().collect();
    assert_eq!(
        everything,
        all.into_iter().collect::<BTreeSet<_>>(),
        "the group read every record"
    );
}
