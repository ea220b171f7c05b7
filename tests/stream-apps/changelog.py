"""Reading a stream app's changelog topics back with a plain consumer (shared by the scripts).

Env read by `await_compaction`: COMPACTION_WAIT (seconds to wait for the gateway's log
cleaner to leave offset gaps in a changelog before the restart; 0 or unset: no wait) and
COMPACTION_REQUIRED=1 (no gap within that time fails the run instead of being noted).
"""
import os
import sys
import time

from confluent_kafka import Consumer, TopicPartition


def read_topic(bootstrap, topic, group):
    """Every record of `topic` from the start: ([(partition, offset, key, value)], {partition:
    (low watermark, high watermark)}); None when the topic is not there (yet)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        tm = c.list_topics(topic, timeout=10).topics.get(topic)
        if tm is None or tm.error is not None or not tm.partitions:
            return None
        spans = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                 for p in sorted(tm.partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in spans])
        records = []
        done = {p for p, (lo, hi) in spans.items() if hi <= lo}
        deadline = time.time() + 20
        while len(done) < len(spans) and time.time() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            records.append((m.partition(), m.offset(), m.key(), m.value()))
            if m.offset() + 1 >= spans[m.partition()][1]:
                done.add(m.partition())
        if len(done) < len(spans):
            raise RuntimeError(f"{topic}: could not read up to the high watermarks {spans}")
        return records, spans
    finally:
        c.close()


def await_compaction(bootstrap, topics, group, step):
    """Waits up to COMPACTION_WAIT seconds until one of `topics` has fewer records than
    offsets (the cleaner removed some, leaving gaps); reports what it saw."""
    wait = float(os.environ.get("COMPACTION_WAIT", "0") or 0)
    required = os.environ.get("COMPACTION_REQUIRED") == "1"
    if wait <= 0:
        return
    deadline = time.time() + wait
    while True:
        seen = {}
        for t in topics:
            got = read_topic(bootstrap, t, group)
            if got is None:
                continue
            records, spans = got
            span = sum(hi - lo for lo, hi in spans.values())
            seen[t] = (len(records), span)
            if len(records) < span:
                step(f"changelog {t} compacted before the restart: {len(records)} records"
                     f" left of {span} offsets")
                return
        if time.time() > deadline:
            msg = f"no changelog compacted within {wait:.0f}s (records/offsets: {seen})"
            if required:
                step(f"FAIL: {msg}")
                sys.exit(1)
            step(f"{msg}: the restart reads the whole changelog")
            return
        time.sleep(1)


def check_compact(bootstrap, topics, step):
    """DescribeConfigs: every topic of `topics` has cleanup.policy=compact; prints the
    settings that are not at their default."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # (the futures must stay in their dict: the client completes them through it)
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t)
                                      for t in topics])
    for resource, future in futures.items():
        cfg = future.result(20)
        named = {k: v.value for k, v in cfg.items() if not v.is_default}
        step(f"{resource.name}: configs not at their default: {named}")
        policy = cfg["cleanup.policy"].value
        if policy != "compact":
            step(f"FAIL: {resource.name}: cleanup.policy={policy}, expected compact")
            sys.exit(1)
    step(f"changelog topics {sorted(topics)} have cleanup.policy=compact")
