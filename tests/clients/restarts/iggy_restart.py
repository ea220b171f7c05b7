"""The Iggy server restarts under a running producer and consumer (bridged gateway).

Phase `run`: an idempotent producer (acks=all) sends keyed records for RUN_SECS while a
group consumer reads; the test restarts the Iggy server meanwhile. Both clients must ride
it out (retriable errors only). At the end the keys of every acknowledged record are
written to ACK_FILE.

Phase `verify`: a fresh assign() consumer reads the whole topic from the beginning; every
acknowledged record must be there exactly once.

Env: BOOTSTRAP, TOPIC_PREFIX, PHASE=run|verify, ACK_FILE, RUN_SECS (run).
"""

import os
import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ["BOOTSTRAP"]
TOPIC = os.environ["TOPIC_PREFIX"] + "-iggy-restart"
ACK_FILE = os.environ["ACK_FILE"]
PHASE = os.environ["PHASE"]


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    os._exit(1)


if PHASE == "run":
    run_secs = float(os.environ.get("RUN_SECS", "12"))
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    acked, failed = [], []

    def on_delivery(err, msg):
        (failed if err else acked).append((err, msg.key()))

    stop = threading.Event()
    consumed = [0]

    def consume():
        c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC + "-g",
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        c.subscribe([TOPIC])
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None and not m.error():
                consumed[0] += 1
        c.close()

    t = threading.Thread(target=consume)
    t.start()
    p = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 90000, "linger.ms": 5})
    i = 0
    end = time.time() + run_secs
    while time.time() < end:
        try:
            p.produce(TOPIC, key=b"k%06d" % i, value=b"v%06d" % i, on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.1)
        p.poll(0)
        time.sleep(0.005)
    left = p.flush(120)
    stop.set()
    t.join(30)
    if left:
        fail(f"{left} records still unconfirmed after the restart")
    if failed:
        fail(f"{len(failed)} records failed for good, first: {failed[0][0]}")
    with open(ACK_FILE, "w") as f:
        f.write("\n".join(k.decode() for _, k in acked))
    print(f"OK sent {i}, acknowledged {len(acked)}, consumer read {consumed[0]} meanwhile",
          flush=True)
    os._exit(0)

acked = open(ACK_FILE).read().split()
c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": TOPIC + "-verify",
              "enable.auto.commit": False})
c.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
seen = {}
deadline = time.time() + 60
while len(seen) < len(acked) and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            continue
        fail(f"consumer error {m.error()}")
    k = m.key().decode()
    seen[k] = seen.get(k, 0) + 1
extra = c.poll(3)
while extra is not None:
    if not extra.error():
        k = extra.key().decode()
        seen[k] = seen.get(k, 0) + 1
    extra = c.poll(1)
c.close()
missing = [k for k in acked if k not in seen]
twice = [k for k, n in seen.items() if n > 1]
if missing:
    fail(f"{len(missing)} acknowledged records missing, first {missing[:5]}")
if twice:
    fail(f"{len(twice)} records stored more than once, first {twice[:5]}")
print(f"OK all {len(acked)} acknowledged records read exactly once", flush=True)
os._exit(0)
