"""A Kafka client under its Iggy user's permissions, changed in Iggy while it runs.

Run by apps/gateway/tests/authz_iggy.rs against a bridged gateway with a SASL_PLAINTEXT
listener (PLAIN checked by Iggy). The Iggy user USER may send to and poll TOPIC only; its
topics need no ACL binding (its Iggy permissions decide), its consumer group does (the
super user ADMIN_USER grants it).
The harness changes the user's permissions with the Iggy SDK when this script asks for
it through marker files in STATE_DIR:

1. produce and consume TOPIC; producing to OTHER_TOPIC fails with
   TOPIC_AUTHORIZATION_FAILED;
2. `consumed` -> the harness revokes poll_messages and writes `revoked`; producing still
   works, and the running consumer's fetches fail with TOPIC_AUTHORIZATION_FAILED within
   the refresh interval (REFRESH_MS) plus a margin;
3. `denied` -> the harness grants poll_messages back and writes `granted`; the same
   consumer then receives what was produced after.
"""
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

BOOTSTRAP = os.environ["BOOTSTRAP"]
TOPIC = os.environ["TOPIC"]
OTHER_TOPIC = os.environ["OTHER_TOPIC"]
USER = os.environ["USER_NAME"]
PASSWORD = os.environ["USER_PASSWORD"]
STATE = os.environ["STATE_DIR"]
REFRESH_S = int(os.environ["REFRESH_MS"]) / 1000.0
# The refresh interval, a fetch's own wait and librdkafka's fetch error backoff.
DENY_WITHIN_S = REFRESH_S + 10.0

SASL = {
    "bootstrap.servers": BOOTSTRAP,
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanisms": "PLAIN",
    "sasl.username": USER,
    "sasl.password": PASSWORD,
}


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def log(msg):
    print(msg, flush=True)


def mark(name):
    with open(os.path.join(STATE, name), "w") as f:
        f.write("1")


def wait_for_mark(name, timeout=60.0):
    deadline = time.time() + timeout
    while not os.path.exists(os.path.join(STATE, name)):
        if time.time() > deadline:
            fail(f"the harness did not write {name} within {timeout}s")
        time.sleep(0.05)


def produce(producer, topic, values):
    """Sends `values` to partition 0 of `topic`; returns the delivery errors."""
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    for v in values:
        try:
            producer.produce(topic, value=v, partition=0, on_delivery=report)
        except KafkaException as e:
            # librdkafka refuses at once when it already knows the topic is refused.
            errors.append(e.args[0])
    left = producer.flush(30)
    if left:
        fail(f"{left} messages to {topic} not delivered within 30 s")
    return errors


def consume(consumer, want, timeout=30.0):
    """Polls until `want` messages arrived; fails on an error."""
    got = []
    deadline = time.time() + timeout
    while len(got) < want:
        if time.time() > deadline:
            fail(f"received {len(got)} of {want} messages within {timeout}s")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            fail(f"consume: {msg.error()}")
        got.append(msg.value())
    return got


producer = Producer({**SASL, "message.timeout.ms": 20000})
errors = produce(producer, TOPIC, [b"m%d" % i for i in range(5)])
if errors:
    fail(f"produce to {TOPIC}: {errors}")
log("produced 5 to the permitted topic")

errors = produce(producer, OTHER_TOPIC, [b"x"])
if [e.code() for e in errors] != [KafkaError.TOPIC_AUTHORIZATION_FAILED]:
    fail(f"produce to {OTHER_TOPIC}: expected TOPIC_AUTHORIZATION_FAILED, got {errors}")
log("produce to a topic without permission: TOPIC_AUTHORIZATION_FAILED")

# A consumer group is no Iggy resource: out of the box it needs an ACL binding, which the
# super user (Iggy's root) grants.
GROUP = "unused-no-commits"
admin = AdminClient({**SASL, "sasl.username": os.environ["ADMIN_USER"], "sasl.password": os.environ["ADMIN_PASSWORD"]})
grant = AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL, f"User:{USER}", "*", AclOperation.READ,
                   AclPermissionType.ALLOW)
try:
    admin.create_acls([grant], request_timeout=30)[grant].result(30)
except KafkaException as e:
    fail(f"the super user grants READ on group {GROUP}: {e}")
log(f"the super user granted READ on group {GROUP}")

consumer = Consumer(
    {
        **SASL,
        "group.id": GROUP,
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 200,
        "fetch.error.backoff.ms": 200,
    }
)
consumer.assign([TopicPartition(TOPIC, 0, 0)])
got = consume(consumer, 5)
if got != [b"m%d" % i for i in range(5)]:
    fail(f"consumed {got}")
log("consumed 5")

mark("consumed")
wait_for_mark("revoked")
revoked_at = time.time()
errors = produce(producer, TOPIC, [b"r%d" % i for i in range(3)])
if errors:
    fail(f"produce after poll was revoked (send is still granted): {errors}")
log("produced 3 after poll was revoked")

# Fetches may still succeed until the gateway reads the permissions again.
denied = None
while denied is None:
    if time.time() - revoked_at > DENY_WITHIN_S:
        fail(f"no TOPIC_AUTHORIZATION_FAILED within {DENY_WITHIN_S}s of the revocation")
    msg = consumer.poll(0.2)
    if msg is None:
        continue
    if msg.error():
        if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            denied = time.time() - revoked_at
        else:
            fail(f"unexpected consumer error: {msg.error()}")
    else:
        log(f"received {msg.value()!r} before the refresh")
log(f"fetch refused with TOPIC_AUTHORIZATION_FAILED {denied:.1f}s after the revocation")

mark("denied")
wait_for_mark("granted")
errors = produce(producer, TOPIC, [b"g0", b"g1"])
if errors:
    fail(f"produce after the grant: {errors}")
deadline = time.time() + DENY_WITHIN_S + 20.0
seen = []
while b"g1" not in seen:
    if time.time() > deadline:
        fail(f"after poll was granted back, received only {seen}")
    msg = consumer.poll(0.5)
    if msg is None:
        continue
    if msg.error():
        if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            continue  # until the gateway reads the permissions again
        fail(f"unexpected consumer error after the grant: {msg.error()}")
    seen.append(msg.value())
log(f"consumed again after the grant: {seen}")
consumer.close()
log("OK")
