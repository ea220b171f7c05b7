//! Crate-level tests: property tests over every generated message and version, and
//! hand-written checks of the behaviour the broker relies on.

use crate::api::{HeaderPrefix, decode_request, encode_request, encode_response};
use crate::generated::ALL_MESSAGES;
use crate::messages::api_versions_request::ApiVersionsRequest;
use crate::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};
use crate::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use crate::messages::request_header::RequestHeader;
use crate::{ApiKey, ByteString, ErrorCode, Message, ProtocolError, RequestBody, ResponseBody};
use bytes::Bytes;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_message_round_trips_at_every_version(seed: u64) {
        for h in ALL_MESSAGES {
            for v in h.versions.min..=h.versions.max {
                (h.roundtrip)(seed, v).map_err(TestCaseError::fail)?;
            }
        }
    }

    #[test]
    fn every_prefix_of_every_message_is_an_error(seed: u64) {
        for h in ALL_MESSAGES {
            for v in h.versions.min..=h.versions.max {
                (h.prefixes)(seed, v).map_err(TestCaseError::fail)?;
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(key in 0i16..80, version in -1i16..20, body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut frame = Vec::new();
        frame.extend_from_slice(&key.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.extend_from_slice(&body);
        let _ = decode_request(&Bytes::from(frame));
    }
}

#[test]
fn all_messages_are_registered() {
    // 46 request/response pairs plus the two headers and two consumer-protocol structures.
    assert_eq!(ALL_MESSAGES.len(), 96);
    let names: std::collections::HashSet<_> = ALL_MESSAGES.iter().map(|h| h.name).collect();
    assert_eq!(names.len(), 96);
}

fn header(key: ApiKey, version: i16) -> RequestHeader {
    RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 42,
        client_id: Some(ByteString::from_static("tester")),
        ..RequestHeader::default()
    }
}

#[test]
fn request_frames_round_trip_with_headers() {
    for v in 0..=13 {
        let body = RequestBody::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(ByteString::from_static("orders")),
                ..MetadataRequestTopic::default()
            }]),
            allow_auto_topic_creation: true,
            ..MetadataRequest::default()
        });
        let bytes = encode_request(&header(ApiKey::Metadata, v), &body).expect("encodes");
        let frame = bytes.slice(4..);
        let back = decode_request(&frame).expect("decodes");
        assert_eq!(back.body, body, "v{v}");
        assert_eq!(back.header.correlation_id, 42);
        assert_eq!(back.header.client_id.as_deref(), Some("tester"));
    }
}

#[test]
fn unsupported_version_and_unknown_key_are_error_values() {
    let mut frame = Vec::new();
    frame.extend_from_slice(&18i16.to_be_bytes());
    frame.extend_from_slice(&99i16.to_be_bytes());
    frame.extend_from_slice(&5i32.to_be_bytes());
    let err = decode_request(&Bytes::from(frame.clone())).unwrap_err();
    assert_eq!(
        err,
        ProtocolError::UnsupportedVersion {
            api_key: 18,
            version: 99,
            min: 0,
            max: 4
        }
    );
    // The correlation id is still readable, so the broker can answer.
    assert_eq!(
        HeaderPrefix::peek(&frame).expect("prefix").correlation_id,
        5
    );

    frame[..2].copy_from_slice(&1000i16.to_be_bytes());
    assert_eq!(
        decode_request(&Bytes::from(frame)).unwrap_err(),
        ProtocolError::UnknownApiKey { api_key: 1000 }
    );
}

#[test]
fn produce_v0_to_v2_decode_so_they_can_be_refused() {
    assert_eq!(ApiKey::Produce.versions().map(|r| r.min), Some(0));
    let mut frame = Vec::new();
    frame.extend_from_slice(&0i16.to_be_bytes()); // Produce
    frame.extend_from_slice(&2i16.to_be_bytes()); // v2
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    frame.extend_from_slice(&1i16.to_be_bytes()); // acks
    frame.extend_from_slice(&1000i32.to_be_bytes()); // timeout
    frame.extend_from_slice(&0i32.to_be_bytes()); // no topics
    let req = decode_request(&Bytes::from(frame)).expect("decodes");
    assert!(matches!(req.body, RequestBody::Produce(ref p) if p.acks == 1 && p.timeout_ms == 1000));
}

#[test]
fn api_versions_response_header_is_always_v0() {
    let body = ResponseBody::ApiVersions(ApiVersionsResponse {
        error_code: ErrorCode::NONE.0,
        api_keys: vec![ApiVersion {
            api_key: 18,
            min_version: 0,
            max_version: 4,
            ..ApiVersion::default()
        }],
        ..ApiVersionsResponse::default()
    });
    let frame = encode_response(9, 3, &body).expect("encodes").to_bytes();
    // size | correlation id | error code | compact array (1 entry => 2) ...
    assert_eq!(&frame[4..8], &9i32.to_be_bytes());
    assert_eq!(&frame[8..10], &0i16.to_be_bytes());
    assert_eq!(frame[10], 2);
    // Default-valued tagged fields (supported/finalized features) are not written: the
    // body ends with throttle time and an empty tagged section.
    let tail = &frame[frame.len() - 5..];
    assert_eq!(tail, &[0, 0, 0, 0, 0]);
}

#[test]
fn forged_array_lengths_do_not_allocate() {
    // ApiVersions v3 request, then a Metadata v1 request claiming 2^31-1 topics.
    let mut frame = Vec::new();
    frame.extend_from_slice(&3i16.to_be_bytes());
    frame.extend_from_slice(&1i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    frame.extend_from_slice(&i32::MAX.to_be_bytes());
    let err = decode_request(&Bytes::from(frame)).unwrap_err();
    assert!(
        matches!(err, ProtocolError::ArrayTooLong { found, .. } if found == i32::MAX as u64),
        "{err:?}"
    );
}

#[test]
fn forged_string_and_bytes_lengths_are_refused() {
    let mut frame = Vec::new();
    frame.extend_from_slice(&18i16.to_be_bytes());
    frame.extend_from_slice(&1i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&30000i16.to_be_bytes()); // client id claims 30000 bytes
    frame.extend_from_slice(b"abc");
    let err = decode_request(&Bytes::from(frame)).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::InvalidLength {
                found: 30000,
                max: 3,
                ..
            }
        ),
        "{err:?}"
    );

    let mut frame = Vec::new();
    frame.extend_from_slice(&18i16.to_be_bytes());
    frame.extend_from_slice(&1i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(-7i16).to_be_bytes());
    let err = decode_request(&Bytes::from(frame)).unwrap_err();
    assert!(
        matches!(err, ProtocolError::InvalidLength { found: -7, .. }),
        "{err:?}"
    );
}

#[test]
fn unknown_tagged_fields_are_preserved() {
    let req = ApiVersionsRequest {
        client_software_name: ByteString::from_static("x"),
        client_software_version: ByteString::from_static("1"),
        unknown_tagged_fields: vec![crate::RawTaggedField {
            tag: 77,
            data: Bytes::from_static(b"hello"),
        }],
    };
    let bytes = req.encode_to_bytes(3).expect("encodes");
    let back = ApiVersionsRequest::decode_from(&bytes, 3).expect("decodes");
    assert_eq!(back, req);
}

#[test]
fn fields_a_version_cannot_carry_are_refused_on_encode() {
    use crate::messages::join_group_request::JoinGroupRequest;
    // group_instance_id exists from v5 and is not ignorable: a static member id cannot be
    // silently dropped. topic_id in Metadata is ignorable: older versions just omit it.
    let join = JoinGroupRequest {
        group_id: ByteString::from_static("g"),
        group_instance_id: Some(ByteString::from_static("static-1")),
        ..JoinGroupRequest::default()
    };
    assert!(join.encode_to_bytes(5).is_ok());
    assert_eq!(
        join.encode_to_bytes(4),
        Err(ProtocolError::FieldNotInVersion {
            field: "JoinGroupRequest.group_instance_id",
            version: 4
        })
    );
    let meta = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: crate::Uuid::from_u128(1),
            name: Some(ByteString::from_static("a")),
            ..MetadataRequestTopic::default()
        }]),
        ..MetadataRequest::default()
    };
    assert!(meta.encode_to_bytes(9).is_ok());
}

#[test]
fn payloads_are_zero_copy_slices_of_the_frame() {
    use crate::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    let records = Bytes::from(vec![7u8; 10_000]);
    let body = RequestBody::Produce(ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(records.clone()),
                ..PartitionProduceData::default()
            }],
            ..TopicProduceData::default()
        }],
        ..ProduceRequest::default()
    });
    let bytes = encode_request(&header(ApiKey::Produce, 9), &body).expect("encodes");
    let frame = bytes.slice(4..);
    let req = decode_request(&frame).expect("decodes");
    let RequestBody::Produce(p) = req.body else {
        panic!("not a produce request")
    };
    let got = p.topic_data[0].partition_data[0]
        .records
        .clone()
        .expect("records");
    assert_eq!(got, records);
    let start = got.as_ptr() as usize - frame.as_ptr() as usize;
    assert!(start < frame.len(), "records point into the frame");
}

#[test]
fn trailing_bytes_after_a_request_body_are_tolerated_like_kafka() {
    // Metadata v13 for all topics as confluent-kafka 2.16.1 (librdkafka 2.16.0) sends it:
    // three bytes follow the body. Kafka brokers ignore them, so must we.
    let frame = hex::decode(concat!(
        "0003000d00000004001d",
        "636c69656e74732d73756974652d636f6e666c75656e742d6b61666b61",
        "0000000000010000"
    ))
    .expect("hex");
    let req = decode_request(&Bytes::from(frame)).expect("decodes");
    assert_eq!(req.trailing_bytes, 3);
    let RequestBody::Metadata(m) = req.body else {
        panic!("not metadata")
    };
    assert_eq!(m.topics, None);
}

#[test]
fn truncation_inside_a_run_of_fixed_fields_names_the_field() {
    use crate::messages::fetch_request::FetchPartition;
    // FetchPartition v12: partition i32 | current_leader_epoch i32 | fetch_offset i64 |
    // last_fetched_epoch i32 | log_start_offset i64 | partition_max_bytes i32 | tags.
    // Generated decoders read such a run in one step when it is all there, and field by
    // field otherwise, so a cut anywhere must name the field it falls in.
    let p = FetchPartition {
        partition: 3,
        fetch_offset: 7,
        ..FetchPartition::default()
    };
    let mut e = crate::wire::Encoder::new();
    crate::Encode::encode(&p, &mut e, 12).unwrap();
    let full = e.into_bytes();
    let cx = crate::wire::Cx::new(&full);
    assert_eq!(full.len(), 33);
    let fields = [
        (4, "FetchPartition.partition"),
        (8, "FetchPartition.current_leader_epoch"),
        (16, "FetchPartition.fetch_offset"),
        (20, "FetchPartition.last_fetched_epoch"),
        (28, "FetchPartition.log_start_offset"),
        (32, "FetchPartition.partition_max_bytes"),
        (33, "FetchPartition._tagged"),
    ];
    for cut in 0..full.len() {
        let (end, name) = fields.iter().find(|(end, _)| cut < *end).copied().unwrap();
        let err = FetchPartition::read(&mut &full[..cut], &cx, 12).unwrap_err();
        assert!(
            matches!(err, ProtocolError::Truncated { field, needed, .. }
                if field == name && needed == end - cut),
            "cut at {cut}: {err:?}"
        );
    }
    assert_eq!(FetchPartition::read(&mut &full[..], &cx, 12).unwrap(), p);
}

mod error_codes {
    use crate::messages::describe_cluster_response::{
        DescribeClusterBroker, DescribeClusterResponse,
    };
    use crate::messages::fetch_response::{FetchResponse, FetchableTopicResponse, PartitionData};
    use crate::messages::metadata_response::{
        MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use crate::messages::offset_fetch_response::{
        OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
        OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
    };
    use crate::messages::produce_response::{
        PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
    };
    use crate::{ApiKey, ByteString, ResponseBody, decode_response, encode_response};

    fn codes(body: &ResponseBody, version: i16) -> Vec<i16> {
        let mut out = Vec::new();
        body.for_each_error_code(version, &mut |c| out.push(c));
        out
    }

    fn produce_partition(index: i32, error_code: i16) -> PartitionProduceResponse {
        PartitionProduceResponse {
            index,
            error_code,
            ..PartitionProduceResponse::default()
        }
    }

    fn produce() -> ResponseBody {
        ResponseBody::Produce(ProduceResponse {
            responses: vec![
                TopicProduceResponse {
                    name: ByteString::from_static("a"),
                    partition_responses: vec![produce_partition(0, 0), produce_partition(1, 6)],
                    ..TopicProduceResponse::default()
                },
                TopicProduceResponse {
                    name: ByteString::from_static("b"),
                    partition_responses: vec![produce_partition(0, 3), produce_partition(1, 75)],
                    ..TopicProduceResponse::default()
                },
            ],
            ..ProduceResponse::default()
        })
    }

    #[test]
    fn produce_yields_every_partition_code_in_order() {
        for v in [0, 3, 8, 9, 12, 13] {
            assert_eq!(codes(&produce(), v), [0, 6, 3, 75], "v{v}");
        }
    }

    #[test]
    fn produce_codes_survive_the_wire() {
        // A decoded response reports what was sent.
        for v in [3, 9, 12] {
            let frame = encode_response(1, v, &produce())
                .expect("encodes")
                .to_bytes();
            let (_, body) =
                decode_response(ApiKey::Produce, v, &frame.slice(4..)).expect("decodes");
            assert_eq!(codes(&body, v), [0, 6, 3, 75], "v{v}");
        }
    }

    #[test]
    fn produce_without_topics_yields_nothing() {
        let body = ResponseBody::Produce(ProduceResponse::default());
        assert_eq!(codes(&body, 9), Vec::<i16>::new());
    }

    fn fetch() -> ResponseBody {
        let p = |partition_index, error_code| PartitionData {
            partition_index,
            error_code,
            ..PartitionData::default()
        };
        ResponseBody::Fetch(FetchResponse {
            error_code: 15,
            responses: vec![
                FetchableTopicResponse {
                    topic: ByteString::from_static("a"),
                    partitions: vec![p(0, 1), p(1, 0)],
                    ..FetchableTopicResponse::default()
                },
                FetchableTopicResponse {
                    topic: ByteString::from_static("b"),
                    partitions: vec![p(0, 74), p(1, 100)],
                    ..FetchableTopicResponse::default()
                },
            ],
            ..FetchResponse::default()
        })
    }

    #[test]
    fn fetch_top_level_code_only_from_v7() {
        // The top-level error code does not exist before v7, whatever the struct holds.
        for v in [4, 5, 6] {
            assert_eq!(codes(&fetch(), v), [1, 0, 74, 100], "v{v}");
        }
        for v in [7, 12, 13, 18] {
            assert_eq!(codes(&fetch(), v), [15, 1, 0, 74, 100], "v{v}");
        }
    }

    fn metadata() -> ResponseBody {
        let p = |partition_index, error_code| MetadataResponsePartition {
            partition_index,
            error_code,
            ..MetadataResponsePartition::default()
        };
        ResponseBody::Metadata(MetadataResponse {
            brokers: vec![MetadataResponseBroker {
                node_id: 1,
                host: ByteString::from_static("h"),
                port: 9092,
                ..MetadataResponseBroker::default()
            }],
            topics: vec![
                MetadataResponseTopic {
                    error_code: 3,
                    name: Some(ByteString::from_static("a")),
                    partitions: vec![],
                    ..MetadataResponseTopic::default()
                },
                MetadataResponseTopic {
                    error_code: 0,
                    name: Some(ByteString::from_static("b")),
                    partitions: vec![p(0, 9), p(1, 0), p(2, 5)],
                    ..MetadataResponseTopic::default()
                },
            ],
            error_code: 41,
            ..MetadataResponse::default()
        })
    }

    #[test]
    fn metadata_topic_then_partition_codes() {
        for v in [0, 1, 9, 12] {
            assert_eq!(codes(&metadata(), v), [3, 0, 9, 0, 5], "v{v}");
        }
        // v13 adds a top-level error code, declared after the topics.
        assert_eq!(codes(&metadata(), 13), [3, 0, 9, 0, 5, 41]);
    }

    #[test]
    fn nested_arrays_absent_at_a_version_are_skipped() {
        // OffsetFetch moved from a topic list (v0-7) to a group list (v8+); the struct below
        // holds both, each version reports only its own.
        let body = ResponseBody::OffsetFetch(OffsetFetchResponse {
            topics: vec![OffsetFetchResponseTopic {
                partitions: vec![OffsetFetchResponsePartition {
                    error_code: 16,
                    ..OffsetFetchResponsePartition::default()
                }],
                ..OffsetFetchResponseTopic::default()
            }],
            error_code: 14,
            groups: vec![OffsetFetchResponseGroup {
                topics: vec![OffsetFetchResponseTopics {
                    partitions: vec![OffsetFetchResponsePartitions {
                        error_code: 3,
                        ..OffsetFetchResponsePartitions::default()
                    }],
                    ..OffsetFetchResponseTopics::default()
                }],
                error_code: 25,
                ..OffsetFetchResponseGroup::default()
            }],
            ..OffsetFetchResponse::default()
        });
        assert_eq!(codes(&body, 1), [16]);
        assert_eq!(codes(&body, 2), [16, 14]);
        assert_eq!(codes(&body, 7), [16, 14]);
        assert_eq!(codes(&body, 8), [3, 25]);
        assert_eq!(codes(&body, 9), [3, 25]);
    }

    #[test]
    fn describe_cluster_has_only_its_top_level_code() {
        // Every generated response has at least one error code; DescribeCluster's brokers
        // carry none, so only the top-level one is reported.
        let body = ResponseBody::DescribeCluster(DescribeClusterResponse {
            error_code: 0,
            brokers: vec![
                DescribeClusterBroker {
                    broker_id: 1,
                    ..DescribeClusterBroker::default()
                },
                DescribeClusterBroker {
                    broker_id: 2,
                    ..DescribeClusterBroker::default()
                },
            ],
            ..DescribeClusterResponse::default()
        });
        for v in 0..=2 {
            assert_eq!(codes(&body, v), [0], "v{v}");
        }
    }

    #[test]
    fn structs_without_error_codes_report_nothing() {
        let mut seen = Vec::new();
        MetadataResponseBroker {
            node_id: 7,
            ..MetadataResponseBroker::default()
        }
        .for_each_error_code(12, &mut |c| seen.push(c));
        DescribeClusterBroker::default().for_each_error_code(2, &mut |c| seen.push(c));
        assert_eq!(seen, Vec::<i16>::new());
    }

    #[test]
    fn every_default_response_reports_only_zeros() {
        for &key in ApiKey::ALL {
            let Some(range) = key.versions() else {
                continue;
            };
            let body = ResponseBody::default_for(key).expect("known key");
            for v in range.min..=range.max {
                assert!(codes(&body, v).iter().all(|&c| c == 0), "{key:?} v{v}");
            }
        }
    }
}

#[test]
fn fetch_records_in_segments_encode_as_the_joined_bytes() {
    use crate::RecordSet;
    use crate::messages::fetch_response::{FetchResponse, FetchableTopicResponse, PartitionData};
    let big = Bytes::from(vec![7u8; 5000]);
    let small = Bytes::from_static(b"small batch bytes");
    let parts = [
        big.clone(),
        small.clone(),
        Bytes::new(),
        big.clone(),
        small.clone(),
    ];
    let joined: Bytes = parts.concat().into();
    let response = |records: RecordSet| {
        ResponseBody::Fetch(FetchResponse {
            responses: vec![FetchableTopicResponse {
                topic: ByteString::from_static("t"),
                partitions: vec![PartitionData {
                    records: Some(records),
                    ..PartitionData::default()
                }],
                ..FetchableTopicResponse::default()
            }],
            ..FetchResponse::default()
        })
    };
    let segmented: RecordSet = parts.iter().cloned().collect();
    assert_eq!(segmented.segments().len(), 4, "the empty part is not kept");
    assert_eq!(segmented.len(), joined.len());
    assert_eq!(segmented.to_bytes(), joined);
    assert_eq!(segmented, RecordSet::from(joined.clone()));
    for version in [4, 11, 12, 16] {
        let a = encode_response(9, version, &response(segmented.clone())).expect("encodes");
        let b = encode_response(9, version, &response(RecordSet::from(joined.clone())))
            .expect("encodes");
        assert_eq!(a.segments.concat(), b.segments.concat(), "v{version}");
        // The large batches are referenced, not copied.
        let shared = a
            .segments
            .iter()
            .filter(|s| s.as_ptr() == big.as_ptr() && s.len() == big.len())
            .count();
        assert_eq!(shared, 2, "v{version}");
    }
}
