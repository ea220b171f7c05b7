"""One member of a consumer group under failover (confluent-kafka, manual commits).

Subscribes to TOPIC in GROUP and, until the file STOP exists: takes up to 200 records,
logs each as `{"read":[partition,offset,n]}`, then commits the next offset of every
partition it read, synchronously, and logs the outcome per partition:
`{"commit":[partition,offset]}` once the coordinator accepted it, else
`{"commit_failed":[partition,offset],"error":...}`. Assignments and revocations are
logged too. At STOP it closes (leaving the group; no commit) and logs `{"closed":true}`.

Env: BOOTSTRAP (comma-separated), TOPIC, GROUP, NAME, EVENTS, STOP,
FAILOVER_SESSION_TIMEOUT_MS (the members' session.timeout.ms, default 10000).
"""
import os

from confluent_kafka import Consumer, KafkaException, TopicPartition

from fcommon import Events, step, stop_requested

TOPIC = os.environ["TOPIC"]
NAME = os.environ["NAME"]
STOP = os.environ["STOP"]
events = Events(os.environ["EVENTS"])


def on_error(err):
    events.add(error=str(err), fatal=err.fatal())


def on_assign(_c, parts):
    events.add(assigned=sorted(p.partition for p in parts))


def on_revoke(_c, parts):
    events.add(revoked=sorted(p.partition for p in parts))


def on_lost(_c, parts):
    events.add(lost=sorted(p.partition for p in parts))


c = Consumer({
    "bootstrap.servers": os.environ["BOOTSTRAP"],
    "group.id": os.environ["GROUP"],
    "client.id": NAME,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": int(os.environ.get("FAILOVER_SESSION_TIMEOUT_MS", "10000")),
    "heartbeat.interval.ms": 500,
    "error_cb": on_error,
})
c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
step(f"{NAME} in {os.environ['GROUP']}")
while not stop_requested(STOP):
    msgs = c.consume(num_messages=200, timeout=0.2)
    upto = {}
    for m in msgs:
        if m.error():
            events.add(consume_error=str(m.error()))
            continue
        events.add(read=[m.partition(), m.offset(), int(m.value())])
        upto[m.partition()] = m.offset() + 1
    if not upto:
        continue
    offsets = [TopicPartition(TOPIC, p, o) for p, o in sorted(upto.items())]
    try:
        done = c.commit(offsets=offsets, asynchronous=False)
    except KafkaException as e:
        for tp in offsets:
            events.add(commit_failed=[tp.partition, tp.offset], error=str(e))
        continue
    for tp in done:
        if tp.error is not None:
            events.add(commit_failed=[tp.partition, tp.offset], error=str(tp.error))
        else:
            events.add(commit=[tp.partition, tp.offset])
c.close()
events.add(closed=True)
step(f"{NAME} closed")
os._exit(0)
