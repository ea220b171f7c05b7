#!/usr/bin/env python3
"""Topic settings honoured on produce, seen by kafka-python.

Env: BOOTSTRAP, TOPIC_PREFIX. Topics (one partition each, names distinct from the
confluent-kafka script's):
  <prefix>-kp-codec-zstd  compression.type=zstd: gzip-produced records come back identical.
  <prefix>-kp-lat         LogAppendTime: timestamp_type 1, a time inside the produce window.
  <prefix>-kp-compacted   cleanup.policy=compact: a keyless send fails InvalidRecordError.
  <prefix>-kp-plain       defaults: a timestamp two hours ahead fails InvalidTimestampError.
"""
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidRecordError, InvalidTimestampError

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from common import check, env, fail, finish, step  # noqa: E402

bootstrap, prefix = env()
servers = bootstrap.split(",")
admin = KafkaAdminClient(bootstrap_servers=servers, client_id="topic-behaviour-kp")
topics = {
    f"{prefix}-kp-codec-zstd": {"compression.type": "zstd"},
    f"{prefix}-kp-lat": {"message.timestamp.type": "LogAppendTime"},
    f"{prefix}-kp-compacted": {"cleanup.policy": "compact"},
    f"{prefix}-kp-plain": {},
}
try:
    admin.create_topics([NewTopic(t, 1, 1, topic_configs=c) for t, c in topics.items()],
                        timeout_ms=30000)
except Exception as e:  # noqa: BLE001
    fail(f"CreateTopics {topics}: {e}")
step(f"created {len(topics)} topics")


def producer(codec=None):
    return KafkaProducer(bootstrap_servers=servers, compression_type=codec, retries=0,
                         linger_ms=20, request_timeout_ms=30000)


def consume(topic, n):
    c = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = []
    for m in c:
        got.append(m)
        if len(got) == n:
            break
    c.close()
    check(len(got) == n, f"{topic}: read {len(got)} of {n}")
    return got


now = int(time.time() * 1000)
topic = f"{prefix}-kp-codec-zstd"
p = producer("gzip")
recs = [(f"k{i}".encode(), f"value {i} ".encode() * 30, [("h", str(i).encode())], now + i)
        for i in range(30)]
futures = [p.send(topic, key=k, value=v, headers=h, partition=0, timestamp_ms=ts)
           for k, v, h, ts in recs]
offsets = [f.get(timeout=30).offset for f in futures]
check(offsets == list(range(len(recs))), f"{topic}: offsets {offsets}")
for i, (m, (k, v, h, ts)) in enumerate(zip(consume(topic, len(recs)), recs)):
    check((m.key, m.value, list(m.headers), m.timestamp, m.timestamp_type) == (k, v, h, ts, 0),
          f"{topic}: record {i} {m}")
step(f"{topic}: gzip records read back identical")

topic = f"{prefix}-kp-lat"
before = int(time.time() * 1000)
futures = [p.send(topic, key=b"k", value=f"v{i}".encode(), partition=0,
                  timestamp_ms=now - 86_400_000) for i in range(3)]
metas = [f.get(timeout=30) for f in futures]
after = int(time.time() * 1000)
for m in consume(topic, 3):
    check(m.timestamp_type == 1, f"{topic}: timestamp type {m.timestamp_type}")
    check(before - 1000 <= m.timestamp <= after + 1000,
          f"{topic}: timestamp {m.timestamp} outside [{before}, {after}]")
step(f"{topic}: LOG_APPEND_TIME within the produce window ({metas[0].timestamp})")

topic = f"{prefix}-kp-compacted"
try:
    p.send(topic, key=None, value=b"no key", partition=0).get(timeout=30)
    fail(f"{topic}: a keyless record was accepted")
except InvalidRecordError as e:
    step(f"{topic}: keyless record refused: {e}")
check(p.send(topic, key=b"k", value=b"v", partition=0).get(timeout=30).offset == 0,
      f"{topic}: a keyed record after the refusal")

topic = f"{prefix}-kp-plain"
try:
    p.send(topic, key=b"k", value=b"late", partition=0,
           timestamp_ms=now + 2 * 3_600_000).get(timeout=30)
    fail(f"{topic}: a timestamp two hours ahead was accepted")
except InvalidTimestampError as e:
    step(f"{topic}: two hours ahead refused: {e}")
p.close()
finish("topic behaviour (kafka-python)")
