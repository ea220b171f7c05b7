"""An idempotent producer under failover (confluent-kafka, acks=all).

Sends records numbered 0, 1, 2, ... (value `%08d`, record n to partition n % PARTITIONS,
about FAILOVER_RATE records a second) until the file STOP exists, then flushes and exits
0. Every delivery report goes to EVENTS: `{"ack":[n,partition,offset],"sent":ms}`
(`sent`: when it was handed to the client) or `{"fail":[n,error]}`; client errors as
`{"error":...,"fatal":bool}`; at the end `{"done":sent,"left":unconfirmed}`.

Env: BOOTSTRAP (comma-separated), TOPIC, PARTITIONS, EVENTS, STOP, FAILOVER_RATE
(default 300).
"""
import os
import time

from confluent_kafka import Producer

from fcommon import Events, now_ms, step, stop_requested

BOOTSTRAP = os.environ["BOOTSTRAP"]
TOPIC = os.environ["TOPIC"]
PARTITIONS = int(os.environ["PARTITIONS"])
STOP = os.environ["STOP"]
RATE = float(os.environ.get("FAILOVER_RATE", "300"))
events = Events(os.environ["EVENTS"])


def on_error(err):
    events.add(error=str(err), fatal=err.fatal())


# When each unconfirmed record was handed to the client (wall-clock milliseconds).
sent_at = {}


def on_delivery(err, msg):
    n = int(msg.value())
    sent = sent_at.pop(n, None)
    if err is not None:
        events.add(fail=[n, str(err)], fatal=err.fatal())
    else:
        events.add(ack=[n, msg.partition(), msg.offset()], sent=sent)


p = Producer({
    "bootstrap.servers": BOOTSTRAP,
    "client.id": "failover-producer",
    "enable.idempotence": True,
    "acks": "all",
    # Longer than any failover here: a record is acknowledged late, not given up.
    "message.timeout.ms": 240000,
    "linger.ms": 5,
    "error_cb": on_error,
})
step(f"producing to {TOPIC} through {BOOTSTRAP}")
n = 0
pause = 1.0 / RATE
while not stop_requested(STOP):
    try:
        sent_at[n] = now_ms()
        p.produce(TOPIC, value=b"%08d" % n, partition=n % PARTITIONS, on_delivery=on_delivery)
        n += 1
    except BufferError:
        del sent_at[n]
        p.poll(0.1)
        continue
    p.poll(0)
    time.sleep(pause)
left = p.flush(240)
events.add(done=n, left=left)
step(f"sent {n}, {left} unconfirmed")
os._exit(0)
