#!/usr/bin/env python3
"""Client suite: confluent-kafka 2.16.1 (librdkafka 2.16).

Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run).
Admin CreateTopics (3 partitions) and Metadata; per codec (none, gzip, snappy, lz4, zstd) a
producer sends keyed/null-key records, a null value, an empty value, headers with repeated
names and a null value, explicit partitions and timestamps; assign-style consumers read every
partition back from the beginning and from a given offset; ListOffsets earliest, latest and
by timestamp (consumer and admin APIs); DeleteTopics and the topic is gone from Metadata.
"""
import sys
import time

import confluent_kafka
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from common import (CODECS, PARTITIONS, Expected, check, compare, env, fail, finish,
                    records, step)

bootstrap, prefix = env()
topic = f"{prefix}-confluent-kafka"
base = {"bootstrap.servers": bootstrap, "client.id": "clients-suite-confluent-kafka"}
step(f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
     f"{confluent_kafka.libversion()[0]}), bootstrap {bootstrap}, topic {topic}")

admin = AdminClient(base)

# --- create the topic and see it in Metadata ----------------------------------------
for t, f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                          replication_factor=1)]).items():
    try:
        f.result(20)
    except Exception as e:  # noqa: BLE001
        fail(f"CreateTopics {t}: {e}")
step("created topic")


def topic_metadata():
    md = admin.list_topics(timeout=10)
    return md.topics.get(topic)


deadline = time.time() + 10
while True:
    tm = topic_metadata()
    if tm is not None and tm.error is None and len(tm.partitions) == PARTITIONS:
        break
    if time.time() > deadline:
        fail(f"Metadata: topic {topic} not listed with {PARTITIONS} partitions: "
             f"{None if tm is None else (tm.error, sorted(tm.partitions))}")
    time.sleep(0.2)
check(sorted(tm.partitions) == list(range(PARTITIONS)),
      f"Metadata: partition ids {sorted(tm.partitions)}")
for p, pm in tm.partitions.items():
    check(pm.error is None, f"Metadata: partition {p} error {pm.error}")
    check(pm.leader >= 0, f"Metadata: partition {p} has no leader ({pm.leader})")
step(f"metadata lists {topic} with {PARTITIONS} partitions")

# --- produce ----------------------------------------------------------------------------
exp = Expected()
for i, codec in enumerate(CODECS):
    p = Producer({**base, "compression.type": codec, "linger.ms": 50, "acks": "all",
                  "enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
                  "message.send.max.retries": 0})
    errors = []

    def on_delivery(err, msg, errors=errors):
        if err is not None:
            errors.append(f"partition {msg.partition()}: {err}")

    for part, key, value, headers in records(i, codec):
        ts = exp.timestamp()
        p.produce(topic, value=value, key=key, partition=part, headers=headers, timestamp=ts,
                  on_delivery=on_delivery)
        exp.add(part, key, value, headers, ts)
    left = p.flush(20)
    check(left == 0, f"Produce codec={codec}: {left} records not delivered after 20 s")
    check(not errors, f"Produce codec={codec}: delivery errors {errors}")
    step(f"produced codec={codec}")

# --- consume, partition by partition, assign-style -------------------------------------


def read(partition, start, count):
    """Assign one partition at `start` (an offset or OFFSET_BEGINNING) and read `count`
    records, then make sure nothing more follows."""
    c = Consumer({**base, "group.id": f"{topic}-unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "error",
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, partition, start)])
    got = []
    deadline = time.time() + 20
    eof = False
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                if len(got) >= count:
                    eof = True
                    break
                continue
            fail(f"consume partition {partition} from {start}: {m.error()}")
        hs = m.headers() or []
        tstype, ts = m.timestamp()
        check(tstype == confluent_kafka.TIMESTAMP_CREATE_TIME,
              f"partition {partition} offset {m.offset()}: timestamp type {tstype}, "
              f"expected CreateTime")
        got.append((m.offset(), m.key(), m.value(), list(hs), ts))
    c.close()
    check(eof, f"consume partition {partition} from {start}: got {len(got)} of {count} "
               f"records and no end-of-partition within 20 s")
    return got


for part in range(PARTITIONS):
    want = exp.parts[part]
    compare(f"partition {part} from beginning", read(part, OFFSET_BEGINNING, len(want)), want, 0)
    mid = len(want) // 2
    compare(f"partition {part} from offset {mid}", read(part, mid, len(want) - mid),
            want[mid:], mid)
    step(f"partition {part}: {len(want)} records read back from the beginning and from {mid}")

# --- list offsets ---------------------------------------------------------------------
c = Consumer({**base, "group.id": f"{topic}-unused", "enable.auto.commit": False})
for part in range(PARTITIONS):
    want = exp.parts[part]
    low, high = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
    check((low, high) == (0, len(want)),
          f"ListOffsets partition {part}: earliest/latest {low}/{high}, expected 0/{len(want)}")
    k = len(want) // 2
    tk = want[k][3]
    queries = [(tk, k), (tk - 1, k), (want[0][3] - 5000, 0), (want[-1][3], len(want) - 1),
               (want[-1][3] + 1, -1)]
    for ts, expected_offset in queries:
        r = c.offsets_for_times([TopicPartition(topic, part, ts)], timeout=10)
        check(r[0].error is None, f"ListOffsets partition {part} timestamp {ts}: {r[0].error}")
        check(r[0].offset == expected_offset,
              f"ListOffsets partition {part} timestamp {ts}: offset {r[0].offset}, "
              f"expected {expected_offset}")
c.close()
step("consumer ListOffsets: earliest, latest, by timestamp")

specs = {}
for part in range(PARTITIONS):
    want = exp.parts[part]
    specs[(part, "earliest")] = (OffsetSpec.earliest(), 0)
    specs[(part, "latest")] = (OffsetSpec.latest(), len(want))
    specs[(part, "timestamp")] = (OffsetSpec.for_timestamp(want[1][3]), 1)
for (part, kind), (spec, expected_offset) in specs.items():
    fut = admin.list_offsets({TopicPartition(topic, part): spec}, request_timeout=10)
    try:
        res = {tp.partition: r for tp, f in fut.items() for r in [f.result(15)]}
    except Exception as e:  # noqa: BLE001
        fail(f"admin ListOffsets partition {part} {kind}: {e}")
    check(res[part].offset == expected_offset,
          f"admin ListOffsets partition {part} {kind}: offset {res[part].offset}, "
          f"expected {expected_offset}")
step("admin ListOffsets: earliest, latest, by timestamp")

# --- delete the topic -------------------------------------------------------------------
for t, f in admin.delete_topics([topic], operation_timeout=15).items():
    try:
        f.result(20)
    except Exception as e:  # noqa: BLE001
        fail(f"DeleteTopics {t}: {e}")
deadline = time.time() + 10
while topic_metadata() is not None:
    if time.time() > deadline:
        fail(f"Metadata still lists {topic} 10 s after DeleteTopics")
    time.sleep(0.2)
step("deleted topic; gone from metadata")
finish("confluent-kafka")
