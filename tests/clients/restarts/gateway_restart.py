"""A gateway restart between produce and consume loses nothing (bridged gateway).

Phase `produce` (first gateway): creates the topic (3 partitions), produces 30 keyed
records with acks=all, and a consumer in group `<prefix>-g` reads exactly 15 of them,
committing each, then closes.

Phase `consume` (second gateway on the same Iggy server): a consumer in the same group
resumes from the commits and reads exactly the other 15, none twice; a fresh assign()
consumer reads all 30 from the beginning with their keys and values intact.

Env: BOOTSTRAP, TOPIC_PREFIX, PHASE=produce|consume.
"""

import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ["BOOTSTRAP"]
PREFIX = os.environ["TOPIC_PREFIX"]
PHASE = os.environ["PHASE"]
TOPIC = f"{PREFIX}-restart"
GROUP = f"{PREFIX}-g"
TOTAL = 30
FIRST = 15


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    os._exit(1)


def consumer(extra=None):
    conf = {
        "bootstrap.servers": BOOTSTRAP,
        "group.id": GROUP,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    conf.update(extra or {})
    return Consumer(conf)


def read(c, want, deadline_s=40):
    got = []
    deadline = time.time() + deadline_s
    while len(got) < want and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            fail(f"consumer error {m.error()}")
        got.append(m)
    return got


if PHASE == "produce":
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True})
    errors = []
    for i in range(TOTAL):
        p.produce(TOPIC, key=b"k%02d" % i, value=b"v%02d" % i, partition=i % 3,
                  on_delivery=lambda err, msg: err and errors.append(err))
    if p.flush(30) != 0 or errors:
        fail(f"produce did not complete: {errors}")
    c = consumer({"max.poll.interval.ms": 60000})
    c.subscribe([TOPIC])
    got = read(c, FIRST)
    if len(got) < FIRST:
        fail(f"read {len(got)} of the first {FIRST}")
    for m in got[:FIRST]:
        c.commit(m, asynchronous=False)
    c.close()
    print(f"OK produced {TOTAL}, read and committed {FIRST}", flush=True)
    os._exit(0)

# consume
c = consumer()
committed = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=20)
start = {tp.partition: tp.offset for tp in committed}
if sum(o for o in start.values() if o > 0) != FIRST:
    fail(f"committed offsets after the restart {start} do not add up to {FIRST}")
c.subscribe([TOPIC])
rest = read(c, TOTAL - FIRST)
seen = {(m.partition(), m.offset()) for m in rest}
if len(rest) != TOTAL - FIRST or len(seen) != len(rest):
    fail(f"resumed consumer read {len(rest)} ({len(seen)} distinct), want {TOTAL - FIRST}")
for m in rest:
    if m.offset() < max(start[m.partition()], 0):
        fail(f"re-read {m.partition()}/{m.offset()} below the commit {start[m.partition()]}")
extra = c.poll(3)
if extra is not None and not extra.error():
    fail(f"unexpected extra record {extra.partition()}/{extra.offset()}")
c.close()

fresh = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"{GROUP}-fresh",
                  "enable.auto.commit": False})
fresh.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
everything = read(fresh, TOTAL)
fresh.close()
values = sorted((m.key(), m.value()) for m in everything)
want = sorted((b"k%02d" % i, b"v%02d" % i) for i in range(TOTAL))
if values != want:
    fail(f"after the restart the topic holds {values}, want {want}")
print(f"OK resumed with {TOTAL - FIRST} records after the commit; all {TOTAL} intact", flush=True)
os._exit(0)
