//! The transaction coordinator's APIs: InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.
//!
//! (Skeleton: every request is refused until the coordinator is wired in.)

use super::Ctx;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnRequest;
use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResponse;
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::DescribeTransactionsResponse;
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::end_txn_response::EndTxnResponse;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::ListTransactionsResponse;

pub(crate) async fn add_partitions(
    _ctx: &Ctx<'_>,
    _req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    AddPartitionsToTxnResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        ..Default::default()
    }
}

pub(crate) async fn add_offsets(
    _ctx: &Ctx<'_>,
    _req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    AddOffsetsToTxnResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        ..Default::default()
    }
}

pub(crate) async fn end_txn(_ctx: &Ctx<'_>, _req: EndTxnRequest) -> EndTxnResponse {
    EndTxnResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        ..Default::default()
    }
}

pub(crate) async fn describe_transactions(
    _ctx: &Ctx<'_>,
    _req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    DescribeTransactionsResponse::default()
}

pub(crate) async fn list_transactions(
    _ctx: &Ctx<'_>,
    _req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    ListTransactionsResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        ..Default::default()
    }
}
