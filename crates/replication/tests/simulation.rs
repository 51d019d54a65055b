//! Runs the replication simulation (see `sim/mod.rs`) over many seeds.
//!
//! - `cargo test -p tinymq-replication --test simulation`: 300 seeds.
//! - `TINYMQ_SIM_SEEDS=20000` (and optionally `TINYMQ_SIM_FIRST_SEED=N`): more.
//! - `TINYMQ_SIM_SEED=N`: replay one seed and print its whole trace.
//! - `TINYMQ_SIM_STEPS=N`: steps per seed (default 2000).

mod sim;

use std::time::Instant;

use sim::world::Stats;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}")),
    )
}

fn report(f: &sim::Failure, steps: u64) -> String {
    format!(
        "seed {} broke an invariant at step {}: {}\n\nstate:\n{}\nreplay: TINYMQ_SIM_SEED={} \
         TINYMQ_SIM_STEPS={steps} cargo test -p tinymq-replication --test simulation -- --nocapture",
        f.seed, f.step, f.message, f.state, f.seed
    )
}

#[test]
fn seeds_keep_every_acknowledged_record() {
    let steps = env_u64("TINYMQ_SIM_STEPS").unwrap_or(2_000);
    let seeds: Vec<u64> = match env_u64("TINYMQ_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("TINYMQ_SIM_FIRST_SEED").unwrap_or(0);
            let count = env_u64("TINYMQ_SIM_SEEDS").unwrap_or(300);
            (first..first.saturating_add(count)).collect()
        }
    };
    let single = seeds.len() == 1;
    let started = Instant::now();
    let mut total = Stats::default();
    for &seed in &seeds {
        let run = std::panic::catch_unwind(|| sim::run_seed(seed, steps));
        match run {
            Ok(Ok(stats)) => {
                if single {
                    eprintln!("{}", sim::trace_of(seed, steps).join("\n"));
                }
                total.add(&stats);
            }
            Ok(Err(failure)) => {
                eprintln!("{}", failure.trace.join("\n"));
                panic!("{}", report(&failure, steps));
            }
            Err(_) => {
                eprintln!("{}", sim::trace_of_until_panic(seed, steps).join("\n"));
                panic!("seed {seed} panicked (trace above); replay: TINYMQ_SIM_SEED={seed}");
            }
        }
    }
    eprintln!(
        "{} seeds x {steps} steps in {:.1?}: {total:?}",
        seeds.len(),
        started.elapsed()
    );
    if !single {
        assert!(
            total.acked > 0 && total.leader_epochs > 0 && total.truncations > 0,
            "the schedule exercised too little: {total:?}"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    assert_eq!(sim::trace_of(7, 400), sim::trace_of(7, 400));
    assert_ne!(sim::trace_of(7, 400), sim::trace_of(8, 400));
}
