//! Native per-partition answers matched to the Kafka partitions that asked for them. The
//! broker answers partitions it refused for authorization after the others, so answers are
//! matched by topic and partition, not position; a partition named more than once gets its
//! answers in the order it was named.

use std::collections::{HashMap, VecDeque};

use tinymq_protocol::messages as m;

/// A native response of per-partition results.
pub(crate) trait PerPartition {
    type Result;
    /// The response's own error (the whole request refused) and its partitions' results.
    fn split(self) -> (Option<m::Error>, Vec<Self::Result>);
    /// A result's topic and partition.
    fn key(result: &Self::Result) -> (&str, u32);
}

macro_rules! per_partition {
    ($response:ty, $result:ty) => {
        impl PerPartition for $response {
            type Result = $result;
            fn split(self) -> (Option<m::Error>, Vec<$result>) {
                (self.error, self.partitions)
            }
            fn key(result: &$result) -> (&str, u32) {
                (&result.topic, result.partition)
            }
        }
    };
}

per_partition!(m::ProduceResponse, m::ProducePartitionResult);
per_partition!(m::FetchResponse, m::FetchPartitionResult);
per_partition!(m::ListOffsetsResponse, m::ListOffsetsPartitionResult);
per_partition!(m::DeleteRecordsResponse, m::DeleteRecordsPartitionResult);

/// A native response's results by partition, or the error that refused it whole.
pub(crate) struct Answers<T> {
    /// Set when the whole request failed: every partition gets this error.
    pub failed: Option<m::Error>,
    by_partition: HashMap<(String, u32), VecDeque<T>>,
}

impl<T> Answers<T> {
    pub fn new<R: PerPartition<Result = T>>(answer: Result<R, m::Error>) -> Answers<T> {
        let mut by_partition: HashMap<_, VecDeque<_>> = HashMap::new();
        let failed = match answer.map(R::split) {
            Err(e) => Some(e),
            Ok((Some(e), _)) => Some(e),
            Ok((None, results)) => {
                for result in results {
                    let (topic, partition) = R::key(&result);
                    let key = (topic.to_owned(), partition);
                    by_partition.entry(key).or_default().push_back(result);
                }
                None
            }
        };
        Answers {
            failed,
            by_partition,
        }
    }

    /// The next answer for `topic`/`partition`; `None` when the broker gave none.
    pub fn take(&mut self, topic: &str, partition: u32) -> Option<T> {
        self.by_partition
            .get_mut(&(topic.to_owned(), partition))
            .and_then(VecDeque::pop_front)
    }
}
