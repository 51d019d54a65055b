//! Log output of the `tinymq` processes, on stderr.
//!
//! The level comes from `TINYMQ_LOG`, else `RUST_LOG` (tracing's `EnvFilter` syntax, e.g.
//! `TINYMQ_LOG=debug` or `TINYMQ_LOG=info,tinymq_broker=debug,openraft=info`), else the
//! defaults below: tinymq's own lifecycle at INFO (listening, registered, topics created and
//! deleted, partitions opened, Raft leader changes, peers unreachable and back, stopping) and
//! dependencies at WARN — except openraft, off by default: it logs an ERROR for every vote a
//! starting peer cannot answer, and tinymq logs those peers itself. Colour codes only when
//! stderr is a terminal, so log files stay plain text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Server roles (`server`, `broker`, `meta`) by default.
pub const SERVER_LOG_DEFAULT: &str = "warn,openraft=off,tinymq=info,tinymq_broker=info,\
     tinymq_meta=info,tinymq_net=info,tinymq_http=info,tinymq_log=info,tinymq_client=warn";
/// Tools (`consume`, …) by default: warnings only, e.g. a partition that cannot be read.
pub const TOOL_LOG_DEFAULT: &str = "warn,openraft=off";

/// The filter from `TINYMQ_LOG`, else `RUST_LOG`, else `default`. A variable that does not
/// parse is reported and skipped rather than silently ignored.
fn filter(default: &str) -> EnvFilter {
    for var in ["TINYMQ_LOG", "RUST_LOG"] {
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => match EnvFilter::try_new(&value) {
                Ok(filter) => return filter,
                Err(e) => eprintln!("warning: ignoring {var}={value:?}: {e}"),
            },
            _ => {}
        }
    }
    EnvFilter::new(default)
}

fn init(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

pub fn init_server() {
    init(SERVER_LOG_DEFAULT);
}

pub fn init_tool() {
    init(TOOL_LOG_DEFAULT);
}
