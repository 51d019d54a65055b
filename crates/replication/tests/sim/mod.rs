//! A deterministic simulation of one partition's replication: a MetaServer and three replicas
//! stepping the rules of `tinymq_replication` under a seeded random schedule of produces,
//! fetches, lost and reordered messages, lagging fsyncs, crashes, restarts, pauses (zombie
//! leaders), network cuts and passing time. After every step the invariants in
//! [`world::World::check`] must hold. A seed replays exactly.

pub mod meta;
pub mod replica;
pub mod rng;
pub mod world;

use world::{Stats, World};

/// A seed that broke an invariant: where, why, and every step up to it.
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub message: String,
    pub trace: Vec<String>,
    pub state: String,
}

/// Runs `steps` steps of `seed`, checking the invariants after each.
pub fn run_seed(seed: u64, steps: u64) -> Result<Stats, Failure> {
    let mut w = World::new(seed);
    for step in 1..=steps {
        w.trace.push(format!("#{step}"));
        w.step();
        if let Err(message) = w.check() {
            return Err(Failure {
                seed,
                step,
                message,
                state: w.describe(),
                trace: std::mem::take(&mut w.trace),
            });
        }
    }
    Ok(w.stats)
}

/// The trace of a seed, for the replay test.
pub fn trace_of(seed: u64, steps: u64) -> Vec<String> {
    let mut w = World::new(seed);
    for _ in 0..steps {
        w.step();
    }
    w.trace
}

/// The trace of a seed up to a panic inside a step (the step runs under `catch_unwind`, so
/// the world and its trace survive it).
pub fn trace_of_until_panic(seed: u64, steps: u64) -> Vec<String> {
    let mut w = World::new(seed);
    for step in 1..=steps {
        w.trace.push(format!("#{step}"));
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.step()));
        if run.is_err() {
            break;
        }
    }
    w.trace
}
