//! The broker's request path as a client drives it: a structure-aware scenario of produce
//! (honest, crafted with lying headers, raw bytes), retries, fetch, list offsets, producer ids,
//! clean and unclean reopens and damage to the partition's files, on a real partition in a
//! fresh directory (under /dev/shm when it exists, so fsyncs are cheap). The harness panics
//! when a rule is broken; see `tinymq_broker::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinymq_broker::fuzzing::{run, Scenario};

fuzz_target!(|scenario: Scenario| {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory");
    run(scenario, dir.path());
});
