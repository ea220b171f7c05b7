//! The async runtime that serves connections: how many worker threads it runs.

use super::values::parsed;
use super::{ConfigError, Names};
use serde::Deserialize;

/// Most worker threads a gateway may ask for. Far above any useful count; it keeps a typo
/// (`100000`) from spawning thousands of threads before the first connection.
pub const MAX_WORKER_THREADS: usize = 1024;

/// The runtime settings as read from the layers.
#[derive(Deserialize, Default)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    worker_threads: usize,
}

impl Raw {
    /// The worker count asked for: `None` (the setting's `0`) is one per core.
    pub(super) fn validate(self, names: &Names<'_>) -> Result<Option<usize>, ConfigError> {
        match self.worker_threads {
            0 => Ok(None),
            n if n <= MAX_WORKER_THREADS => Ok(Some(n)),
            _ => Err(names.invalid(
                "worker_threads",
                &format!("must be 0 (one per core) to {MAX_WORKER_THREADS}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use super::super::tests::{env, load_err, toml_file};

    #[test]
    fn one_per_core_unless_set() {
        assert_eq!(load(None, env(&[])).unwrap().worker_threads, None);
        let zero = load(None, env(&[("IGGY_KAFKA_WORKER_THREADS", "0")])).unwrap();
        assert_eq!(zero.worker_threads, None);
        let one = load(None, env(&[("IGGY_KAFKA_WORKER_THREADS", "1")])).unwrap();
        assert_eq!(one.worker_threads, Some(1));
        let file = toml_file("worker_threads = 3\n");
        let from_file = load(Some(file.path()), env(&[])).unwrap();
        assert_eq!(from_file.worker_threads, Some(3));
        let overridden = load(
            Some(file.path()),
            env(&[("IGGY_KAFKA_WORKER_THREADS", "2")]),
        )
        .unwrap();
        assert_eq!(overridden.worker_threads, Some(2));
    }

    #[test]
    fn counts_past_the_bound_or_not_numbers_are_refused() {
        assert_eq!(
            load_err(None, &[("IGGY_KAFKA_WORKER_THREADS", "1025")]),
            "IGGY_KAFKA_WORKER_THREADS=\"1025\": must be 0 (one per core) to 1024"
        );
        for bad in ["-1", "two", "1.5"] {
            let err = load_err(None, &[("IGGY_KAFKA_WORKER_THREADS", bad)]);
            assert!(
                err.starts_with(&format!("IGGY_KAFKA_WORKER_THREADS={bad:?}")),
                "{err}"
            );
        }
    }
}
