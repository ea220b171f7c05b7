"""Shared parts of the Python consumer-group scripts in this directory.

Every script reads `BOOTSTRAP` (host:port) and `TOPIC_PREFIX` from the environment, works on
its own topics and groups `<TOPIC_PREFIX>-<scenario>`, prints `[time] step` lines while it
goes, and exits 0 when every check held, 1 with a `FAIL: ...` line at the first that did not.

Records are produced with values `p<partition>-<index>` so that a consumer's reads can be
compared with what was sent, partition by partition and offset by offset.
"""
import os
import sys
import time

T0 = time.monotonic()


def step(msg):
    print(f"[{time.monotonic() - T0:7.2f}s] {msg}", flush=True)


def fail(msg):
    """Exits at once: os._exit, because closing librdkafka consumers in the middle of a
    rebalance at interpreter exit can block for max.poll.interval.ms."""
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def ok(name):
    step(f"OK {name}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def env():
    """(bootstrap, prefix)."""
    bootstrap = os.environ.get("BOOTSTRAP")
    if not bootstrap:
        fail("BOOTSTRAP (host:port) is not set")
    prefix = os.environ.get("TOPIC_PREFIX") or f"groups-{os.getpid()}-{int(time.time())}"
    return bootstrap, prefix


def value(partition, index):
    return f"p{partition}-{index}".encode()


def parse_value(v):
    """(partition, index) from a value written by value()."""
    p, i = v.decode().split("-", 1)
    return int(p[1:]), int(i)


def wait_until(what, cond, timeout, poll=None, interval=0.05):
    """Calls poll() (if given) and cond() until cond() is true; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if poll is not None:
            poll()
        if cond():
            return
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout}s waiting for: {what}")
        if poll is None:
            time.sleep(interval)


def confluent_create_topic(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for t, f in fs.items():
        try:
            f.result(15)
        except Exception as e:  # noqa: BLE001
            fail(f"create topic {t}: {e}")
    wait_until(
        f"topic {topic} in Metadata with {partitions} partitions",
        lambda: topic in admin.list_topics(timeout=5).topics
        and len(admin.list_topics(timeout=5).topics[topic].partitions) == partitions,
        15,
    )
    step(f"created topic {topic} with {partitions} partitions")


def confluent_produce(bootstrap, topic, per_partition, partitions, start=0):
    """Produces values p<p>-<start..start+per_partition> to every partition; waits for acks.
    Returns {partition: [values]} in offset order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": False})
    errors = []
    sent = {}
    for part in range(partitions):
        for i in range(start, start + per_partition):
            v = value(part, i)
            sent.setdefault(part, []).append(v)
            p.produce(topic, v, partition=part,
                      on_delivery=lambda err, _m: err and errors.append(err))
    left = p.flush(15)
    check(left == 0 and not errors, f"produce to {topic}: {left} unacknowledged, errors {errors}")
    step(f"produced {per_partition} records to each of {partitions} partitions of {topic}")
    return sent


class Reads:
    """What one consumer read: [(partition, offset, value, committed)]. `committed` is false
    when the synchronous commit right after the read failed (as Kafka lets it fail during a
    rebalance); only such a record may be read again by the next owner."""

    def __init__(self, name):
        self.name = name
        self.items = []
        self.failed_commits = []

    def add(self, partition, offset, v, committed=True):
        self.items.append((partition, offset, v, committed))

    def commit_failed(self, partition, offset, error):
        self.failed_commits.append((partition, offset, str(error)))
        p, o, v, _ = self.items[-1]
        self.items[-1] = (p, o, v, False)
        step(f"{self.name}: commit of {partition}@{offset} failed during a rebalance: {error}")


def check_exactly_once(topic, sent, readers):
    """Every sent record was read by exactly one reader, at its offset (value index = offset
    within the partition when produced from an empty topic)."""
    seen = {}
    twice = 0
    for r in readers:
        for part, off, v, committed in r.items:
            key = (part, off)
            if key in seen:
                first, first_committed = seen[key]
                if first_committed:
                    fail(f"{topic}: partition {part} offset {off} read twice "
                         f"(by {first} and {r.name}) although {first} had committed it")
                twice += 1
            seen[key] = (r.name, committed)
            exp = sent.get(part, [])
            check(off < len(exp) and exp[off] == v,
                  f"{topic}: {r.name} read {v!r} at partition {part} offset {off}, "
                  f"expected {exp[off] if off < len(exp) else 'nothing'!r}")
    for part, vals in sent.items():
        for off in range(len(vals)):
            if (part, off) not in seen:
                fail(f"{topic}: partition {part} offset {off} ({vals[off]!r}) was never read")
    step(f"{topic}: all {len(seen)} records read, none twice past a successful commit "
         f"({twice} re-read after a failed commit) "
         + ", ".join(f"{r.name}={len(r.items)}" for r in readers))


def check_resume(topic, sent, first, committed, second):
    """The join-consume-commit-resume flow: `first` read some records and committed
    `committed` ({partition: next offset}); `second`, a new member of the same group, must
    read exactly the records from the committed offsets on (earliest where nothing was
    committed), in offset order per partition."""
    for p, off in committed.items():
        read_p = sorted(o for q, o, _v, _c in first.items if q == p)
        check(read_p == list(range(off)),
              f"{topic}: the first consumer read offsets {read_p} of partition {p} "
              f"but committed {off}")
    for p, vals in sent.items():
        start = committed.get(p, 0)
        got = [(o, v) for q, o, v, _c in second.items if q == p]
        exp = [(o, vals[o]) for o in range(start, len(vals))]
        check(got == exp,
              f"{topic}: the second consumer read partition {p} as {got}, expected {exp} "
              f"(committed offset {start})")
    step(f"{topic}: the second consumer resumed exactly after the commit {committed} "
         f"({len(second.items)} records)")
