"""Shared parts of the confluent-kafka transaction scripts: topic creation and reading a
set of topics back to their end with a given isolation level."""
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def step(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# CLIENT_SUITE_KEEP_GOING=1: report every failed check and exit 1 at the end (for
# diagnosing a broker: against Tansu, which shows aborted records to read_committed
# readers, the later checks still run).
KEEP_GOING = os.environ.get("CLIENT_SUITE_KEEP_GOING") == "1"
FAILED = []


def check(cond, msg):
    if not cond:
        if not KEEP_GOING:
            fail(msg)
        print(f"FAIL (continuing): {msg}", file=sys.stderr, flush=True)
        FAILED.append(msg)
    return cond


def finish(name):
    if FAILED:
        fail(f"{name}: {len(FAILED)} check(s) failed, first: {FAILED[0]}")
    print(f"OK {name}", flush=True)
    sys.exit(0)


def env():
    bootstrap = os.environ.get("BOOTSTRAP")
    if not bootstrap:
        fail("BOOTSTRAP (host:port[,host:port...]) is not set")
    prefix = os.environ.get("TOPIC_PREFIX") or f"txn-{os.getpid()}-{int(time.time())}"
    return bootstrap, prefix


def create_topics(bootstrap, names, partitions):
    """Creates `names` with `partitions` each and waits until Metadata lists them all."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t, f in admin.create_topics([NewTopic(n, num_partitions=partitions,
                                              replication_factor=1) for n in names]).items():
        try:
            f.result(30)
        except Exception as e:  # noqa: BLE001
            fail(f"CreateTopics {t}: {e}")
    deadline = time.time() + 20
    while True:
        md = admin.list_topics(timeout=10)
        ok = all(n in md.topics and md.topics[n].error is None
                 and len(md.topics[n].partitions) == partitions for n in names)
        if ok:
            return
        if time.time() > deadline:
            fail(f"Metadata does not list {names} with {partitions} partitions")
        time.sleep(0.2)


def read_all(bootstrap, topic, partitions, isolation, timeout=30.0):
    """Every record of `topic` with `isolation` ("read_committed" or "read_uncommitted"):
    {partition: [(offset, key, value), ...]} in offset order. An assign-style consumer reads
    from the beginning until each partition reported its end (EOF) and nothing more came
    for half a second."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-reader-{os.getpid()}-{time.time_ns()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = {p: [] for p in range(partitions)}
    at_end = set()
    deadline = time.time() + timeout
    quiet_since = None
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(at_end) == partitions:
                    quiet_since = quiet_since or time.time()
                    if time.time() - quiet_since > 0.5:
                        return out
                continue
            quiet_since = None
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                fail(f"read {topic} ({isolation}): {m.error()}")
            at_end.discard(m.partition())
            out[m.partition()].append((m.offset(), m.key(), m.value()))
        fail(f"read {topic} ({isolation}): no end of partitions {sorted(set(range(partitions)) - at_end)} within {timeout}s")
    finally:
        c.close()
    return out


def committed_offsets(bootstrap, group, topic, partitions):
    """{partition: committed offset or None} of `group` on `topic`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
    finally:
        c.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in got}
