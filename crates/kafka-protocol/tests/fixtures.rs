//! Wire bytes captured from real clients (see `fixtures/README.md`) decode and re-encode
//! byte for byte: requests as the clients sent them, and the responses a peer broker
//! answered with (which the clients accepted).

use bytes::Bytes;
use kafka_protocol::ProtocolError;
use kafka_protocol::api::{
    decode_request, decode_response, encode_request, encode_response_with_header,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CLIENTS: &[&str] = &[
    "librdkafka-2.0.2",
    "librdkafka-2.16",
    "kafka-python-3.0.12",
    "kafkajs-2.2.4",
    "java-3.9.1",
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/requests")
}

fn is_request_file(name: &str) -> bool {
    name.ends_with(".bin") && !name.ends_with("-response.bin")
}

#[test]
fn real_client_requests_round_trip_byte_for_byte() {
    let dir = fixtures_dir();
    let required = std::env::var("KAFKA_FIXTURES_REQUIRED").is_ok_and(|v| v == "1");
    let mut checked = 0;
    let mut responses = 0;
    let mut non_canonical = 0;
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for client in CLIENTS {
        let Ok(entries) = std::fs::read_dir(dir.join(client)) else {
            assert!(!required, "missing fixtures for {client}");
            println!("SKIPPED: no fixtures for {client}");
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        for path in files {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if !is_request_file(&name) {
                continue;
            }
            let frame = Bytes::from(std::fs::read(&path).expect("readable fixture"));
            let req = match decode_request(&frame) {
                Ok(r) => r,
                Err(ProtocolError::UnknownApiKey { api_key }) => {
                    // Client telemetry (key 71) and the like are outside the table.
                    println!("{client}/{name}: API key {api_key} is outside the table");
                    continue;
                }
                Err(e) => panic!("{client}/{name}: {e}"),
            };
            assert_eq!(req.trailing_bytes, 0, "{client}/{name}: trailing bytes");
            let again = encode_request(&req.header, &req.body)
                .unwrap_or_else(|e| panic!("{client}/{name}: re-encode failed: {e}"));
            assert_eq!(
                &again[4..],
                &frame[..],
                "{client}/{name}: re-encoded bytes differ"
            );
            seen.entry(client)
                .or_default()
                .insert(req.body.api_key().name().to_string());
            checked += 1;

            let resp_path = path.with_file_name(name.replace(".bin", "-response.bin"));
            if let Ok(resp) = std::fs::read(&resp_path) {
                let resp = Bytes::from(resp);
                let key = req.body.api_key();
                let v = req.api_version();
                let (header, body) = decode_response(key, v, &resp)
                    .unwrap_or_else(|e| panic!("{client}/{name} response: {e}"));
                assert_eq!(header.correlation_id, req.header.correlation_id);
                let again = encode_response_with_header(&header, key, v, &body)
                    .unwrap_or_else(|e| panic!("{client}/{name} response: re-encode: {e}"))
                    .to_bytes();
                if again[4..] != resp[..] {
                    // The peer writes some default-valued tagged fields that a canonical
                    // encoder omits; the meaning must still be identical.
                    let (_, body2) = decode_response(key, v, &again.slice(4..))
                        .unwrap_or_else(|e| panic!("{client}/{name}: re-decode: {e}"));
                    assert_eq!(body2, body, "{client}/{name}: response meaning differs");
                    non_canonical += 1;
                }
                responses += 1;
            }
        }
    }
    println!(
        "checked {checked} request frames and {responses} responses ({non_canonical} not in canonical form): {seen:?}"
    );
    if required {
        for client in CLIENTS {
            let apis = seen.get(client).cloned().unwrap_or_default();
            for api in [
                "ApiVersions",
                "Metadata",
                "Produce",
                "Fetch",
                "JoinGroup",
                "SyncGroup",
                "OffsetCommit",
            ] {
                assert!(apis.contains(api), "{client}: no {api} fixture");
            }
        }
    }
}
