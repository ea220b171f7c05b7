#!/usr/bin/env python3
"""Transactions with confluent-kafka 2.16.1 (librdkafka 2.16).

Env: BOOTSTRAP=host:port[,...], TOPIC_PREFIX (unique per run).

1. A transactional producer commits, aborts and commits again (records on all 3 partitions
   of `<prefix>-ctxn`); a read_committed reader (librdkafka's default isolation) sees
   exactly the committed records, in order; a read_uncommitted reader also sees the aborted
   ones (they were written, and are only hidden).
2. Consume-transform-produce: 30 input records; a read_committed group consumer turns each
   batch into output records and commits its input offsets inside the same transaction
   (`send_offsets_to_transaction` with the consumer's group metadata). One batch is
   aborted and re-read from the group's committed offsets. The output holds every input
   exactly once, and the group's committed offsets are the end of each input partition.
3. Zombie fencing: producer A (transactional.id Z) begins and writes; producer B with the
   same id runs init_transactions; A's next commit fails (fenced: PRODUCER_FENCED or
   INVALID_PRODUCER_EPOCH, fatal in librdkafka); none of A's records is visible to a
   read_committed reader, B's committed record is.
Exits 0 when all matched, 1 with a FAIL line at the first mismatch.
"""
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from txncommon import (check, committed_offsets, create_topics, env, fail, finish, read_all,
                       step)

P = 3
bootstrap, prefix = env()
base = {"bootstrap.servers": bootstrap}
step(f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
     f"{confluent_kafka.libversion()[0]}), bootstrap {bootstrap}")

simple, inp, outp, zombie = (f"{prefix}-ctxn", f"{prefix}-ctxn-in", f"{prefix}-ctxn-out",
                             f"{prefix}-ctxn-zombie")
create_topics(bootstrap, [simple, inp, outp, zombie], P)
step("created topics")


def producer(txn_id, **extra):
    conf = {**base, "transactional.id": txn_id, "transaction.timeout.ms": 30000,
            "linger.ms": 5, **extra}
    return Producer(conf)


def values(read):
    return {p: [v for _, _, v in recs] for p, recs in read.items()}


# --- 1. commit, abort, commit ----------------------------------------------------------
pr = producer(f"{prefix}-simple")
pr.init_transactions(30)
expected = {p: [] for p in range(P)}
everything = {p: [] for p in range(P)}
for txn, commit in [(1, True), (2, False), (3, True)]:
    pr.begin_transaction()
    for i in range(6):
        p = i % P
        v = f"txn{txn}-{'c' if commit else 'a'}-{i}".encode()
        pr.produce(simple, key=f"k{i}".encode(), value=v, partition=p)
        everything[p].append(v)
        if commit:
            expected[p].append(v)
    pr.flush(30)
    if commit:
        pr.commit_transaction(30)
    else:
        pr.abort_transaction(30)
    step(f"transaction {txn} {'committed' if commit else 'aborted'}")
got = values(read_all(bootstrap, simple, P, "read_committed"))
if check(got == expected, f"read_committed after commit/abort/commit: {got}, expected {expected}"):
    step("read_committed sees exactly the committed records")
got = values(read_all(bootstrap, simple, P, "read_uncommitted"))
if check(got == everything, f"read_uncommitted: {got}, expected all written records {everything}"):
    step("read_uncommitted also sees the aborted records")

# A transactional producer with an empty transaction: commit and abort both succeed.
pr.begin_transaction()
pr.commit_transaction(30)
pr.begin_transaction()
pr.abort_transaction(30)
step("empty transactions commit and abort")

# --- 2. consume-transform-produce --------------------------------------------------------
N = 30
plain = Producer(base)
for i in range(N):
    plain.produce(inp, key=f"in{i}".encode(), value=f"in-{i}".encode(), partition=i % P)
if plain.flush(30) != 0:
    fail("input records not delivered")
group = f"{prefix}-ctp"
consumer = Consumer({**base, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
consumer.subscribe([inp])
ctp = producer(f"{prefix}-ctp")
ctp.init_transactions(30)
seen = 0
batches = 0
aborted_once = False
deadline = time.time() + 60
while seen < N:
    if time.time() > deadline:
        fail(f"consume-transform-produce: only {seen} of {N} inputs within 60 s")
    msgs = consumer.consume(num_messages=7, timeout=1.0)
    msgs = [m for m in msgs if m.error() is None]
    if not msgs:
        continue
    batches += 1
    ctp.begin_transaction()
    for m in msgs:
        ctp.produce(outp, key=m.key(), value=b"out-" + m.value(), partition=m.partition())
    ctp.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                    consumer.consumer_group_metadata(), 30)
    if batches == 2 and not aborted_once:
        # abort this batch (its records written first, so that the broker has them to hide)
        # and rewind to the last committed offsets: it is processed again
        if ctp.flush(30) != 0:
            fail("records of the batch to abort not delivered")
        ctp.abort_transaction(30)
        aborted_once = True
        committed = consumer.committed(consumer.assignment(), timeout=20)
        for tp in committed:
            consumer.seek(TopicPartition(tp.topic, tp.partition,
                                         tp.offset if tp.offset >= 0 else 0))
        step(f"aborted a batch of {len(msgs)}, rewound to {[(t.partition, t.offset) for t in committed]}")
        continue
    ctp.commit_transaction(30)
    seen += len(msgs)
consumer.close()
if not aborted_once:
    fail("no batch was aborted")
step(f"processed {N} inputs in {batches} transactions (one aborted)")
out = read_all(bootstrap, outp, P, "read_committed")
got = sorted(v for recs in out.values() for _, _, v in recs)
want = sorted(f"out-in-{i}".encode() for i in range(N))
ok = check(got == want, f"output (read_committed): {len(got)} records {got}, expected each input once: {want}")
for p, recs in out.items():
    order = [int(v.decode().rsplit("-", 1)[1]) for _, _, v in recs]
    ok = check(order == sorted(order), f"output partition {p} out of input order: {order}") and ok
if ok:
    step("output holds every input exactly once, in input order per partition")
ends = {p: len([i for i in range(N) if i % P == p]) for p in range(P)}
offs = committed_offsets(bootstrap, group, inp, P)
if check(offs == ends, f"group {group} committed offsets {offs}, expected the input ends {ends}"):
    step(f"group committed offsets are the input ends {ends}")

# --- 3. zombie fencing -----------------------------------------------------------------
zid = f"{prefix}-zombie"
a = producer(zid)
a.init_transactions(30)
a.begin_transaction()
a.produce(zombie, value=b"zombie-1", partition=0)
a.produce(zombie, value=b"zombie-2", partition=1)
if a.flush(30) != 0:
    fail("zombie's first records not delivered")
b = producer(zid)
b.init_transactions(60)
step("second producer with the same transactional.id initialised")
b.begin_transaction()
b.produce(zombie, value=b"new-1", partition=0)
b.commit_transaction(30)
fenced = None
try:
    a.produce(zombie, value=b"zombie-3", partition=2)
    a.flush(10)
    a.commit_transaction(30)
except KafkaException as e:
    fenced = e.args[0]
if fenced is None:
    fail("the fenced producer's commit succeeded")
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
if fenced.code() not in FENCED:
    fail(f"the fenced producer's commit failed with {fenced}, expected fencing")
step(f"the older producer is fenced: {fenced.name()} fatal={fenced.fatal()}")
got = values(read_all(bootstrap, zombie, P, "read_committed"))
if check(got == {0: [b"new-1"], 1: [], 2: []},
         f"read_committed after fencing: {got}, expected only new-1"):
    step("none of the fenced producer's records is visible")
finish("confluent-kafka transactions")
