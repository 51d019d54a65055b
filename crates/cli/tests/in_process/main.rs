//! Behaviour tests that need no signal, no `kill -9` and no process boundary: each starts its
//! nodes in this process through `tinymq_node::Node` (the assembly the binary runs), so they
//! share one test binary and pay no process start. Tests that kill, signal or run the CLI stay
//! beside this folder as process tests.

/// How many tests run at once unless RUST_TEST_THREADS or --test-threads say otherwise. The
/// tests here mostly wait (session timeouts, heartbeats, long polls, bounded polls: about 4 s
/// of CPU in 70 s of tests), so one a core (libtest's default) leaves the cores idle and the
/// binary takes the sum of its waits halved; eight at once take about the longest test.
const TEST_THREADS: &str = "8";

/// Sets RUST_TEST_THREADS to [`TEST_THREADS`] before `main` (where libtest reads it), when
/// the caller has not set it.
#[used]
#[link_section = ".init_array"]
static SET_TEST_THREADS: extern "C" fn() = set_test_threads;

extern "C" fn set_test_threads() {
    // Before main: the process has one thread, so changing the environment races nothing.
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        std::env::set_var("RUST_TEST_THREADS", TEST_THREADS);
    }
}

// As the binary does: the Kafka listener's decoder needs huge declared allocations to be
// mapped unreserved (see tinymq_node::alloc_guard).
#[global_allocator]
static ALLOCATOR: tinymq_node::alloc_guard::GuardedAllocator =
    tinymq_node::alloc_guard::GuardedAllocator;

#[path = "../common/mod.rs"]
mod common;
mod node;

mod broker_behaviour;
mod compaction;
mod delete_records;
mod failover;
mod fetch_paths;
mod filters;
mod groups;
mod half_messages;
mod http_endpoints;
mod idempotence;
mod kafka_groups;
mod many_clients;
mod meta_cluster;
mod protocol_conformance;
mod rest_api;
mod send_batch;
mod share_protocol;
mod transactions;
