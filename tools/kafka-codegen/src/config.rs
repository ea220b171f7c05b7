//! Which messages are generated, and at which versions.
//!
//! The ranges are those Apache Kafka 4.1 brokers advertise. Two differ from the specs'
//! `validVersions` on purpose: Produce starts at 0 because brokers advertise 0 (older
//! librdkafka disables compression otherwise) and versions 0-2 have the v3 layout minus the
//! transactional id, so they can be decoded and refused; and a few APIs stop below the
//! spec's newest version because 4.1 brokers do not advertise it yet.

/// One generated message.
#[derive(Debug, Clone, Copy)]
pub struct MessageConfig {
    /// Spec file stem, e.g. `ProduceRequest`.
    pub spec: &'static str,
    /// Lowest generated version.
    pub min: i16,
    /// Highest generated version.
    pub max: i16,
}

const fn m(spec: &'static str, min: i16, max: i16) -> MessageConfig {
    MessageConfig { spec, min, max }
}

macro_rules! api {
    ($name:literal, $min:literal, $max:literal) => {
        [
            m(concat!($name, "Request"), $min, $max),
            m(concat!($name, "Response"), $min, $max),
        ]
    };
}

/// Request/response pairs, in API-key order, then headers and embedded data.
pub const MESSAGES: &[MessageConfig] = &{
    const PAIRS: [[MessageConfig; 2]; 46] = [
        api!("Produce", 0, 13),
        api!("Fetch", 4, 18),
        api!("ListOffsets", 1, 10),
        api!("Metadata", 0, 13),
        api!("OffsetCommit", 2, 9),
        api!("OffsetFetch", 1, 9),
        api!("FindCoordinator", 0, 6),
        api!("JoinGroup", 0, 9),
        api!("Heartbeat", 0, 4),
        api!("LeaveGroup", 0, 5),
        api!("SyncGroup", 0, 5),
        api!("DescribeGroups", 0, 6),
        api!("ListGroups", 0, 5),
        api!("SaslHandshake", 0, 1),
        api!("ApiVersions", 0, 4),
        api!("CreateTopics", 2, 7),
        api!("DeleteTopics", 1, 6),
        api!("DeleteRecords", 0, 2),
        api!("InitProducerId", 0, 5),
        api!("OffsetForLeaderEpoch", 2, 4),
        api!("AddPartitionsToTxn", 0, 5),
        api!("AddOffsetsToTxn", 0, 4),
        api!("EndTxn", 0, 5),
        api!("WriteTxnMarkers", 1, 2),
        api!("TxnOffsetCommit", 0, 5),
        api!("DescribeAcls", 1, 3),
        api!("CreateAcls", 1, 3),
        api!("DeleteAcls", 1, 3),
        api!("DescribeConfigs", 1, 4),
        api!("AlterConfigs", 0, 2),
        api!("SaslAuthenticate", 0, 2),
        api!("CreatePartitions", 0, 3),
        api!("DeleteGroups", 0, 2),
        api!("IncrementalAlterConfigs", 0, 1),
        api!("OffsetDelete", 0, 0),
        api!("DescribeClientQuotas", 0, 1),
        api!("AlterClientQuotas", 0, 1),
        api!("DescribeUserScramCredentials", 0, 0),
        api!("AlterUserScramCredentials", 0, 0),
        api!("DescribeCluster", 0, 2),
        api!("DescribeProducers", 0, 0),
        api!("DescribeTransactions", 0, 0),
        api!("ListTransactions", 0, 2),
        api!("ConsumerGroupHeartbeat", 0, 1),
        // The spec set in use defines version 0 only.
        api!("ConsumerGroupDescribe", 0, 0),
        api!("DescribeTopicPartitions", 0, 0),
    ];
    const EXTRA: [MessageConfig; 4] = [
        m("RequestHeader", 0, 2),
        m("ResponseHeader", 0, 1),
        m("ConsumerProtocolSubscription", 0, 3),
        m("ConsumerProtocolAssignment", 0, 3),
    ];
    let mut out = [m("", 0, 0); 96];
    let mut i = 0;
    while i < 46 {
        out[2 * i] = PAIRS[i][0];
        out[2 * i + 1] = PAIRS[i][1];
        i += 1;
    }
    let mut j = 0;
    while j < 4 {
        out[92 + j] = EXTRA[j];
        j += 1;
    }
    out
};
