//! One request, from its parsed header to the handler that answers it: ApiVersions first
//! (answered whatever its version), then the SASL gate, the version check against
//! [`crate::api_versions::SUPPORTED`], the body's decoding, and the handler.
//!
//! `admit` runs in the connection's read loop, so what a handler does before returning its
//! [`Pending`] happens in request order (produce writes there); the pending responses run
//! concurrently and are written in request order by the connection's writer.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::context::{Ctx, Pending, Reply};
use crate::frame::Request;
use crate::sasl::Session;
use crate::{
    admin, api_versions, fetch, groups, list_offsets, metadata, produce, producer_id, txn,
};

/// Why a connection is closed instead of answered: logged, as Kafka's protocol has no way
/// to answer a request whose body cannot be parsed.
pub(crate) type Close = String;

/// A request on its way: the response to come, and what to write it with.
pub(crate) struct Admitted {
    pub api_key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub pending: Pending,
}

/// Admits one request. `ctx` is replaced when the request completes a SASL login (the
/// connection acts as the new principal from its next request).
pub(crate) async fn admit(
    ctx: &mut Arc<Ctx>,
    session: &mut Session,
    request: Request,
) -> Result<Admitted, Close> {
    let Request {
        api_key,
        header,
        mut body,
    } = request;
    let version = header.request_api_version;
    let correlation_id = header.correlation_id;
    let admitted = |version: i16, pending: Pending| Admitted {
        api_key,
        version,
        correlation_id,
        pending,
    };
    if api_key == ApiKey::ApiVersions {
        // Not decoded: a client may send a version newer than ours, whose body we cannot
        // read, and must still learn which versions we serve.
        let (response, version) = api_versions::response(version);
        let pending = ready(ResponseKind::ApiVersions(response));
        return Ok(admitted(version, pending));
    }
    if !session.admits(api_key) {
        return Err(format!(
            "{api_key:?} before SASL authentication (the listener requires SaslHandshake and SaslAuthenticate first)"
        ));
    }
    if !api_versions::is_supported(api_key, version) {
        return match crate::unsupported::response(api_key, version) {
            Some(response) => Ok(admitted(version, ready(response))),
            None => Err(format!(
                "{api_key:?} v{version} is not supported by this listener"
            )),
        };
    }
    let decoded = decode(api_key, version, &mut body)?;
    if let RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_) = decoded {
        let (response, principal) = session.step(ctx, version, decoded).await?;
        if let Some(principal) = principal {
            *ctx = ctx.with_peer(|peer| peer.principal = principal);
        }
        return Ok(admitted(version, ready(response)));
    }
    let pending = route(ctx, version, decoded).await?;
    Ok(admitted(version, pending))
}

/// The request's body. The decoder is third-party code fed network bytes: a panic in it
/// (there should be none) closes this connection, not the process. Its lying-array-count
/// allocations are the binary's allocator's concern (`tinymq_node::alloc_guard`, installed by the binary).
fn decode(api_key: ApiKey, version: i16, body: &mut bytes::Bytes) -> Result<RequestKind, Close> {
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        RequestKind::decode(api_key, body, version)
    }));
    match decoded {
        Ok(Ok(request)) => Ok(request),
        Ok(Err(e)) => Err(format!("cannot parse {api_key:?} v{version}: {e}")),
        Err(_) => Err(format!(
            "cannot parse {api_key:?} v{version}: the decoder panicked"
        )),
    }
}

/// A response already known.
fn ready(response: ResponseKind) -> Pending {
    Box::pin(std::future::ready(Reply::send(response)))
}

/// Runs `$handler(ctx, version, request)` concurrently, as `ResponseKind::$variant`.
macro_rules! serve {
    ($ctx:expr, $version:expr, $request:expr, $variant:ident, $handler:path) => {{
        let ctx = Arc::clone($ctx);
        let version = $version;
        let request = $request;
        Box::pin(async move {
            Reply::send(ResponseKind::$variant(
                $handler(ctx, version, request).await,
            ))
        }) as Pending
    }};
}

async fn route(ctx: &Arc<Ctx>, version: i16, request: RequestKind) -> Result<Pending, Close> {
    use RequestKind as R;
    Ok(match request {
        // Written before this returns: the connection's produce requests in arrival order.
        R::Produce(r) => produce::admit(ctx, version, r).await,
        // One fetch per connection at a time, taken in arrival order and held until its
        // answer is written (see `Ctx::fetch_turn`).
        R::Fetch(r) => {
            let Ok(turn) = Arc::clone(&ctx.fetch_turn).acquire_owned().await else {
                return Err("closing".into());
            };
            let ctx = Arc::clone(ctx);
            Box::pin(async move {
                let response = fetch::handle(Arc::clone(&ctx), version, r).await;
                // The records stay in memory until written: counted in the broker's fetch
                // memory meanwhile, as the fetches being read are.
                let memory = ctx
                    .state()
                    .hold_fetch_memory(fetch::records_bytes(&response))
                    .await;
                Reply::Send {
                    response: Box::new(ResponseKind::Fetch(response)),
                    hold: Some(Box::new((turn, memory))),
                }
            })
        }
        R::ListOffsets(r) => serve!(ctx, version, r, ListOffsets, list_offsets::handle),
        R::InitProducerId(r) => serve!(ctx, version, r, InitProducerId, producer_id::handle),
        R::Metadata(r) => serve!(ctx, version, r, Metadata, metadata::handle),
        R::CreateTopics(r) => serve!(ctx, version, r, CreateTopics, admin::create_topics),
        R::DeleteTopics(r) => serve!(ctx, version, r, DeleteTopics, admin::delete_topics),
        R::CreatePartitions(r) => {
            serve!(ctx, version, r, CreatePartitions, admin::create_partitions)
        }
        R::DescribeConfigs(r) => serve!(ctx, version, r, DescribeConfigs, admin::describe_configs),
        R::IncrementalAlterConfigs(r) => serve!(
            ctx,
            version,
            r,
            IncrementalAlterConfigs,
            admin::incremental_alter_configs
        ),
        R::DeleteRecords(r) => serve!(ctx, version, r, DeleteRecords, admin::delete_records),
        R::CreateAcls(r) => serve!(ctx, version, r, CreateAcls, admin::create_acls),
        R::DescribeAcls(r) => serve!(ctx, version, r, DescribeAcls, admin::describe_acls),
        R::DeleteAcls(r) => serve!(ctx, version, r, DeleteAcls, admin::delete_acls),
        R::AlterConfigs(r) => serve!(ctx, version, r, AlterConfigs, admin::alter_configs),
        R::DescribeCluster(r) => serve!(ctx, version, r, DescribeCluster, admin::describe_cluster),
        R::DescribeUserScramCredentials(r) => serve!(
            ctx,
            version,
            r,
            DescribeUserScramCredentials,
            admin::describe_user_scram_credentials
        ),
        R::AlterUserScramCredentials(r) => serve!(
            ctx,
            version,
            r,
            AlterUserScramCredentials,
            admin::alter_user_scram_credentials
        ),
        R::DescribeClientQuotas(r) => {
            serve!(
                ctx,
                version,
                r,
                DescribeClientQuotas,
                admin::describe_client_quotas
            )
        }
        R::AlterClientQuotas(r) => {
            serve!(
                ctx,
                version,
                r,
                AlterClientQuotas,
                admin::alter_client_quotas
            )
        }
        R::DescribeLogDirs(r) => serve!(ctx, version, r, DescribeLogDirs, admin::describe_log_dirs),
        R::ElectLeaders(r) => serve!(ctx, version, r, ElectLeaders, admin::elect_leaders),
        R::AlterPartitionReassignments(r) => serve!(
            ctx,
            version,
            r,
            AlterPartitionReassignments,
            admin::alter_partition_reassignments
        ),
        R::ListPartitionReassignments(r) => serve!(
            ctx,
            version,
            r,
            ListPartitionReassignments,
            admin::list_partition_reassignments
        ),
        R::FindCoordinator(r) => {
            serve!(ctx, version, r, FindCoordinator, groups::find_coordinator)
        }
        R::JoinGroup(r) => serve!(ctx, version, r, JoinGroup, groups::join_group),
        R::SyncGroup(r) => serve!(ctx, version, r, SyncGroup, groups::sync_group),
        R::Heartbeat(r) => serve!(ctx, version, r, Heartbeat, groups::heartbeat),
        R::LeaveGroup(r) => serve!(ctx, version, r, LeaveGroup, groups::leave_group),
        // Committed before the next request is read, as Kafka does: a client's pipelined
        // commits (librdkafka's async commits) must apply in the order sent, the last one
        // winning, and concurrent native commits have no order between them.
        R::OffsetCommit(r) => {
            let response = groups::offset_commit(Arc::clone(ctx), version, r).await;
            ready(ResponseKind::OffsetCommit(response))
        }
        R::OffsetFetch(r) => serve!(ctx, version, r, OffsetFetch, groups::offset_fetch),
        R::ListGroups(r) => serve!(ctx, version, r, ListGroups, groups::list_groups),
        R::DescribeGroups(r) => serve!(ctx, version, r, DescribeGroups, groups::describe_groups),
        R::DeleteGroups(r) => serve!(ctx, version, r, DeleteGroups, groups::delete_groups),
        R::OffsetDelete(r) => serve!(ctx, version, r, OffsetDelete, groups::offset_delete),
        R::AddPartitionsToTxn(r) => {
            serve!(ctx, version, r, AddPartitionsToTxn, txn::add_partitions)
        }
        R::AddOffsetsToTxn(r) => serve!(ctx, version, r, AddOffsetsToTxn, txn::add_offsets),
        R::EndTxn(r) => serve!(ctx, version, r, EndTxn, txn::end_txn),
        // Before the next request, as OffsetCommit: a client's commits apply in order.
        R::TxnOffsetCommit(r) => {
            let response = txn::txn_offset_commit(Arc::clone(ctx), version, r).await;
            ready(ResponseKind::TxnOffsetCommit(response))
        }
        R::WriteTxnMarkers(r) => serve!(ctx, version, r, WriteTxnMarkers, txn::write_markers),
        R::DescribeTransactions(r) => {
            serve!(
                ctx,
                version,
                r,
                DescribeTransactions,
                txn::describe_transactions
            )
        }
        R::ListTransactions(r) => {
            serve!(ctx, version, r, ListTransactions, txn::list_transactions)
        }
        R::DescribeProducers(r) => {
            serve!(ctx, version, r, DescribeProducers, txn::describe_producers)
        }
        other => {
            // `is_supported` let through only the APIs above.
            return Err(format!(
                "{:?} has no handler",
                std::mem::discriminant(&other)
            ));
        }
    })
}
