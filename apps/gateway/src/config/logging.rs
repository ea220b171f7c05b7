//! How log lines are written. The filter stays with `RUST_LOG`, the usual place for it.

use super::values::parsed;
use super::{ConfigError, Names};
use serde::Deserialize;

/// The log format of standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (tracing-subscriber's default format).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The logging settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    log_format: String,
}

impl Default for Raw {
    fn default() -> Self {
        Raw {
            log_format: "text".into(),
        }
    }
}

impl Raw {
    /// The format named by `log_format`.
    pub(super) fn validate(self, names: &Names<'_>) -> Result<LogFormat, ConfigError> {
        match self.log_format.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(names.invalid("log_format", "must be text or json")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{env, load_err, toml_file};
    use super::super::{LogFormat, load};

    #[test]
    fn text_unless_json_is_asked_for() {
        assert_eq!(load(None, env(&[])).unwrap().log_format, LogFormat::Text);
        let config = load(None, env(&[("IGGY_KAFKA_LOG_FORMAT", "json")])).unwrap();
        assert_eq!(config.log_format, LogFormat::Json);
        let file = toml_file("log_format = \"json\"\n");
        let config = load(Some(file.path()), env(&[("IGGY_KAFKA_LOG_FORMAT", "text")])).unwrap();
        assert_eq!(config.log_format, LogFormat::Text);
    }

    #[test]
    fn other_formats_are_refused() {
        for bad in ["JSON", "xml", "logfmt"] {
            assert_eq!(
                load_err(None, &[("IGGY_KAFKA_LOG_FORMAT", bad)]),
                format!("IGGY_KAFKA_LOG_FORMAT={bad:?}: must be text or json")
            );
        }
    }
}
