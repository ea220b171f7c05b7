#!/usr/bin/env python3
"""Fixture capture client: confluent-kafka 2.16.1 (librdkafka 2.16).

Usage: capture_confluent.py BOOTSTRAP  (SENT_FILE env: where to write the sent manifest)
Admin CreateTopics (3 partitions), Metadata, one producer per codec (each codec flushed
on its own, so it lands in its own Produce request), then a group consumer that reads
everything from the beginning, commits and closes.
"""
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common import CODECS, TOPIC_PARTITIONS, Manifest, records

CLIENT = "librdkafka-2.16"
bootstrap = sys.argv[1]
topic = "fixtures-librdkafka-2-16"
base = {"bootstrap.servers": bootstrap, "client.id": "fixture-capture-confluent"}

admin = AdminClient(base)
fut = admin.create_topics([NewTopic(topic, num_partitions=TOPIC_PARTITIONS, replication_factor=1)])
for t, f in fut.items():
    try:
        f.result(15)
        print(f"created {t}")
    except Exception as e:  # noqa: BLE001 - report and go on (broker may refuse)
        print(f"create_topics {t}: {e}", file=sys.stderr)
md = admin.list_topics(topic, timeout=10)
print("metadata:", {t: len(m.partitions) for t, m in md.topics.items()})

manifest = Manifest(CLIENT, confluent_kafka.libversion()[0], topic)
total = 0
for codec in CODECS:
    p = Producer({**base, "compression.type": codec, "linger.ms": 200,
                  "enable.idempotence": False, "acks": "all"})
    errors = []
    for part, key, value, headers in records(codec):
        p.produce(topic, value=value, key=key, partition=part, headers=headers,
                  on_delivery=lambda err, msg: err and errors.append(err))
        manifest.add(codec, part, key, value, headers)
        total += 1
    left = p.flush(15)
    print(f"produced codec={codec} left={left} errors={errors}")

manifest.write()

c = Consumer({**base, "group.id": "fixtures-librdkafka-2-16-group", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "heartbeat.interval.ms": 300,
              "session.timeout.ms": 10000})
c.subscribe([topic])
got = 0
deadline = time.time() + 30
while got < total and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    if m.error():
        print("consume error:", m.error(), file=sys.stderr)
        continue
    got += 1
print(f"consumed {got}/{total}")
if got:
    c.commit(asynchronous=False)
time.sleep(1.0)  # let a heartbeat or two go out
c.close()
sys.exit(0 if got == total else 1)
