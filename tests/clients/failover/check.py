"""Checks of the failover drivers' event logs (see producer.py, consumer.py).

PHASE=progress: waits (up to TIMEOUT seconds) until the producer had a record sent after
SINCE_MS acknowledged on every partition in PARTS, the group read such a record of each
and had a commit up to such a record of each accepted, and (ALL_MEMBERS=1) every member
had a commit accepted after SINCE_MS. Fails at once on a producer error that is fatal or a record that failed
for good. Prints `MEASURED:` lines: the time from SINCE_MS to the first of each, and to
the last partition's first, labelled LABEL.

PHASE=verify (after the producer has stopped): waits until the group has read and
committed every acknowledged record, stops the members (touches MEMBERS_STOP) and waits
until they closed; then reads the whole topic back and checks:
- every acknowledged record is in the log exactly once, at the partition and offset its
  acknowledgement gave, and no record (acknowledged or not) is in the log twice;
- the group read every acknowledged record;
- no member read a record below an offset of its partition that had already been
  committed (records after the last commit may be read again; records before it never);
- the committed offset of each partition is the highest commit that was accepted.

Env: BOOTSTRAP, TOPIC, PARTITIONS, GROUP, PRODUCER_EVENTS, MEMBER_EVENTS (comma-separated),
PHASE; progress: SINCE_MS, PARTS (comma-separated), LABEL, TIMEOUT, ALL_MEMBERS; verify:
MEMBERS_STOP.
"""
import os
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fcommon import fail, now_ms, read_events, step

BOOTSTRAP = os.environ["BOOTSTRAP"]
TOPIC = os.environ["TOPIC"]
PARTITIONS = int(os.environ["PARTITIONS"])
GROUP = os.environ["GROUP"]
PRODUCER = os.environ["PRODUCER_EVENTS"]
MEMBERS = os.environ["MEMBER_EVENTS"].split(",")
PHASE = os.environ["PHASE"]


def producer_events():
    evs = read_events(PRODUCER)
    for e in evs:
        if "fail" in e:
            fail(f"the producer gave up a record: {e}")
        if e.get("fatal"):
            fail(f"the producer hit a fatal error: {e}")
    return evs


def progress():
    since = int(os.environ["SINCE_MS"])
    parts = [int(p) for p in os.environ["PARTS"].split(",")]
    label = os.environ["LABEL"]
    all_members = os.environ.get("ALL_MEMBERS") == "1"
    deadline = time.time() + float(os.environ.get("TIMEOUT", "120"))
    while True:
        acks, reads, commits = {}, {}, {}
        any_commit = None
        # Only records handed to the producer after SINCE_MS count: an answer that was
        # on its way at SINCE_MS, or a read of a record fetched before, shows nothing.
        sent, sent_at_offset = {}, {}
        member_commit = [None] * len(MEMBERS)
        for e in producer_events():
            if "ack" not in e:
                continue
            n, p, o = e["ack"]
            sent[n] = e["sent"]
            sent_at_offset[(p, o)] = e["sent"]
            if e["sent"] > since:
                acks.setdefault(p, e["t"])
        for i, path in enumerate(MEMBERS):
            for e in read_events(path):
                if e["t"] <= since:
                    continue
                if "read" in e:
                    p, _, n = e["read"]
                    if sent.get(n, 0) > since:
                        reads.setdefault(p, e["t"])
                elif "commit" in e:
                    # A commit up to a record sent after SINCE_MS.
                    p, o = e["commit"]
                    if sent_at_offset.get((p, o - 1), 0) > since:
                        commits.setdefault(p, e["t"])
                        any_commit = min(any_commit or e["t"], e["t"])
                    if member_commit[i] is None:
                        member_commit[i] = e["t"]
        missing = []
        for what, got in (("acknowledged", acks), ("read", reads), ("committed", commits)):
            absent = [p for p in parts if p not in got]
            if absent:
                missing.append(f"{what}: partitions {absent}")
        if all_members and None in member_commit:
            missing.append(f"a commit by every member: {member_commit}")
        if not missing:
            break
        if time.time() > deadline:
            fail(f"{label}: not every partition of {parts} resumed; missing {missing}")
        time.sleep(0.2)

    def ms(t):
        return t - since

    def first(got):
        return min(ms(got[p]) for p in parts)

    def last(got):
        return max(ms(got[p]) for p in parts)

    print(f"MEASURED: {label}: the group's coordinator: first commit up to a record sent "
          f"after it accepted {ms(any_commit)} ms (any partition)", flush=True)
    print(f"MEASURED: {label}: partitions {parts}: first record sent after it acknowledged "
          f"{first(acks)} ms, on each partition within {last(acks)} ms", flush=True)
    print(f"MEASURED: {label}: partitions {parts}: first record sent after it read by the "
          f"group {first(reads)} ms, on each partition within {last(reads)} ms", flush=True)
    print(f"MEASURED: {label}: partitions {parts}: first commit up to a record sent after it "
          f"accepted {first(commits)} ms, on each partition within {last(commits)} ms",
          flush=True)


def read_topic():
    """{(partition, offset): n} of the whole topic."""
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP + "-verify",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    highs = {}
    for p in range(PARTITIONS):
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        highs[p] = high
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    log = {}
    at = {p: 0 for p in range(PARTITIONS)}
    deadline = time.time() + 120
    while any(at[p] < highs[p] for p in at):
        if time.time() > deadline:
            fail(f"reading the topic back: at {at}, ends {highs}")
        for m in c.consume(num_messages=500, timeout=0.5):
            err = m.error()
            if err is None:
                log[(m.partition(), m.offset())] = int(m.value())
                at[m.partition()] = m.offset() + 1
            elif err.code() != KafkaError._PARTITION_EOF:
                fail(f"reading the topic back: {err}")
    c.close()
    return log, highs


def committed():
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP,
                  "enable.auto.commit": False})
    got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    c.close()
    return {tp.partition: tp.offset for tp in got}


def verify():
    evs = producer_events()
    done = [e for e in evs if "done" in e]
    if not done:
        fail("the producer did not finish")
    if done[-1]["left"]:
        fail(f"the producer stopped with records unconfirmed: {done[-1]}")
    acked = {}
    for e in evs:
        if "ack" in e:
            n, p, o = e["ack"]
            if n in acked:
                fail(f"record {n} acknowledged twice: {acked[n]} and {(p, o)}")
            acked[n] = (p, o)
    step(f"{len(acked)} records acknowledged of {done[-1]['done']} sent")
    want = {}
    for p, o in acked.values():
        want[p] = max(want.get(p, 0), o + 1)

    deadline = time.time() + 120
    while True:
        read, top = set(), {}
        for path in MEMBERS:
            for e in read_events(path):
                if "read" in e:
                    read.add((e["read"][0], e["read"][1]))
                elif "commit" in e:
                    p, o = e["commit"]
                    top[p] = max(top.get(p, 0), o)
        unread = [po for po in acked.values() if po not in read]
        behind = {p: (top.get(p), o) for p, o in want.items() if top.get(p, 0) < o}
        if not unread and not behind:
            break
        if time.time() > deadline:
            fail(f"the group did not read and commit everything: {len(unread)} acknowledged "
                 f"records unread (first {sorted(unread)[:5]}), commits behind {behind}")
        time.sleep(0.2)
    open(os.environ["MEMBERS_STOP"], "w").close()
    deadline = time.time() + 60
    while not all(any("closed" in e for e in read_events(p)) for p in MEMBERS):
        if time.time() > deadline:
            fail("the members did not close")
        time.sleep(0.2)

    for i, path in enumerate(MEMBERS):
        evs = read_events(path)
        assigned = [e["assigned"] for e in evs if "assigned" in e]
        errors = sorted({e["error"] for e in evs if "commit_failed" in e})
        step(f"member {i}: assignments {assigned}; {sum('read' in e for e in evs)} reads, "
             f"{sum('commit' in e for e in evs)} commits accepted, "
             f"{sum('commit_failed' in e for e in evs)} refused {errors[:3]}")
    log, highs = read_topic()
    step(f"read back {len(log)} records, ends {highs}")
    where = {}
    for po, n in log.items():
        where.setdefault(n, []).append(po)
    twice = {n: ps for n, ps in where.items() if len(ps) > 1}
    if twice:
        first = sorted(twice)[:5]
        fail(f"{len(twice)} records are in the log more than once, e.g. "
             f"{[(n, twice[n]) for n in first]}")
    lost = {n: po for n, po in acked.items() if log.get(po) != n}
    if lost:
        first = sorted(lost)[:5]
        fail(f"{len(lost)} acknowledged records are not at their offset, e.g. "
             f"{[(n, lost[n], where.get(n)) for n in first]}")
    unacked = len(log) - len(acked)
    step(f"every acknowledged record is in the log once; {unacked} records in the log were "
         "not acknowledged (sent before a failure and not reported)")

    # Reads against commits, in time order over both members.
    # A member's own events stay in the order it logged them (times are in milliseconds,
    # so a commit and the reads before it often share one).
    timeline = []
    for i, path in enumerate(MEMBERS):
        for j, e in enumerate(read_events(path)):
            if "read" in e:
                timeline.append((e["t"], i, j, "read", e["read"][0], e["read"][1]))
            elif "commit" in e:
                timeline.append((e["t"], i, j, "commit", e["commit"][0], e["commit"][1]))
    timeline.sort()
    commit_at = {}
    seen = set()
    rereads, bad = 0, []
    for t, member, _, kind, p, o in timeline:
        if kind == "commit":
            commit_at[p] = max(commit_at.get(p, 0), o)
            continue
        if (p, o) in seen:
            rereads += 1
        seen.add((p, o))
        if o < commit_at.get(p, 0):
            bad.append((t, f"member {member}", p, o, commit_at[p]))
    if bad:
        fail(f"{len(bad)} reads below an offset already committed (time, member, partition, "
             f"offset, committed), first {bad[:5]}")
    step(f"no read below a committed offset; {rereads} records read again after their "
         "partition's last commit")

    stored = committed()
    mismatch = {p: (stored.get(p), commit_at.get(p)) for p in range(PARTITIONS)
                if commit_at.get(p) is not None and stored.get(p) != commit_at.get(p)}
    if mismatch:
        fail(f"committed offsets differ from the highest accepted commits (stored, accepted): "
             f"{mismatch}")
    step(f"committed offsets are the last accepted commits: {dict(sorted(stored.items()))}")
    print(f"OK {len(acked)} acknowledged records, each once in the log and read by the group",
          flush=True)


if PHASE == "progress":
    progress()
elif PHASE == "verify":
    verify()
else:
    fail(f"unknown PHASE {PHASE}")
os._exit(0)
