//! `tinymq route add|list|delete`: content-based routes (docs/queues.md, "Routes").
//!
//! Owner: the routes work of issue 18 (a stub until it lands).

#[derive(clap::Subcommand, Debug)]
pub enum RouteCommand {
    /// List every route with its lag.
    List {
        #[command(flatten)]
        bootstrap: crate::Bootstrap,
    },
}

pub async fn run(_cmd: RouteCommand) -> anyhow::Result<()> {
    anyhow::bail!("routes are not built yet")
}
