//! Writes the request-path fuzz seeds (`tinymq_broker::fuzzing::seeds`) as files for
//! libFuzzer: `cargo run -p tinymq-broker --example write_request_path_seeds -- fuzz/corpus/request_path`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus/request_path".into());
    std::fs::create_dir_all(&dir)?;
    for (name, scenario) in tinymq_broker::fuzzing::seeds() {
        let path = std::path::Path::new(&dir).join(name);
        std::fs::write(&path, tinymq_broker::fuzzing::seed_bytes(&scenario))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
