#!/usr/bin/env python3
"""Stream app: faust-streaming 0.15 (a table backed by a compacted changelog topic).

Env: BOOTSTRAP=host:port, TOPIC_PREFIX (unique per run), APP_PHASE_TIMEOUT (seconds, default 60).

The application is faust's own page-view example (the README's "count page views" agent),
unchanged except for names: page views are grouped by page id (a repartition topic) and
counted in `app.Table('page_views', default=int)`, whose changelog topic faust creates with
`cleanup.policy=compact`. The table lives in a local RocksDB store (rocksdict).

1. Start the worker, produce 30 page views (3 pages, 10 each) once it is ready, wait until
   the table's changelog holds 10 for every page and the worker has committed its input
   offsets, stop the worker (SIGTERM, a clean shutdown).
2. Delete the worker's data directory (the RocksDB table is gone). With COMPACTION_WAIT,
   wait until the gateway's cleaner has compacted the changelog (see changelog.py).
3. Start the worker again, produce 15 more once it is ready: it must have restored the
   table from the changelog, so the counts go on to 15 (without the restore they would
   restart at 1 and end at 5).
   Checked on the changelog: per page the counts written are strictly increasing, and end at
   15; and on the worker's own log, which reports the recovery.
4. DescribeConfigs shows cleanup.policy=compact on the changelog topic.

The app itself is `faust_page_views_app.py`, run with faust's command line (`worker`).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from changelog import await_compaction, check_compact, read_topic

bootstrap = os.environ["BOOTSTRAP"]
prefix = os.environ["TOPIC_PREFIX"]
phase_timeout = float(os.environ.get("APP_PHASE_TIMEOUT", "60"))
PAGES = ["home", "pricing", "docs"]


def step(msg):
    print(f"[faust] {msg}", flush=True)


def fail(msg):
    print(f"[faust] FAIL: {msg}", flush=True)
    sys.exit(1)


APP_ID = f"{prefix}-page-views"
INPUT = f"{prefix}-page_views"
CHANGELOG = f"{APP_ID}-page_views-changelog"
APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faust_page_views_app.py")


def produce(first_n, count):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for n in range(first_n, first_n + count):
        page = PAGES[n % len(PAGES)]
        # what the example's PageView record looks like as JSON (faust's value serializer)
        p.produce(INPUT, key=f"user-{n}", value=json.dumps({"id": page, "user": f"user-{n}"}))
    left = p.flush(30)
    if left:
        fail(f"{left} page views not delivered")


def read_changelog():
    """Every value written per page, in offset order (None when the topic is not there yet)."""
    got = read_topic(bootstrap, CHANGELOG, f"{prefix}-reader")
    if got is None:
        return None
    values = {}
    # faust's default key serializer for str keys is raw, values are JSON
    for _, _, key, value in sorted(got[0]):
        values.setdefault(key.decode().strip('"'), []).append(int(value))
    return values


def wait_committed(deadline):
    """Waits until the app's group has committed the end of every input partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": APP_ID,
                  "enable.auto.commit": False})
    try:
        while True:
            md = c.list_topics(INPUT, timeout=10).topics[INPUT]
            tps = [TopicPartition(INPUT, p) for p in sorted(md.partitions)]
            got = [tp.offset for tp in c.committed(tps, timeout=10)]
            ends = [c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
            if got == ends:
                return got
            if time.time() > deadline:
                fail(f"the worker's committed input offsets {got}, end offsets {ends}")
            time.sleep(0.5)
    finally:
        c.close()


def stop(proc):
    """SIGTERM to the worker's process group (a clean shutdown), SIGKILL after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_until(datadir, want, logfile, feed):
    """Starts the worker, calls `feed` once it is ready (its tables recovered), waits until
    the changelog's last value of every page is `want`.

    The input comes only once the worker is ready: records already there at start-up may be
    processed twice, as faust's at-least-once processing allows (it reads its input while it
    recovers its tables, then seeks back to the committed offsets)."""
    env = dict(os.environ, FAUST_DATADIR=datadir)
    with open(logfile, "w") as log:
        # --without-web: no web server on faust's fixed port (runs in parallel do not clash)
        proc = subprocess.Popen([sys.executable, APP, "worker", "--without-web", "-l", "info"],
                                env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started = time.time()
    values = None
    try:
        while "[^Worker]: Ready" not in open(logfile).read():
            if proc.poll() is not None or time.time() - started > phase_timeout:
                print(open(logfile).read()[-20000:])
                fail("the worker did not get ready")
            time.sleep(0.2)
        step(f"worker ready after {time.time() - started:.1f}s")
        feed()
        while time.time() - started < phase_timeout:
            if proc.poll() is not None:
                print(open(logfile).read())
                fail(f"the worker exited with {proc.returncode}")
            values = read_changelog()
            if values and all(values.get(p, [None])[-1] == want for p in PAGES):
                break
            time.sleep(1)
        else:
            print(open(logfile).read()[-20000:])
            fail(f"changelog values after {phase_timeout}s: {values}, expected every page at"
                 f" {want}")
        step(f"worker reached {want} per page in {time.time() - started:.1f}s")
        # faust commits the offsets of what it processed every few seconds (at least once):
        # stop it once they are in, so that the restart starts where this run ended
        committed = wait_committed(started + phase_timeout)
        step(f"the worker committed its input offsets {committed}")
    finally:
        stop(proc)
    return values


def main():
    from confluent_kafka.admin import AdminClient, NewTopic

    from importlib.metadata import version

    step(f"faust-streaming {version('faust-streaming')}, bootstrap {bootstrap}, app {APP_ID}")
    work = tempfile.mkdtemp(prefix="faust-data-")
    datadir = os.path.join(work, "data")
    try:
        # the input topic as the app expects it (its topic_partitions)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(INPUT, num_partitions=2,
                                               replication_factor=1)]).values():
            f.result(20)
        run_until(datadir, 10, os.path.join(work, "worker1.log"), feed=lambda: produce(0, 30))
        if not os.path.isdir(datadir) or not os.listdir(datadir):
            fail(f"the worker left no local state in {datadir}")
        shutil.rmtree(datadir)
        step("stopped the worker and deleted its data directory")
        await_compaction(bootstrap, [CHANGELOG], f"{prefix}-reader", step)

        log2 = os.path.join(work, "worker2.log")
        values = run_until(datadir, 15, log2, feed=lambda: produce(30, 15))
        for page in PAGES:
            seq = values[page]
            if any(a >= b for a, b in zip(seq, seq[1:])):
                fail(f"changelog counts of {page} not increasing (state not restored?): {seq}")
        step(f"after the restart with no local state: counts continued {values}")
        text = open(log2).read()
        if "Restore complete" not in text and "recovery" not in text.lower():
            print(text[-20000:])
            fail("the second worker's log does not mention a table recovery")

        check_compact(bootstrap, [CHANGELOG], step)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step("OK")


if __name__ == "__main__":
    main()
