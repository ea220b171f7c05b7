//! Regenerating from the specs must reproduce the checked-in code exactly.

use std::path::PathBuf;

#[test]
fn generated_code_matches_specs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let spec_dir = std::env::var_os("KAFKA_MESSAGE_SPECS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/kafka-message-specs"));
    if !spec_dir.is_dir() {
        println!(
            "SKIPPED: no message specs at {} (set KAFKA_MESSAGE_SPECS)",
            spec_dir.display()
        );
        return;
    }
    let files = kafka_codegen::generate(&spec_dir).expect("generation succeeds");
    let out = root.join("crates/kafka-protocol/src/generated");
    let mut stale = Vec::new();
    for f in &files {
        let current = std::fs::read_to_string(out.join(&f.path)).unwrap_or_default();
        if current != f.contents {
            stale.push(f.path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale, run `cargo run -p kafka-codegen`: {stale:?}"
    );
}
