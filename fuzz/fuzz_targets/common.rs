//! Helpers shared by the protocol fuzz targets (a module, not a target of its own).

// Each target uses some of the helpers.
#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::ApiKey;
use kafka_protocol::api::request_header_version;
use std::fmt::Debug;

/// The API and version a fuzz input names: a wire API key (a key without messages picks
/// `ApiKey::ALL[key % len]`), and the version as is when supported, else
/// `min + version % (max - min + 1)`.
pub fn pick(key: u8, version: u8) -> Option<(ApiKey, i16)> {
    let mut api = ApiKey::from_i16(i16::from(key));
    if api.versions().is_none() {
        api = ApiKey::ALL[usize::from(key) % ApiKey::ALL.len()];
    }
    let range = api.versions()?;
    let v = i16::from(version);
    if range.contains(v) {
        return Some((api, v));
    }
    let span = range.max - range.min + 1;
    Some((api, range.min + v % span))
}

/// A request frame (without size prefix): a valid header for `api` at `v` (correlation
/// id, client id `fuzz`, an empty tagged section when flexible), then `body`.
pub fn request_frame(api: ApiKey, v: i16, body: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(32 + body.len());
    frame.put_i16(api.as_i16());
    frame.put_i16(v);
    frame.put_i32(0x0102_0304);
    frame.put_i16(4);
    frame.put_slice(b"fuzz");
    if request_header_version(api, v) >= 2 {
        frame.put_u8(0);
    }
    frame.put_slice(body);
    frame.freeze()
}

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
