#!/usr/bin/env python3
"""Fixture capture client: kafka-python 3.0.12.

Usage: capture_kafka_python.py BOOTSTRAP  (SENT_FILE env: where to write the sent manifest)
Admin CreateTopics (3 partitions), Metadata, one producer per codec (flushed per codec),
then a group consumer from the beginning, commit, close. kafka-python's send() refuses a
null header value, so record 3 goes without its header.
"""
import logging
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from common import CODECS, TOPIC_PARTITIONS, Manifest, records

logging.basicConfig(level=logging.WARNING)
CLIENT = "kafka-python-3.0.12"
bootstrap = sys.argv[1]
topic = "fixtures-kafka-python-3-0-12"
cid = "fixture-capture-kafka-python"

admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid)
try:
    print(admin.create_topics([NewTopic(topic, num_partitions=TOPIC_PARTITIONS, replication_factor=1)]))
except Exception as e:  # noqa: BLE001
    print(f"create_topics: {e!r}", file=sys.stderr)
try:
    print("metadata:", admin.describe_topics([topic]))
except Exception as e:  # noqa: BLE001
    print(f"describe_topics: {e!r}", file=sys.stderr)
admin.close()

manifest = Manifest(CLIENT, kafka.__version__, topic)
total = 0
for codec in CODECS:
    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=cid, linger_ms=200, acks="all",
                      compression_type=None if codec == "none" else codec)
    futs = []
    for part, key, value, headers in records(codec, null_header_values=False):
        futs.append(p.send(topic, value=value, key=key, partition=part, headers=headers))
        manifest.add(codec, part, key, value, headers)
        total += 1
    p.flush(15)
    errs = [f.exception for f in futs if f.failed()]
    print(f"produced codec={codec} errors={errs}")
    p.close(5)

manifest.write()

c = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id=cid,
                  group_id="fixtures-kafka-python-3-0-12-group", auto_offset_reset="earliest",
                  enable_auto_commit=False, heartbeat_interval_ms=300, session_timeout_ms=10000)
got = 0
deadline = time.time() + 30
while got < total and time.time() < deadline:
    for tp, msgs in c.poll(timeout_ms=500).items():
        got += len(msgs)
print(f"consumed {got}/{total}")
if got:
    c.commit()
end = time.time() + 1.0
while time.time() < end:  # keep polling so heartbeats go out
    c.poll(timeout_ms=200)
c.close()
sys.exit(0 if got == total else 1)
