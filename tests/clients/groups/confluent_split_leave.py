"""confluent-kafka (librdkafka): two consumers of one group split a 4-partition topic; one
leaves (close sends LeaveGroup) and the other takes every partition and resumes from the
committed offsets.

1. Consumers A and B (eager default assignor, auto commit off) join group G; the script
   polls both until their assignments are disjoint, non-empty and cover partitions 0-3.
2. 10 records go to each partition. A reads 12 records and B reads everything it owns;
   each record is committed synchronously (commit(message, asynchronous=False)) right
   after it is read, and each consumer must only read partitions it owns.
3. A closes. Its session timeout is 45 s, so B owning all 4 partitions within 20 s shows
   the LeaveGroup was acted upon (not the session expiry).
4. B reads on until all 40 records are in: every record read by exactly one consumer at
   its offset (nothing lost, nothing read twice past the last commit). The committed
   offsets are 10 on every partition.
"""
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from gcommon import (Reads, check, check_exactly_once, confluent_create_topic,
                     confluent_produce, env, fail, ok, step, wait_until)

PARTS = 4
PER_PART = 10

bootstrap, prefix = env()
topic = f"{prefix}-split"
group = f"{prefix}-split-group"
confluent_create_topic(bootstrap, topic, PARTS)


def consumer(name):
    assigned = set()

    def on_assign(c, parts):
        assigned.clear()
        assigned.update(p.partition for p in parts)
        step(f"{name}: assigned {sorted(assigned)}")

    def on_revoke(c, parts):
        step(f"{name}: revoked {sorted(p.partition for p in parts)}")
        assigned.clear()

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 45000,
        "heartbeat.interval.ms": 300,
        "max.poll.interval.ms": 60000,
    })
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    return c, assigned


a, a_parts = consumer("A")
b, b_parts = consumer("B")
ra, rb = Reads("A"), Reads("B")


def poll_into(c, parts, reads, timeout=0.1):
    m = c.poll(timeout)
    if m is None:
        return None
    if m.error():
        fail(f"{reads.name}: consumer error {m.error()}")
    check(m.partition() in parts,
          f"{reads.name} read partition {m.partition()} which it does not own ({sorted(parts)})")
    reads.add(m.partition(), m.offset(), m.value())
    try:
        c.commit(message=m, asynchronous=False)
    except KafkaException as e:
        fail(f"{reads.name}: synchronous commit of {m.partition()}@{m.offset()}: {e}")
    return m


def split_done():
    return (a_parts and b_parts and not (a_parts & b_parts)
            and (a_parts | b_parts) == set(range(PARTS)))


wait_until("A and B split the 4 partitions",
           split_done, 40, poll=lambda: (poll_into(a, a_parts, ra), poll_into(b, b_parts, rb)))
step(f"split: A={sorted(a_parts)} B={sorted(b_parts)}")
# both are Stable: let a couple of heartbeats pass and check the split holds
end = time.monotonic() + 1.0
while time.monotonic() < end:
    poll_into(a, a_parts, ra, 0.05)
    poll_into(b, b_parts, rb, 0.05)
check(split_done(), f"the split did not hold: A={sorted(a_parts)} B={sorted(b_parts)}")
a_owned, b_owned = set(a_parts), set(b_parts)

sent = confluent_produce(bootstrap, topic, PER_PART, PARTS)
a_target = 12 if len(a_owned) * PER_PART > 12 else len(a_owned) * PER_PART - 1
b_target = len(b_owned) * PER_PART
wait_until(f"A reads {a_target} records and B all {b_target} of its records",
           lambda: len(ra.items) >= a_target and len(rb.items) >= b_target, 30,
           poll=lambda: (len(ra.items) < a_target and poll_into(a, a_parts, ra, 0.05),
                         len(rb.items) < b_target and poll_into(b, b_parts, rb, 0.05)))
check(a_parts == a_owned and b_parts == b_owned,
      f"assignments changed while consuming: A={sorted(a_parts)} B={sorted(b_parts)}")
step(f"A read {len(ra.items)} records of partitions {sorted(a_owned)}, B read {len(rb.items)}")

t_close = time.monotonic()
a.close()
step("A closed (LeaveGroup)")
wait_until("B owns all 4 partitions after A left",
           lambda: b_parts == set(range(PARTS)), 20, poll=lambda: poll_into(b, b_parts, rb, 0.05))
step(f"B took over every partition {time.monotonic() - t_close:.2f}s after A left")

wait_until("B reads every record A did not", lambda: len(ra.items) + len(rb.items) >= PARTS * PER_PART,
           20, poll=lambda: poll_into(b, b_parts, rb, 0.05))
# nothing more may come (a duplicate would show up here)
end = time.monotonic() + 1.0
while time.monotonic() < end:
    poll_into(b, b_parts, rb, 0.05)
check_exactly_once(topic, sent, [ra, rb])

committed = b.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=10)
got = {tp.partition: tp.offset for tp in committed}
check(got == {p: PER_PART for p in range(PARTS)}, f"committed offsets {got}, expected 10 each")
step(f"committed offsets {got}")
b.close()
ok("confluent-kafka split, leave and resume")
