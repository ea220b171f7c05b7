//! `kafka-codegen [SPEC_DIR] [--out DIR] [--check]`
//!
//! Regenerates `crates/kafka-protocol/src/generated/` from Kafka's JSON message specs
//! (default folder: `../shared/kafka-message-specs`, relative to the workspace root).
//! With `--check` it writes nothing and exits 1 when the checked-in files differ.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut spec_dir = root.join("../shared/kafka-message-specs");
    let mut out_dir = root.join("crates/kafka-protocol/src/generated");
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--out" => match args.next() {
                Some(d) => out_dir = PathBuf::from(d),
                None => {
                    eprintln!("--out needs a folder");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("usage: kafka-codegen [SPEC_DIR] [--out DIR] [--check]");
                return ExitCode::SUCCESS;
            }
            other => spec_dir = PathBuf::from(other),
        }
    }
    let files = match kafka_codegen::generate(&spec_dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("kafka-codegen: {e}");
            return ExitCode::from(2);
        }
    };
    let mut differs = 0;
    for f in &files {
        let path = out_dir.join(&f.path);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == f.contents {
            continue;
        }
        differs += 1;
        if check {
            eprintln!("differs: {}", path.display());
        } else if let Err(e) =
            std::fs::create_dir_all(&out_dir).and_then(|()| std::fs::write(&path, &f.contents))
        {
            eprintln!("kafka-codegen: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if check && differs > 0 {
        return ExitCode::from(1);
    }
    println!(
        "{} files, {differs} {}",
        files.len(),
        if check { "differ" } else { "written" }
    );
    ExitCode::SUCCESS
}
