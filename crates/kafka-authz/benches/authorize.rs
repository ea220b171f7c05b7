//! The cost of one authorization check: `Acls::authorize` for a principal that is not a
//! super user, over sets of 100 to 100 000 bindings shaped like a multi-tenant gateway's
//! (the same shape as `apps/kafka-bench/authz-bench.sh`'s ACL file, grown with more
//! tenants): the caller's topic is reached through a PREFIXED grant, with a DENY on a
//! neighbouring name. A Produce or Fetch request costs one such check per topic it names;
//! Metadata for all topics one per topic. `scan` is the baseline in the same run: the
//! same decision by visiting every binding, as checks were made before the index.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kafka_authz::{AclBinding, Acls, Operation, PatternType, Permission, ResourceType};
use std::hint::black_box;

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern: PatternType,
    principal: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        resource_type,
        name: name.into(),
        pattern,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission,
    }
}

/// `total` bindings: the bench user's four, then tenants with four each.
fn acls(total: usize) -> Acls {
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;
    let mut acls = Acls::new(["User:admin"], false);
    for op in [Write, Read, Create] {
        acls.add(binding(Topic, "bench-", Prefixed, "User:bench", op, Allow));
    }
    acls.add(binding(
        Topic,
        "bench-quarantine",
        Literal,
        "User:bench",
        All,
        Deny,
    ));
    let mut tenant = 0;
    while acls.len() < total {
        let t = format!("tenant{tenant:05}");
        let user = format!("User:{t}");
        acls.add(binding(
            Topic,
            &format!("{t}-"),
            Prefixed,
            &user,
            All,
            Allow,
        ));
        acls.add(binding(
            Group,
            &format!("{t}-"),
            Prefixed,
            &user,
            Read,
            Allow,
        ));
        acls.add(binding(
            Topic,
            &format!("{t}-events"),
            Literal,
            &user,
            Write,
            Allow,
        ));
        acls.add(binding(
            Topic,
            &format!("{t}-audit"),
            Literal,
            &user,
            Write,
            Deny,
        ));
        tenant += 1;
    }
    acls
}

/// The baseline: the same decision by a scan of every binding (how checks were made before
/// the bindings were indexed by resource).
fn authorize_by_scan(
    bindings: &[AclBinding],
    principal: &str,
    host: &str,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    let mut any_binding = false;
    let mut allowed = false;
    for b in bindings {
        let covers = match b.pattern {
            PatternType::Literal => b.name == "*" || b.name == name,
            PatternType::Prefixed => name.starts_with(b.name.as_str()),
            _ => false,
        };
        if b.resource_type != resource_type || !covers {
            continue;
        }
        any_binding = true;
        if !((b.principal == principal || b.principal == "User:*")
            && (b.host == host || b.host == "*"))
        {
            continue;
        }
        match b.permission {
            Permission::Deny if b.operation.denies(operation) => return false,
            Permission::Allow if b.operation.allows(operation) => allowed = true,
            _ => {}
        }
    }
    any_binding && allowed
}

fn authorize(c: &mut Criterion) {
    let mut group = c.benchmark_group("authorize");
    for total in [100, 1_000, 10_000, 100_000] {
        let acls = acls(total);
        assert!(acls.authorize(
            "User:bench",
            "127.0.0.1",
            Operation::Write,
            ResourceType::Topic,
            "bench-on"
        ));
        assert!(!acls.authorize(
            "User:bench",
            "127.0.0.1",
            Operation::Read,
            ResourceType::Topic,
            "tenant00000-events"
        ));
        if total >= 10_000 {
            group.sample_size(10);
        }
        let all = acls.describe(&kafka_authz::AclBindingFilter::any());
        assert!(authorize_by_scan(
            &all,
            "User:bench",
            "127.0.0.1",
            Operation::Write,
            ResourceType::Topic,
            "bench-on"
        ));
        group.bench_with_input(BenchmarkId::new("scan", total), &all, |b, all| {
            b.iter(|| {
                authorize_by_scan(
                    all,
                    black_box("User:bench"),
                    "127.0.0.1",
                    Operation::Write,
                    ResourceType::Topic,
                    black_box("bench-on"),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("allowed", total), &acls, |b, acls| {
            b.iter(|| {
                acls.authorize(
                    black_box("User:bench"),
                    "127.0.0.1",
                    Operation::Write,
                    ResourceType::Topic,
                    black_box("bench-on"),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, authorize);
criterion_main!(benches);
