//! The one-time upgrade path for logs written before record batches: their normal entries are
//! [`Command`]s, and the only way to know their records is to execute them at apply time,
//! as those versions did. Every node replaying the same log executes the same commands on the
//! same image, so they still agree; and the node snapshots its image once it has replayed any
//! (see `MetaNode::start`), so a log's legacy entries are executed at most until that snapshot.
//!
//! Nothing here may panic on data: a command whose execution panics (a bug in a rule) is
//! refused, the same way on every node, instead of stopping every node at every restart.

use super::proposer::execute_without_panic;
use crate::{Command, MetaError, MetadataImage, Reply};

/// Executes a legacy command against `image` and applies its records.
pub fn replay(image: &mut MetadataImage, command: &Command) -> Result<Reply, MetaError> {
    let (records, reply) = execute_without_panic(image, command)?;
    for record in &records {
        image.apply(record);
    }
    Ok(reply)
}
