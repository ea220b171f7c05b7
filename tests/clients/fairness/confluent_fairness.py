"""Fairness under a produce flood (apps/gateway/tests/fairness.rs), with confluent-kafka.

A flooder process produces 1 KiB records to topic F as fast as librdkafka can send them
(large batches, several producer instances, each its own connection). Meanwhile this process
is a well-behaved client: every 20 ms it produces one record to topic Q (acks=all, no linger)
and a consumer of Q reads it back. For each record it measures the produce round trip
(delivery report) and the end-to-end time (produce call to the consumer seeing it).

Passes when, after a warm-up, the p99 of both stays within FAIRNESS_P99_MS (default 250)
and the flooder really flooded (at least FAIRNESS_MIN_FLOOD_MB megabytes acknowledged while
the probe ran). Prints the figures either way.
"""
import multiprocessing as mp
import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "groups"))
from gcommon import check, confluent_create_topic, env, ok, step  # noqa: E402

bootstrap, prefix = env()
flood_topic = f"{prefix}-flood"
quiet_topic = f"{prefix}-quiet"
P99_MS = float(os.environ.get("FAIRNESS_P99_MS", "250"))
MIN_FLOOD_MB = float(os.environ.get("FAIRNESS_MIN_FLOOD_MB", "20"))
PROBE_SECS = float(os.environ.get("FAIRNESS_PROBE_SECS", "20"))
WARMUP_SECS = 3.0
FLOODERS = int(os.environ.get("FAIRNESS_FLOODERS", "2"))


def flood(stop, acked, index):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 65536,
        "acks": 1,
        "enable.idempotence": False,
        "client.id": f"flooder-{index}",
    })
    payload = os.urandom(1024)

    def delivered(err, _msg):
        if err is None:
            with acked.get_lock():
                acked.value += 1024

    parent = os.getppid()
    # Stops with the probe, or when the probe is gone (it exits with os._exit).
    while not stop.is_set() and os.getppid() == parent:
        try:
            p.produce(flood_topic, payload, partition=index % 2, on_delivery=delivered)
        except BufferError:
            p.poll(0.005)
            continue
        p.poll(0)
    p.flush(30)


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round((len(s) - 1) * q)))]


# The flood topic keeps at most 32 MiB per partition, so the flood can run at full speed
# for as long as the probe does without filling the embedded store.
admin = AdminClient({"bootstrap.servers": bootstrap})
for t, f in admin.create_topics([NewTopic(flood_topic, num_partitions=2, replication_factor=1,
                                          config={"retention.bytes": str(32 << 20)})]).items():
    f.result(15)
step(f"created topic {flood_topic} with retention.bytes 32 MiB")
confluent_create_topic(bootstrap, quiet_topic, 1)

consumer = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": f"{prefix}-quiet-reader",
    "enable.auto.commit": False,
    "fetch.wait.max.ms": 10,
    "fetch.min.bytes": 1,
    "client.id": "quiet-consumer",
})
consumer.assign([TopicPartition(quiet_topic, 0, 0)])
quiet = Producer({
    "bootstrap.servers": bootstrap,
    "linger.ms": 0,
    "acks": "all",
    "client.id": "quiet-producer",
})

stop = mp.Event()
acked = mp.Value("q", 0)
flooders = [mp.Process(target=flood, args=(stop, acked, i), daemon=True) for i in range(FLOODERS)]
for f in flooders:
    f.start()
step(f"{FLOODERS} flooders started")

sent_at = {}
produce_ms = []
e2e_ms = []
start = time.monotonic()
measure_from = start + WARMUP_SECS
flood_at_start = None
i = 0


def delivered(err, msg):
    check(err is None, f"quiet produce failed: {err}")
    key = int(msg.key())
    if sent_at[key] >= measure_from:
        produce_ms.append((time.monotonic() - sent_at[key]) * 1000)


next_send = start
while time.monotonic() < start + WARMUP_SECS + PROBE_SECS:
    now = time.monotonic()
    if flood_at_start is None and now >= measure_from:
        flood_at_start = acked.value
    if now >= next_send:
        sent_at[i] = now
        quiet.produce(quiet_topic, b"q", key=str(i).encode(), on_delivery=delivered)
        i += 1
        next_send += 0.02
    quiet.poll(0)
    m = consumer.poll(0.005)
    if m is not None and m.error() is None:
        key = int(m.key())
        if sent_at[key] >= measure_from:
            e2e_ms.append((time.monotonic() - sent_at[key]) * 1000)
flood_bytes = acked.value - (flood_at_start or 0)
stop.set()
check(quiet.flush(30) == 0, "quiet producer did not flush")
deadline = time.monotonic() + 15
while len(e2e_ms) < len(produce_ms) and time.monotonic() < deadline:
    m = consumer.poll(0.05)
    if m is not None and m.error() is None:
        key = int(m.key())
        if sent_at[key] >= measure_from:
            e2e_ms.append((time.monotonic() - sent_at[key]) * 1000)
for f in flooders:
    f.join(60)
consumer.close()

flood_mb = flood_bytes / 1e6
p99_produce = percentile(produce_ms, 0.99)
p99_e2e = percentile(e2e_ms, 0.99)
print(f"flood: {flood_mb:.1f} MB acknowledged in {PROBE_SECS:.0f} s "
      f"({flood_mb / PROBE_SECS:.1f} MB/s) by {FLOODERS} flooders")
print(f"quiet produce: n={len(produce_ms)} p50={percentile(produce_ms, 0.5):.1f} ms "
      f"p99={p99_produce:.1f} ms max={max(produce_ms):.1f} ms")
print(f"quiet end-to-end: n={len(e2e_ms)} p50={percentile(e2e_ms, 0.5):.1f} ms "
      f"p99={p99_e2e:.1f} ms max={max(e2e_ms):.1f} ms")
check(flood_mb >= MIN_FLOOD_MB, f"the flood was too weak to prove anything: {flood_mb:.1f} MB")
check(len(e2e_ms) >= 0.9 * len(produce_ms), f"quiet records lost: {len(e2e_ms)} of {len(produce_ms)}")
check(p99_produce <= P99_MS, f"quiet produce p99 {p99_produce:.1f} ms > {P99_MS} ms")
check(p99_e2e <= P99_MS, f"quiet end-to-end p99 {p99_e2e:.1f} ms > {P99_MS} ms")
ok("fairness")
