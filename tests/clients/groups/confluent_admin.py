"""confluent-kafka AdminClient on consumer groups: list_consumer_groups,
describe_consumer_groups, list_consumer_group_offsets, delete_consumer_groups.

1. A consumer of group G reads a 3-partition topic holding 4/2/0 records and commits
   offsets 4 and 2 (partition 2: nothing committed).
2. While it is a member: G is listed as STABLE; described as STABLE with protocol type
   `consumer`, assignor `range`, one member whose client id, host and assignment (all 3
   partitions) are those of the consumer; deleting it fails with NON_EMPTY_GROUP.
3. After it closes: G is listed as EMPTY, described as EMPTY with no members; its offsets
   are 4 and 2 (partition 2 absent, or -1 when asked for explicitly); an unknown group is
   described as DEAD and has no offsets.
4. delete_consumer_groups([G]) succeeds; G is no longer listed and has no offsets.
"""
import time

from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, Consumer,
                             KafkaException, TopicPartition)
from confluent_kafka.admin import AdminClient

from gcommon import (check, confluent_create_topic, env, fail, ok, step, value, wait_until)

bootstrap, prefix = env()
topic = f"{prefix}-admin"
group = f"{prefix}-admin-group"
confluent_create_topic(bootstrap, topic, 3)
admin = AdminClient({"bootstrap.servers": bootstrap})

from confluent_kafka import Producer  # noqa: E402

p = Producer({"bootstrap.servers": bootstrap})
for part, n in ((0, 4), (1, 2)):
    for i in range(n):
        p.produce(topic, value(part, i), partition=part)
check(p.flush(15) == 0, "produce did not complete")

c = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "client.id": "admin-probe",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 10000,
    "heartbeat.interval.ms": 300,
    "partition.assignment.strategy": "range",
})
c.subscribe([topic])
read = 0
deadline = time.monotonic() + 30
while read < 6:
    m = c.poll(0.2)
    check(time.monotonic() < deadline, f"read only {read} of 6 records")
    if m is None:
        continue
    check(not m.error(), f"consumer error {m.error() if m else ''}")
    read += 1
c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 2)], asynchronous=False)
step("consumer read 6 records and committed 0:4 1:2")


def listed():
    res = admin.list_consumer_groups(request_timeout=10).result()
    check(not res.errors, f"list_consumer_groups errors {res.errors}")
    return {g.group_id: g for g in res.valid}


def describe(g):
    return admin.describe_consumer_groups([g], request_timeout=10)[g].result()


def offsets(g, parts=None):
    req = ConsumerGroupTopicPartitions(g, parts)
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[g].result()
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic}


gs = listed()
check(group in gs, f"{group} not listed: {sorted(gs)}")
check(gs[group].state == ConsumerGroupState.STABLE, f"listed state {gs[group].state}")
check(not gs[group].is_simple_consumer_group, "listed as a simple consumer group")
step(f"listed while active: {gs[group].group_id} {gs[group].state}")
d = describe(group)
check(d.state == ConsumerGroupState.STABLE, f"described state {d.state}")
check(d.partition_assignor == "range", f"assignor {d.partition_assignor!r}")
check(not d.is_simple_consumer_group, "described as simple")
check(len(d.members) == 1, f"members {d.members}")
mem = d.members[0]
check(mem.client_id == "admin-probe", f"member client id {mem.client_id!r}")
check(mem.host and mem.host.lstrip("/").startswith("127.0.0.1"), f"member host {mem.host!r}")
check(sorted((tp.topic, tp.partition) for tp in mem.assignment.topic_partitions)
      == [(topic, 0), (topic, 1), (topic, 2)], f"member assignment {mem.assignment.topic_partitions}")
check(d.coordinator is not None and d.coordinator.id >= 0, f"coordinator {d.coordinator}")
step(f"described while active: {d.state} {d.partition_assignor} member {mem.member_id} "
     f"{mem.client_id} {mem.host}")
check(offsets(group) == {0: 4, 1: 2}, f"offsets while active {offsets(group)}")

try:
    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    fail("deleting a group with a member succeeded")
except KafkaException as e:
    check(e.args[0].name() == "NON_EMPTY_GROUP", f"delete of an active group: {e}")
    step(f"delete of the active group refused: {e.args[0].name()}")

c.close()
step("consumer closed")
wait_until("the group listed as EMPTY", lambda: listed().get(group) is not None
           and listed()[group].state == ConsumerGroupState.EMPTY, 15)
d = describe(group)
check(d.state == ConsumerGroupState.EMPTY and not d.members, f"after close: {d.state} {d.members}")
step("listed and described as EMPTY with no members")
got = offsets(group)
check(got == {0: 4, 1: 2}, f"committed offsets {got}, expected {{0: 4, 1: 2}}")
got = offsets(group, [TopicPartition(topic, i) for i in range(3)])
check(got == {0: 4, 1: 2, 2: -1001}, f"offsets of partitions 0-2 {got}, expected 4, 2, -1001 (none)")
step(f"list_consumer_group_offsets: {got}")

unknown = f"{prefix}-no-such-group"
d = describe(unknown)
check(d.state == ConsumerGroupState.DEAD and not d.members, f"unknown group described as {d.state}")
check(offsets(unknown) == {}, f"unknown group has offsets {offsets(unknown)}")
step("an unknown group is DEAD with no offsets")

admin.delete_consumer_groups([group], request_timeout=10)[group].result()
step("delete_consumer_groups of the empty group succeeded")
check(group not in listed(), "deleted group still listed")
check(offsets(group) == {}, f"deleted group still has offsets {offsets(group)}")
d = describe(group)
check(d.state == ConsumerGroupState.DEAD, f"deleted group described as {d.state}")
ok("confluent-kafka admin")
