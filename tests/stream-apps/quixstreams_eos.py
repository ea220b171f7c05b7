#!/usr/bin/env python3
"""Stream app: quixstreams 3.28 with processing_guarantee="exactly-once", killed mid-way.

Env: BOOTSTRAP=host:port, TOPIC_PREFIX (unique per run), APP_PHASE_TIMEOUT (seconds, 60),
APP_LOG=1 (print the app's log of every run).

Under exactly-once, quixstreams makes its producer transactional and turns every checkpoint
into one transaction: the output records, the state stores' changelog records and the
consumer's input offsets (send_offsets_to_transaction) commit together; its consumers read
read_committed. The app is the keyed running count of quixstreams' "Stateful Processing"
page (a total per key in `State`), writing `{user, n, total}` per input record; it keeps a
fixed transactional.id, as a deployment does, so a restarted instance fences the crashed one.

1. Produce 60 records (3 keys, 20 each). Run the app with a checkpoint every 5 records; while
   processing record 37 it sleeps half a second (its outputs since the last checkpoint reach
   the broker inside the open transaction) and kills itself with SIGKILL.
2. Restart it on the same local state directory; it runs until no input came for a few
   seconds. Read the output read_committed: every input record exactly once with the right
   running total (no double counting of what the crashed run had processed), and the group's
   committed offsets are the input ends.
3. Delete the local state, produce 15 more, run again: the state is restored from the
   changelog (committed records only) and the totals go on at 21..25 per key.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KEYS = ["alice", "bob", "carol"]
CRASH_AT = 37


def step(msg):
    print(f"[quixstreams-eos] {msg}", flush=True)


def fail(msg):
    print(f"[quixstreams-eos] FAIL: {msg}", flush=True)
    sys.exit(1)


bootstrap = os.environ["BOOTSTRAP"]
prefix = os.environ["TOPIC_PREFIX"]
phase_timeout = float(os.environ.get("APP_PHASE_TIMEOUT", "60"))
input_name = f"{prefix}-eos-clicks"
output_name = f"{prefix}-eos-counts"
group = f"{prefix}-eos-counter"


def run_app(state_dir, crash_at, count):
    from quixstreams import Application, State

    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        processing_guarantee="exactly-once",
        commit_every=5,
        producer_extra_config={"transactional.id": f"{group}-eos",
                               "transaction.timeout.ms": 20000},
        # the killed instance leaves the group after 6 s rather than librdkafka's 45 s
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    )
    clicks = app.topic(input_name, value_deserializer="json")
    counts = app.topic(output_name, value_serializer="json")

    def count_messages(value: dict, state: State):
        total = state.get("total", default=0) + 1
        state.set("total", total)
        if value["n"] == crash_at:
            time.sleep(0.5)
            print("CRASHING", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return {"user": value["user"], "n": value["n"], "total": total}

    sdf = app.dataframe(clicks)
    sdf = sdf.apply(count_messages, stateful=True)
    sdf.to_topic(counts)
    if count:
        app.run(count=count, timeout=phase_timeout)
    else:
        # until no input came for 8 s (after the rebalance and the state recovery)
        app.run(timeout=8)


def produce(first_n, count):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(first_n, first_n + count):
        user = KEYS[n % len(KEYS)]
        p.produce(input_name, key=user, value=json.dumps({"user": user, "n": n}))
    left = p.flush(30)
    if left:
        fail(f"{left} input records not delivered")


def phase(state_dir, crash_at=-1, count=0, killed=False):
    started = time.time()
    proc = subprocess.run([sys.executable, __file__, "app", state_dir, str(crash_at), str(count)],
                          capture_output=True, text=True, timeout=phase_timeout + 120)
    log = proc.stdout + proc.stderr
    if killed:
        if proc.returncode != -signal.SIGKILL or "CRASHING" not in proc.stdout:
            print(log)
            fail(f"the app did not crash at record {crash_at} (exit {proc.returncode})")
    elif proc.returncode != 0:
        print(log)
        fail(f"the app exited with {proc.returncode}")
    if os.environ.get("APP_LOG") == "1":
        print(log)
    step(f"app ran {time.time() - started:.1f}s (exit {proc.returncode})")


def read_output(isolation):
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-eos-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    md = c.list_topics(output_name, timeout=10).topics[output_name]
    parts = sorted(md.partitions)
    c.assign([TopicPartition(output_name, p, 0) for p in parts])
    out, at_end, quiet = [], set(), None
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(at_end) == len(parts):
                    quiet = quiet or time.time()
                    if time.time() - quiet > 0.5:
                        return out
                continue
            quiet = None
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                fail(f"read {output_name}: {m.error()}")
            at_end.discard(m.partition())
            out.append(json.loads(m.value()))
    finally:
        c.close()
    fail(f"read {output_name} ({isolation}): no end within 60 s")


def check_totals(outputs, upto):
    """Each input n < upto once, with total = its position among its key's records."""
    by_n = {}
    for o in outputs:
        by_n.setdefault(o["n"], []).append(o["total"])
    dups = {n: t for n, t in by_n.items() if len(t) > 1}
    if dups:
        fail(f"inputs with several outputs (double counting): {sorted(dups.items())[:10]}")
    missing = [n for n in range(upto) if n not in by_n]
    if missing:
        fail(f"inputs without output: {missing}")
    extra = sorted(n for n in by_n if n >= upto)
    if extra:
        fail(f"outputs for inputs never produced: {extra}")
    wrong = [(n, by_n[n][0], n // len(KEYS) + 1) for n in range(upto)
             if by_n[n][0] != n // len(KEYS) + 1]
    if wrong:
        fail(f"wrong running totals (input, got, expected): {wrong[:10]}")


def committed_is_end():
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        md = c.list_topics(input_name, timeout=10).topics[input_name]
        tps = [TopicPartition(input_name, p) for p in sorted(md.partitions)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=20)}
        ends = {p: c.get_watermark_offsets(TopicPartition(input_name, p), timeout=10)[1]
                for p in sorted(md.partitions)}
    finally:
        c.close()
    if committed != ends:
        fail(f"group {group} committed {committed}, expected the input ends {ends}")
    return committed


def main():
    import quixstreams
    from confluent_kafka.admin import AdminClient, NewTopic

    step(f"quixstreams {quixstreams.__version__}, bootstrap {bootstrap}, input {input_name}")
    work = tempfile.mkdtemp(prefix="quixstreams-eos-")
    state_dir = os.path.join(work, "state")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # retention.ms given explicitly: quixstreams derives its changelog settings from it
        for _, f in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1,
                                                  config={"retention.ms": "604800000"})
                                         for t in (input_name, output_name)]).items():
            f.result(20)
        produce(0, 60)
        phase(state_dir, crash_at=CRASH_AT, killed=True)
        step(f"the app killed itself (SIGKILL) while processing record {CRASH_AT}")
        phase(state_dir)
        outputs = read_output("read_committed")
        check_totals(outputs, 60)
        uncommitted = read_output("read_uncommitted")
        step(f"after the restart: 60 outputs read_committed, each input once with the right "
             f"total ({len(uncommitted)} read_uncommitted, aborted ones included)")
        step(f"group offsets are the input ends {committed_is_end()}")

        shutil.rmtree(state_dir)
        produce(60, 15)
        phase(state_dir, count=15)
        outputs = read_output("read_committed")
        check_totals(outputs, 75)
        step("with no local state, restored from the changelog: totals go on without a gap")
        step(f"group offsets are the input ends {committed_is_end()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step("OK")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "app":
        run_app(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
