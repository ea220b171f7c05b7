"""confluent-kafka (librdkafka): a consumer killed without leaving the group.

1. A child process (this script with argument `child`) runs consumer K in group G on a
   4-partition topic, session timeout 6 s; the parent runs consumer S in the same group
   (session timeout 10 s) and both poll until they split the partitions.
2. 8 records go to each partition. The child reads and synchronously commits 3 records of
   each of its partitions, reports them on stdout, and then only keeps polling.
3. The parent SIGKILLs the child: no LeaveGroup. The group must rebalance once K's
   session timeout (6 s) has passed, giving S every partition (within a generous 30 s).
4. S resumes K's partitions after K's last commit: every record read exactly once.
"""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException

from gcommon import (Reads, check, check_exactly_once, confluent_create_topic,
                     confluent_produce, env, fail, ok, step, wait_until)

PARTS = 4
PER_PART = 8
CHILD_READS_PER_PART = 3


def make(bootstrap, group, name, session_ms, on_assign, on_revoke):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": 300,
    })
    return c


def child(bootstrap, topic, group):
    """Consumer K: prints JSON lines {"assigned": [...]} and {"read": [p, off, value]}."""
    def out(obj):
        print(json.dumps(obj), flush=True)

    owned = set()

    def on_assign(c, parts):
        owned.clear()
        owned.update(p.partition for p in parts)
        out({"assigned": sorted(owned)})

    def on_revoke(c, parts):
        owned.clear()
        out({"assigned": []})

    c = make(bootstrap, group, "K", 6000, None, None)
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    per_part = {}
    while True:
        m = c.poll(0.1)
        if m is None:
            continue
        if m.error():
            out({"error": str(m.error())})
            continue
        n = per_part.get(m.partition(), 0)
        if n >= CHILD_READS_PER_PART:
            # read more than it may commit: pause that partition and rewind
            from confluent_kafka import TopicPartition
            c.pause([TopicPartition(topic, m.partition())])
            continue
        c.commit(message=m, asynchronous=False)
        per_part[m.partition()] = n + 1
        out({"read": [m.partition(), m.offset(), m.value().decode()]})


if len(sys.argv) > 1 and sys.argv[1] == "child":
    child(*sys.argv[2:5])
    sys.exit(0)

bootstrap, prefix = env()
topic = f"{prefix}-kill"
group = f"{prefix}-kill-group"
confluent_create_topic(bootstrap, topic, PARTS)

proc = subprocess.Popen(
    [sys.executable, os.path.abspath(__file__), "child", bootstrap, topic, group],
    stdout=subprocess.PIPE, text=True, bufsize=1,
    cwd=os.path.dirname(os.path.abspath(__file__)))
lines = queue.Queue()
threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
k_parts = set()
rk = Reads("K")


def read_child():
    while not lines.empty():
        obj = json.loads(lines.get())
        if "assigned" in obj:
            k_parts.clear()
            k_parts.update(obj["assigned"])
            step(f"K: assigned {obj['assigned']}")
        elif "read" in obj:
            p, off, v = obj["read"]
            rk.add(p, off, v.encode())
        else:
            step(f"K: {obj}")
    if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
        fail(f"the child consumer exited with {proc.returncode}")


try:
    s_parts = set()

    def on_assign(c, parts):
        s_parts.clear()
        s_parts.update(p.partition for p in parts)
        step(f"S: assigned {sorted(s_parts)}")

    def on_revoke(c, parts):
        step(f"S: revoked {sorted(p.partition for p in parts)}")
        s_parts.clear()

    s = make(bootstrap, group, "S", 10000, None, None)
    s.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    rs = Reads("S")

    def poll_s():
        read_child()
        m = s.poll(0.05)
        if m is None:
            return
        if m.error():
            fail(f"S: consumer error {m.error()}")
        check(m.partition() in s_parts, f"S read partition {m.partition()} it does not own")
        rs.add(m.partition(), m.offset(), m.value())
        try:
            s.commit(message=m, asynchronous=False)
        except KafkaException as e:
            fail(f"S: synchronous commit: {e}")

    def split_done():
        return (s_parts and k_parts and not (s_parts & k_parts)
                and (s_parts | k_parts) == set(range(PARTS)))

    wait_until("S and the child K split the partitions", split_done, 40, poll=poll_s)
    step(f"split: K={sorted(k_parts)} S={sorted(s_parts)}")
    k_owned = set(k_parts)
    sent = confluent_produce(bootstrap, topic, PER_PART, PARTS)
    wait_until("K reads and commits 3 records of each of its partitions",
               lambda: len(rk.items) >= CHILD_READS_PER_PART * len(k_owned), 30, poll=poll_s)
    time.sleep(0.3)
    read_child()
    check(len(rk.items) == CHILD_READS_PER_PART * len(k_owned),
          f"K read {len(rk.items)} records, expected {CHILD_READS_PER_PART * len(k_owned)}")

    t_kill = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    step("K killed with SIGKILL (no LeaveGroup)")
    wait_until("S owns every partition after K's session timed out",
               lambda: s_parts == set(range(PARTS)), 30, poll=poll_s)
    took = time.monotonic() - t_kill
    step(f"S took over every partition {took:.2f}s after the kill (K's session timeout: 6 s)")
    wait_until("S reads the rest", lambda: len(rk.items) + len(rs.items) >= PARTS * PER_PART,
               20, poll=poll_s)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        poll_s()
    check_exactly_once(topic, sent, [rk, rs])
    s.close()
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
ok("confluent-kafka killed member")
