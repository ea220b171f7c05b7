//! Helpers shared by the protocol fuzz targets (a module, not a target of its own).

use std::fmt::Debug;

/// `{:?}` of `v` with the entries of every `unknown_tagged_fields` list sorted.
///
/// The decoders accept tagged fields in any order (and repeated tags), while the encoder
/// writes them sorted by tag, so a request whose unknown tags arrive out of order comes
/// back from a re-encode with the same fields in a different order. Comparing this form
/// checks everything else about the round trip; the ordering itself is covered by
/// `crates/kafka-protocol/tests/fuzz_regressions.rs`.
pub fn canonical_debug(v: &impl Debug) -> String {
    const LIST: &str = "unknown_tagged_fields: [";
    let s = format!("{v:?}");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = find_outside_strings(rest, LIST) {
        let (head, tail) = rest.split_at(at + LIST.len());
        out.push_str(head);
        let (entries, after) = split_list(tail);
        let mut entries = entries;
        entries.sort_unstable();
        out.push_str(&entries.join(", "));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Position of `needle` in `s`, skipping quoted (`"..."`, with escapes) text.
fn find_outside_strings(s: &str, needle: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut quoted = false;
    while i < b.len() {
        match b[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            _ if !quoted && s[i..].starts_with(needle) => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Splits `s` (just after a list's `[`) into its top-level entries and what follows the
/// closing `]` (which is left at the start of the returned rest).
fn split_list(s: &str) -> (Vec<&str>, &str) {
    let b = s.as_bytes();
    let mut entries = Vec::new();
    let (mut depth, mut start, mut i, mut quoted) = (0usize, 0usize, 0usize, false);
    while i < b.len() {
        match b[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            _ if quoted => {}
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b')' => depth = depth.saturating_sub(1),
            b']' if depth == 0 => {
                if i > start {
                    entries.push(&s[start..i]);
                }
                return (entries, &s[i..]);
            }
            b']' => depth -= 1,
            b',' if depth == 0 => {
                entries.push(&s[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    (entries, "")
}
