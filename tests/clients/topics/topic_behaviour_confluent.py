#!/usr/bin/env python3
"""Topic settings honoured on produce, seen by confluent-kafka (librdkafka).

Env: BOOTSTRAP, TOPIC_PREFIX. Topics (one partition each):
  <prefix>-codec-<c>   compression.type=<c> for gzip, snappy, lz4, zstd, uncompressed:
                       records produced with another codec come back identical (keys,
                       values, headers, CreateTime timestamps) from offset 0.
  <prefix>-lat         message.timestamp.type=LogAppendTime: every record reads
                       TIMESTAMP_LOG_APPEND_TIME with a time inside the produce window,
                       not the producer's (one day old) timestamp.
  <prefix>-compacted   cleanup.policy=compact: a keyless record's delivery report fails
                       with INVALID_RECORD; keyed records land.
  <prefix>-plain       defaults: a timestamp two hours ahead fails with INVALID_TIMESTAMP.
Prints "CODEC <topic> <codec>" per codec topic for the caller's raw Fetch check.
"""
import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME,
                             TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from common import check, env, fail, finish, step  # noqa: E402

bootstrap, prefix = env()
base = {"bootstrap.servers": bootstrap}
admin = AdminClient(base)

# topic -> (its compression.type, the producer's codec)
CODECS = {"gzip": "lz4", "snappy": "zstd", "lz4": "none", "zstd": "gzip",
          "uncompressed": "snappy"}
topics = {f"{prefix}-codec-{c}": {"compression.type": c} for c in CODECS}
topics[f"{prefix}-lat"] = {"message.timestamp.type": "LogAppendTime"}
topics[f"{prefix}-compacted"] = {"cleanup.policy": "compact"}
topics[f"{prefix}-plain"] = {}
futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1,
                                        config=cfg) for t, cfg in topics.items()])
for t, f in futures.items():
    try:
        f.result(30)
    except Exception as e:  # noqa: BLE001
        fail(f"CreateTopics {t} with {topics[t]}: {e}")
step(f"created {len(topics)} topics")


def produce(topic, recs, codec="none", idempotent=True):
    """Sends recs [(key, value, headers, timestamp)]; returns the delivery reports
    [(error, offset)] in send order."""
    conf = dict(base, **{"compression.type": codec, "linger.ms": 50,
                         "enable.idempotence": idempotent, "retries": 2 if not idempotent
                         else 2147483647, "message.timeout.ms": 30000})
    p = Producer(conf)
    reports = [None] * len(recs)

    def done(i):
        return lambda err, msg: reports.__setitem__(
            i, (err, msg.offset() if msg is not None else -1))

    for i, (key, value, headers, ts) in enumerate(recs):
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0,
                  on_delivery=done(i))
    left = p.flush(40)
    check(left == 0, f"{topic}: {left} records not delivered")
    return reports


def consume(topic, n):
    c = Consumer(dict(base, **{"group.id": f"{topic}-reader", "enable.auto.commit": False,
                               "auto.offset.reset": "earliest"}))
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.time() + 30
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            fail(f"{topic}: consumer error {m.error()}")
        got.append(m)
    c.close()
    check(len(got) == n, f"{topic}: read {len(got)} of {n} records")
    return got


now = int(time.time() * 1000)
for c, producer_codec in CODECS.items():
    topic = f"{prefix}-codec-{c}"
    recs = [(f"key-{i}".encode(), (f"value-{i} " + c * 40).encode() * (1 + i % 3),
             [("h", f"{i}".encode()), ("n", None)], now + i) for i in range(50)]
    recs[7] = (recs[7][0], None, [], now + 7)  # a tombstone
    reports = produce(topic, recs, producer_codec)
    for i, (err, off) in enumerate(reports):
        check(err is None and off == i, f"{topic}: record {i} report {err} offset {off}")
    got = consume(topic, len(recs))
    for i, (m, (key, value, headers, ts)) in enumerate(zip(got, recs)):
        check(m.offset() == i, f"{topic}: offset {m.offset()} for record {i}")
        check((m.key(), m.value()) == (key, value), f"{topic}: record {i} key/value")
        check(list(m.headers() or []) == headers,
              f"{topic}: record {i} headers {m.headers()} != {headers}")
        check(m.timestamp() == (TIMESTAMP_CREATE_TIME, ts),
              f"{topic}: record {i} timestamp {m.timestamp()} != {ts}")
    print(f"CODEC {topic} {c}", flush=True)
    step(f"{topic}: produced with {producer_codec}, read back identical")

topic = f"{prefix}-lat"
day_old = now - 86_400_000
before = int(time.time() * 1000)
reports = produce(topic, [(b"k", f"v{i}".encode(), [], day_old + i) for i in range(5)], "lz4")
after = int(time.time() * 1000)
check(all(err is None for err, _ in reports), f"{topic}: delivery reports {reports}")
for m in consume(topic, 5):
    tstype, ts = m.timestamp()
    check(tstype == TIMESTAMP_LOG_APPEND_TIME, f"{topic}: timestamp type {tstype}")
    check(before - 1000 <= ts <= after + 1000,
          f"{topic}: timestamp {ts} outside the produce window [{before}, {after}]")
step(f"{topic}: LOG_APPEND_TIME within the produce window")

topic = f"{prefix}-compacted"
reports = produce(topic, [(None, b"no key", [], now)], idempotent=False)
err = reports[0][0]
check(err is not None and err.code() == KafkaError.INVALID_RECORD,
      f"{topic}: keyless record report {err}")
reports = produce(topic, [(b"k1", b"v1", [], now), (b"k1", None, [], now + 1)])
check(all(e is None for e, _ in reports), f"{topic}: keyed records {reports}")
check([o for _, o in reports] == [0, 1], f"{topic}: offsets {reports}")
step(f"{topic}: keyless record refused with INVALID_RECORD ({err.str()}), keyed ones land")

topic = f"{prefix}-plain"
reports = produce(topic, [(b"k", b"future", [], now + 2 * 3_600_000)], idempotent=False)
err = reports[0][0]
check(err is not None and err.code() == KafkaError.INVALID_TIMESTAMP,
      f"{topic}: a timestamp two hours ahead: report {err}")
reports = produce(topic, [(b"k", b"now", [], now)], idempotent=False)
check(reports[0][0] is None and reports[0][1] == 0, f"{topic}: {reports}")
step(f"{topic}: two hours ahead refused with INVALID_TIMESTAMP ({err.str()})")

finish("topic behaviour (confluent-kafka)")
