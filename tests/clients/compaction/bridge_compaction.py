"""Compaction on Iggy seen by a Kafka client (bridged gateway with a fast log cleaner).

Creates a topic with cleanup.policy=compact and 1 MiB segments, produces 3000 updates of
5 keys (1000-byte values) and then one record of key `end` on its own (so the updates
are not the active batch), remembering the offset of each. Then reads the partition
from the beginning, again and again, until the gateway's cleaner has compacted it: the
reader must end up seeing exactly the latest record of each key at the offset it was
written at (and never anything but produced records at their offsets meanwhile), and
the log start must stay 0.

Env: BOOTSTRAP, TOPIC_PREFIX.
"""

import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ["BOOTSTRAP"]
TOPIC = f"{os.environ['TOPIC_PREFIX']}-compacted"
UPDATES = 3000
KEYS = 5


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    os._exit(1)


admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
config = {
    "cleanup.policy": "compact",
    "segment.bytes": "1048576",
    "min.cleanable.dirty.ratio": "0.01",
}
admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)

produced = {}


def delivered(err, msg):
    if err is not None:
        fail(f"delivery failed: {err}")
    produced[msg.offset()] = (msg.key(), msg.value())


producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
for i in range(UPDATES):
    key = f"k{i % KEYS}".encode()
    value = f"k{i % KEYS}:{i}:".encode().ljust(1000, b".")
    producer.produce(TOPIC, key=key, value=value, on_delivery=delivered)
    producer.poll(0)
if producer.flush(60) != 0:
    fail("produce did not finish")
producer.produce(TOPIC, key=b"end", value=b"end", on_delivery=delivered)
if producer.flush(60) != 0:
    fail("produce of the last record did not finish")
if len(produced) != UPDATES + 1:
    fail(f"{len(produced)} records acknowledged")

latest = {}
for offset in sorted(produced):
    latest[produced[offset][0]] = offset
expected = sorted((o, produced[o][0], produced[o][1]) for o in latest.values())
high = max(produced) + 1


def read_from_start():
    c = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"{TOPIC}-reader",
            "enable.auto.commit": False,
        }
    )
    low, hw = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    if (low, hw) != (0, high):
        fail(f"watermarks {(low, hw)}, expected (0, {high})")
    c.assign([TopicPartition(TOPIC, 0, 0)])
    seen = []
    deadline = time.time() + 30
    while time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            fail(f"consume error: {m.error()}")
        seen.append((m.offset(), m.key(), m.value()))
        if m.offset() == high - 1:
            break
    c.close()
    for o, k, v in seen:
        if produced.get(o) != (k, v):
            fail(f"offset {o} read as {k!r} but was produced as {produced.get(o)!r}")
    offsets = [o for o, _, _ in seen]
    if offsets != sorted(set(offsets)) or not offsets or offsets[-1] != high - 1:
        fail(f"offsets not strictly increasing up to {high - 1}: {offsets[:10]}...")
    return seen


deadline = time.time() + 90
while True:
    seen = read_from_start()
    if seen == expected:
        break
    if time.time() > deadline:
        fail(f"not compacted after 90 s: {len(seen)} records, expected {len(expected)}")
    time.sleep(1)
print(f"OK: {UPDATES + 1} produced, {len(seen)} after compaction at offsets {[o for o, _, _ in seen]}")
