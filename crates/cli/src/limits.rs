//! The listener limits every server role takes (`tinymq server`, `broker` and `meta`): flags
//! and `TINYMQ_*` variables over the TOML file over the role's defaults, and a TOML reader that
//! takes these keys out of a role's file before reading the rest.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tinymq_broker::ListenerLimits;

use crate::http::{HttpArgs, HTTP_KEYS};

/// The limit settings, as flags (with their `TINYMQ_*` variables) or as keys of a TOML file.
#[derive(clap::Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitArgs {
    /// Most open connections; one more is refused with LIMIT_EXCEEDED [default: 10000 for
    /// server and broker, 1024 for meta].
    #[arg(long, env = "TINYMQ_CONNECTIONS_MAX")]
    connections_max: Option<usize>,
    /// Largest frame body in bytes after the handshake [default: 16777216].
    #[arg(long, env = "TINYMQ_FRAME_BYTES_MAX")]
    frame_bytes_max: Option<u32>,
    /// Requests processed at once per connection [default: 32].
    #[arg(long, env = "TINYMQ_REQUESTS_IN_FLIGHT_MAX")]
    requests_in_flight_max: Option<usize>,
    /// Close connections that do not finish the handshake in time, ms [default: 10000].
    #[arg(long, env = "TINYMQ_HANDSHAKE_TIMEOUT_MS")]
    handshake_timeout_ms: Option<u64>,
    /// Close idle connections after, ms [default: 600000].
    #[arg(long, env = "TINYMQ_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,
}

/// The TOML keys of [`LimitArgs`].
const LIMIT_KEYS: [&str; 5] = [
    "connections_max",
    "frame_bytes_max",
    "requests_in_flight_max",
    "handshake_timeout_ms",
    "idle_timeout_ms",
];

impl LimitArgs {
    /// These settings (flags and variables) over `file`'s over `defaults`, checked.
    pub fn merge(
        self,
        file: LimitArgs,
        defaults: ListenerLimits,
    ) -> anyhow::Result<ListenerLimits> {
        let mut limits = defaults;
        let ms = Duration::from_millis;
        macro_rules! pick {
            ($field:ident) => {
                self.$field.or(file.$field)
            };
        }
        limits.connections_max = pick!(connections_max).unwrap_or(limits.connections_max);
        limits.frame_bytes_max = pick!(frame_bytes_max).unwrap_or(limits.frame_bytes_max);
        limits.requests_in_flight_max =
            pick!(requests_in_flight_max).unwrap_or(limits.requests_in_flight_max);
        limits.handshake_timeout = pick!(handshake_timeout_ms).map_or(limits.handshake_timeout, ms);
        limits.idle_timeout = pick!(idle_timeout_ms).map_or(limits.idle_timeout, ms);
        limits.check().map_err(anyhow::Error::msg)?;
        Ok(limits)
    }
}

/// Reads a role's TOML file: the limit keys into [`LimitArgs`], the HTTP keys into
/// [`HttpArgs`], the rest into `T` (which should deny unknown fields, so a misspelt key is an
/// error). No file: defaults for all three.
pub fn read_file<T: DeserializeOwned + Default>(
    path: Option<&Path>,
) -> anyhow::Result<(T, LimitArgs, HttpArgs)> {
    let Some(path) = path else {
        return Ok((T::default(), LimitArgs::default(), HttpArgs::default()));
    };
    let context = || format!("parsing {}", path.display());
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rest: toml::Table = toml::from_str(&text).with_context(context)?;
    let limits: toml::Table = LIMIT_KEYS
        .iter()
        .filter_map(|key| rest.remove(*key).map(|v| (key.to_string(), v)))
        .collect();
    let http: toml::Table = HTTP_KEYS
        .iter()
        .filter_map(|key| rest.remove(*key).map(|v| (key.to_string(), v)))
        .collect();
    let rest = rest.try_into().with_context(|| {
        format!(
            "parsing {} (besides these, the limit keys {} and the HTTP keys {} are allowed)",
            path.display(),
            LIMIT_KEYS.join(", "),
            HTTP_KEYS.join(", ")
        )
    })?;
    let limits = limits.try_into().with_context(context)?;
    Ok((rest, limits, http.try_into().with_context(context)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Role {
        data: Option<String>,
    }

    #[test]
    fn a_file_splits_into_limits_and_the_rest_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        let all_limits = LIMIT_KEYS.map(|k| format!("{k} = 70000")).join("\n");
        std::fs::write(&path, format!("data = \"d\"\n{all_limits}\n")).unwrap();
        let (role, file, _) = read_file::<Role>(Some(&path)).unwrap();
        assert_eq!(role.data.as_deref(), Some("d"));
        let flags = LimitArgs {
            connections_max: Some(5),
            ..LimitArgs::default()
        };
        let limits = flags.merge(file, ListenerLimits::default()).unwrap();
        assert_eq!(limits.connections_max, 5, "the flag wins");
        assert_eq!(limits.frame_bytes_max, 70000, "every key was read");
        assert_eq!(limits.idle_timeout, Duration::from_millis(70000));

        let http = "http = \"off\"\nhttp_idle_timeout_ms = 30000\nhttp_partition_series_max = 5\n";
        std::fs::write(&path, format!("data = \"d\"\n{http}")).unwrap();
        let (role, _, http) = read_file::<Role>(Some(&path)).unwrap();
        assert_eq!(
            role.data.as_deref(),
            Some("d"),
            "HTTP keys are taken out first"
        );
        assert!(format!("{http:?}").contains("http_idle_timeout_ms: Some(30000)"));
        std::fs::write(&path, "http_idle_timeout = 3\n").unwrap();
        assert!(
            read_file::<Role>(Some(&path)).is_err(),
            "a misspelt HTTP key"
        );

        std::fs::write(&path, "data = \"d\"\nconections_max = 3\n").unwrap();
        assert!(read_file::<Role>(Some(&path)).is_err(), "a misspelt key");
        let zero = LimitArgs {
            requests_in_flight_max: Some(0),
            ..LimitArgs::default()
        };
        assert!(zero
            .merge(LimitArgs::default(), ListenerLimits::default())
            .is_err());
    }
}
