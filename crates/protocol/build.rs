//! Compiles `proto/tinymq/v1/*.proto` into Rust with prost. protox parses the files in pure
//! Rust, so no system `protoc` is needed and `cargo build` alone works.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/tinymq/v1/tinymq.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    prost_build::Config::new()
        // Record data is carried as `Bytes` so a decoded body shares the frame's buffer.
        .bytes(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
