//! Generates the message code of the `kafka-protocol` crate from Kafka's JSON message specs.
//!
//! Each supported message becomes one Rust module with plain structs (one per spec struct),
//! a `Default` that follows the spec's defaults, and version-aware `Decode`/`Encode`
//! implementations. The version logic lives here, once, instead of in hand-written
//! `if version >= n` checks in every message. The list of messages and the version range
//! generated for each is the table in [`config`], which follows what Kafka 4.1 brokers
//! advertise rather than the specs' `validVersions`.
//!
//! The output is formatted with `rustfmt`, so `cargo fmt` leaves it unchanged and a
//! regeneration with the same specs gives no diff (checked by this crate's tests).

pub mod config;
pub mod emit;
pub mod spec;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Everything that can go wrong while generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodegenError {
    #[error("spec error: {0}")]
    Spec(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rustfmt failed: {0}")]
    Rustfmt(String),
}

/// One generated file, relative to the output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    pub path: PathBuf,
    pub contents: String,
}

fn read(path: &Path) -> Result<String, CodegenError> {
    std::fs::read_to_string(path).map_err(|source| CodegenError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the specs named in [`config::MESSAGES`] from `spec_dir` and renders every file.
pub fn generate(spec_dir: &Path) -> Result<Vec<GeneratedFile>, CodegenError> {
    let mut specs = Vec::new();
    for m in config::MESSAGES {
        let src = read(&spec_dir.join(format!("{}.json", m.spec)))?;
        let spec = spec::parse_spec(&src)?;
        specs.push((m, spec));
    }
    let files = emit::render(&specs)?;
    files
        .into_iter()
        .map(|(path, contents)| {
            Ok(GeneratedFile {
                path,
                contents: rustfmt(&contents)?,
            })
        })
        .collect()
}

fn rustfmt(src: &str) -> Result<String, CodegenError> {
    use std::io::Write;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CodegenError::Rustfmt(e.to_string()))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| CodegenError::Rustfmt("no stdin".into()))?;
    let input = src.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| CodegenError::Rustfmt(e.to_string()))?;
    writer
        .join()
        .map_err(|_| CodegenError::Rustfmt("writer thread panicked".into()))?
        .map_err(|e| CodegenError::Rustfmt(e.to_string()))?;
    if !out.status.success() {
        return Err(CodegenError::Rustfmt(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| CodegenError::Rustfmt(e.to_string()))
}
