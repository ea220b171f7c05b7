"""kafka-python: join, consume, commit, close; a new consumer of the same group resumes
exactly after the commit. Default assignor (range, then round robin), auto commit off.

1. 10 records go to each of 3 partitions.
2. Consumer 1 (group G, subscribe) reads 13 records, commits the next offset of every
   partition it read from synchronously, and closes (LeaveGroup).
3. committed() of a fresh consumer in G shows those offsets.
4. Consumer 2 (group G) reads: exactly the records from the committed offsets on, nothing
   before them, in order; nothing more arrives afterwards.
"""
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from gcommon import Reads, check, check_resume, env, ok, step, value, wait_until

PARTS = 3
PER_PART = 10

bootstrap, prefix = env()
topic = f"{prefix}-kp-resume"
group = f"{prefix}-kp-resume-group"

admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(topic, PARTS, 1)])
wait_until("topic in metadata", lambda: topic in admin.list_topics(), 15)
step(f"created {topic}")
prod = KafkaProducer(bootstrap_servers=bootstrap)
sent = {}
for p in range(PARTS):
    for i in range(PER_PART):
        sent.setdefault(p, []).append(value(p, i))
        prod.send(topic, value(p, i), partition=p)
prod.flush(15)
prod.close()
step(f"produced {PER_PART} records to each of {PARTS} partitions")


def consumer(name):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=10000, heartbeat_interval_ms=500)
    c.subscribe([topic])
    return c


def read(c, reads, n, timeout):
    deadline = time.monotonic() + timeout
    while len(reads.items) < n and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=200, max_records=n - len(reads.items)).items():
            for m in msgs:
                reads.add(m.partition, m.offset, m.value)
    return reads


c1 = consumer("first")
r1 = read(c1, Reads("first"), 13, 30)
check(len(r1.items) == 13, f"the first consumer read {len(r1.items)} records, expected 13")
committed = {}
for p, off, _v, _c in r1.items:
    committed[p] = max(committed.get(p, 0), off + 1)
c1.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
step(f"the first consumer read 13 records and committed {committed}")
c1.close()
step("the first consumer closed")

probe = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
got = {p: probe.committed(TopicPartition(topic, p)) for p in range(PARTS)}
probe.close()
check(got == {p: committed.get(p) for p in range(PARTS)},
      f"committed() shows {got}, expected {committed}")

c2 = consumer("second")
expected = PARTS * PER_PART - 13
r2 = read(c2, Reads("second"), expected, 30)
check(len(r2.items) == expected, f"the second consumer read {len(r2.items)} records, expected {expected}")
extra = read(c2, Reads("extra"), 1, 1.5)
check(not extra.items, f"the second consumer read more than expected: {extra.items}")
check_resume(topic, sent, r1, committed, r2)
c2.close()
ok("kafka-python resume")
