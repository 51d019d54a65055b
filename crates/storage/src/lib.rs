//! tinymq's one storage layer (docs/storage.md, "One storage layer"): every durable file of a
//! broker or MetaServer node (partition segments and indexes, leader-epoch checkpoints, share
//! state logs, timer logs, producer state, `broker.json`, the Raft log and vote) is reached
//! through the [`Storage`] trait, so a test can hand any of them the fault-injecting
//! [`fault::FaultyStorage`] instead of the real file system ([`OsStorage`]).
//!
//! A file that is replaced whole goes through [`replace_file`] (or [`replace_file_with`] for
//! one streamed out): temporary file, fsync, rename over the target, directory fsync; the one
//! implementation of that protocol.
//!
//! Pure: no async runtime, no networking.

pub mod fault;
mod read;
mod replace;
mod storage;

pub use read::{read_file, FileReader};
pub use replace::{
    replace_file, replace_file_with, temp_path, FileWriter, ReplaceError, ReplaceStep, TEMP_SUFFIX,
};
pub use storage::{OsStorage, Storage, StorageFile};
