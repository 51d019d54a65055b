//! `tinymq consume TOPIC --share-group G`: a share-group member that prints each record it is
//! handed and then accepts it (docs/queues.md, "Share groups").
//!
//! Owner: the share-groups client work of issue 18 (a stub until it lands).

use crate::consume::ConsumeArgs;

/// The flags that only a share-group member reads.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// How long each record handed to this member stays locked to it, ms [default: 30000].
    #[arg(long, value_parser = crate::args::positive_u32)]
    lock_ms: Option<u32>,
}

pub async fn run(_args: &ConsumeArgs, _group: &str) -> anyhow::Result<()> {
    anyhow::bail!("share groups are not built yet")
}
