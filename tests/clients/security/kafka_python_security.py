"""kafka-python over SASL_SSL: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

The admin super user (PLAIN) creates the topics and SCRAM_USER's credentials with
AlterUserScramCredentials, and finds both mechanisms in DescribeUserScramCredentials. Each
mechanism then does a produce/consume round trip on its own topic with its own consumer
group (committed offsets read back). A wrong password must end in an authentication
error, not a hang.
"""
import time

from sec_common import (PARTITIONS, AuthErrorLog, Settings, check, committed_ok, compare_consumed, fail,
                        finish, records, step)
import kafka.errors as Errors
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic, ScramMechanism, UserScramCredentialUpsertion

CLIENT = "kafka-python"
S = Settings()
TIMEOUT_MS = 30000


def sasl(mechanism, user, password):
    return dict(bootstrap_servers=S.bootstrap, security_protocol="SASL_SSL", ssl_cafile=S.ca_file,
                sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
                request_timeout_ms=TIMEOUT_MS)


def admin_setup(labels):
    admin = KafkaAdminClient(**sasl("PLAIN", S.admin_user, S.admin_password))
    admin.create_topics([NewTopic(S.topic(CLIENT, label), num_partitions=PARTITIONS, replication_factor=1)
                         for label in labels])
    step(f"topics created as {S.admin_user}")
    # One request per mechanism: two changes of one user in one request are DUPLICATE_RESOURCE
    for mechanism, iterations in [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]:
        result = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(S.scram_user, mechanism, S.scram_password, iterations=iterations)])
        check(result == {S.scram_user: None}, f"AlterUserScramCredentials ({mechanism.name}) gave {result}")
    desc = admin.describe_user_scram_credentials([S.scram_user])
    infos = sorted((int(i["mechanism"]), i["iterations"]) for i in desc[S.scram_user]["credential_infos"])
    check(desc[S.scram_user]["error"] is None and infos == [(1, 4096), (2, 8192)],
          f"DescribeUserScramCredentials gave {desc}")
    step(f"SCRAM credentials of {S.scram_user} created and described")
    admin.close()


def round_trip(label, conf):
    topic = S.topic(CLIENT, label)
    want = records(label)
    producer = KafkaProducer(acks="all", linger_ms=5, **conf)
    futures = [producer.send(topic, key=k, value=v, partition=p) for p, k, v in want]
    producer.flush(TIMEOUT_MS / 1000)
    for f in futures:
        f.get(timeout=TIMEOUT_MS / 1000)
    producer.close()

    group = S.group(CLIENT, label)
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **conf)
    got = []
    deadline = time.time() + TIMEOUT_MS / 1000
    while len(got) < len(want) and time.time() < deadline:
        for _, msgs in consumer.poll(timeout_ms=500).items():
            got.extend((m.partition, m.key, m.value) for m in msgs)
    compare_consumed(label, got, want)
    consumer.commit()
    committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    committed_ok(label, committed, want)
    consumer.close()
    step(f"{label}: {len(want)} records produced and consumed by group {group}")


def refused(label, conf):
    """kafka-python logs the broker's SASL_AUTHENTICATION_FAILED and then gives up
    bootstrapping with KafkaTimeoutError at max_block_ms."""
    log = AuthErrorLog("kafka")
    started = time.time()
    try:
        producer = KafkaProducer(**{**conf, "max_block_ms": 20000, "bootstrap_timeout_ms": 20000})
        producer.send(S.topic(CLIENT, "plain"), b"x").get(timeout=TIMEOUT_MS / 1000)
        fail(f"{label}: the record was accepted")
    except (Errors.SaslAuthenticationFailedError, Errors.KafkaTimeoutError) as e:
        # The client must have decoded the broker's answer (error 58), not merely logged
        # the raw bytes: the gateway keeps the connection open briefly after the answer
        # (close_linger) so the client reads it before it sees the close.
        decoded = [m for m in log.seen if "[Error 58]" in m or "SaslAuthenticationFailed" in m]
        check(isinstance(e, Errors.SaslAuthenticationFailedError) or decoded,
              f"{label}: {type(e).__name__} without an authentication error from the broker: {e}")
        log.seen[:] = decoded or log.seen
        step(f"{label}: refused after {time.time() - started:.1f}s ({(log.seen or [str(e)])[0][:160]})")


def main():
    labels = ["plain", "scram-sha-256", "scram-sha-512"]
    admin_setup(labels)
    round_trip("plain", sasl("PLAIN", S.plain_user, S.plain_password))
    round_trip("scram-sha-256", sasl("SCRAM-SHA-256", S.scram_user, S.scram_password))
    round_trip("scram-sha-512", sasl("SCRAM-SHA-512", S.scram_user, S.scram_password))
    refused("wrong PLAIN password", sasl("PLAIN", S.plain_user, "not-" + S.plain_password))
    finish("kafka-python security")


if __name__ == "__main__":
    main()
