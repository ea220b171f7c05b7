#!/usr/bin/env python3
"""Client suite: kafka-python 3.0.12 (pure Python).

Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run).
Admin CreateTopics (3 partitions) and Metadata; per codec (none, gzip, snappy, lz4, zstd) a
producer sends keyed/null-key records, a null value, an empty value, headers with repeated
names, explicit partitions and timestamps (kafka-python's send() refuses a null header value:
"All headers items must be (str, bytes) tuples", so those headers are left out); an
assign-style consumer (no group) reads every partition back from the beginning and from a
given offset; ListOffsets earliest, latest and by timestamp; DeleteTopics and the topic is
gone from Metadata.
"""
import logging
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from common import (CODECS, PARTITIONS, Expected, check, compare, env, fail, finish,
                    records, step)

logging.basicConfig(level=logging.ERROR)
bootstrap, prefix = env()
topic = f"{prefix}-kafka-python"
cid = "clients-suite-kafka-python"
step(f"kafka-python {kafka.__version__}, bootstrap {bootstrap}, topic {topic}")

admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid, request_timeout_ms=20000)

# --- create the topic and see it in Metadata ----------------------------------------
try:
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
except Exception as e:  # noqa: BLE001
    fail(f"CreateTopics: {e!r}")
step("created topic")


deadline = time.time() + 10
while True:
    try:
        d = admin.describe_topics([topic])
    except Exception as e:  # noqa: BLE001
        fail(f"Metadata (describe_topics): {e!r}")
    t = d[0] if d else None
    if t and t["error_code"] == 0 and len(t["partitions"]) == PARTITIONS:
        break
    if time.time() > deadline:
        fail(f"Metadata: topic {topic} not listed with {PARTITIONS} partitions: {t}")
    time.sleep(0.2)
check(t["name"] == topic, f"Metadata: topic name {t['name']!r}")
check(sorted(p["partition_index"] for p in t["partitions"]) == list(range(PARTITIONS)),
      f"Metadata: partitions {t['partitions']}")
for p in t["partitions"]:
    check(p["error_code"] == 0, f"Metadata: partition {p}")
    check(p["leader_id"] >= 0, f"Metadata: partition without leader {p}")
check(topic in admin.list_topics(), f"Metadata (list_topics) does not list {topic}")
step(f"metadata lists {topic} with {PARTITIONS} partitions")

# --- produce ----------------------------------------------------------------------------
exp = Expected()
for i, codec in enumerate(CODECS):
    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=cid, linger_ms=50, acks="all",
                      compression_type=None if codec == "none" else codec,
                      max_in_flight_requests_per_connection=1, retries=0,
                      enable_idempotence=False)
    futs = []
    for part, key, value, headers in records(i, codec, null_header_values=False):
        ts = exp.timestamp()
        futs.append((part, p.send(topic, value=value, key=key, partition=part, headers=headers,
                                  timestamp_ms=ts)))
        exp.add(part, key, value, headers, ts)
    p.flush(20)
    for part, f in futs:
        try:
            md = f.get(timeout=20)
        except Exception as e:  # noqa: BLE001
            fail(f"Produce codec={codec} partition {part}: {e!r}")
        check(md.partition == part, f"Produce codec={codec}: landed in {md.partition}, not {part}")
    p.close(5)
    step(f"produced codec={codec}")

# --- consume, partition by partition, assign-style -------------------------------------
c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=cid, group_id=None,
                  enable_auto_commit=False, auto_offset_reset="none", fetch_max_wait_ms=100,
                  request_timeout_ms=20000)


def read(partition, start, count):
    """Assign one partition, seek (None = to the beginning), read `count` records, then check
    that nothing more follows."""
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    if start is None:
        c.seek_to_beginning(tp)
    else:
        c.seek(tp, start)
    got = []
    deadline = time.time() + 20
    while len(got) < count and time.time() < deadline:
        for _, msgs in c.poll(timeout_ms=300).items():
            for m in msgs:
                check(m.timestamp_type == 0,
                      f"partition {partition} offset {m.offset}: timestamp type "
                      f"{m.timestamp_type}, expected CreateTime (0)")
                got.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
    extra = c.poll(timeout_ms=500)
    for _, msgs in extra.items():
        got.extend((m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in msgs)
    return got


for part in range(PARTITIONS):
    want = exp.parts[part]
    compare(f"partition {part} from beginning", read(part, None, len(want)), want, 0)
    mid = len(want) // 2
    compare(f"partition {part} from offset {mid}", read(part, mid, len(want) - mid),
            want[mid:], mid)
    step(f"partition {part}: {len(want)} records read back from the beginning and from {mid}")

# --- list offsets -----------------------------------------------------------------------
tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
try:
    earliest = c.beginning_offsets(tps)
    latest = c.end_offsets(tps)
except Exception as e:  # noqa: BLE001
    fail(f"ListOffsets earliest/latest: {e!r}")
for tp in tps:
    n = len(exp.parts[tp.partition])
    check((earliest[tp], latest[tp]) == (0, n),
          f"ListOffsets partition {tp.partition}: earliest/latest {earliest[tp]}/{latest[tp]}, "
          f"expected 0/{n}")
for tp in tps:
    want = exp.parts[tp.partition]
    k = len(want) // 2
    tk = want[k][3]
    for ts, expected_offset in [(tk, k), (tk - 1, k), (want[0][3] - 5000, 0),
                                (want[-1][3], len(want) - 1), (want[-1][3] + 1, None)]:
        try:
            r = c.offsets_for_times({tp: ts})[tp]
        except Exception as e:  # noqa: BLE001
            fail(f"ListOffsets partition {tp.partition} timestamp {ts}: {e!r}")
        got = None if r is None else r.offset
        check(got == expected_offset,
              f"ListOffsets partition {tp.partition} timestamp {ts}: offset {got}, "
              f"expected {expected_offset}")
        if r is not None and expected_offset is not None:
            check(r.timestamp == want[expected_offset][3],
                  f"ListOffsets partition {tp.partition} timestamp {ts}: returned timestamp "
                  f"{r.timestamp}, expected {want[expected_offset][3]}")
c.close()
step("ListOffsets: earliest, latest, by timestamp")

# --- delete the topic -------------------------------------------------------------------
try:
    admin.delete_topics([topic], timeout_ms=15000)
except Exception as e:  # noqa: BLE001
    fail(f"DeleteTopics: {e!r}")
deadline = time.time() + 10
while topic in admin.list_topics():
    if time.time() > deadline:
        fail(f"Metadata still lists {topic} 10 s after DeleteTopics")
    time.sleep(0.2)
admin.close()
step("deleted topic; gone from metadata")
finish("kafka-python")
