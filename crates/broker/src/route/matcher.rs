//! A route's filter applied to a consumed record: the record's key and headers as the
//! filter crate's `RecordFields` (the first header of a name counts, as for the broker-side
//! fetch filter).

use tinymq_client::ConsumerRecord;

// TODO(issue 18): tinymq_filter::{Filter, RecordFields} once the filter crate lands on main.
mod pending {
    pub trait RecordFields {
        fn key(&self) -> Option<&[u8]>;
        fn header(&self, name: &str) -> Option<&[u8]>;
    }
    #[derive(Debug)]
    pub struct Filter(Option<(String, String)>);
    impl Filter {
        pub fn parse(text: &str) -> Result<Filter, String> {
            let eq = text
                .strip_prefix("header.")
                .and_then(|t| t.split_once(" = '"));
            Ok(Filter(eq.map(|(n, v)| {
                (n.to_string(), v.trim_end_matches('\'').to_string())
            })))
        }
        pub fn matches(&self, record: &(impl RecordFields + ?Sized)) -> bool {
            let _ = record.key();
            self.0
                .as_ref()
                .is_none_or(|(n, v)| record.header(n) == Some(v.as_bytes()))
        }
    }
}
use pending::{Filter, RecordFields};

/// A route's filter; no filter matches every record.
#[derive(Debug)]
pub struct Matcher(Option<Filter>);

impl Matcher {
    /// The stored filter text, checked when the route was created; a text that no longer
    /// parses (a filter language change) is an error for the runner to report.
    pub fn new(text: &str) -> Result<Matcher, String> {
        if text.is_empty() {
            return Ok(Matcher(None));
        }
        Filter::parse(text)
            .map(|f| Matcher(Some(f)))
            .map_err(|e| e.to_string())
    }

    pub fn matches(&self, record: &ConsumerRecord) -> bool {
        self.0.as_ref().is_none_or(|f| f.matches(&Fields(record)))
    }
}

struct Fields<'r>(&'r ConsumerRecord);

impl RecordFields for Fields<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.0.key.as_deref()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }
}
