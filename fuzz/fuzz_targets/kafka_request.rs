//! Arbitrary bytes as one Kafka request frame (what follows the size prefix), through the
//! listener's own parsing: the header (`tinymq_kafka::frame::parse_request`), then the body
//! with kafka-protocol's decoder for that API and version, as `dispatch` does, for every
//! version the listener serves (`tinymq_kafka::api_versions::SUPPORTED`). Nothing may panic
//! (the listener would survive a decoder panic by closing the connection; here it is a
//! finding). ApiVersions, answered whatever its version, must always be encodable.
//!
//! kafka-protocol 0.18 reserves an array's declared count before decoding it (upstream
//! #152/#161/#200): a lying count asks for hundreds of GiB. The `tinymq` binary contains that
//! with its allocator (`crates/node/src/alloc_guard.rs`: huge allocations only reserve address
//! space); this target uses the same allocator, so it tests what the binary runs. Those
//! mappings bypass libFuzzer's malloc hooks, so `-malloc_limit_mb` does not flag them.
#![no_main]

#[path = "../../crates/node/src/alloc_guard.rs"]
mod alloc_guard;

#[global_allocator]
static ALLOCATOR: alloc_guard::GuardedAllocator = alloc_guard::GuardedAllocator;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use libfuzzer_sys::fuzz_target;
use tinymq_kafka::{api_versions, frame};

fuzz_target!(|data: &[u8]| {
    let Ok(request) = frame::parse_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    let version = request.header.request_api_version;
    if request.api_key == ApiKey::ApiVersions {
        let (response, answered_at) = api_versions::response(version);
        let response = ResponseKind::ApiVersions(response);
        let correlation_id = request.header.correlation_id;
        frame::encode_response(ApiKey::ApiVersions, answered_at, correlation_id, &response)
            .expect("an ApiVersions answer can always be written");
        return;
    }
    if !api_versions::is_supported(request.api_key, version) {
        return;
    }
    let mut body = request.body;
    let _ = RequestKind::decode(request.api_key, &mut body, version);
});
