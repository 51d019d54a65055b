//! Replays the committed request-path fuzz seeds (`fuzz/corpus/request_path/`) and a few
//! hundred generated scenarios through the fuzzing harness, so every test run checks what the
//! fuzzer checks: no panic, a valid batch still accepted and read back, recovery succeeds.

use arbitrary::{Arbitrary, Unstructured};
use tinymq_broker::fuzzing::{run, seed_bytes, seeds, Scenario};

fn corpus_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/request_path")
}

fn decode(bytes: &[u8]) -> Scenario {
    Scenario::arbitrary_take_rest(Unstructured::new(bytes)).expect("any bytes make a scenario")
}

#[test]
fn seed_bytes_decode_to_their_scenarios_and_match_the_committed_files() {
    for (name, scenario) in seeds() {
        let bytes = seed_bytes(&scenario);
        assert_eq!(
            decode(&bytes),
            scenario,
            "{name}: the encoding follows arbitrary's"
        );
        let committed = std::fs::read(corpus_dir().join(name)).unwrap_or_else(|e| {
            panic!("{name} is not committed ({e}); run the example write_request_path_seeds")
        });
        assert_eq!(committed, bytes, "{name}: regenerate the seeds");
    }
}

#[test]
fn every_committed_seed_runs_clean() {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("the corpus directory")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= seeds().len());
    for path in files {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        run(decode(&bytes), tmp.path());
    }
}

#[test]
fn generated_scenarios_run_clean() {
    // A fixed pseudo-random stream (xorshift), so a failure repeats.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..200 {
        let bytes: Vec<u8> = (0..2048)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        run(decode(&bytes), tmp.path());
    }
}
