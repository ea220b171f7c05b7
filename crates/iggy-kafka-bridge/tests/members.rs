//! Gateway membership with leases in Iggy, on a real Iggy server (`IGGY_SERVER_BIN`):
//! several memberships on one server see each other, expire a member that stopped,
//! drop one that left at once, fence an older start of a restarted node id, and a
//! member cut off from Iggy gives up its lease before the others expire it.
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use iggy_kafka_bridge::{IggyBridge, IggyMembership, JoinSettings};
use kafka_store::cluster::{MemberListener, Membership};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HEARTBEAT: Duration = Duration::from_millis(200);
const SESSION: Duration = Duration::from_millis(2000);
const BROKERS: [i32; 3] = [1, 2, 3];

fn settings(node_id: i32) -> JoinSettings {
    JoinSettings::new(
        node_id,
        vec![MemberListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 19090 + u16::try_from(node_id).unwrap(),
        }],
        BROKERS.to_vec(),
        HEARTBEAT,
        SESSION,
    )
}

async fn join(bridge: &IggyBridge, node_id: i32) -> Arc<IggyMembership> {
    bridge
        .join_cluster(settings(node_id))
        .await
        .unwrap_or_else(|e| panic!("join {node_id}: {e}"))
}

fn ids(m: &IggyMembership) -> Vec<i32> {
    m.view().members.iter().map(|m| m.node_id).collect()
}

/// Waits up to `limit` for `cond`, checking every 10 ms; the time it took.
async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_see_each_other_expire_and_leave() {
    let Some(bin) = support::server_bin("members_see_each_other_expire_and_leave") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let a = join(&bridge, 1).await;
    let b = join(&bridge, 2).await;
    let c = join(&bridge, 3).await;
    assert!(a.holds_lease() && b.holds_lease() && c.holds_lease());
    let all = vec![1, 2, 3];
    let seen = wait_for(HEARTBEAT * 5, || {
        ids(&a) == all && ids(&b) == all && ids(&c) == all
    })
    .await;
    assert!(
        seen.is_some(),
        "views after 5 heartbeats: {:?} {:?} {:?}",
        ids(&a),
        ids(&b),
        ids(&c)
    );
    let view = b.view();
    let a_in_b = view.members.iter().find(|m| m.node_id == 1).unwrap();
    assert_eq!(a_in_b.epoch, a.me().epoch);
    assert_eq!(a_in_b.listeners, a.me().listeners);

    // Dropped without leaving: gone after the session timeout, not much earlier.
    let mut changes = a.subscribe();
    let version = changes.borrow_and_update().version;
    drop(c);
    let gone = wait_for(SESSION * 3, || ids(&a) == [1, 2] && ids(&b) == [1, 2]).await;
    let gone = gone.expect("a member that stopped was never expired");
    eprintln!("member dropped without leave expired after {gone:?}");
    // The last heartbeat was observed at most one interval (and a poll pause) before
    // the drop.
    assert!(
        gone >= SESSION - HEARTBEAT * 2,
        "expired after {gone:?}, before the session timeout {SESSION:?}"
    );
    assert!(
        gone < SESSION + Duration::from_secs(2),
        "expired after {gone:?}"
    );
    assert!(changes.has_changed().unwrap(), "no change published");
    let after = changes.borrow_and_update().clone();
    assert!(after.version > version);
    assert!(!after.contains(3) && after.contains(1) && after.contains(2));

    // Leave: gone at once (well within the session timeout).
    b.leave().await.unwrap();
    assert!(!b.holds_lease());
    let gone = wait_for(SESSION, || ids(&a) == [1]).await;
    let gone = gone.expect("a member that left is still in the view");
    eprintln!("member that left disappeared after {gone:?}");
    assert!(gone < SESSION / 2, "left member gone only after {gone:?}");
    assert!(a.holds_lease());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_id_gets_a_higher_epoch_and_fences_the_older_start() {
    let Some(bin) = support::server_bin("a_restarted_node_id_fences_the_older_start") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let old = join(&bridge, 1).await;
    let other = join(&bridge, 2).await;
    assert!(
        wait_for(HEARTBEAT * 5, || ids(&other) == [1, 2])
            .await
            .is_some()
    );
    let new = join(&bridge, 1).await;
    assert!(
        new.me().epoch > old.me().epoch,
        "epochs {} then {}",
        old.me().epoch,
        new.me().epoch
    );
    let fenced = wait_for(HEARTBEAT * 5, || !old.holds_lease()).await;
    assert!(fenced.is_some(), "the older start still holds its lease");
    assert!(old.fenced());
    assert!(new.holds_lease());
    let epoch_in_other = wait_for(HEARTBEAT * 5, || {
        other
            .view()
            .members
            .iter()
            .any(|m| m.node_id == 1 && m.epoch == new.me().epoch)
    })
    .await;
    assert!(epoch_in_other.is_some(), "view: {:?}", other.view());
    // The older start stays fenced and out of the view, heartbeats or not.
    tokio::time::sleep(HEARTBEAT * 3).await;
    assert!(!old.holds_lease());
    assert_eq!(
        other
            .view()
            .members
            .iter()
            .filter(|m| m.node_id == 1)
            .map(|m| m.epoch)
            .collect::<Vec<_>>(),
        vec![new.me().epoch]
    );
}

/// A TCP relay to `target` that stops passing bytes (both ways) once `blocked` is set:
/// to Iggy, a member behind it is cut off.
async fn relay(target: String, blocked: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect(&target).await else {
                continue;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            tokio::spawn(pipe(ri, wo, blocked.clone()));
            tokio::spawn(pipe(ro, wi, blocked.clone()));
        }
    });
    address
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blocked: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        while blocked.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_iggy_loses_its_lease_before_the_others_expire_it() {
    let Some(bin) = support::server_bin("a_member_cut_off_loses_its_lease_first") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let blocked = Arc::new(AtomicBool::new(false));
    let via_relay = relay(server.address.clone(), blocked.clone()).await;
    let cut_bridge = IggyBridge::connect(iggy_kafka_bridge::BridgeConfig {
        address: via_relay,
        ..support::config(&server)
    })
    .await
    .unwrap();
    let a = join(&bridge, 1).await;
    let c = join(&cut_bridge, 3).await;
    assert!(
        wait_for(HEARTBEAT * 5, || ids(&a) == [1, 3] && ids(&c) == [1, 3])
            .await
            .is_some(),
        "views: {:?} {:?}",
        ids(&a),
        ids(&c)
    );
    blocked.store(true, Ordering::Release);
    let cut = Instant::now();
    let mut lease_lost = None;
    let mut expired = None;
    while cut.elapsed() < SESSION * 3 && (lease_lost.is_none() || expired.is_none()) {
        if lease_lost.is_none() && !c.holds_lease() {
            lease_lost = Some(cut.elapsed());
        }
        if expired.is_none() && !a.view().contains(3) {
            expired = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lease_lost = lease_lost.expect("the member cut off kept its lease");
    let expired = expired.expect("the others never expired the member cut off");
    eprintln!("cut off: lease lost after {lease_lost:?}, expired by the others after {expired:?}");
    assert!(
        lease_lost < expired,
        "lease lost after {lease_lost:?}, but the others expired it already after {expired:?}"
    );
    assert!(
        lease_lost <= SESSION,
        "lease lost only after {lease_lost:?}"
    );
    // It does not take the lease up again, and its own view no longer holds it.
    assert!(!c.holds_lease() && c.lapsed());
    assert!(
        !c.view().contains(3)
            || wait_for(HEARTBEAT * 2, || !c.view().contains(3))
                .await
                .is_some()
    );
    assert!(a.holds_lease());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_reads_recent_epochs_and_the_view_skips_foreign_and_garbled_records() {
    let Some(bin) = support::server_bin("join_reads_recent_epochs_and_skips_bad_records") else {
        return;
    };
    let server = Server::start(&bin);
    let bridge = support::bridge(&server).await;
    let a = join(&bridge, 1).await;
    // Written by hand: garbage, a node id outside the broker list, one over the record
    // bound, and a heartbeat of node 2 with an epoch far above the wall clock.
    let far = u64::MAX / 4;
    let payloads = vec![
        b"{not a record".to_vec(),
        br#"{"n":9,"e":1,"l":[]}"#.to_vec(),
        format!(
            r#"{{"n":3,"e":1,"l":[{{"name":"{}","host":"h","port":1}}]}}"#,
            "x".repeat(20_000)
        )
        .into_bytes(),
        format!(r#"{{"n":2,"e":{far},"l":[]}}"#).into_bytes(),
    ];
    let native = support::native_client(&server).await;
    support::send_raw(&native, "__kafka_gateway", "members", payloads).await;
    let seen = wait_for(HEARTBEAT * 5, || {
        a.view()
            .members
            .iter()
            .any(|m| m.node_id == 2 && m.epoch == far)
    })
    .await;
    assert!(seen.is_some(), "view: {:?}", a.view());
    assert_eq!(
        ids(&a),
        [1, 2],
        "node 9 and the oversized node 3 record are skipped"
    );

    let b = join(&bridge, 2).await;
    assert_eq!(
        b.me().epoch,
        far + 1,
        "the epoch is above the one in the log"
    );
    let replaced = wait_for(HEARTBEAT * 5, || {
        a.view()
            .members
            .iter()
            .any(|m| m.node_id == 2 && m.epoch == far + 1)
    })
    .await;
    assert!(replaced.is_some(), "view: {:?}", a.view());
    assert_eq!(ids(&a), [1, 2]);
    assert_eq!(ids(&b), [1, 2]);
    assert!(a.holds_lease() && b.holds_lease());
}
