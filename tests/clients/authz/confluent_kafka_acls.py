"""ACL management with confluent-kafka's AdminClient (librdkafka 2.16).

Allow-everyone-if-no-ACL-found is off, so User:alice starts with nothing.
- alice's produce is TOPIC_AUTHORIZATION_FAILED and her CreateAcls
  CLUSTER_AUTHORIZATION_FAILED (only the super user manages ACLs);
- the admin creates five bindings (alice: WRITE and READ on PREFIXED `acl.` topics, READ
  on her group, DENY READ on one literal topic; bob: DESCRIBE on one topic); right after,
  alice produces to both topics, consumes one in her group, and is refused the denied one;
  her AdminClient connection, open since before the grant, now describes the topic;
- describe_acls with filters (principal, PREFIXED, MATCH, LITERAL + DENY, GROUP, operation,
  an unknown principal) returns exactly the bindings each selects;
- delete_acls with a filter removes the WRITE binding only (returned as deleted): alice's
  next produce is refused while she still reads; a second filter removes the rest of hers
  and her consume is refused; a last ANY filter removes bob's, leaving none.
"""
import time

from authz_common import (CLUSTER_AUTHORIZATION_FAILED, PARTITIONS, RECORDS, TIMEOUT, TOPIC_AUTHORIZATION_FAILED,
                          Settings, check, fail, finish, records, same_records, step)
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

S = Settings()
TOPIC = f"acl.{S.prefix}-t"
SECRET = f"acl.{S.prefix}-secret"
GROUP = f"{S.prefix}-alice-group"
ALICE = f"User:{S.alice[0]}"
BOB = f"User:{S.bob[0]}"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC_T, GROUP_T = ResourceType.TOPIC, ResourceType.GROUP

B_WRITE = AclBinding(TOPIC_T, "acl.", PREFIXED, ALICE, "*", AclOperation.WRITE, ALLOW)
B_READ = AclBinding(TOPIC_T, "acl.", PREFIXED, ALICE, "*", AclOperation.READ, ALLOW)
B_GROUP = AclBinding(GROUP_T, GROUP, LITERAL, ALICE, "*", AclOperation.READ, ALLOW)
B_DENY = AclBinding(TOPIC_T, SECRET, LITERAL, ALICE, "*", AclOperation.READ, DENY)
B_BOB = AclBinding(TOPIC_T, TOPIC, LITERAL, BOB, "*", AclOperation.DESCRIBE, ALLOW)
ALL_BINDINGS = [B_WRITE, B_READ, B_GROUP, B_DENY, B_BOB]


def conf(user):
    name, password = user
    return {"bootstrap.servers": S.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": name, "sasl.password": password}


def key(b):
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


def keys(bindings):
    return sorted(key(b) for b in bindings)


def acl_filter(restype=ResourceType.ANY, name=None, pattern=ResourcePatternType.ANY, principal=None,
               operation=AclOperation.ANY, permission=AclPermissionType.ANY):
    return AclBindingFilter(restype, name, pattern, principal, None, operation, permission)


def result(label, future):
    try:
        return future.result(TIMEOUT)
    except KafkaException as e:
        fail(f"{label}: {e}")


def refused(label, future, code):
    try:
        value = future.result(TIMEOUT)
    except KafkaException as e:
        check(e.args[0].code() == code, f"{label}: {e.args[0]}, expected error {code}")
        return
    fail(f"{label}: succeeded ({value!r}), expected error {code}")


def produce(topic):
    """alice produces one record to partition 0 of `topic`; the delivery error or None."""
    reports = []
    producer = Producer({**conf(S.alice), "acks": "all", "message.timeout.ms": int(TIMEOUT * 1000)})
    producer.produce(topic, key=b"k", value=b"v", partition=0, on_delivery=lambda err, _m: reports.append(err))
    producer.flush(TIMEOUT + 5)
    check(len(reports) == 1, f"produce to {topic}: {len(reports)} delivery reports")
    return reports[0]


def produce_ok(topic):
    err = produce(topic)
    check(err is None, f"alice's produce to {topic}: {err}, expected success")


def produce_refused(topic):
    err = produce(topic)
    check(err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED,
          f"alice's produce to {topic}: {err}, expected TOPIC_AUTHORIZATION_FAILED")


def consume(topic, group, count):
    """alice reads `count` records of `topic` in `group`; ([records], [errors])."""
    consumer = Consumer({**conf(S.alice), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, errors, deadline = [], [], time.time() + TIMEOUT
    while len(got) < count and not errors and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
        else:
            got.append((msg.partition(), msg.key(), msg.value()))
    consumer.close()
    return got, errors


def described(admin, label, flt, want):
    got = result(f"describe_acls {label}", admin.describe_acls(flt, request_timeout=TIMEOUT))
    check(keys(got) == keys(want), f"describe_acls {label}: {keys(got)}, expected {keys(want)}")


def deleted(admin, label, flt, want):
    answer = admin.delete_acls([flt], request_timeout=TIMEOUT)
    got = result(f"delete_acls {label}", answer[flt])
    check(keys(got) == keys(want), f"delete_acls {label} deleted {keys(got)}, expected {keys(want)}")


def main():
    admin = AdminClient(conf(S.admin))
    for topic, f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (TOPIC, SECRET)],
                                        request_timeout=TIMEOUT).items():
        result(f"admin creates {topic}", f)
    want = records("acl")
    producer = Producer({**conf(S.admin), "acks": "all"})
    for p, k, v in want:
        producer.produce(TOPIC, key=k, value=v, partition=p)
    check(producer.flush(TIMEOUT) == 0, "admin's records still queued")
    described(admin, "everything, before", acl_filter(), [])
    alice_admin = AdminClient(conf(S.alice))
    refused("alice describes the topic before the grant",
            alice_admin.describe_topics(TopicCollection([TOPIC]), request_timeout=TIMEOUT)[TOPIC],
            TOPIC_AUTHORIZATION_FAILED)
    produce_refused(TOPIC)
    refused("alice create_acls", alice_admin.create_acls([B_WRITE], request_timeout=TIMEOUT)[B_WRITE],
            CLUSTER_AUTHORIZATION_FAILED)
    step("before the grant: alice's produce and describe refused (29), her CreateAcls refused (31)")

    for binding, f in admin.create_acls(ALL_BINDINGS, request_timeout=TIMEOUT).items():
        result(f"create_acls {binding}", f)
    produce_ok(TOPIC)
    produce_ok(SECRET)
    got, errors = consume(TOPIC, GROUP, RECORDS + 1)
    check(not errors, f"alice's consume of {TOPIC} after the grant: {errors}")
    same_records("alice's consume", [r for r in got if r[1] != b"k"], want)
    _, errors = consume(SECRET, GROUP, 1)
    check(any(e.code() == TOPIC_AUTHORIZATION_FAILED for e in errors),
          f"alice's consume of the denied {SECRET}: {errors}, expected TOPIC_AUTHORIZATION_FAILED")
    description = result("alice describes the topic after the grant, same connection",
                         alice_admin.describe_topics(TopicCollection([TOPIC]), request_timeout=TIMEOUT)[TOPIC])
    check(description.name == TOPIC and len(description.partitions) == PARTITIONS,
          f"alice's describe_topics: {description}")
    step("right after create_acls: alice produces to both topics, consumes one in her group, the DENY READ "
         "holds for the other; her open admin connection now describes the topic")

    described(admin, "everything", acl_filter(), ALL_BINDINGS)
    described(admin, "principal alice", acl_filter(principal=ALICE), [B_WRITE, B_READ, B_GROUP, B_DENY])
    described(admin, "PREFIXED topics", acl_filter(TOPIC_T, pattern=PREFIXED), [B_WRITE, B_READ])
    described(admin, f"MATCH {TOPIC}", acl_filter(TOPIC_T, TOPIC, ResourcePatternType.MATCH),
              [B_WRITE, B_READ, B_BOB])
    described(admin, "LITERAL secret DENY", acl_filter(TOPIC_T, SECRET, LITERAL, permission=DENY), [B_DENY])
    described(admin, "groups", acl_filter(GROUP_T), [B_GROUP])
    described(admin, "operation WRITE", acl_filter(operation=AclOperation.WRITE), [B_WRITE])
    described(admin, "unknown principal", acl_filter(principal="User:nobody"), [])
    step("describe_acls with filters: principal, PREFIXED, MATCH, LITERAL+DENY, GROUP, operation, unknown")

    deleted(admin, "alice's PREFIXED WRITE", acl_filter(TOPIC_T, "acl.", PREFIXED, ALICE, AclOperation.WRITE),
            [B_WRITE])
    produce_refused(TOPIC)
    got, errors = consume(TOPIC, GROUP, RECORDS)
    check(not errors and len(got) >= RECORDS, f"alice's consume after the WRITE delete: {errors}, {len(got)}")
    step("after delete_acls (WRITE): alice's next produce refused, her consume still works")
    deleted(admin, "the rest of alice's", acl_filter(principal=ALICE), [B_READ, B_GROUP, B_DENY])
    _, errors = consume(TOPIC, GROUP, 1)
    check(errors and errors[0].code() in (TOPIC_AUTHORIZATION_FAILED, 30),
          f"alice's consume after deleting her bindings: {errors}, expected an authorization error")
    refused("alice describes the topic after the delete, same connection",
            alice_admin.describe_topics(TopicCollection([TOPIC]), request_timeout=TIMEOUT)[TOPIC],
            TOPIC_AUTHORIZATION_FAILED)
    described(admin, "what is left", acl_filter(), [B_BOB])
    deleted(admin, "everything", acl_filter(), [B_BOB])
    described(admin, "everything, at the end", acl_filter(), [])
    step("after delete_acls (the rest): alice's consume and describe refused; no binding left")
    finish("confluent-kafka ACL management")


if __name__ == "__main__":
    main()
