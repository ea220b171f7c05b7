"""Shared parts of the failover drivers: event logs of JSON lines with wall-clock times.

Every driver process appends one JSON object per line to its own event file, each with
`t`, the wall clock in milliseconds (all processes run on one machine, so their times
compare). The checker reads the files while they grow: a last line still being written is
skipped.
"""
import json
import os
import sys
import time


def now_ms():
    return int(time.time() * 1000)


def fail(msg):
    """Exits at once (os._exit): closing librdkafka clients mid-rebalance can block."""
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def step(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Events:
    """An append-only event file, one JSON object per line, flushed per line."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def add(self, **fields):
        fields["t"] = now_ms()
        self.f.write(json.dumps(fields, separators=(",", ":")) + "\n")


def read_events(path):
    """Every complete line of an event file (a partly written last line is left out)."""
    try:
        with open(path) as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split("\n")[:-1]:
        try:
            out.append(json.loads(line))
        except ValueError:
            fail(f"{path}: not an event line: {line[:200]!r}")
    return out


def stop_requested(path):
    return os.path.exists(path)
