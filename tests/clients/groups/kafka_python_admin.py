"""kafka-python KafkaAdminClient on consumer groups (3.0 names): list_groups,
describe_groups, list_group_offsets, delete_group_offsets (OffsetDelete), delete_groups.

1. A consumer of group G reads a 3-partition topic holding 4/2/0 records and commits 4
   and 2 on partitions 0 and 1.
2. While it is a member: list_groups has G (protocol type `consumer`, state Stable);
   describe_groups shows Stable, protocol `range`, one member with its client id and an
   assignment of all 3 partitions; delete_groups answers NON_EMPTY_GROUP.
3. After it closes: Empty, no members; list_group_offsets gives {0: 4, 1: 2}.
4. delete_group_offsets of partition 1 succeeds: the offsets are then {0: 4}.
5. delete_groups([G]) succeeds; G is no longer listed and has no offsets.
"""
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import NoError
from kafka.structs import OffsetAndMetadata

from gcommon import check, env, ok, step, value, wait_until

bootstrap, prefix = env()
topic = f"{prefix}-kp-admin"
group = f"{prefix}-kp-admin-group"
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(topic, 3, 1)])
wait_until("topic in metadata", lambda: topic in admin.list_topics(), 15)
prod = KafkaProducer(bootstrap_servers=bootstrap)
for p, n in ((0, 4), (1, 2)):
    for i in range(n):
        prod.send(topic, value(p, i), partition=p)
prod.flush(15)
prod.close()

c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="kp-admin-probe",
                  enable_auto_commit=False, auto_offset_reset="earliest",
                  session_timeout_ms=10000, heartbeat_interval_ms=500,
                  partition_assignment_strategy=[RangePartitionAssignor])
c.subscribe([topic])
n = 0
deadline = time.monotonic() + 30
while n < 6 and time.monotonic() < deadline:
    n += sum(len(v) for v in c.poll(timeout_ms=200).values())
check(n == 6, f"read {n} of 6 records")
c.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "", -1),
          TopicPartition(topic, 1): OffsetAndMetadata(2, "", -1)})
step("consumer read 6 records and committed 0:4 1:2")


def as_dict(x):
    if isinstance(x, dict):
        return x
    if hasattr(x, "_asdict"):
        return x._asdict()
    return dict(x) if not isinstance(x, (tuple, list)) else {"tuple": x}


def listed():
    return {as_dict(g).get("group_id", as_dict(g).get("tuple", [None])[0]): as_dict(g)
            for g in admin.list_groups()}


def describe():
    d = admin.describe_groups([group])
    return as_dict(d[group] if isinstance(d, dict) else d[0])


def offsets():
    res = admin.list_group_offsets({group: None})[group]
    return {tp.partition: om.offset for tp, om in res.items() if tp.topic == topic}


gs = listed()
check(group in gs, f"{group} not listed: {gs}")
step(f"list_groups while active: {gs[group]}")
check(gs[group].get("protocol_type") == "consumer", f"listed protocol type {gs[group]}")
check(gs[group].get("group_state", "Stable") == "Stable", f"listed state {gs[group]}")
d = describe()
step(f"describe_groups while active: state {d.get('group_state')} protocol {d.get('protocol_data', d.get('protocol'))}")
check(d.get("error_code", 0) == 0, f"describe error {d}")
check(d.get("group_state") == "Stable", f"described state {d.get('group_state')}")
check(d.get("protocol_type") == "consumer", f"protocol type {d.get('protocol_type')}")
check(d.get("protocol_data") == "range", f"protocol {d.get('protocol_data')}")
members = d.get("members")
check(len(members) == 1, f"members {members}")
m = as_dict(members[0])
check(m.get("client_id") == "kp-admin-probe", f"member client id {m.get('client_id')}")
assignment = m.get("member_assignment")
parts = []
if assignment is not None:
    a = as_dict(assignment)
    for t in a.get("assignment", a.get("assigned_partitions", [])):
        t = t if isinstance(t, (tuple, list)) else tuple(as_dict(t).values())
        if t[0] == topic:
            parts += list(t[1])
check(sorted(parts) == [0, 1, 2], f"member assignment {assignment}")
check(offsets() == {0: 4, 1: 2}, f"offsets while active {offsets()}")
res = dict(admin.delete_groups([group]))
check(res[group] == "NonEmptyGroupError", f"delete of an active group: {res[group]}")
step(f"delete of the active group refused: {res[group]}")

c.close()
step("consumer closed")
wait_until("described as Empty", lambda: describe().get("group_state") == "Empty", 15)
check(not describe().get("members"), f"members after close {describe().get('members')}")
check(offsets() == {0: 4, 1: 2}, f"offsets after close {offsets()}")
step(f"Empty with no members, offsets {offsets()}")

res = admin.delete_group_offsets(group, [TopicPartition(topic, 1)])
check(all(e is NoError for e in res.values()), f"delete_group_offsets: {res}")
check(offsets() == {0: 4}, f"offsets after deleting partition 1's: {offsets()}")
step("delete_group_offsets of partition 1 succeeded")

res = dict(admin.delete_groups([group]))
check(res[group] == "OK", f"delete_groups: {res}")
check(group not in listed(), "deleted group still listed")
check(offsets() == {}, f"deleted group has offsets {offsets()}")
step("delete_groups of the empty group succeeded")
ok("kafka-python admin")
