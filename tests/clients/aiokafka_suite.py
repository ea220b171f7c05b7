#!/usr/bin/env python3
"""Client suite: aiokafka 0.14.0 (asyncio).

Env: BOOTSTRAP=host:port[,host:port...], TOPIC_PREFIX (unique per run).
Admin CreateTopics (3 partitions) and Metadata; per codec (none, gzip, snappy, lz4, zstd) a
producer sends keyed/null-key records, a null value, an empty value, headers with repeated
names and a null value, explicit partitions and timestamps; an assign-style consumer (no
group) reads every partition back from the beginning and from a given offset; ListOffsets
earliest, latest and by timestamp; DeleteTopics and the topic is gone from Metadata.
"""
import asyncio
import logging
import time

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from common import (CODECS, PARTITIONS, Expected, check, compare, env, fail, finish,
                    records, step)

logging.basicConfig(level=logging.CRITICAL)
bootstrap, prefix = env()
topic = f"{prefix}-aiokafka"
cid = "clients-suite-aiokafka"


async def topic_partitions(admin):
    """Partition ids of the topic from Metadata (DescribeTopics), or None if not listed."""
    md = await admin.describe_topics([topic])
    t = next((t for t in md if t.get("topic", t.get("name")) == topic), None)
    if t is None or t["error_code"] != 0:
        return None
    return t


async def main():
    step(f"aiokafka {aiokafka.__version__}, bootstrap {bootstrap}, topic {topic}")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid,
                                request_timeout_ms=20000)
    await admin.start()

    # --- create the topic and see it in Metadata ------------------------------------
    try:
        resp = await admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                                   replication_factor=1)])
    except Exception as e:  # noqa: BLE001
        fail(f"CreateTopics: {e!r}")
    errs = [e for e in getattr(resp, "topic_errors", []) if e[1] != 0]
    check(not errs, f"CreateTopics: errors {errs}")
    step("created topic")
    deadline = time.time() + 10
    while True:
        t = await topic_partitions(admin)
        if t is not None and len(t["partitions"]) == PARTITIONS:
            break
        if time.time() > deadline:
            fail(f"Metadata: topic {topic} not listed with {PARTITIONS} partitions: {t}")
        await asyncio.sleep(0.2)
    ids = sorted(p["partition"] for p in t["partitions"])
    check(ids == list(range(PARTITIONS)), f"Metadata: partitions {t['partitions']}")
    for p in t["partitions"]:
        check(p["error_code"] == 0 and p["leader"] >= 0, f"Metadata: partition {p}")
    check(topic in await admin.list_topics(), f"Metadata (list_topics) does not list {topic}")
    step(f"metadata lists {topic} with {PARTITIONS} partitions")

    # --- produce ------------------------------------------------------------------------
    exp = Expected()
    for i, codec in enumerate(CODECS):
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=cid, linger_ms=50,
                             acks="all", compression_type=None if codec == "none" else codec,
                             enable_idempotence=False, request_timeout_ms=20000)
        await p.start()
        try:
            futs = []
            for part, key, value, headers in records(i, codec):
                ts = exp.timestamp()
                futs.append((part, await p.send(topic, value=value, key=key, partition=part,
                                                headers=headers, timestamp_ms=ts)))
                exp.add(part, key, value, headers, ts)
            await p.flush()
            for part, f in futs:
                try:
                    md = await asyncio.wait_for(f, 20)
                except Exception as e:  # noqa: BLE001
                    fail(f"Produce codec={codec} partition {part}: {e!r}")
                check(md.partition == part,
                      f"Produce codec={codec}: landed in {md.partition}, not {part}")
        finally:
            await p.stop()
        step(f"produced codec={codec}")

    # --- consume, partition by partition, assign-style ---------------------------------
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=cid, group_id=None,
                         enable_auto_commit=False, auto_offset_reset="none",
                         fetch_max_wait_ms=100, request_timeout_ms=20000)
    await c.start()
    try:
        async def read(partition, start, count):
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            if start is None:
                await c.seek_to_beginning(tp)
            else:
                c.seek(tp, start)
            got = []
            deadline = time.time() + 20
            while len(got) < count and time.time() < deadline:
                for _, msgs in (await c.getmany(tp, timeout_ms=300)).items():
                    for m in msgs:
                        check(m.timestamp_type == 0,
                              f"partition {partition} offset {m.offset}: timestamp type "
                              f"{m.timestamp_type}, expected CreateTime (0)")
                        got.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
            for _, msgs in (await c.getmany(tp, timeout_ms=500)).items():
                got.extend((m.offset, m.key, m.value, list(m.headers), m.timestamp)
                           for m in msgs)
            return got

        for part in range(PARTITIONS):
            want = exp.parts[part]
            compare(f"partition {part} from beginning", await read(part, None, len(want)),
                    want, 0)
            mid = len(want) // 2
            compare(f"partition {part} from offset {mid}",
                    await read(part, mid, len(want) - mid), want[mid:], mid)
            step(f"partition {part}: {len(want)} records read back from the beginning and "
                 f"from {mid}")

        # --- list offsets ---------------------------------------------------------------
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        try:
            earliest = await c.beginning_offsets(tps)
            latest = await c.end_offsets(tps)
        except Exception as e:  # noqa: BLE001
            fail(f"ListOffsets earliest/latest: {e!r}")
        for tp in tps:
            n = len(exp.parts[tp.partition])
            check((earliest[tp], latest[tp]) == (0, n),
                  f"ListOffsets partition {tp.partition}: earliest/latest "
                  f"{earliest[tp]}/{latest[tp]}, expected 0/{n}")
        for tp in tps:
            want = exp.parts[tp.partition]
            k = len(want) // 2
            tk = want[k][3]
            for ts, expected_offset in [(tk, k), (tk - 1, k), (want[0][3] - 5000, 0),
                                        (want[-1][3], len(want) - 1),
                                        (want[-1][3] + 1, None)]:
                try:
                    r = (await c.offsets_for_times({tp: ts}))[tp]
                except Exception as e:  # noqa: BLE001
                    fail(f"ListOffsets partition {tp.partition} timestamp {ts}: {e!r}")
                got = None if r is None else r.offset
                check(got == expected_offset,
                      f"ListOffsets partition {tp.partition} timestamp {ts}: offset {got}, "
                      f"expected {expected_offset}")
                if r is not None and expected_offset is not None:
                    check(r.timestamp == want[expected_offset][3],
                          f"ListOffsets partition {tp.partition} timestamp {ts}: returned "
                          f"timestamp {r.timestamp}, expected {want[expected_offset][3]}")
        step("ListOffsets: earliest, latest, by timestamp")
    finally:
        await c.stop()

    # --- delete the topic -----------------------------------------------------------------
    try:
        await admin.delete_topics([topic], timeout_ms=15000)
    except Exception as e:  # noqa: BLE001
        fail(f"DeleteTopics: {e!r}")
    deadline = time.time() + 10
    while topic in await admin.list_topics():
        if time.time() > deadline:
            fail(f"Metadata still lists {topic} 10 s after DeleteTopics")
        await asyncio.sleep(0.2)
    await admin.close()
    step("deleted topic; gone from metadata")


asyncio.run(main())
finish("aiokafka")
