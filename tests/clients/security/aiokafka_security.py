"""aiokafka over SASL_SSL: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

aiokafka has no admin call for SCRAM credentials: the harness creates SCRAM_USER's with
the gateway's `users set-scram` before the gateway starts. The admin super user (PLAIN)
creates the topics; each mechanism does a produce/consume round trip on its own topic with
its own consumer group (committed offsets read back). A wrong password must end in an
authentication error, not a hang.
"""
import asyncio
import time

from sec_common import (PARTITIONS, AuthErrorLog, Settings, committed_ok, compare_consumed, fail, finish,
                        records, step)
import aiokafka.errors as Errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

CLIENT = "aiokafka"
S = Settings()
TIMEOUT = 30


def sasl(mechanism, user, password):
    return dict(bootstrap_servers=S.bootstrap, security_protocol="SASL_SSL",
                ssl_context=create_ssl_context(cafile=S.ca_file), sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password, request_timeout_ms=TIMEOUT * 1000)


async def create_topics(labels):
    admin = AIOKafkaAdminClient(**sasl("PLAIN", S.admin_user, S.admin_password))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(S.topic(CLIENT, label), num_partitions=PARTITIONS, replication_factor=1)
                                   for label in labels])
    finally:
        await admin.close()
    step(f"topics created as {S.admin_user}")


async def round_trip(label, conf):
    topic = S.topic(CLIENT, label)
    want = records(label)
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **conf)
    await producer.start()
    try:
        for p, k, v in want:
            await producer.send_and_wait(topic, key=k, value=v, partition=p)
    finally:
        await producer.stop()

    group = S.group(CLIENT, label)
    consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **conf)
    await consumer.start()
    try:
        got = []
        deadline = time.time() + TIMEOUT
        while len(got) < len(want) and time.time() < deadline:
            for _, msgs in (await consumer.getmany(timeout_ms=500)).items():
                got.extend((m.partition, m.key, m.value) for m in msgs)
        compare_consumed(label, got, want)
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
        committed_ok(label, committed, want)
    finally:
        await consumer.stop()
    step(f"{label}: {len(want)} records produced and consumed by group {group}")


async def refused(label, conf):
    """aiokafka logs the broker's SASL_AUTHENTICATION_FAILED and then reports only that it
    could not bootstrap (KafkaConnectionError)."""
    log = AuthErrorLog("aiokafka")
    started = time.time()
    producer = AIOKafkaProducer(**conf)
    try:
        await asyncio.wait_for(producer.start(), TIMEOUT)
    except (Errors.SaslAuthenticationFailed, Errors.AuthenticationFailedError, Errors.KafkaConnectionError) as e:
        ok = not isinstance(e, Errors.KafkaConnectionError) or log.seen
        if not ok:
            fail(f"{label}: {type(e).__name__} without an authentication error from the broker: {e}")
        step(f"{label}: refused after {time.time() - started:.1f}s ({(log.seen or [str(e)])[0][:160]})")
        return
    except Exception as e:  # noqa: BLE001 - anything else is the failure reported here
        fail(f"{label}: expected an authentication error, got {type(e).__name__}: {e}")
    finally:
        await producer.stop()
    fail(f"{label}: the producer started")


async def main():
    labels = ["plain", "scram-sha-256", "scram-sha-512"]
    await create_topics(labels)
    await round_trip("plain", sasl("PLAIN", S.plain_user, S.plain_password))
    await round_trip("scram-sha-256", sasl("SCRAM-SHA-256", S.scram_user, S.scram_password))
    await round_trip("scram-sha-512", sasl("SCRAM-SHA-512", S.scram_user, S.scram_password))
    await refused("wrong PLAIN password", sasl("PLAIN", S.plain_user, "not-" + S.plain_password))
    finish("aiokafka security")


if __name__ == "__main__":
    asyncio.run(main())
