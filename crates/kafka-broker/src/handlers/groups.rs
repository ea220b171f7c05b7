//! The classic consumer-group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12),
//! LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).
//!
//! Groups are placed over the live gateways by [`crate::cluster::coordinator`] (by their
//! coordinator shard); FindCoordinator answers the owner, and a gateway refuses the group
//! APIs for a group it does not coordinate with `NOT_COORDINATOR` (per group where the API
//! names several). While this gateway is still loading the shard of a group it now
//! coordinates, the group APIs answer `COORDINATOR_LOAD_IN_PROGRESS` (code 14, known to
//! every version of them; retriable), per group where the API names several, and
//! ListGroups as a whole while any of its shards loads; as in Kafka, Heartbeat is answered
//! `NONE` and SyncGroup `REBALANCE_IN_PROGRESS` instead.
//! Membership and rebalances are decided by the `kafka-groups` state machine; these
//! handlers translate between wire versions and its domain types.
//!
//! What the coordinator keeps beyond the request (protocol metadata, assignments) is
//! copied out of the request frame to its exact size, so a member never pins a frame.
//! DescribeGroups describes each distinct group once, however often a request names it.

use super::{Ctx, bs};
use crate::cluster::{Route, coordinator};
use bytes::Bytes;
use bytestring::ByteString;
use kafka_groups::{
    GroupState, Heartbeat, JoinGroup, LeaveGroup, LeavingMember, MemberAssignment, Protocol,
    Response, SyncGroup,
};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;
use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_protocol::messages::leave_group_request::LeaveGroupRequest;
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use std::time::Duration;

const UNAVAILABLE: i16 = ErrorCode::COORDINATOR_NOT_AVAILABLE.0;

/// A coordinator's node id, host and port, or why there is none.
type Located = Result<(i32, String, u16), ErrorCode>;

/// Where the coordinator of `key` is, for the listener the request came in on: its
/// node id, host and port; `COORDINATOR_NOT_AVAILABLE` when the live view is empty or
/// the owner advertises no listener.
fn locate(ctx: &Ctx<'_>, route: &Route, key: &str) -> Located {
    let owner = coordinator(&route.view, key).ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)?;
    super::metadata::live_brokers(ctx, route)
        .find(|(id, _, _)| *id == owner)
        .map(|(id, h, p)| (id, h.to_owned(), p))
        .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)
}

pub(crate) fn find_coordinator(
    ctx: &Ctx<'_>,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let route = ctx.broker.route();
    // Group (0) and transaction (1) keys are both placed by `cluster::coordinator`;
    // transactional producers then learn from InitProducerId that transactions are not
    // supported.
    let known = req.key_type == 0 || req.key_type == 1;
    let answer = |key: &str| -> (Located, Option<ByteString>) {
        if known {
            (locate(ctx, &route, key), None)
        } else {
            (
                Err(ErrorCode::INVALID_REQUEST),
                Some(bs(format!("unknown key type {}", req.key_type))),
            )
        }
    };
    if ctx.version >= 4 {
        FindCoordinatorResponse {
            coordinators: req
                .coordinator_keys
                .iter()
                .map(|k| {
                    let (found, message) = answer(k);
                    let (node_id, host, port, error) = split(found);
                    Coordinator {
                        key: k.clone(),
                        node_id,
                        host,
                        port,
                        error_code: error.code(),
                        error_message: message,
                        ..Coordinator::default()
                    }
                })
                .collect(),
            ..FindCoordinatorResponse::default()
        }
    } else {
        let (found, message) = answer(&req.key);
        let (node_id, host, port, error) = split(found);
        FindCoordinatorResponse {
            error_code: error.code(),
            error_message: if ctx.version >= 1 { message } else { None },
            node_id,
            host,
            port,
            ..FindCoordinatorResponse::default()
        }
    }
}

/// A coordinator's fields as FindCoordinator carries them (-1, "" and -1 on an error).
fn split(found: Located) -> (i32, ByteString, i32, ErrorCode) {
    match found {
        Ok((id, host, port)) => (id, bs(host), i32::from(port), ErrorCode::NONE),
        Err(e) => (-1, bs(""), -1, e),
    }
}

/// Why this gateway does not serve `group` now: `NOT_COORDINATOR` when another live
/// gateway coordinates it (the client asks FindCoordinator again), and
/// `COORDINATOR_NOT_AVAILABLE` when this gateway cannot act as an owner (its lease
/// lapsed, or it is not in the live view); `None` when it is the coordinator.
pub(crate) fn refusal(route: &Route, group: &str) -> Option<ErrorCode> {
    if !route.owner {
        Some(ErrorCode::COORDINATOR_NOT_AVAILABLE)
    } else if route.coordinates(group) {
        None
    } else {
        Some(ErrorCode::NOT_COORDINATOR)
    }
}

fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn client_host(ctx: &Ctx<'_>) -> String {
    format!("/{}", ctx.session.peer.ip())
}

pub(crate) async fn join_group(ctx: &Ctx<'_>, req: JoinGroupRequest) -> JoinGroupResponse {
    let v = ctx.version;
    if let Some(e) = refusal(&ctx.broker.route(), &req.group_id) {
        return JoinGroupResponse {
            error_code: e.code(),
            generation_id: -1,
            protocol_name: if v >= 7 { None } else { Some(bs("")) },
            member_id: req.member_id,
            ..JoinGroupResponse::default()
        };
    }
    let join = JoinGroup {
        group_id: req.group_id.to_string(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_deref().map(str::to_string),
        session_timeout: millis(req.session_timeout_ms),
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout: millis(if v >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        }),
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            // Copied to their exact size: a slice would keep the whole request frame alive
            // for as long as the member stays in the group.
            .map(|p| Protocol::new(p.name.to_string(), Bytes::copy_from_slice(&p.metadata)))
            .collect(),
        client_id: ctx.session.client_id.to_string(),
        client_host: client_host(ctx),
        reason: req.reason.as_deref().map(str::to_string),
        require_known_member_id: v >= 4,
    };
    let r = match ctx.broker.groups.join(join).await {
        Ok(Response::Join(r)) => r,
        _ => {
            return JoinGroupResponse {
                error_code: UNAVAILABLE,
                generation_id: -1,
                protocol_name: if v >= 7 { None } else { Some(bs("")) },
                ..JoinGroupResponse::default()
            };
        }
    };
    tracing::debug!(
        group = %req.group_id,
        member = %r.member_id,
        generation = r.generation_id,
        leader = r.member_id == r.leader,
        error = ?r.error,
        "join group answered"
    );
    let nullable = v >= 7;
    JoinGroupResponse {
        error_code: r.error.code(),
        generation_id: r.generation_id,
        protocol_type: if v >= 7 {
            r.protocol_type.map(bs)
        } else {
            None
        },
        protocol_name: match r.protocol_name {
            Some(p) => Some(bs(p)),
            None if nullable => None,
            None => Some(bs("")),
        },
        leader: bs(r.leader),
        skip_assignment: false,
        member_id: bs(r.member_id),
        members: r
            .members
            .into_iter()
            .map(|m| JoinGroupResponseMember {
                member_id: bs(m.member_id),
                group_instance_id: if v >= 5 {
                    m.group_instance_id.map(bs)
                } else {
                    None
                },
                metadata: m.metadata,
                ..JoinGroupResponseMember::default()
            })
            .collect(),
        ..JoinGroupResponse::default()
    }
}

pub(crate) async fn sync_group(ctx: &Ctx<'_>, req: SyncGroupRequest) -> SyncGroupResponse {
    if let Some(e) = refusal(&ctx.broker.route(), &req.group_id) {
        return SyncGroupResponse {
            error_code: e.code(),
            ..SyncGroupResponse::default()
        };
    }
    let sync = SyncGroup {
        group_id: req.group_id.to_string(),
        generation_id: req.generation_id,
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_deref().map(str::to_string),
        protocol_type: req.protocol_type.as_deref().map(str::to_string),
        protocol_name: req.protocol_name.as_deref().map(str::to_string),
        assignments: req
            .assignments
            .iter()
            .map(|a| MemberAssignment {
                member_id: a.member_id.to_string(),
                // Kept until every member has synced: copied, not a slice of the frame.
                assignment: Bytes::copy_from_slice(&a.assignment),
            })
            .collect(),
    };
    match ctx.broker.groups.sync(sync).await {
        Ok(Response::Sync(r)) => SyncGroupResponse {
            error_code: r.error.code(),
            protocol_type: if ctx.version >= 5 {
                r.protocol_type.map(bs)
            } else {
                None
            },
            protocol_name: if ctx.version >= 5 {
                r.protocol_name.map(bs)
            } else {
                None
            },
            assignment: r.assignment,
            ..SyncGroupResponse::default()
        },
        _ => SyncGroupResponse {
            error_code: UNAVAILABLE,
            ..SyncGroupResponse::default()
        },
    }
}

pub(crate) async fn heartbeat(ctx: &Ctx<'_>, req: HeartbeatRequest) -> HeartbeatResponse {
    if let Some(e) = refusal(&ctx.broker.route(), &req.group_id) {
        return HeartbeatResponse {
            error_code: e.code(),
            ..HeartbeatResponse::default()
        };
    }
    let hb = Heartbeat {
        group_id: req.group_id.to_string(),
        generation_id: req.generation_id,
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_deref().map(str::to_string),
    };
    let error_code = match ctx.broker.groups.heartbeat(hb).await {
        Ok(r) => r.error().code(),
        Err(_) => UNAVAILABLE,
    };
    HeartbeatResponse {
        error_code,
        ..HeartbeatResponse::default()
    }
}

pub(crate) async fn leave_group(ctx: &Ctx<'_>, req: LeaveGroupRequest) -> LeaveGroupResponse {
    if let Some(e) = refusal(&ctx.broker.route(), &req.group_id) {
        return LeaveGroupResponse {
            error_code: e.code(),
            ..LeaveGroupResponse::default()
        };
    }
    let batched = ctx.version >= 3;
    let members = if batched {
        req.members
            .iter()
            .map(|m| LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_deref().map(str::to_string),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let leave = LeaveGroup {
        group_id: req.group_id.to_string(),
        members,
    };
    let Ok(Response::Leave(r)) = ctx.broker.groups.leave(leave).await else {
        return LeaveGroupResponse {
            error_code: UNAVAILABLE,
            ..LeaveGroupResponse::default()
        };
    };
    if batched {
        LeaveGroupResponse {
            error_code: r.error.code(),
            members: r
                .members
                .into_iter()
                .map(|m| MemberResponse {
                    member_id: bs(m.member_id),
                    group_instance_id: m.group_instance_id.map(bs),
                    error_code: m.error.code(),
                    ..MemberResponse::default()
                })
                .collect(),
            ..LeaveGroupResponse::default()
        }
    } else {
        // Before v3 the one member's outcome is the top-level error.
        let member_error = r.members.first().map(|m| m.error).unwrap_or(r.error);
        let error = if r.error.is_ok() {
            member_error
        } else {
            r.error
        };
        LeaveGroupResponse {
            error_code: error.code(),
            ..LeaveGroupResponse::default()
        }
    }
}

pub(crate) async fn describe_groups(
    ctx: &Ctx<'_>,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    // A group named more than once is described once: the response is bounded by the
    // distinct names, not by how often a request repeats one.
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut names = Vec::new();
    for g in &req.groups {
        if seen.insert(g) {
            names.push(g.clone());
        }
    }
    drop(seen);
    // Groups another gateway coordinates are answered with the refusal, not looked up.
    let route = ctx.broker.route();
    let mut refused = Vec::new();
    names.retain(|g| match refusal(&route, g) {
        Some(e) => {
            refused.push(DescribedGroup {
                error_code: e.code(),
                group_id: g.clone(),
                ..DescribedGroup::default()
            });
            false
        }
        None => true,
    });
    let groups_handle = &ctx.broker.groups;
    let shards = names.iter().fold(0, |set, g| {
        set | (1u32 << kafka_store::cluster::group_shard(g))
    });
    groups_handle.wait_shards(shards).await;
    names.retain(|g| {
        if groups_handle.is_loaded(g) {
            true
        } else {
            refused.push(DescribedGroup {
                error_code: ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code(),
                group_id: g.clone(),
                ..DescribedGroup::default()
            });
            false
        }
    });
    let ids: Vec<String> = names.iter().map(|g| g.to_string()).collect();
    let found = ctx
        .broker
        .groups
        .with(move |c, _| {
            ids.iter()
                .map(|g| (g.clone(), c.describe(g)))
                .collect::<Vec<_>>()
        })
        .await;
    let Ok(found) = found else {
        refused.extend(names.iter().map(|g| DescribedGroup {
            error_code: UNAVAILABLE,
            group_id: g.clone(),
            ..DescribedGroup::default()
        }));
        return DescribeGroupsResponse {
            groups: refused,
            ..DescribeGroupsResponse::default()
        };
    };
    let offsets = &ctx.broker.stores.offsets;
    let mut groups = refused;
    groups.reserve(found.len());
    for (id, desc) in found {
        groups.push(match desc {
            Some(d) => DescribedGroup {
                error_code: ErrorCode::NONE.code(),
                group_id: bs(id),
                group_state: bs(d.state.as_str()),
                protocol_type: bs(d.protocol_type),
                protocol_data: bs(d.protocol),
                members: d
                    .members
                    .into_iter()
                    .map(|m| DescribedGroupMember {
                        member_id: bs(m.member_id),
                        group_instance_id: if ctx.version >= 4 {
                            m.group_instance_id.map(bs)
                        } else {
                            None
                        },
                        client_id: bs(m.client_id),
                        client_host: bs(m.client_host),
                        member_metadata: m.metadata,
                        member_assignment: m.assignment,
                        ..DescribedGroupMember::default()
                    })
                    .collect(),
                ..DescribedGroup::default()
            },
            None => {
                // A group known only by its committed offsets is Empty; anything else
                // does not exist (Dead, and from v6 GROUP_ID_NOT_FOUND).
                let has_offsets = offsets
                    .fetch_all(&id)
                    .await
                    .map(|o| !o.is_empty())
                    .unwrap_or(false);
                if has_offsets {
                    DescribedGroup {
                        error_code: ErrorCode::NONE.code(),
                        group_id: bs(id),
                        group_state: bs(GroupState::Empty.as_str()),
                        ..DescribedGroup::default()
                    }
                } else {
                    DescribedGroup {
                        error_code: if ctx.version >= 6 {
                            ErrorCode::GROUP_ID_NOT_FOUND.code()
                        } else {
                            ErrorCode::NONE.code()
                        },
                        error_message: None,
                        group_id: bs(id),
                        group_state: bs(GroupState::Dead.as_str()),
                        ..DescribedGroup::default()
                    }
                }
            }
        });
    }
    // KIP-430: without authorization every operation a group supports, as Kafka answers
    // without an authorizer; the authorization layer, when on, puts the principal's own.
    if req.include_authorized_operations {
        let all = crate::authz::api::all_operations(crate::authz::ResourceType::Group);
        for g in &mut groups {
            g.authorized_operations = all;
        }
    }
    DescribeGroupsResponse {
        groups,
        ..DescribeGroupsResponse::default()
    }
}

pub(crate) async fn list_groups(ctx: &Ctx<'_>, req: ListGroupsRequest) -> ListGroupsResponse {
    let mut states = Vec::new();
    if ctx.version >= 4 {
        for s in &req.states_filter {
            match GroupState::parse(s) {
                Some(st) => states.push(st),
                // An unknown state matches nothing, as in Kafka.
                None => {
                    return ListGroupsResponse {
                        error_code: ErrorCode::NONE.code(),
                        ..ListGroupsResponse::default()
                    };
                }
            }
        }
    }
    let types: Vec<String> = if ctx.version >= 5 {
        req.types_filter.iter().map(|t| t.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    if !types.is_empty() && !types.iter().any(|t| t == "classic") {
        return ListGroupsResponse::default();
    }
    let route = ctx.broker.route();
    if !ctx.broker.groups.loaded_all(&route).await {
        return ListGroupsResponse {
            error_code: ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code(),
            ..ListGroupsResponse::default()
        };
    }
    let filter = states.clone();
    let Ok(mut listed) = ctx.broker.groups.with(move |c, _| c.list(&filter)).await else {
        return ListGroupsResponse {
            error_code: UNAVAILABLE,
            ..ListGroupsResponse::default()
        };
    };
    // Groups that only have committed offsets (assign()-style consumers) are Empty.
    if states.is_empty() || states.contains(&GroupState::Empty) {
        let known: std::collections::HashSet<String> =
            listed.iter().map(|g| g.group_id.clone()).collect();
        if let Ok(with_offsets) = ctx.broker.stores.offsets.groups().await {
            for g in with_offsets {
                if !known.contains(&g) {
                    listed.push(kafka_groups::GroupListing {
                        group_id: g,
                        protocol_type: String::new(),
                        state: GroupState::Empty,
                    });
                }
            }
        }
    }
    // Each gateway lists the groups it coordinates (the offsets are shared), so a client
    // asking every broker sees each group once.
    listed.retain(|g| route.coordinates(&g.group_id));
    listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    ListGroupsResponse {
        error_code: ErrorCode::NONE.code(),
        groups: listed
            .into_iter()
            .map(|g| ListedGroup {
                group_id: bs(g.group_id),
                protocol_type: bs(g.protocol_type),
                group_state: if ctx.version >= 4 {
                    bs(g.state.as_str())
                } else {
                    bs("")
                },
                group_type: if ctx.version >= 5 {
                    bs("classic")
                } else {
                    bs("")
                },
                ..ListedGroup::default()
            })
            .collect(),
        ..ListGroupsResponse::default()
    }
}

pub(crate) async fn delete_groups(ctx: &Ctx<'_>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    let route = ctx.broker.route();
    for g in &req.groups_names {
        if let Some(e) = refusal(&route, g) {
            results.push(DeletableGroupResult {
                group_id: g.clone(),
                error_code: e.code(),
                ..DeletableGroupResult::default()
            });
            continue;
        }
        let id = g.to_string();
        let outcome = ctx
            .broker
            .groups
            .with_group(g, move |c, _| c.delete(&id))
            .await;
        let offsets = &ctx.broker.stores.offsets;
        let error = match outcome {
            Err(e) => e,
            Ok(Ok(())) => match offsets.delete_group(g).await {
                Ok(()) => ErrorCode::NONE,
                Err(e) => e.error_code(),
            },
            Ok(Err(ErrorCode::GROUP_ID_NOT_FOUND)) => {
                // Known only by its offsets: deleting them deletes the group.
                match offsets.fetch_all(g).await {
                    Ok(o) if !o.is_empty() => match offsets.delete_group(g).await {
                        Ok(()) => ErrorCode::NONE,
                        Err(e) => e.error_code(),
                    },
                    Ok(_) => ErrorCode::GROUP_ID_NOT_FOUND,
                    Err(e) => e.error_code(),
                }
            }
            Ok(Err(e)) => e,
        };
        results.push(DeletableGroupResult {
            group_id: g.clone(),
            error_code: error.code(),
            ..DeletableGroupResult::default()
        });
    }
    DeleteGroupsResponse {
        results,
        ..DeleteGroupsResponse::default()
    }
}
