//! `tinymq transaction list|describe|producers|abort`: the cluster's transactional ids and
//! their states, the producers of a partition with their open transactions, and the abort of
//! a transaction left hanging on a partition (Kafka's `kafka-transactions.sh`, KIP-664).

use clap::Subcommand;
use tinymq_client::Admin;
use tinymq_protocol::messages as m;

use crate::{outln, Bootstrap};

#[derive(Subcommand, Debug)]
pub enum TransactionCommand {
    /// Every transactional id with its state and producer.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// One transactional id: state, producer id and epoch, timeout, the open transaction's
    /// start and partitions.
    Describe {
        /// The transactional id.
        transactional_id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// The producers of a partition, with where their open transaction starts.
    Producers {
        /// The topic of the partition.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
    /// Abort a producer's transaction left open on a partition (it holds the partition's
    /// last stable offset back, so read-committed consumers wait): the partition's leader
    /// writes an ABORT marker for it. Find the producer with `transaction producers`.
    Abort {
        /// The topic of the partition the transaction hangs on.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: u32,
        /// The producer whose open transaction to abort (see `transaction producers`).
        #[arg(long)]
        producer_id: i64,
        #[command(flatten)]
        bootstrap: Bootstrap,
    },
}

fn partitions(t: &m::TransactionState) -> String {
    let all: Vec<String> = t
        .topics
        .iter()
        .flat_map(|x| x.partitions.iter().map(move |p| format!("{}/{p}", x.topic)))
        .collect();
    if all.is_empty() {
        "-".into()
    } else {
        all.join(",")
    }
}

fn to_json(t: &m::TransactionState) -> serde_json::Value {
    serde_json::json!({
        "transactional_id": t.transactional_id,
        "state": t.state,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "timeout_ms": t.timeout_ms,
        "start_ms": t.start_ms,
        "partitions": partitions(t),
        "coordinator": t.coordinator,
    })
}

pub async fn run(command: TransactionCommand) -> anyhow::Result<()> {
    match command {
        TransactionCommand::List { json, bootstrap } => {
            let all = Admin::new(bootstrap.client_config()?)?
                .list_transactions()
                .await?;
            if json {
                let out: Vec<_> = all.iter().map(to_json).collect();
                return outln!("{}", serde_json::to_string_pretty(&out)?);
            }
            outln!("TRANSACTIONAL-ID\tSTATE\tPRODUCER\tEPOCH\tCOORDINATOR")?;
            for t in &all {
                outln!(
                    "{}\t{}\t{}\t{}\t{}",
                    t.transactional_id,
                    t.state,
                    t.producer_id,
                    t.producer_epoch,
                    t.coordinator
                )?;
            }
            Ok(())
        }
        TransactionCommand::Describe {
            transactional_id,
            json,
            bootstrap,
        } => {
            let t = Admin::new(bootstrap.client_config()?)?
                .describe_transaction(&transactional_id)
                .await?;
            if json {
                return outln!("{}", serde_json::to_string_pretty(&to_json(&t))?);
            }
            outln!("transactional id: {}", t.transactional_id)?;
            outln!("state:            {}", t.state)?;
            outln!(
                "producer:         {} epoch {}",
                t.producer_id,
                t.producer_epoch
            )?;
            outln!("timeout:          {} ms", t.timeout_ms)?;
            outln!("coordinator:      broker {}", t.coordinator)?;
            outln!("started (ms):     {}", t.start_ms)?;
            outln!("partitions:       {}", partitions(&t))
        }
        TransactionCommand::Producers {
            topic,
            partition,
            bootstrap,
        } => {
            let producers = Admin::new(bootstrap.client_config()?)?
                .describe_producers(&topic, partition)
                .await?;
            outln!("PRODUCER\tEPOCH\tLAST-SEQUENCE\tCOORDINATOR-EPOCH\tOPEN-TXN-START")?;
            for p in &producers {
                let start = if p.current_txn_start_offset < 0 {
                    "-".to_string()
                } else {
                    p.current_txn_start_offset.to_string()
                };
                outln!(
                    "{}\t{}\t{}\t{}\t{start}",
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.coordinator_epoch
                )?;
            }
            Ok(())
        }
        TransactionCommand::Abort {
            topic,
            partition,
            producer_id,
            bootstrap,
        } => {
            Admin::new(bootstrap.client_config()?)?
                .abort_transaction(&topic, partition, producer_id)
                .await?;
            outln!("aborted producer {producer_id}'s open transaction on {topic}/{partition}")
        }
    }
}
