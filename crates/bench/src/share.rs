//! `tinymq bench consume --share-group G`: `consumers` members of one share group accepting
//! every record, reporting accepted records per second.
//!
//! Owner: the share-groups client work of issue 18 (a stub until it lands).

use std::sync::Arc;

use crate::{BenchConfig, BenchError, BenchResult, Progress};

pub(crate) async fn run_share_consume(
    _config: &BenchConfig,
    _partitions: u32,
    _progress: Arc<Progress>,
) -> Result<BenchResult, BenchError> {
    Err(BenchError::Config(
        "share-group consumers are not built yet".into(),
    ))
}
