"""confluent-kafka (librdkafka) with `partition.assignment.strategy=cooperative-sticky`:
incremental rebalances on a 4-partition topic.

1. C1 joins alone and gets all 4 partitions.
2. C2 joins: C1 gives up only some partitions (an incremental revoke, never all 4), C2
   gets them; the two own disjoint sets covering 0-3.
3. C3 joins: partitions move to C3, C1 and C2 each keep at least one partition (nobody
   loses all of theirs), the three cover 0-3 disjointly.
4. C3 closes (leaves): its partitions go to C1 and C2 with no revoke on C1 or C2.
Throughout, the callbacks' deltas are applied to each member's view, a partition is never
owned by two members at once, and every record produced meanwhile is read, with a
synchronous commit after each; a record is read a second time only when that commit was
refused because of a rebalance (ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS, as Kafka
answers a commit of a member that has not caught up with the group's generation).
"""
import time

from confluent_kafka import Consumer, KafkaError, KafkaException

from gcommon import (Reads, check, check_exactly_once, confluent_create_topic,
                     confluent_produce, env, fail, ok, step, wait_until)

PARTS = 4
REBALANCE_ERRORS = (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)
ALL = set(range(PARTS))

bootstrap, prefix = env()
topic = f"{prefix}-coop"
group = f"{prefix}-coop-group"
confluent_create_topic(bootstrap, topic, PARTS)


class Member:
    def __init__(self, name):
        self.name = name
        self.owned = set()
        self.revoked = []  # every revoke delta, in order
        self.assigned = []
        self.reads = Reads(name)
        self.closed = False
        self.c = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300,
        })
        self.c.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                         on_lost=self.on_lost)

    def on_assign(self, c, parts):
        delta = {p.partition for p in parts}
        check(not (delta & self.owned), f"{self.name}: assigned {delta} it already owns")
        self.owned |= delta
        self.assigned.append(delta)
        step(f"{self.name}: +{sorted(delta)} -> {sorted(self.owned)}")

    def on_revoke(self, c, parts):
        delta = {p.partition for p in parts}
        self.owned -= delta
        self.revoked.append(delta)
        step(f"{self.name}: -{sorted(delta)} -> {sorted(self.owned)}")

    def on_lost(self, c, parts):
        fail(f"{self.name}: partitions lost {[p.partition for p in parts]}")

    def poll(self):
        if self.closed:
            return
        m = self.c.poll(0.03)
        if m is None:
            return
        if m.error():
            fail(f"{self.name}: consumer error {m.error()}")
        check(m.partition() in self.owned,
              f"{self.name} read partition {m.partition()} it does not own")
        self.reads.add(m.partition(), m.offset(), m.value())
        try:
            self.c.commit(message=m, asynchronous=False)
        except KafkaException as e:
            # Kafka refuses a commit of the previous generation once the group has moved
            # on (ILLEGAL_GENERATION) and any commit while it completes a rebalance
            # (REBALANCE_IN_PROGRESS); with cooperative rebalancing the consumer keeps
            # reading its other partitions meanwhile.
            if e.args[0].code() not in REBALANCE_ERRORS:
                fail(f"{self.name}: synchronous commit of {m.partition()}@{m.offset()}: {e}")
            self.reads.commit_failed(m.partition(), m.offset(), e.args[0].name())

    def close(self):
        self.c.close()
        self.closed = True


members = []


def poll_all():
    for m in members:
        m.poll()
    live = [m for m in members if not m.closed]
    for i, x in enumerate(live):
        for y in live[i + 1:]:
            check(not (x.owned & y.owned),
                  f"{x.name} {sorted(x.owned)} and {y.name} {sorted(y.owned)} overlap")


def covers(live):
    return (all(m.owned for m in live) and set().union(*(m.owned for m in live)) == ALL
            and sum(len(m.owned) for m in live) == PARTS)


def settle(what, live, timeout=30):
    wait_until(what, lambda: covers(live), timeout, poll=poll_all)
    # stays that way for a few heartbeats
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        poll_all()
    check(covers(live), f"{what}: did not hold: " +
          ", ".join(f"{m.name}={sorted(m.owned)}" for m in live))
    step(f"{what}: " + ", ".join(f"{m.name}={sorted(m.owned)}" for m in live))


c1 = Member("C1")
members.append(c1)
settle("C1 alone owns every partition", [c1])
sent = confluent_produce(bootstrap, topic, 5, PARTS)

c2 = Member("C2")
members.append(c2)
settle("C1 and C2 split", [c1, c2])
check(all(len(d) < PARTS for d in c1.revoked),
      f"C1 had all its partitions revoked at once when C2 joined: {c1.revoked}")
check(len(c1.owned) >= 1, "C1 lost every partition when C2 joined")
before3 = {m.name: set(m.owned) for m in (c1, c2)}
rev_before3 = {m.name: len(m.revoked) for m in (c1, c2)}
more = confluent_produce(bootstrap, topic, 5, PARTS, start=5)

c3 = Member("C3")
members.append(c3)
settle("C1, C2 and C3 split", [c1, c2, c3])
for m in (c1, c2):
    check(m.owned and m.owned <= before3[m.name],
          f"{m.name} owned {sorted(before3[m.name])} before C3 joined and "
          f"{sorted(m.owned)} after: it should only give some up")
    for d in m.revoked[rev_before3[m.name]:]:
        check(d != before3[m.name],
              f"{m.name} had all of {sorted(d)} revoked when C3 joined")
before_leave = {m.name: (set(m.owned), len(m.revoked)) for m in (c1, c2)}
c3_had = set(c3.owned)

c3.close()
step(f"C3 closed (LeaveGroup), it owned {sorted(c3_had)}")
settle("C1 and C2 after C3 left", [c1, c2])
for m in (c1, c2):
    owned_before, n_rev = before_leave[m.name]
    check(len(m.revoked) == n_rev,
          f"{m.name} got revokes {m.revoked[n_rev:]} when C3 left; cooperative-sticky "
          "only hands out C3's partitions")
    check(owned_before <= m.owned, f"{m.name} lost partitions when C3 left")

for p in more:
    sent[p] = sent[p] + more[p]
wait_until("every record read", lambda: sum(len(m.reads.items) for m in members) >= 10 * PARTS,
           20, poll=poll_all)
end = time.monotonic() + 1.0
while time.monotonic() < end:
    poll_all()
check_exactly_once(topic, sent, [m.reads for m in members])
for m in (c1, c2):
    m.close()
ok("confluent-kafka cooperative-sticky")
