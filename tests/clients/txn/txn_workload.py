#!/usr/bin/env python3
"""A Jepsen-style transaction workload with confluent-kafka 2.16.1 (librdkafka 2.16).

Env: BOOTSTRAP=host:port[,...], TOPIC_PREFIX (unique per run), and optionally
  PRODUCERS (4), PARTITIONS (4), TXNS (transactions per producer, 25), MAX_RECORDS (records
  per transaction, 1..5), ABORT_RATIO (0.3), SEED (random), RUN_TIMEOUT (seconds, 150),
  RESTART_READY_FILE / RESTART_DONE_FILE (restart mode, below), HISTORY_FILE (writes the
  history and what was read, JSON, for diagnosis).

PRODUCERS transactional producers (distinct transactional ids) each run TXNS transactions
over the PARTITIONS partitions of `<prefix>-workload`: every transaction writes 1..MAX_RECORDS
records to random partitions, each record's value `<producer> <txn> <seq>`, then commits,
or aborts at random. The outcome of every transaction is recorded:
- committed: commit_transaction returned;
- aborted: commit was never asked for, or the commit failed with an abortable error and the
  abort then succeeded;
- unknown: the commit failed otherwise (a fatal error, a timeout that outlived the retries);
  the producer is replaced by a new instance with the same transactional id (which fences
  the old one and settles its transaction), and the checker accepts all or nothing of it.
A read_committed consumer reads all partitions while the producers run; after they are done,
a fresh read_committed consumer reads everything again. The checker, on both reads: no
record of an aborted transaction, no record of no transaction, no record twice, per partition
the records of each producer in (txn, seq) order; every record of a committed transaction
present; an unknown transaction all or nothing. And the live reader ends with the same
records as the fresh one.

Restart mode (RESTART_READY_FILE and RESTART_DONE_FILE set): once every producer has
finished TXNS/2 transactions, the script creates RESTART_READY_FILE and keeps producing;
the runner restarts the broker (or its store) and then creates RESTART_DONE_FILE. Each
producer goes on until it has done TXNS transactions and at least 5 begun after it saw
RESTART_DONE_FILE. Errors during the restart are retried as above.
Exits 0 when the checker found nothing, 1 with FAIL lines otherwise.
"""
import json
import os
import random
import threading
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from txncommon import create_topics, env, fail, read_all, step

bootstrap, prefix = env()
PRODUCERS = int(os.environ.get("PRODUCERS", "4"))
PARTITIONS = int(os.environ.get("PARTITIONS", "4"))
TXNS = int(os.environ.get("TXNS", "25"))
MAX_RECORDS = int(os.environ.get("MAX_RECORDS", "5"))
ABORT_RATIO = float(os.environ.get("ABORT_RATIO", "0.3"))
SEED = int(os.environ.get("SEED", str(random.randrange(1 << 30))))
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "150"))
READY_FILE = os.environ.get("RESTART_READY_FILE")
DONE_FILE = os.environ.get("RESTART_DONE_FILE")
RESTART = bool(READY_FILE and DONE_FILE)
AFTER_RESTART = 5
OP_TIMEOUT = 30
topic = f"{prefix}-workload"
step(f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}), "
     f"bootstrap {bootstrap}, {PRODUCERS} producers x {TXNS} txns over {PARTITIONS} partitions, "
     f"abort ratio {ABORT_RATIO}, seed {SEED}, restart mode {RESTART}")
create_topics(bootstrap, [topic], PARTITIONS)
deadline = time.time() + RUN_TIMEOUT

lock = threading.Lock()
history = {}          # (producer, txn) -> {"outcome": ..., "records": [(partition, seq)]}
half_done = set()     # producers past TXNS/2
errors = []           # unexpected failures of the workload itself (not checker findings)
events = []           # what went wrong on the way (retries, replacements), for the log


def note(msg):
    with lock:
        events.append(msg)
    step(msg)


def new_producer(i):
    """A producer with transactional id `<prefix>-wl-<i>`, initialised (retrying)."""
    while True:
        pr = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-wl-{i}",
                       "transaction.timeout.ms": 20000, "linger.ms": 2,
                       "reconnect.backoff.max.ms": 1000})
        while True:
            if time.time() > deadline:
                raise RuntimeError(f"producer {i}: init_transactions never succeeded")
            try:
                pr.init_transactions(OP_TIMEOUT)
                return pr
            except KafkaException as e:
                err = e.args[0]
                note(f"producer {i}: init_transactions: {err}")
                if not err.retriable():
                    break  # fatal: a new instance
            time.sleep(0.2)


def finish_abort(i, pr):
    """Aborts the open transaction; True when the abort went through."""
    while time.time() < deadline:
        try:
            pr.abort_transaction(OP_TIMEOUT)
            return True
        except KafkaException as e:
            err = e.args[0]
            note(f"producer {i}: abort_transaction: {err}")
            if not err.retriable():
                return False
    return False


def run_producer(i):
    rng = random.Random(SEED * 1000 + i)
    pr = new_producer(i)
    t = 0
    after_restart = 0
    while True:
        restarted = RESTART and os.path.exists(DONE_FILE)
        if t >= TXNS and (not RESTART or (restarted and after_restart >= AFTER_RESTART)):
            return
        if time.time() > deadline:
            raise RuntimeError(f"producer {i}: run timeout after {t} transactions")
        if restarted:
            after_restart += 1
        elif RESTART and len(half_done) == PRODUCERS:
            time.sleep(0.05)  # waiting for the restart: keep transactions going, slowly
        t += 1
        recs = [(rng.randrange(PARTITIONS), s) for s in range(rng.randint(1, MAX_RECORDS))]
        commit = rng.random() >= ABORT_RATIO
        with lock:
            history[(i, t)] = {"outcome": "pending", "records": recs}
        outcome = "aborted"
        commit_asked = False
        try:
            pr.begin_transaction()
            for p, s in recs:
                pr.produce(topic, key=str(i).encode(), value=f"{i} {t} {s}".encode(), partition=p)
            # the records reach the broker before an abort, so there is something to hide
            pr.flush(OP_TIMEOUT)
            if commit:
                commit_asked = True
                while True:
                    try:
                        pr.commit_transaction(OP_TIMEOUT)
                        outcome = "committed"
                        break
                    except KafkaException as e:
                        err = e.args[0]
                        note(f"producer {i} txn {t}: commit_transaction: {err}")
                        if err.retriable() and time.time() < deadline:
                            continue
                        raise
            else:
                pr.abort_transaction(OP_TIMEOUT)
        except KafkaException as e:
            err = e.args[0]
            if outcome != "committed":
                if not commit_asked:
                    note(f"producer {i} txn {t}: {err}; aborting")
                    if not (err.fatal() or finish_abort(i, pr)):
                        note(f"producer {i}: abort failed; replacing the producer")
                        pr = new_producer(i)
                    elif err.fatal():
                        pr = new_producer(i)
                    outcome = "aborted"  # no commit was asked for: it cannot commit
                elif err.txn_requires_abort() and finish_abort(i, pr):
                    outcome = "aborted"
                else:
                    outcome = "unknown"
                    note(f"producer {i} txn {t}: outcome unknown ({err}); replacing the producer")
                    pr = new_producer(i)
        with lock:
            history[(i, t)]["outcome"] = outcome
            if RESTART and t >= TXNS // 2 and i not in half_done:
                half_done.add(i)
                if len(half_done) == PRODUCERS:
                    with open(READY_FILE, "w") as f:
                        f.write("ready\n")
                    step("half of the transactions done: restart requested")


def producer_thread(i):
    try:
        run_producer(i)
    except Exception as e:  # noqa: BLE001
        with lock:
            errors.append(f"producer {i}: {e!r}")


stop = threading.Event()
give_up = threading.Event()
live = {p: [] for p in range(PARTITIONS)}


def dump_tail(p, start):
    """Logs what a read_uncommitted consumer finds in partition `p` from `start`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-dump",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_uncommitted"})
    c.assign([TopicPartition(topic, p, start)])
    seen = []
    end = time.time() + 10
    try:
        while time.time() < end:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                seen.append(f"error {m.error()}")
                continue
            seen.append(f"{m.offset()}:{m.value().decode()}")
    finally:
        c.close()
    step(f"partition {p} from {start} (read_uncommitted): {seen}")


def live_reader():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-live",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "reconnect.backoff.max.ms": 1000})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    at_end = set()
    last_error = {}
    quiet = None
    try:
        while time.time() < deadline + 30 and not give_up.is_set():
            m = c.poll(0.2)
            if m is None:
                if stop.is_set() and len(at_end) == PARTITIONS:
                    quiet = quiet or time.time()
                    if time.time() - quiet > 1.0:
                        return
                continue
            quiet = None
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                elif m.error().fatal():
                    errors.append(f"live reader: {m.error()}")
                    return
                else:
                    last_error[m.partition()] = str(m.error())
                continue
            at_end.discard(m.partition())
            live[m.partition()].append(m.value().decode())
        errors.append("live reader: did not reach the end of every partition")
    finally:
        if give_up.is_set():
            # Where the reader stands, for the log of a run that hangs.
            for p in range(PARTITIONS):
                tp = TopicPartition(topic, p)
                try:
                    pos = c.position([tp])[0].offset
                    lo, hi = c.get_watermark_offsets(tp, timeout=5)
                except KafkaException as e:
                    pos, lo, hi = "?", "?", str(e)
                step(f"live reader: partition {p}: at end {p in at_end}, position {pos}, "
                     f"watermarks (read_committed) {lo}..{hi}, last error {last_error.get(p)}")
                if p not in at_end and isinstance(pos, int) and pos >= 0:
                    dump_tail(p, max(0, pos - 5))
        c.close()


reader = threading.Thread(target=live_reader, daemon=True)
reader.start()
threads = [threading.Thread(target=producer_thread, args=(i,), daemon=True) for i in range(PRODUCERS)]
started = time.time()
for th in threads:
    th.start()
for th in threads:
    th.join(max(1.0, deadline - time.time() + 5))
stop.set()
took = time.time() - started
reader.join(60)
if reader.is_alive():
    give_up.set()
    reader.join(20)
if any(th.is_alive() for th in threads) or reader.is_alive():
    fail(f"workload still running after {RUN_TIMEOUT}s")
if errors:
    fail(f"workload errors: {errors}")
counts = {}
for h in history.values():
    counts[h["outcome"]] = counts.get(h["outcome"], 0) + 1
step(f"{len(history)} transactions in {took:.1f}s: {counts}; {len(events)} retries/replacements")
if counts.get("pending"):
    fail("a transaction has no outcome")
final = {p: [v.decode() for _, _, v in recs]
         for p, recs in read_all(bootstrap, topic, PARTITIONS, "read_committed", 60).items()}

if os.environ.get("HISTORY_FILE"):
    with open(os.environ["HISTORY_FILE"], "w") as f:
        json.dump({"seed": SEED, "history": {f"{i} {t}": h for (i, t), h in history.items()},
                   "final": final, "live": live, "events": events}, f)


def check_view(name, view):
    """Checker findings for one read: {partition: ["<producer> <txn> <seq>", ...]}."""
    problems = []
    seen = {}
    for p, values in view.items():
        last = {}
        for v in values:
            try:
                i, t, s = (int(x) for x in v.split())
            except ValueError:
                problems.append(f"{name}: partition {p}: a record not of the workload: {v!r}")
                continue
            h = history.get((i, t))
            if h is None or (p, s) not in [tuple(r) for r in h["records"]]:
                problems.append(f"{name}: partition {p}: record {v!r} of no transaction")
                continue
            if h["outcome"] == "aborted":
                problems.append(f"{name}: partition {p}: record {v!r} of an ABORTED transaction")
            if (i, t, s) in seen:
                problems.append(f"{name}: record {v!r} seen twice (partitions {seen[(i, t, s)]}, {p})")
            seen[(i, t, s)] = p
            if i in last and last[i] >= (t, s):
                problems.append(f"{name}: partition {p}: producer {i}'s {v!r} after txn/seq {last[i]}")
            last[i] = (t, s)
    for (i, t), h in sorted(history.items()):
        present = [(i, t, s) in seen for _, s in h["records"]]
        if h["outcome"] == "committed" and not all(present):
            problems.append(f"{name}: committed txn {i} {t}: {present.count(False)} of "
                            f"{len(present)} records missing")
        if h["outcome"] == "unknown" and any(present) and not all(present):
            problems.append(f"{name}: txn {i} {t} of unknown outcome partly visible "
                            f"({present.count(True)} of {len(present)})")
    return problems


problems = check_view("final read", final) + check_view("live read", live)
if live != final:
    diff = {p: (len(live[p]), len(final[p])) for p in final if live[p] != final[p]}
    problems.append(f"the live reader ended with other records than the final read "
                    f"(partition: (live, final) counts) {diff}")
records = sum(len(v) for v in final.values())
step(f"read back {records} committed records; checker: {len(problems)} finding(s)")
for msg in problems[:30]:
    print(f"FAIL (checker): {msg}", flush=True)
if problems:
    fail(f"{len(problems)} checker finding(s), first: {problems[0]} (seed {SEED})")
if counts.get("committed", 0) == 0 or counts.get("aborted", 0) == 0:
    fail(f"the run needs committed and aborted transactions: {counts}")
print(f"OK transaction workload (seed {SEED})", flush=True)
