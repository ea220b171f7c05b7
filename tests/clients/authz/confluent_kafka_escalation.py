"""An ordinary user trying to escalate with confluent-kafka's AdminClient (librdkafka 2.16).

The harness (apps/gateway/tests/authz_clients.rs) starts the gateway with authorization on
and `ALLOW_EVERYONE` saying whether it also set IGGY_KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND=true
(`false`: the setting left at its default). The admin (a super user) binds bob ALL on his
topic and denies alice READ on it. Then alice, whom nothing grants anything on the cluster:
- CreateAcls granting herself READ on bob's topic: CLUSTER_AUTHORIZATION_FAILED, and her
  consume of it stays refused;
- DeleteAcls of the DENY binding: CLUSTER_AUTHORIZATION_FAILED, and the binding is still there;
- AlterUserScramCredentials for the admin with a password of her choice:
  CLUSTER_AUTHORIZATION_FAILED, and the admin's SCRAM login with it fails;
- IncrementalAlterConfigs on the broker: CLUSTER_AUTHORIZATION_FAILED;
with the default also: her produce to a topic no binding names is TOPIC_AUTHORIZATION_FAILED,
and her consume in a group no binding names is refused; with allow-everyone on, that produce succeeds (the setting still
opens topics, never the cluster's management).

DescribeUserScramCredentials is not tried here: librdkafka 2.16 aborts the process
(`munmap_chunk(): invalid pointer`) on any answer with a request-level error, as its parser
keeps `rd_kafka_err2str`'s static string (or an alloca'd copy of the message) as the result's
error string and frees it later; a Kafka broker's refusal does the same to it.
"""
import os
import time

from authz_common import (CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, PARTITIONS, TIMEOUT,
                          TOPIC_AUTHORIZATION_FAILED, Settings, check, fail, finish, refused, result, step)
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

S = Settings()
OPEN = os.environ.get("ALLOW_EVERYONE") == "true"
BOBS = f"b.{S.prefix}-private"
LOOSE = f"c.{S.prefix}-unbound"
GROUP = f"c.{S.prefix}-group"
ALICE = f"User:{S.alice[0]}"
BOB = f"User:{S.bob[0]}"
LITERAL = ResourcePatternType.LITERAL
BOB_ALL = AclBinding(ResourceType.TOPIC, BOBS, LITERAL, BOB, "*", AclOperation.ALL, AclPermissionType.ALLOW)
ALICE_DENIED = AclBinding(ResourceType.TOPIC, BOBS, LITERAL, ALICE, "*", AclOperation.READ, AclPermissionType.DENY)
ALICE_GRANT = AclBinding(ResourceType.TOPIC, BOBS, LITERAL, ALICE, "*", AclOperation.READ, AclPermissionType.ALLOW)
STOLEN_PASSWORD = "chosen-by-alice"


def conf(user, mechanism="PLAIN"):
    name, password = user
    return {"bootstrap.servers": S.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": name, "sasl.password": password}


def key(b):
    return (b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


def bindings(admin):
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    return sorted(key(b) for b in result("admin describe_acls", admin.describe_acls(flt, request_timeout=TIMEOUT)))


def produce(topic):
    reports = []
    producer = Producer({**conf(S.alice), "acks": "all", "message.timeout.ms": int(TIMEOUT * 1000)})
    producer.produce(topic, key=b"k", value=b"v", partition=0, on_delivery=lambda err, _m: reports.append(err))
    producer.flush(TIMEOUT + 5)
    check(len(reports) == 1, f"produce to {topic}: {len(reports)} delivery reports")
    return reports[0]


def consume_error(topic, group):
    """The first error alice's consumer of `topic` in `group` gets, or None after one record."""
    consumer = Consumer({**conf(S.alice), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.time() + TIMEOUT
    try:
        while time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            return msg.error()
        fail(f"alice's consumer of {topic} got neither a record nor an error in {TIMEOUT} s")
    finally:
        consumer.close()


def scram_login_works(user, password):
    admin = AdminClient({**conf((user, password), "SCRAM-SHA-256"), "socket.timeout.ms": 10000})
    try:
        admin.list_topics(timeout=10)
        return True
    except KafkaException:
        return False


def main():
    admin = AdminClient(conf(S.admin))
    for topic, f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (BOBS, LOOSE)],
                                        request_timeout=TIMEOUT).items():
        result(f"admin creates {topic}", f)
    for binding, f in admin.create_acls([BOB_ALL, ALICE_DENIED], request_timeout=TIMEOUT).items():
        result(f"admin create_acls {binding}", f)
    producer = Producer({**conf(S.admin), "acks": "all"})
    producer.produce(BOBS, key=b"secret", value=b"bob's", partition=0)
    check(producer.flush(TIMEOUT) == 0, "admin's record still queued")
    before = bindings(admin)
    alice = AdminClient(conf(S.alice))

    refused("alice grants herself READ on bob's topic",
            alice.create_acls([ALICE_GRANT], request_timeout=TIMEOUT)[ALICE_GRANT], CLUSTER_AUTHORIZATION_FAILED)
    deny_filter = AclBindingFilter(ResourceType.TOPIC, BOBS, LITERAL, ALICE, None, AclOperation.READ,
                                   AclPermissionType.DENY)
    refused("alice deletes the DENY on her",
            alice.delete_acls([deny_filter], request_timeout=TIMEOUT)[deny_filter], CLUSTER_AUTHORIZATION_FAILED)
    check(bindings(admin) == before, f"the bindings changed under alice: {bindings(admin)}, expected {before}")
    err = consume_error(BOBS, GROUP)
    check(err is not None and err.code() in (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED),
          f"alice's consume of bob's topic: {err}, expected an authorization error")
    step("alice's CreateAcls and DeleteAcls refused (31); bob's topic stays closed to her")

    upsert = UserScramCredentialUpsertion(S.admin[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          STOLEN_PASSWORD.encode())
    for user, f in alice.alter_user_scram_credentials([upsert], request_timeout=TIMEOUT).items():
        refused(f"alice sets a SCRAM credential for {user}", f, CLUSTER_AUTHORIZATION_FAILED)
    check(not scram_login_works(S.admin[0], STOLEN_PASSWORD), "a SCRAM login as the admin with alice's password worked")
    node_id = str(next(iter(alice.list_topics(timeout=TIMEOUT).brokers)))
    broker = ConfigResource(ResourceType.BROKER, node_id, incremental_configs=[
        ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    for res, f in alice.incremental_alter_configs([broker], request_timeout=TIMEOUT).items():
        refused(f"alice alters the broker's configs ({res})", f, CLUSTER_AUTHORIZATION_FAILED)
    step("alice's AlterUserScramCredentials and broker IncrementalAlterConfigs refused (31)")

    err = produce(LOOSE)
    if OPEN:
        check(err is None, f"alice's produce to a topic no binding names, allow-everyone on: {err}")
        step("allow-everyone on: a topic no binding names is open to alice, the cluster's management is not")
    else:
        check(err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED,
              f"alice's produce to a topic no binding names: {err}, expected TOPIC_AUTHORIZATION_FAILED")
        err = consume_error(LOOSE, GROUP)
        check(err is not None and err.code() in (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED),
              f"alice's consume of a topic no binding names: {err}, expected an authorization error")
        step("default settings: alice's produce and consume of a topic no binding names refused")
    finish("confluent-kafka escalation attempts" + (" (allow-everyone on)" if OPEN else ""))


if __name__ == "__main__":
    main()
