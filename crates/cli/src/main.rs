//! The `tinymq` binary: every role and every tool behind one command.
//!
//! Today it reports its version and what it can run; the server and the tools arrive with the
//! broker and client crates.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tinymq",
    version,
    about = "tinymq: a distributed, persistent message queue"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the protocol versions and limits this build speaks.
    Info,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Info => {
            println!(
                "tinymq {} protocol {}..={} frame_bytes_max {}",
                env!("CARGO_PKG_VERSION"),
                tinymq_protocol::PROTOCOL_VERSION_MIN,
                tinymq_protocol::PROTOCOL_VERSION_MAX,
                tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_DEFAULT
            );
        }
    }
    Ok(())
}
