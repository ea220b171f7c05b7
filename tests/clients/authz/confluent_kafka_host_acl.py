"""Host-scoped ACLs for an IPv4 client of a dual-stack listener (confluent-kafka).

The harness binds the gateway to `[::]` and gives the clients `127.0.0.1`: the socket
reports the client as `::ffff:127.0.0.1`, and the gateway must match it as `127.0.0.1`.
- the admin grants alice ALL on one topic from any host, then denies her WRITE on it from
  `192.0.2.1` (another host): her produce still succeeds;
- the admin denies her WRITE from `127.0.0.1`: her next produce is TOPIC_AUTHORIZATION_FAILED,
  and a DENY READ from `127.0.0.1` refuses her consume while her DESCRIBE (no DENY) works.
"""
import time

from authz_common import (PARTITIONS, TIMEOUT, TOPIC_AUTHORIZATION_FAILED, Settings, check, fail, finish, result, step)
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

S = Settings()
TOPIC = f"host.{S.prefix}-t"
GROUP = f"{S.prefix}-host-group"
ALICE = f"User:{S.alice[0]}"
TOPIC_T, GROUP_T, LITERAL = ResourceType.TOPIC, ResourceType.GROUP, ResourcePatternType.LITERAL
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

GRANT = AclBinding(TOPIC_T, TOPIC, LITERAL, ALICE, "*", AclOperation.ALL, ALLOW)
GRANT_GROUP = AclBinding(GROUP_T, GROUP, LITERAL, ALICE, "*", AclOperation.ALL, ALLOW)
DENY_ELSEWHERE = AclBinding(TOPIC_T, TOPIC, LITERAL, ALICE, "192.0.2.1", AclOperation.WRITE, DENY)
DENY_WRITE_HERE = AclBinding(TOPIC_T, TOPIC, LITERAL, ALICE, "127.0.0.1", AclOperation.WRITE, DENY)
DENY_READ_HERE = AclBinding(TOPIC_T, TOPIC, LITERAL, ALICE, "127.0.0.1", AclOperation.READ, DENY)


def conf(user):
    name, password = user
    return {"bootstrap.servers": S.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": name, "sasl.password": password}


def create(admin, bindings):
    for binding, f in admin.create_acls(bindings, request_timeout=TIMEOUT).items():
        result(f"create_acls {binding}", f)


def produce():
    """alice produces one record from 127.0.0.1; the delivery error or None."""
    reports = []
    producer = Producer({**conf(S.alice), "acks": "all", "message.timeout.ms": int(TIMEOUT * 1000)})
    producer.produce(TOPIC, key=b"k", value=b"v", partition=0, on_delivery=lambda err, _m: reports.append(err))
    producer.flush(TIMEOUT + 5)
    check(len(reports) == 1, f"produce to {TOPIC}: {len(reports)} delivery reports")
    return reports[0]


def consume_errors():
    consumer = Consumer({**conf(S.alice), "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    got, errors, deadline = 0, [], time.time() + TIMEOUT
    while not got and not errors and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            errors.append(msg.error())
        else:
            got += 1
    consumer.close()
    return got, errors


def main():
    check(S.bootstrap.startswith("127.0.0.1:"), f"BOOTSTRAP {S.bootstrap}: the clients must come in over IPv4")
    admin = AdminClient(conf(S.admin))
    result("admin creates the topic",
           admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=TIMEOUT)[TOPIC])
    create(admin, [GRANT, GRANT_GROUP, DENY_ELSEWHERE])
    err = produce()
    check(err is None, f"alice's produce with a DENY for another host only: {err}, expected success")
    step("a DENY WRITE for 192.0.2.1 leaves alice's produce from 127.0.0.1 alone")

    create(admin, [DENY_WRITE_HERE])
    err = produce()
    check(err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED,
          f"alice's produce from 127.0.0.1 with a DENY WRITE for 127.0.0.1: {err}, expected "
          f"TOPIC_AUTHORIZATION_FAILED (the listener sees ::ffff:127.0.0.1)")
    got, errors = consume_errors()
    check(got == 1 and not errors, f"alice's consume (no DENY READ yet): {got} records, {errors}")
    step("a DENY WRITE for 127.0.0.1 refuses alice's produce over IPv4 on the [::] listener")

    create(admin, [DENY_READ_HERE])
    _, errors = consume_errors()
    check(any(e.code() == TOPIC_AUTHORIZATION_FAILED for e in errors),
          f"alice's consume with a DENY READ for 127.0.0.1: {errors}, expected TOPIC_AUTHORIZATION_FAILED")
    alice_admin = AdminClient(conf(S.alice))
    description = result("alice describes the topic (DESCRIBE is not denied)",
                         alice_admin.describe_topics(TopicCollection([TOPIC]), request_timeout=TIMEOUT)[TOPIC])
    check(description.name == TOPIC, f"alice's describe_topics: {description}")
    step("a DENY READ for 127.0.0.1 refuses her consume; her describe still works")
    finish("confluent-kafka host ACLs on a dual-stack listener")


if __name__ == "__main__":
    main()
