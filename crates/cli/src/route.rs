//! `tinymq route add|list|delete`: content-based routes (docs/queues.md, "Routes"). `list`
//! shows each route with its lag (records of the source not yet routed; `-` when a leader
//! could not be asked), and with `--json` its progress per source partition.

use clap::Subcommand;
use tinymq_client::Admin;

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum RouteCommand {
    /// Add a route: every record of --from that matches --filter is copied into --to, exactly
    /// once, with the origin headers tinymq.route.name, .partition and .offset.
    Add {
        /// The route's name: 1 to 249 characters of [A-Za-z0-9._-].
        name: String,
        /// The source topic.
        #[arg(long)]
        from: String,
        /// The target topic.
        #[arg(long)]
        to: String,
        /// A filter expression, e.g. "header.region = 'eu'"; without it, every record.
        #[arg(long, default_value = "")]
        filter: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// List every route with its lag.
    List {
        /// Print JSON, with the progress of each source partition.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Delete a route; what it copied stays in the target.
    Delete {
        /// The route to delete.
        name: String,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

pub async fn run(command: RouteCommand) -> anyhow::Result<()> {
    match command {
        RouteCommand::Add {
            name,
            from,
            to,
            filter,
            bootstrap,
        } => {
            let admin = Admin::new(bootstrap.client_config()?)?;
            admin.create_route(&name, &from, &to, &filter).await?;
            outln!("created route {name}: {from} -> {to}")?;
        }
        RouteCommand::List { json, bootstrap } => list(json, &bootstrap).await?,
        RouteCommand::Delete { name, bootstrap } => {
            Admin::new(bootstrap.client_config()?)?
                .delete_route(&name)
                .await?;
            outln!("deleted route {name}")?;
        }
    }
    Ok(())
}

/// -1 (unknown) as JSON null.
fn known(v: i64) -> serde_json::Value {
    if v < 0 {
        serde_json::Value::Null
    } else {
        v.into()
    }
}

async fn list(json: bool, bootstrap: &Bootstrap) -> anyhow::Result<()> {
    let routes = Admin::new(bootstrap.client_config()?)?
        .list_routes()
        .await?;
    if json {
        let out: Vec<_> = routes
            .iter()
            .map(|r| {
                let partitions: Vec<_> = r
                    .partitions
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "partition": p.partition,
                            "next_offset": known(p.next_offset),
                            "high_watermark": known(p.high_watermark),
                            "copied": p.copied,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": r.name, "from": r.from_topic, "to": r.to_topic,
                    "filter": r.filter, "lag": known(r.lag), "partitions": partitions,
                })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    outln!(
        "{:<20} {:<20} {:<20} {:>8}  filter",
        "route",
        "from",
        "to",
        "lag"
    )?;
    for r in routes {
        let lag = match r.lag {
            l if l < 0 => "-".to_string(),
            l => l.to_string(),
        };
        let filter = if r.filter.is_empty() {
            "(every record)"
        } else {
            &r.filter
        };
        outln!(
            "{:<20} {:<20} {:<20} {:>8}  {}",
            r.name,
            r.from_topic,
            r.to_topic,
            lag,
            filter
        )?;
    }
    Ok(())
}
