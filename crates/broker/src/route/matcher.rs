//! A route's filter applied to a consumed record: the record's key and headers as the
//! filter crate's `RecordFields` (the first header of a name counts, as for the broker-side
//! fetch filter).

use tinymq_client::ConsumerRecord;

use tinymq_filter::{Filter, RecordFields};

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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(headers: &[(&str, &str)]) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            key: Some("k1".into()),
            value: None,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string().into())))
                .collect(),
        }
    }

    #[test]
    fn a_route_filter_reads_the_key_and_the_first_header_of_a_name() {
        let eu = Matcher::new("header.region = 'eu'").unwrap();
        assert!(eu.matches(&record(&[("region", "eu")])));
        assert!(!eu.matches(&record(&[("region", "us"), ("region", "eu")])));
        assert!(!eu.matches(&record(&[])));
        assert!(Matcher::new("key = 'k1'").unwrap().matches(&record(&[])));
        assert!(Matcher::new("").unwrap().matches(&record(&[])));
        assert!(Matcher::new("tag = AND").is_err());
    }
}
