#!/usr/bin/env python3
"""Stream app: quixstreams 3.28 (state in RocksDB, changelog topics with cleanup.policy=compact).

Env: BOOTSTRAP=host:port, TOPIC_PREFIX (unique per run), APP_PHASE_TIMEOUT (seconds, default 60).

The application is the stateful processing of quixstreams' own documentation, unchanged
except for names: a keyed running count kept in `State` (`count_messages`, the "Stateful
Processing" page) and a tumbling-window count per key (`tumbling_window(...).count().current()`,
the "Windowing" page). Both keep their state in local RocksDB stores that quixstreams backs
with changelog topics it creates itself with `cleanup.policy=compact`.

1. Produce 30 records (3 keys, 10 each, timestamps inside one 60 s window), run the app in a
   child process until it has emitted them all, check every running count and window count.
2. Delete the app's state directory (the RocksDB stores are gone). With COMPACTION_WAIT,
   wait until the gateway's cleaner has compacted a changelog (see changelog.py).
3. Produce 15 more, run the app again: it must restore both stores from their changelog
   topics, so the counts continue at 11..15 per key instead of starting again at 1.
4. The changelog topics exist, DescribeConfigs shows cleanup.policy=compact on them, and
   their records, read back, hold the final count of every key.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

KEYS = ["alice", "bob", "carol"]
WINDOW_S = 60


def step(msg):
    print(f"[quixstreams] {msg}", flush=True)


def fail(msg):
    print(f"[quixstreams] FAIL: {msg}", flush=True)
    sys.exit(1)


bootstrap = os.environ["BOOTSTRAP"]
prefix = os.environ["TOPIC_PREFIX"]
phase_timeout = float(os.environ.get("APP_PHASE_TIMEOUT", "60"))
input_name = f"{prefix}-clicks"
output_name = f"{prefix}-click-counts"
group = f"{prefix}-counter"


def run_app(state_dir, expected_outputs):
    """The application, as documented; runs until `expected_outputs` outputs, prints them."""
    from quixstreams import Application, State
    from quixstreams.models import TopicConfig

    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        # a checkpoint (changelog records) every 5 messages rather than every 5 s, so the
        # changelog holds several values per key for the gateway's cleaner to compact
        commit_every=5,
    )
    clicks = app.topic(input_name, value_deserializer="json",
                       config=TopicConfig(num_partitions=2, replication_factor=1))
    counts = app.topic(output_name, value_serializer="json")

    def count_messages(value: dict, state: State):
        total = state.get("total", default=0)
        total += 1
        state.set("total", total)
        return {**value, "total": total}

    sdf = app.dataframe(clicks)
    running = sdf.apply(count_messages, stateful=True)
    running = running.apply(lambda v: {"kind": "total", "user": v["user"], "n": v["n"],
                                       "total": v["total"]})
    running.to_topic(counts)

    windowed = sdf.tumbling_window(duration_ms=timedelta(seconds=WINDOW_S)).count().current()
    windowed = windowed.apply(lambda w: {"kind": "window", "start": w["start"], "end": w["end"],
                                         "count": w["value"]})
    windowed.to_topic(counts)

    outputs = app.run(count=expected_outputs, timeout=phase_timeout, collect=True, metadata=True)
    for o in outputs:
        o = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in o.items()
             if k in ("kind", "user", "n", "total", "start", "end", "count", "_key")}
        print("OUTPUT " + json.dumps(o), flush=True)


def produce(first_n, count, base_ts):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(first_n, first_n + count):
        user = KEYS[n % len(KEYS)]
        p.produce(input_name, key=user, value=json.dumps({"user": user, "n": n}),
                  timestamp=base_ts + n * 50)
    left = p.flush(30)
    if left:
        fail(f"{left} input records not delivered")


def phase(state_dir, expected):
    """Runs the app in a child process (a real restart); returns its outputs."""
    started = time.time()
    proc = subprocess.run([sys.executable, __file__, "app", state_dir, str(expected)],
                          capture_output=True, text=True, timeout=phase_timeout + 120)
    outputs = [json.loads(line[len("OUTPUT "):]) for line in proc.stdout.splitlines()
               if line.startswith("OUTPUT ")]
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(log)
        fail(f"the app exited with {proc.returncode}")
    step(f"app ran {time.time() - started:.1f}s, {len(outputs)} outputs")
    return outputs, log


def check_outputs(outputs, first_n, count, prior):
    """Every input n in [first_n, first_n+count) gave the running total and window count its
    key had reached: prior[user] + its position among this phase's records of that key."""
    seen = {}
    totals = {}
    windows = {}
    for o in outputs:
        if o.get("kind") == "total":
            totals[o["n"]] = o["total"]
        elif o.get("kind") == "window":
            windows.setdefault(o["_key"], []).append(o["count"])
    for n in range(first_n, first_n + count):
        user = KEYS[n % len(KEYS)]
        seen[user] = seen.get(user, prior.get(user, 0)) + 1
        if totals.get(n) != seen[user]:
            fail(f"record {n} ({user}): running total {totals.get(n)}, expected {seen[user]}"
                 f" (all totals: {sorted(totals.items())})")
    for user in KEYS:
        want = list(range(prior.get(user, 0) + 1, seen[user] + 1))
        if windows.get(user) != want:
            fail(f"window counts of {user}: {windows.get(user)}, expected {want}")
    return seen


def changelog_topics(admin):
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith("changelog__")
             and group in t]
    if len(names) != 2:
        fail(f"expected 2 changelog topics of group {group}, found {names}")
    return names


def main():
    import quixstreams
    from confluent_kafka.admin import AdminClient, NewTopic

    from changelog import await_compaction, check_compact, read_topic

    step(f"quixstreams {quixstreams.__version__}, bootstrap {bootstrap}, input {input_name}")
    # all timestamps inside one window, well in the past (no window closes meanwhile)
    base_ts = (int(time.time()) // WINDOW_S - 10) * WINDOW_S * 1000
    work = tempfile.mkdtemp(prefix="quixstreams-state-")
    state_dir = os.path.join(work, "state")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for t, f in admin.create_topics([NewTopic(input_name, num_partitions=2,
                                                  replication_factor=1)]).items():
            f.result(20)
        produce(0, 30, base_ts)
        outputs, _ = phase(state_dir, 60)
        after1 = check_outputs(outputs, 0, 30, {})
        step(f"first run: running totals and window counts right ({after1})")
        if not os.path.isdir(state_dir) or not os.listdir(state_dir):
            fail(f"the app left no local state in {state_dir}")

        shutil.rmtree(state_dir)
        step("deleted the local state directory")
        names = changelog_topics(admin)
        await_compaction(bootstrap, names, f"{prefix}-reader", step)

        produce(30, 15, base_ts)
        outputs, log = phase(state_dir, 30)
        after2 = check_outputs(outputs, 30, 15, after1)
        step(f"after the restart with no local state: counts continued ({after2})")

        check_compact(bootstrap, names, step)

        # The running-count store's changelog: the last record of each key holds its total.
        store = [t for t in names if "--default" in t]
        if len(store) != 1:
            fail(f"no changelog of the default store among {names}")
        records, _ = read_topic(bootstrap, store[0], f"{prefix}-reader")
        last = {k: v for _, _, k, v in records if v is not None}
        totals = {}
        for k, v in last.items():
            # the state key is '<message key>|"total"' (prefix, separator, JSON state key)
            if k.endswith(b'|"total"'):
                totals[k.split(b"|")[0].decode()] = json.loads(v)
        if totals != after2:
            fail(f"changelog {store[0]}: last totals {totals}, expected {after2}")
        step(f"changelog {store[0]} holds the final totals {totals}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step("OK")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "app":
        run_app(sys.argv[2], int(sys.argv[3]))
    else:
        main()
