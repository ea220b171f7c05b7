"""Known traffic for the metrics test (apps/gateway/tests/observability.rs), with
confluent-kafka:

1. Creates topic T with 2 partitions, then asks to create it again (one
   TOPIC_ALREADY_EXISTS error in a CreateTopics response).
2. Produces 30 records to partition 0 and 20 to partition 1 and waits for the acks.
3. A consumer of group G reads all 50 and commits offsets 30 and 20 synchronously.
4. Produces 7 more records to partition 0 (lag 7 on partition 0, 0 on partition 1), then
   the consumer closes (leaves the group).

The Rust test scrapes /metrics before and after and checks the counters, the histogram
and the lag gauges against these numbers.
"""
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gcommon import check, confluent_create_topic, env, ok, step, value

bootstrap, prefix = env()
topic = f"{prefix}-metrics"
group = f"{prefix}-metrics-group"
confluent_create_topic(bootstrap, topic, 2)

admin = AdminClient({"bootstrap.servers": bootstrap})
again = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
for t, f in again.items():
    try:
        f.result(15)
        check(False, "creating an existing topic succeeded")
    except Exception as e:  # noqa: BLE001
        check("TOPIC_ALREADY_EXISTS" in str(e) or "already exists" in str(e),
              f"unexpected error creating {t} again: {e}")
step("second create of the topic refused")


def produce(counts, start):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "enable.idempotence": False})
    for part, n in counts:
        for i in range(start, start + n):
            p.produce(topic, value(part, i), partition=part)
    check(p.flush(15) == 0, "produce did not complete")


produce([(0, 30), (1, 20)], 0)
step("produced 30 + 20 records")

c = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 10000,
    "heartbeat.interval.ms": 300,
})
c.subscribe([topic])
read = 0
deadline = time.monotonic() + 30
while read < 50:
    m = c.poll(0.2)
    check(time.monotonic() < deadline, f"read only {read} of 50 records")
    if m is None:
        continue
    check(not m.error(), f"consumer error {m.error() if m else ''}")
    read += 1
c.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 20)],
         asynchronous=False)
step("consumer read 50 records and committed 0:30 1:20")

produce([(0, 7)], 30)
step("produced 7 more records to partition 0")
c.close()
ok("confluent_metrics")
