//! ApiVersions (key 18): which APIs and versions this gateway speaks.
//!
//! Only implemented APIs are listed. Produce is listed from version 0 although versions
//! 0-2 are refused, as Kafka 4 does: librdkafka before 2.11.1 turns compression off when a
//! broker's Produce minimum is above 0. Feature lists stay empty, so no default-valued
//! tagged fields are written (librdkafka 2.0.2 cannot parse them).

use super::{Ctx, advertised_all};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

/// The response body with `error` and the advertised key list.
pub(crate) fn response(error: ErrorCode) -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: error.code(),
        api_keys: advertised_all()
            .map(|(key, range)| ApiVersion {
                api_key: key.as_i16(),
                min_version: range.min,
                max_version: range.max,
                ..ApiVersion::default()
            })
            .collect(),
        ..ApiVersionsResponse::default()
    }
}

pub(crate) fn handle(_ctx: &Ctx<'_>, _req: ApiVersionsRequest) -> ApiVersionsResponse {
    response(ErrorCode::NONE)
}
