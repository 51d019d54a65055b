//! Behaviour tests that need no signal, no `kill -9` and no process boundary: each starts its
//! nodes in this process through `tinymq_node::Node` (the assembly the binary runs), so they
//! share one test binary and pay no process start. Tests that kill, signal or run the CLI stay
//! beside this folder as process tests.

// As the binary does: the Kafka listener's decoder needs huge declared allocations to be
// mapped unreserved (see tinymq_node::alloc_guard).
#[global_allocator]
static ALLOCATOR: tinymq_node::alloc_guard::GuardedAllocator =
    tinymq_node::alloc_guard::GuardedAllocator;

#[path = "../common/mod.rs"]
mod common;
mod node;

mod broker_behaviour;
mod failover;
mod fetch_paths;
mod filters;
mod groups;
mod http_endpoints;
mod idempotence;
mod kafka_groups;
mod many_clients;
mod meta_cluster;
mod protocol_conformance;
mod rest_api;
mod send_batch;
mod share_protocol;
