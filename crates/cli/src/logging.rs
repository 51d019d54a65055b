//! Log output of the `tinymq` processes, on stderr: one line per event, as text or as JSON
//! (`--log-format`), each with its timestamp (UTC), level, the node that wrote it (`node`,
//! e.g. `broker-2` or `meta-1`, once the role knows its id) and the event's fields.
//!
//! The filter is, first found: `--log-level`, `TINYMQ_LOG`, `RUST_LOG` (tracing's `EnvFilter`
//! syntax, e.g. `info,tinymq_broker=debug`), else the role's default. The flag wins because it
//! is the most specific: it is given for this one process, while a variable is often exported
//! for a whole shell or unit file. A bare level (`--log-level debug`) applies to tinymq's own
//! crates; dependencies stay at WARN and openraft off (it logs an ERROR for every vote a
//! starting peer cannot answer, and tinymq logs those peers itself) unless the level is
//! quieter than WARN. A full filter (with `=` or `,`) is used as written.
//!
//! Servers log their lifecycle at INFO (listening, registered, topics created and deleted,
//! partitions opened, Raft leader changes, peers unreachable and back, stopping); tools only
//! warnings (e.g. a partition that cannot be read). Colour codes only when stderr is a
//! terminal, so log files stay plain text.

use std::fmt;
use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// tinymq's own crates (module path prefixes), set to the chosen level.
const OWN_CRATES: [&str; 7] = [
    "tinymq",
    "tinymq_broker",
    "tinymq_meta",
    "tinymq_net",
    "tinymq_http",
    "tinymq_log",
    "tinymq_replication",
];

/// The line format on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `TIMESTAMP LEVEL node=ID target: message key=value …`
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `node`, `fields` (with `message`),
    /// `target`, and the enclosing spans.
    Json,
}

/// The logging flags, accepted by every command (before or after the subcommand).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// Log line format on stderr [default: text].
    #[arg(long, global = true, env = "TINYMQ_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level of tinymq's own crates (trace, debug, info, warn, error, off), or a full
    /// filter such as `info,tinymq_broker=debug`; wins over TINYMQ_LOG and RUST_LOG
    /// [default: info for server, broker and meta; warn for tools].
    #[arg(long, global = true, value_parser = parse_filter)]
    pub log_level: Option<String>,
}

/// Which defaults apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `server`, `broker`, `meta`: lifecycle at INFO.
    Server,
    /// Every other command: warnings only.
    Tool,
}

/// Checks a `--log-level` value while the arguments are parsed.
fn parse_filter(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty (say a level such as info, or leave the flag out)".into());
    }
    directives(text, Role::Server)
        .parse::<EnvFilter>()
        .map_err(|e| e.to_string())?;
    Ok(text.to_string())
}

/// The `EnvFilter` directives for `level` (a bare level or a full filter).
fn directives(level: &str, role: Role) -> String {
    if level.contains('=') || level.contains(',') {
        return level.to_string();
    }
    let quiet = matches!(level.to_ascii_lowercase().as_str(), "error" | "off");
    let deps = if quiet { level } else { "warn" };
    let raft = if quiet { level } else { "off" };
    // The client's retries and reconnects are a broker's routine (its own connections to
    // peers): INFO from it is noise on a server unless asked for at DEBUG or finer.
    let client = match (role, level.to_ascii_lowercase().as_str()) {
        (Role::Server, "info") => "warn",
        _ => level,
    };
    let mut out = format!("{deps},openraft={raft},tinymq_client={client}");
    for krate in OWN_CRATES {
        out.push_str(&format!(",{krate}={level}"));
    }
    out
}

/// The filter: the flag, else `TINYMQ_LOG`, else `RUST_LOG`, else the role's default. A
/// variable that does not parse is reported and skipped rather than silently ignored.
fn filter(flag: Option<&str>, role: Role) -> EnvFilter {
    if let Some(level) = flag {
        if let Ok(filter) = EnvFilter::try_new(directives(level, role)) {
            return filter;
        }
    }
    for var in ["TINYMQ_LOG", "RUST_LOG"] {
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => match EnvFilter::try_new(&value) {
                Ok(filter) => return filter,
                Err(e) => eprintln!("warning: ignoring {var}={value:?}: {e}"),
            },
            _ => {}
        }
    }
    let default = match role {
        Role::Server => "info",
        Role::Tool => "warn",
    };
    EnvFilter::new(directives(default, role))
}

/// The node this process is, once known: a field of every line from then on.
static NODE: OnceLock<String> = OnceLock::new();

/// Names this process in every later log line (`broker-2`, `meta-1`, `server-1`). Called
/// once, when the role knows its id; a second call is ignored.
pub fn set_node(node: String) {
    let _ = NODE.set(node);
}

/// Adds the node to the lines of an inner formatter: JSON gets a `node` member first; text
/// gets `TIMESTAMP LEVEL node=ID ` before the inner formatter's target, spans and fields.
struct WithNode<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithNode<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.json {
            let Some(node) = NODE.get() else {
                return self.inner.format_event(ctx, writer, event);
            };
            let mut line = String::new();
            self.inner
                .format_event(ctx, Writer::new(&mut line), event)?;
            let node = serde_json::Value::from(node.as_str());
            return match line.strip_prefix('{') {
                Some(rest) => write!(writer, "{{\"node\":{node},{rest}"),
                None => writer.write_str(&line),
            };
        }
        SystemTime.format_time(&mut writer)?;
        write!(writer, " {:>5} ", event.metadata().level())?;
        if let Some(node) = NODE.get() {
            write!(writer, "node={node} ")?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// Installs the global subscriber on stderr.
pub fn init(args: &LogArgs, role: Role) {
    let filter = filter(args.log_level.as_deref(), role);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format.unwrap_or_default() {
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(WithNode {
                inner: tracing_subscriber::fmt::format().json(),
                json: true,
            })
            .init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .event_format(WithNode {
                inner: tracing_subscriber::fmt::format()
                    .without_time()
                    .with_level(false),
                json: false,
            })
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_level_is_for_tinymq_and_a_full_filter_is_kept() {
        let d = directives("debug", Role::Server);
        assert!(
            d.starts_with("warn,openraft=off,tinymq_client=debug"),
            "{d}"
        );
        assert!(d.contains(",tinymq_broker=debug"), "{d}");
        assert!(directives("info", Role::Server).contains("tinymq_client=warn"));
        assert!(directives("error", Role::Tool).starts_with("error,openraft=error"));
        assert_eq!(directives("info,x=debug", Role::Tool), "info,x=debug");
        assert!(parse_filter("debug").is_ok());
        assert!(parse_filter("").is_err());
        assert!(parse_filter("no such level!").is_err());
    }
}
