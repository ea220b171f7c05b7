"""A compacted topic seen by confluent-kafka (apps/gateway/tests/compaction.rs).

1. Creates T with cleanup.policy=compact, a small min.cleanable.dirty.ratio and no
   compaction lag (delete.retention.ms long, so the tombstones stay).
2. Produces 5 rounds of keys k0..k9 (value = the round), one batch per round, then
   tombstones for k0 and k1, then one more record (the batch the cleaner leaves alone).
3. Reads T from the beginning, again and again, until the cleaner has run: every key
   once with its latest value (k0, k1 as tombstones), the last record, offsets strictly
   increasing with gaps where superseded records were.
"""
import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap = os.environ["BOOTSTRAP"]
prefix = os.environ.get("TOPIC_PREFIX") or f"compaction-{os.getpid()}"
topic = f"{prefix}-compacted"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
config = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "600000",
    "segment.ms": "100",
}
for t, f in admin.create_topics(
    [NewTopic(topic, num_partitions=1, replication_factor=1, config=config)]
).items():
    f.result(15)
print(f"created {topic}", flush=True)

producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                     "enable.idempotence": True})
for rnd in range(5):
    for k in range(10):
        producer.produce(topic, key=f"k{k}", value=f"{rnd}", partition=0)
    producer.flush(15)
for k in range(2):
    producer.produce(topic, key=f"k{k}", value=None, partition=0)
producer.flush(15)
producer.produce(topic, key="last", value="x", partition=0)
if producer.flush(15) != 0:
    fail("records not acknowledged")
total = 5 * 10 + 2 + 1
print(f"produced {total} records", flush=True)


def read_all():
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = []
    deadline = time.time() + 20
    while time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            fail(f"consume error: {msg.error()}")
        value = msg.value()
        seen.append((msg.offset(), msg.key().decode(), None if value is None else value.decode()))
        if msg.offset() == total - 1:
            break
    consumer.close()
    return seen


expected_keys = {f"k{k}": "4" for k in range(2, 10)}
expected_keys.update({"k0": None, "k1": None, "last": "x"})
deadline = time.time() + 60
while True:
    seen = read_all()
    if not seen or seen[-1][0] != total - 1:
        fail(f"the read did not reach the last offset: {seen[-3:]}")
    offsets = [o for o, _, _ in seen]
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        fail(f"offsets do not increase strictly: {offsets}")
    if len(seen) == len(expected_keys):
        break
    if time.time() > deadline:
        fail(f"not compacted within 60 s: {len(seen)} records seen")
    time.sleep(0.5)

latest = {k: v for _, k, v in seen}
if latest != expected_keys:
    fail(f"latest per key {latest}, expected {expected_keys}")
if len({k for _, k, _ in seen}) != len(seen):
    fail(f"a key shows twice: {seen}")
if offsets[0] == 0 or offsets[-1] != total - 1:
    fail(f"offsets keep their places with gaps: {offsets}")
print(f"compacted view: {seen}", flush=True)
print("OK compaction", flush=True)
