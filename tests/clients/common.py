"""Shared parts of the Python client suites (confluent-kafka, kafka-python, aiokafka).

Every suite works on its own topic `<TOPIC_PREFIX>-<client>` with 3 partitions and, per
codec, produces the records below to explicit partitions with explicit, strictly
increasing timestamps. `Expected` keeps what was sent, partition by partition, in send
order: that is what the broker must give back, byte for byte, at offsets 0, 1, 2, ...
"""
import os
import sys
import time

PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BINARY = bytes(range(256))


# CLIENT_SUITE_KEEP_GOING=1: report every failed check (not only the first) and exit 1 at
# the end; for diagnosing a broker. By default the first mismatch ends the run.
KEEP_GOING = os.environ.get("CLIENT_SUITE_KEEP_GOING") == "1"
FAILED = []


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        if KEEP_GOING:
            print(f"FAIL (continuing): {msg}", file=sys.stderr, flush=True)
            FAILED.append(msg)
        else:
            fail(msg)


def finish(name):
    """End of a suite: exit 1 if a check failed under CLIENT_SUITE_KEEP_GOING."""
    if FAILED:
        fail(f"{name}: {len(FAILED)} check(s) failed, first: {FAILED[0]}")
    print(f"OK {name}", flush=True)
    sys.exit(0)


def step(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env():
    """(bootstrap, topic_prefix) from the environment."""
    bootstrap = os.environ.get("BOOTSTRAP")
    if not bootstrap:
        fail("BOOTSTRAP (host:port[,host:port...]) is not set")
    prefix = os.environ.get("TOPIC_PREFIX") or f"clients-{os.getpid()}-{int(time.time())}"
    return bootstrap, prefix


def records(codec_index, codec, null_header_values=True):
    """[(partition, key, value, [(name, value)])] for one codec; bytes or None everywhere.

    Five records go to one partition, one to the next, rotating with the codec so that
    every partition gets records under several codecs. null_header_values=False drops
    headers whose value is null (for clients that cannot send them)."""
    c = codec.encode()
    main = codec_index % PARTITIONS
    other = (codec_index + 1) % PARTITIONS
    recs = [
        (main, b"key-1", b"value-1 " + c + b" the quick brown fox",
         [("h", b"one"), ("h", b"two"), ("trace-id", b"0af7651916cd43dd")]),
        (main, None, b"value-2 " + c + b" no key", []),
        (main, b"key-3", None, [("nullable", None), ("after-null", b"x")]),
        (main, b"key-4", b"", [("empty", b"")]),
        (main, BINARY, b"value-5 " + c + b" " + b"abcdefgh" * 1024,
         [("h", b"one"), ("other", BINARY), ("h", b"three")]),
        (other, b"key-6", BINARY * 4, []),
    ]
    if not null_header_values:
        recs = [(p, k, v, [(n, hv) for n, hv in hs if hv is not None]) for p, k, v, hs in recs]
    return recs


class Expected:
    """What was produced, per partition, in order, with the timestamp given to each record."""

    def __init__(self):
        self.parts = {p: [] for p in range(PARTITIONS)}
        # strictly increasing, well inside any broker's accepted timestamp window
        self.next_ts = int(time.time() * 1000) - 10 * 60 * 1000

    def timestamp(self):
        ts = self.next_ts
        self.next_ts += 1000
        return ts

    def add(self, partition, key, value, headers, ts):
        self.parts[partition].append((key, value, list(headers), ts))

    def total(self):
        return sum(len(v) for v in self.parts.values())


def show(b):
    if b is None:
        return "None"
    if len(b) > 40:
        return f"{bytes(b[:40])!r}...({len(b)} bytes)"
    return repr(bytes(b))


def compare(where, got, want, start_offset):
    """got: [(offset, key, value, headers[(name, value)], ts)]; want: Expected rows from
    start_offset on. Fails on the first mismatch."""
    check(len(got) == len(want),
          f"{where}: got {len(got)} records from offset {start_offset}, expected {len(want)}: "
          f"offsets {[g[0] for g in got]}")
    for i, (g, w) in enumerate(zip(got, want)):
        off, key, value, headers, ts = g
        wkey, wvalue, wheaders, wts = w
        exp_off = start_offset + i
        check(off == exp_off, f"{where}: record #{i} has offset {off}, expected {exp_off} "
                              f"(offsets must be consecutive)")
        check(key == wkey, f"{where} offset {off}: key {show(key)}, expected {show(wkey)}")
        check(value == wvalue,
              f"{where} offset {off}: value {show(value)}, expected {show(wvalue)} "
              f"(null and empty differ)")
        norm = [(n, None if v is None else bytes(v)) for n, v in headers]
        check(norm == wheaders, f"{where} offset {off}: headers {norm}, expected {wheaders}")
        if ts is not None:
            check(ts == wts, f"{where} offset {off}: timestamp {ts}, expected {wts}")
