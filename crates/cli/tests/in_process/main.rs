//! Behaviour tests that need no signal, no `kill -9` and no process boundary: each starts its
//! nodes in this process through `tinymq_node::Node` (the assembly the binary runs), so they
//! share one test binary and pay no process start. Tests that kill, signal or run the CLI stay
//! beside this folder as process tests.

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
mod many_clients;
mod meta_cluster;
mod protocol_conformance;
mod rest_api;
mod send_batch;
mod share_protocol;
