//! The Prometheus text of a node's `/metrics`: a strict parser, and scrapes of a listener.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A strict reader of the Prometheus / OpenMetrics text format: every line is a `# HELP`,
/// `# TYPE`, `# UNIT` or a sample of a family declared by `# TYPE` before it, and the text ends
/// with `# EOF`. Returns every sample as `name{labels}` → value; panics on anything else.
pub fn parse_prometheus_text(text: &str) -> BTreeMap<String, f64> {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    fn check_labels(labels: &str) {
        // `k="v",k="v"`: values here never hold quotes or backslashes.
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').expect("label key=value");
            assert!(is_name(key), "label name {key:?}");
            assert!(
                value.len() >= 2 && value.starts_with('"') && value.ends_with('"'),
                "label value {value:?}"
            );
        }
    }
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the text ends with # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name) = (parts.next().unwrap(), parts.next().expect("a name"));
            assert!(is_name(name), "metric name {name:?}");
            match kind {
                "TYPE" => {
                    let t = parts.next().expect("a type");
                    let known = [
                        "gauge",
                        "counter",
                        "histogram",
                        "summary",
                        "unknown",
                        "info",
                    ];
                    assert!(known.contains(&t), "type {t:?}");
                    families.insert(name.to_string(), t.to_string());
                }
                "HELP" | "UNIT" => {}
                other => panic!("unknown comment {other:?} in {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                check_labels(labels.strip_suffix('}').expect("closing brace"));
                name
            }
            None => series,
        };
        assert!(is_name(name), "sample name {name:?}");
        let family = families
            .keys()
            .find(|f| {
                name == f.as_str()
                    || name.strip_prefix(f.as_str()).is_some_and(|s| {
                        ["_total", "_bucket", "_sum", "_count", "_created"].contains(&s)
                    })
            })
            .unwrap_or_else(|| panic!("sample {name:?} of no declared family"));
        assert!(!family.is_empty());
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value {value:?}"));
        samples.insert(series.to_string(), value);
    }
    samples
}

/// One scrape at `http`, or `None` when the connection is closed unanswered (no place free).
pub fn try_scrape(http: &str) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(http).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    (!body.is_empty()).then(|| parse_prometheus_text(body))
}

/// [`try_scrape`], retried (bounded) while the listener has no place free.
pub fn scrape_when_free(http: &str) -> BTreeMap<String, f64> {
    super::retry(200, Duration::from_millis(50), || try_scrape(http))
        .unwrap_or_else(|| panic!("no scrape got a place at {http}"))
}

pub fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

/// One scrape of the listener at `http`, parsed.
pub fn scrape_at(http: &str) -> BTreeMap<String, f64> {
    let response = super::http::request(http, "GET", "/metrics", None);
    assert_eq!(response.status, 200, "{}", response.body);
    parse_prometheus_text(&response.body)
}
