//! Reading a node's `/metrics` for `tinymq top`: one HTTP/1.1 GET (no keep-alive) and a
//! strict parser of the Prometheus/OpenMetrics text format, only as much of it as top needs
//! (samples with labels; `#` lines skipped). A response is bounded by
//! [`SCRAPE_BYTES_MAX`] and [`SCRAPE_TIMEOUT`]; whatever the node sends, a malformed answer is
//! an error naming the line, never a panic.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most bytes of one `/metrics` response (headers and body). A node's text grows with its
/// partitions until `http_partition_series_max` caps the per-partition series; this leaves room
/// for the largest capped text many times over.
pub const SCRAPE_BYTES_MAX: u64 = 64 << 20;
/// Longest wait for one scrape, connect to last byte.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One sample: metric name (with its `_total` suffix, as written), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// GETs `http://ADDR/metrics` and parses it.
pub async fn scrape(addr: &str) -> anyhow::Result<Vec<Sample>> {
    let body = tokio::time::timeout(SCRAPE_TIMEOUT, get(addr, "/metrics"))
        .await
        .map_err(|_| anyhow::anyhow!("no complete answer within {SCRAPE_TIMEOUT:?}"))??;
    parse(&body)
}

async fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    // One byte past the limit tells a response at the limit from one over it.
    let read = (&mut stream)
        .take(SCRAPE_BYTES_MAX + 1)
        .read_to_end(&mut raw)
        .await?;
    if read as u64 > SCRAPE_BYTES_MAX {
        bail!("the response is larger than {SCRAPE_BYTES_MAX} bytes (SCRAPE_BYTES_MAX)");
    }
    let text = String::from_utf8(raw).context("the response is not UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("the response has no end of headers")?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        bail!("GET {path}: {status:?}");
    }
    let chunked = lines.any(|h| {
        h.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_string())
    }
}

/// The body of a `Transfer-Encoding: chunked` response.
fn dechunk(mut rest: &str) -> anyhow::Result<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("chunk size line unended")?;
        let size = size.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).context("chunk size not hexadecimal")?;
        if size == 0 {
            return Ok(body);
        }
        let chunk = after.get(..size).context("chunk shorter than its size")?;
        body.push_str(chunk);
        rest = after
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .context("chunk not followed by CRLF")?;
    }
}

/// Parses the text format: every line is blank, a `#` comment, or `name[{labels}] value
/// [timestamp]`.
pub fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_line(line).with_context(|| format!("metrics line {}", number + 1))?;
        samples.push(sample);
    }
    Ok(samples)
}

fn parse_line(line: &str) -> anyhow::Result<Sample> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        bail!("no metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().context("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().with_context(|| format!("value {v:?}"))?,
    };
    // An optional timestamp, then nothing (exemplars are not used by tinymq's registry).
    if fields.nth(1).is_some() {
        bail!("more than a value and a timestamp");
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `key="value",...}` and returns what follows the `}`.
fn parse_labels<'a>(
    mut rest: &'a str,
    labels: &mut Vec<(String, String)>,
) -> anyhow::Result<&'a str> {
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let (key, after) = rest.split_once("=\"").context("label without =\"")?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("label name {key:?}");
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => bail!("label {key} unterminated"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => bail!("label {key}: bad escape"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_labels_escapes_and_comments() {
        let text = "# TYPE a counter\n\
                    a_total{topic=\"t\\\"x\",partition=\"0\"} 12\n\
                    b 1.5e3 1700000000\n\
                    c{le=\"+Inf\"} +Inf\n\n# EOF\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "a_total");
        assert_eq!(s[0].label("topic"), Some("t\"x"));
        assert_eq!(s[0].label("partition"), Some("0"));
        assert_eq!(s[0].value, 12.0);
        assert_eq!(s[1].value, 1500.0);
        assert!(s[2].value.is_infinite());
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for bad in [
            "a{topic=\"t} 1",
            "a{topic} 1",
            "a{t=\"\\q\"} 1",
            "a",
            "a x",
            "{t=\"x\"} 1",
            "a 1 2 3",
            "a{=\"x\"} 1",
            "é 1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            "abcde"
        );
        assert!(dechunk("5\r\nab\r\n").is_err());
        assert!(dechunk("zz\r\n").is_err());
    }
}
