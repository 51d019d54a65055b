//! `tinymq dlq replay`: move dead-lettered records back to their origin topic
//! (docs/queues.md, "Dead-letter topics").
//!
//! Owner: the share-groups client work of issue 18 (a stub until it lands).

#[derive(clap::Subcommand, Debug)]
pub enum DlqCommand {
    /// Produce the records of a dead-letter topic back to the topic each came from.
    Replay {
        /// The dead-letter topic.
        topic: String,
        #[command(flatten)]
        bootstrap: crate::Bootstrap,
    },
}

pub async fn run(_cmd: DlqCommand) -> anyhow::Result<()> {
    anyhow::bail!("dlq replay is not built yet")
}
