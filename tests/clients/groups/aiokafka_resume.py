"""aiokafka: join, consume, commit, close; a new consumer of the same group resumes exactly
after the commit. Default assignor (round robin), auto commit off.

1. 10 records go to each of 3 partitions.
2. Consumer 1 (group G, subscribe) reads 13 records, commits the next offset of every
   partition it read from (await commit(offsets)), and stops (LeaveGroup).
3. committed() of a fresh consumer in G shows those offsets.
4. Consumer 2 (group G) reads exactly the records from the committed offsets on, in order;
   nothing more arrives afterwards.
"""
import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from gcommon import Reads, check, check_resume, env, fail, ok, step, value

PARTS = 3
PER_PART = 10


async def main():
    bootstrap, prefix = env()
    topic = f"{prefix}-aio-resume"
    group = f"{prefix}-aio-resume-group"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, PARTS, 1)])
    deadline = time.monotonic() + 15
    while topic not in await admin.list_topics():
        check(time.monotonic() < deadline, f"{topic} not in metadata")
        await asyncio.sleep(0.1)
    await admin.close()
    step(f"created {topic}")

    prod = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await prod.start()
    sent = {}
    for p in range(PARTS):
        for i in range(PER_PART):
            sent.setdefault(p, []).append(value(p, i))
            await prod.send_and_wait(topic, value(p, i), partition=p)
    await prod.stop()
    step(f"produced {PER_PART} records to each of {PARTS} partitions")

    def consumer(name):
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                client_id=name, enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=10000,
                                heartbeat_interval_ms=500)

    async def read(c, reads, n, timeout):
        deadline = time.monotonic() + timeout
        while len(reads.items) < n and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=200, max_records=n - len(reads.items))
            for _tp, msgs in batch.items():
                for m in msgs:
                    reads.add(m.partition, m.offset, m.value)
        return reads

    c1 = consumer("first")
    await c1.start()
    r1 = await read(c1, Reads("first"), 13, 30)
    check(len(r1.items) == 13, f"the first consumer read {len(r1.items)} records, expected 13")
    committed = {}
    for p, off, _v, _c in r1.items:
        committed[p] = max(committed.get(p, 0), off + 1)
    await c1.commit({TopicPartition(topic, p): o for p, o in committed.items()})
    step(f"the first consumer read 13 records and committed {committed}")
    await c1.stop()
    step("the first consumer stopped")

    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    await probe.start()
    got = {p: await probe.committed(TopicPartition(topic, p)) for p in range(PARTS)}
    await probe.stop()
    check(got == {p: committed.get(p) for p in range(PARTS)},
          f"committed() shows {got}, expected {committed}")

    c2 = consumer("second")
    await c2.start()
    expected = PARTS * PER_PART - 13
    r2 = await read(c2, Reads("second"), expected, 30)
    check(len(r2.items) == expected,
          f"the second consumer read {len(r2.items)} records, expected {expected}")
    extra = await read(c2, Reads("extra"), 1, 1.5)
    check(not extra.items, f"the second consumer read more than expected: {extra.items}")
    check_resume(topic, sent, r1, committed, r2)
    await c2.stop()


try:
    asyncio.run(main())
except SystemExit:
    raise
except Exception as e:  # noqa: BLE001
    fail(f"aiokafka: {type(e).__name__}: {e}")
ok("aiokafka resume")
