//! What a normal entry of the MetaServer's Raft log holds: a versioned [`RecordBatch`], the
//! records the leader's [`crate::execute`] produced (applied as they are, never re-executed),
//! or — in logs written before record batches — a bare [`Command`], replayed once through
//! [`super::legacy`].
//!
//! An entry is decoded leniently: JSON that is neither form this version knows (a record type
//! or batch layout from a newer version) becomes [`MetaEntry::Unreadable`], kept as the JSON value it is,
//! so that storing and forwarding it never fail; applying it stops the node with
//! [`ApplyError`] naming the log index, so no node ever applies part of what it cannot read.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Command, MetadataRecord};

/// The record batch layout this version writes and reads (`RecordBatch::version`).
pub const RECORD_BATCH_VERSION: u32 = 1;

/// The key of the JSON object a record batch is stored under (`{"Records": {...}}`); no
/// [`Command`] variant has this name, so the two forms never collide.
const RECORDS_KEY: &str = "Records";

/// Records the leader produced from one or more commands, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordBatch {
    /// The layout of the batch and its records; a node applies only versions it knows.
    pub version: u32,
    /// The applied log index the leader executed the commands against. The records hold only
    /// if no entry after it changed the image before this one is applied; otherwise the batch
    /// is skipped on every node (and its commands executed again by the leader).
    pub base_index: u64,
    pub records: Vec<MetadataRecord>,
}

/// The payload of a normal Raft log entry.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaEntry {
    Records(RecordBatch),
    /// A command, as logs written before record batches hold them.
    Legacy(Command),
    /// An entry this version cannot decode, as it was stored.
    Unreadable {
        raw: serde_json::Value,
        why: String,
    },
}

impl MetaEntry {
    /// Decodes an entry's JSON; never fails (see the module doc).
    fn from_json(raw: serde_json::Value) -> MetaEntry {
        let batch = raw
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.get(RECORDS_KEY));
        if let Some(batch) = batch {
            return match RecordBatch::deserialize(batch) {
                Ok(batch) => MetaEntry::Records(batch),
                Err(e) => {
                    let version = batch.get("version").and_then(serde_json::Value::as_u64);
                    MetaEntry::Unreadable {
                        why: format!("a record batch (version {version:?}) whose records this version does not know: {e}"),
                        raw,
                    }
                }
            };
        }
        match Command::deserialize(&raw) {
            Ok(command) => MetaEntry::Legacy(command),
            Err(e) => MetaEntry::Unreadable {
                why: format!("neither a record batch nor a command: {e}"),
                raw,
            },
        }
    }
}

impl Serialize for MetaEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            MetaEntry::Records(batch) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(RECORDS_KEY, batch)?;
                map.end()
            }
            // Exactly as the version that wrote it did, so that a rewritten log file and an
            // entry sent to a follower keep the original form.
            MetaEntry::Legacy(command) => command.serialize(serializer),
            MetaEntry::Unreadable { raw, .. } => raw.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for MetaEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(MetaEntry::from_json)
    }
}

/// Why a node cannot apply a committed entry: it stops (the Raft core ends with this error)
/// rather than derive an image other nodes do not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("log entry {index}: record batch version {version} is newer than this node reads (up to {max}); upgrade this node to the version of the MetaServer leader")]
    NewerBatch { index: u64, version: u32, max: u32 },
    #[error("log entry {index} cannot be read by this version ({why}); upgrade this node to the version of the MetaServer leader")]
    Unreadable { index: u64, why: String },
}

/// What applying one entry produced, returned to the leader that proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryOutcome {
    /// A blank or membership entry, or a record batch: applied.
    Applied,
    /// A record batch executed against an image that an earlier entry changed before it was
    /// applied: skipped on every node; the leader executes its commands again.
    Stale,
    /// A legacy command's own reply.
    Legacy(Result<crate::Reply, crate::MetaError>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(json: &str) -> MetaEntry {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_record_batch_round_trips_and_a_legacy_command_keeps_its_form() {
        let batch = MetaEntry::Records(RecordBatch {
            version: RECORD_BATCH_VERSION,
            base_index: 7,
            records: vec![MetadataRecord::DeleteTopic { name: "t".into() }],
        });
        let json = serde_json::to_string(&batch).unwrap();
        assert_eq!(
            json,
            r#"{"Records":{"version":1,"base_index":7,"records":[{"DeleteTopic":{"name":"t"}}]}}"#
        );
        assert_eq!(decode(&json), batch);
        let legacy = r#"{"DeleteTopic":{"name":"t"}}"#;
        assert_eq!(
            decode(legacy),
            MetaEntry::Legacy(Command::DeleteTopic { name: "t".into() })
        );
        assert_eq!(serde_json::to_string(&decode(legacy)).unwrap(), legacy);
    }

    #[test]
    fn an_entry_of_a_newer_version_is_kept_as_it_is_and_says_why_it_cannot_be_read() {
        let newer = r#"{"Records":{"version":2,"base_index":1,"records":[{"FutureRecord":{}}]}}"#;
        let entry = decode(newer);
        let MetaEntry::Unreadable { why, .. } = &entry else {
            panic!("decoded as {entry:?}");
        };
        assert!(
            why.contains("version Some(2)") && why.contains("FutureRecord"),
            "{why}"
        );
        let stored: serde_json::Value = serde_json::from_str(newer).unwrap();
        assert_eq!(serde_json::to_value(&entry).unwrap(), stored);
        let stranger = decode(r#"{"FutureCommand":{"x":1}}"#);
        assert!(
            matches!(stranger, MetaEntry::Unreadable { .. }),
            "{stranger:?}"
        );
    }
}
