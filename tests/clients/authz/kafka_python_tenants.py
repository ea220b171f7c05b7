"""Two tenants on one gateway, kafka-python 3.0.12.

The admin (a super user) gives User:alice ALL on PREFIXED `a.` topics and groups and
User:bob the same on `b.`, through kafka-python's own create_acls. Allow-everyone is off.
Bob and alice each create a topic, produce, consume in a group and commit; alice also uses
a second, new `a.` topic. Alice against bob's topic and group: produce, fetch, join his
group, DeleteTopics, CreatePartitions, ListOffsets, DescribeGroups, OffsetFetch and
DeleteGroups are refused with TOPIC_/GROUP_AUTHORIZATION_FAILED, DescribeAcls with
CLUSTER_AUTHORIZATION_FAILED, and DescribeConfigs shows her no config of his topic; her
Metadata (all topics) and ListGroups show none of bob's names. Bob's topic, configs and
group offsets are unchanged afterwards, and he sees none of alice's names.
"""
import time

from authz_common import (CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, PARTITIONS, RECORDS,
                          TIMEOUT, TOPIC_AUTHORIZATION_FAILED, Settings, check, fail, finish, foreign, records,
                          same_records, step)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic,
                         OffsetSpec, ResourcePattern, ResourcePatternFilter, ResourceType)

S = Settings()
TIMEOUT_MS = int(TIMEOUT * 1000)
UNKNOWN_TOPIC_OR_PARTITION = 3


def conf(user):
    name, password = user
    return {"bootstrap_servers": S.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": name, "sasl_plain_password": password}


def codes(value):
    """Every Kafka error code in an answer: KafkaError classes or instances, and integers
    under an `error_code` key, anywhere inside dicts, lists and tuples."""
    found = []
    errno = getattr(value, "errno", None)
    if isinstance(errno, int) and errno != 0:
        found.append(errno)
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "error_code" and isinstance(v, int) and v != 0:
                found.append(v)
            found += codes(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            found += codes(v)
    return found


def refused(label, call, code, also=()):
    """`call()` must raise, or answer with, Kafka error `code` (or one in `also`)."""
    want = {code, *also}
    try:
        value = call()
    except Exception as e:  # noqa: BLE001 - the error's code is what is checked
        got = codes(e)
        check(want & set(got), f"{label}: raised {type(e).__name__}: {e} (codes {got}), expected error {code}")
        return
    got = codes(value)
    check(want & set(got), f"{label}: answered {value!r} (codes {got}), expected error {code}")


def admin_for(user):
    return KafkaAdminClient(**conf(user), request_timeout_ms=TIMEOUT_MS)


def grant_tenants(admin):
    acls = []
    for tenant, (user, _) in (("a.", S.alice), ("b.", S.bob)):
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP):
            acls.append(ACL(principal=f"User:{user}", host="*", operation=ACLOperation.ALL,
                            permission_type=ACLPermissionType.ALLOW,
                            resource_pattern=ResourcePattern(rtype, tenant, ACLResourcePatternType.PREFIXED)))
    answer = admin.create_acls(acls)
    check(not answer.get("failed") and len(answer.get("succeeded", [])) == len(acls), f"create_acls: {answer}")
    got, _ = admin.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                           permission_type=ACLPermissionType.ANY,
                                           resource_pattern=ResourcePatternFilter(
                                               ResourceType.ANY, None, ACLResourcePatternType.ANY)))
    check(len(got) == len(acls), f"describe_acls as admin: {got}")


def work(user, tenant, what):
    topic, group = S.name(tenant, what), S.name(tenant, f"{what}-group")
    admin = admin_for(user)
    answer = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=TIMEOUT_MS)
    check(not codes(answer), f"{user[0]} creates {topic}: {answer}")
    admin.close()
    want = records(what)
    producer = KafkaProducer(**conf(user), acks="all", linger_ms=5)
    for p, k, v in want:
        producer.send(topic, key=k, value=v, partition=p).get(timeout=TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(**conf(user), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_MS)
    consumer.subscribe([topic])
    got, deadline = [], time.time() + TIMEOUT
    while len(got) < len(want) and time.time() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=500).items():
            got += [(tp.partition, m.key, m.value) for m in msgs]
    same_records(f"{user[0]} on {topic}", got, want)
    consumer.commit()
    for p in range(PARTITIONS):
        offset = consumer.committed(TopicPartition(topic, p))
        check(offset == RECORDS // PARTITIONS, f"{user[0]}: committed {offset} for {topic}[{p}] in {group}")
    consumer.close()
    step(f"{user[0]}: created {topic}, produced {len(want)}, consumed and committed in {group}")
    return topic, group


def produce(user, topic):
    producer = KafkaProducer(**conf(user), acks="all", max_block_ms=10000, retries=0)
    try:
        return producer.send(topic, key=b"intruder", value=b"intruder", partition=0).get(timeout=TIMEOUT)
    finally:
        producer.close(timeout=5)


def fetch(user, topic, group):
    consumer = KafkaConsumer(**conf(user), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            got = consumer.poll(timeout_ms=500)
            if got:
                return got
        return "no error and no records"
    finally:
        consumer.close()


def join(user, group, topic):
    consumer = KafkaConsumer(**conf(user), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.subscribe([topic])
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            got = consumer.poll(timeout_ms=500)
            if got:
                return got
        return "no error and no records"
    finally:
        consumer.close()


def describe_configs(admin, topic):
    """Every config of `topic` kafka-python reports (none when the resource was refused)."""
    answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return answer.get("topic", {}).get(topic, {})


def alice_refused(b_topic, b_group, a_topic, a_group):
    user = S.alice
    admin = admin_for(user)
    refused("alice produce to bob's topic", lambda: produce(user, b_topic), TOPIC_AUTHORIZATION_FAILED)
    refused("alice fetch from bob's topic", lambda: fetch(user, b_topic, a_group), TOPIC_AUTHORIZATION_FAILED)
    refused("alice joins bob's group", lambda: join(user, b_group, a_topic), GROUP_AUTHORIZATION_FAILED)
    step("alice: produce, fetch and joining bob's group refused")
    refused("alice DeleteTopics bob's", lambda: admin.delete_topics([b_topic], timeout_ms=TIMEOUT_MS),
            TOPIC_AUTHORIZATION_FAILED)
    refused("alice CreatePartitions on bob's", lambda: admin.create_partitions(
        {b_topic: NewPartitions(PARTITIONS + 1)}, timeout_ms=TIMEOUT_MS), TOPIC_AUTHORIZATION_FAILED)
    # kafka-python's describe_configs drops each resource's error code: a refused resource
    # shows as one without configs (bob_untouched checks that bob sees his)
    shown = describe_configs(admin, b_topic)
    check(shown == {}, f"alice's DescribeConfigs of bob's topic shows {shown}")
    # kafka-python asks Metadata for the partition leaders first; refused there, it reports
    # the partition as unknown itself (3) without sending ListOffsets
    refused("alice ListOffsets of bob's", lambda: admin.list_partition_offsets(
        {TopicPartition(b_topic, 0): OffsetSpec.LATEST}, timeout_ms=TIMEOUT_MS), TOPIC_AUTHORIZATION_FAILED,
        also=(UNKNOWN_TOPIC_OR_PARTITION,))
    step("alice: DeleteTopics, CreatePartitions and ListOffsets of bob's topic refused, DescribeConfigs empty")
    refused("alice DescribeGroups bob's", lambda: admin.describe_groups([b_group]), GROUP_AUTHORIZATION_FAILED)
    refused("alice OffsetFetch of bob's group", lambda: admin.list_group_offsets({b_group: None}),
            GROUP_AUTHORIZATION_FAILED)
    refused("alice DeleteGroups bob's", lambda: admin.delete_groups([b_group]), GROUP_AUTHORIZATION_FAILED)
    step("alice: DescribeGroups, OffsetFetch and DeleteGroups of bob's group refused")
    topics = admin.list_topics()
    check(not foreign(topics), f"alice's Metadata shows bob's {foreign(topics)}")
    check(a_topic in topics, f"alice's Metadata lacks her own {a_topic}: {topics}")
    groups = [g["group_id"] if isinstance(g, dict) else g[0] for g in admin.list_groups()]
    check(not foreign(groups), f"alice's ListGroups shows bob's {foreign(groups)}")
    check(a_group in groups, f"alice's ListGroups lacks her own {a_group}: {groups}")
    refused("alice DescribeAcls", lambda: admin.describe_acls(ACLFilter(
        principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))),
        CLUSTER_AUTHORIZATION_FAILED)
    admin.close()
    step(f"alice: Metadata and ListGroups list none of bob's names ({len(topics)} topics, {len(groups)} groups); "
         "DescribeAcls refused")


def bob_untouched(b_topic, b_group):
    admin = admin_for(S.bob)
    check(describe_configs(admin, b_topic), f"bob's DescribeConfigs of his own {b_topic} shows no config")
    topics = admin.list_topics()
    check(b_topic in topics and not foreign(topics, "a."), f"bob's Metadata: {topics}")
    offsets = admin.list_group_offsets({b_group: None}).get(b_group, {})
    got = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == b_topic}
    check(got == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}, f"bob's {b_group} offsets now {got}")
    latest = admin.list_partition_offsets({TopicPartition(b_topic, p): OffsetSpec.LATEST for p in range(PARTITIONS)},
                                          timeout_ms=TIMEOUT_MS)
    ends = {tp.partition: o.offset for tp, o in latest.items()}
    check(ends == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}, f"bob's {b_topic} ends now at {ends}")
    admin.close()
    step("bob: topic, records and group offsets as he left them; none of alice's names visible to him")


def main():
    admin = admin_for(S.admin)
    grant_tenants(admin)
    admin.close()
    step("admin: ALL on PREFIXED a. (alice) and b. (bob), topics and groups")
    b_topic, b_group = work(S.bob, "b", "orders")
    a_topic, a_group = work(S.alice, "a", "orders")
    work(S.alice, "a", "x")
    step("alice: a new a. topic is hers through the prefixed grant")
    alice_refused(b_topic, b_group, a_topic, a_group)
    bob_untouched(b_topic, b_group)
    finish("kafka-python tenants")


if __name__ == "__main__":
    main()
