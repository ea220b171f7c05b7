"""confluent-kafka (librdkafka 2.16) over TLS.

- SASL_SSL with PLAIN (the admin super user creates every topic, 3 partitions each).
- SCRAM-SHA-256 and SCRAM-SHA-512: the admin creates SCRAM_USER's credentials with
  AlterUserScramCredentials (4096 and 8192 iterations), DescribeUserScramCredentials then
  reports both mechanisms with those iterations; a PLAIN user that is not a super user
  gets CLUSTER_AUTHORIZATION_FAILED from AlterUserScramCredentials.
- OAUTHBEARER with an `oauth_cb` that hands librdkafka the signed JWT in OAUTH_TOKEN.
- SSL with a client certificate (CLIENT_CERT_FILE/CLIENT_KEY_FILE, CN=alice) on
  SSL_BOOTSTRAP.
Each is a produce/consume round trip on its own topic with its own consumer group, which
commits and reads its committed offsets back. A wrong PLAIN or SCRAM password must end in
an authentication error (not a hang, not a success), and the SSL listener must refuse a
client without a certificate.

SCRAM_PROPAGATION_SECONDS (optional, default 0): how long to wait after creating the SCRAM
credentials before using them, for several brokers that learn of a change through one of
them within a bounded interval (as Kafka brokers learn of it from the controller).
"""
import os
import time

from sec_common import (PARTITIONS, Settings, check, committed_ok, compare_consumed, fail,
                        finish, records, step)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

CLIENT = "confluent"
S = Settings()
TIMEOUT = 30.0


def sasl(mechanism, user, password):
    return {
        "bootstrap.servers": S.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": S.ca_file,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def oauth():
    expiry = time.time() + 3600

    def oauth_cb(_config):
        return S.oauth_token, expiry

    return {
        "bootstrap.servers": S.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": S.ca_file,
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def ssl_client_cert():
    return {
        "bootstrap.servers": S.ssl_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": S.ca_file,
        "ssl.certificate.location": S.client_cert_file,
        "ssl.key.location": S.client_key_file,
    }


def create_topics(admin, topics):
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics], request_timeout=TIMEOUT)
    for topic, f in futures.items():
        try:
            f.result(TIMEOUT)
        except KafkaException as e:
            fail(f"create topic {topic} as {S.admin_user}: {e}")


def create_scram_credentials(admin):
    # One request per mechanism: a KRaft controller (and the gateway) refuses two changes of
    # one user in one request with DUPLICATE_RESOURCE, whatever the mechanisms.
    for mechanism, iterations in [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]:
        upsert = UserScramCredentialUpsertion(S.scram_user, ScramCredentialInfo(mechanism, iterations),
                                              S.scram_password.encode())
        for user, f in admin.alter_user_scram_credentials([upsert], request_timeout=TIMEOUT).items():
            try:
                f.result(TIMEOUT)
            except KafkaException as e:
                fail(f"AlterUserScramCredentials ({mechanism}) for {user} as {S.admin_user}: {e}")
    described = admin.describe_user_scram_credentials([S.scram_user], request_timeout=TIMEOUT)
    try:
        desc = described[S.scram_user].result(TIMEOUT)
    except KafkaException as e:
        fail(f"DescribeUserScramCredentials for {S.scram_user}: {e}")
    infos = sorted((i.mechanism.value, i.iterations) for i in desc.scram_credential_infos)
    want = [(ScramMechanism.SCRAM_SHA_256.value, 4096), (ScramMechanism.SCRAM_SHA_512.value, 8192)]
    check(infos == want, f"DescribeUserScramCredentials({S.scram_user}) gave {infos}, expected {want}")


def alter_refused_for_plain_user():
    # AlterUserScramCredentials, not Describe: for a refused Describe a broker answers with a
    # top-level error and no per-user results (Kafka's getErrorResponse), and confluent-kafka
    # 2.16.1 crashes (SIGSEGV) on that answer.
    admin = AdminClient(sasl("PLAIN", S.plain_user, S.plain_password))
    upsert = UserScramCredentialUpsertion(S.plain_user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"not-allowed")
    try:
        admin.alter_user_scram_credentials([upsert], request_timeout=TIMEOUT)[S.plain_user].result(TIMEOUT)
    except KafkaException as e:
        err = e.args[0]
        check(err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED,
              f"AlterUserScramCredentials as {S.plain_user}: {err}, expected CLUSTER_AUTHORIZATION_FAILED")
        return
    fail(f"AlterUserScramCredentials as {S.plain_user} (not a super user) succeeded")


def round_trip(label, conf):
    topic = S.topic(CLIENT, label)
    want = records(label)
    errors = []
    producer = Producer({**conf, "error_cb": errors.append, "acks": "all", "linger.ms": 5})
    delivered = []

    def on_delivery(err, msg):
        if err is not None:
            fail(f"{label}: delivery to {topic}: {err}")
        delivered.append(msg.offset())

    for p, k, v in want:
        producer.produce(topic, key=k, value=v, partition=p, on_delivery=on_delivery)
    left = producer.flush(TIMEOUT)
    check(left == 0 and len(delivered) == len(want),
          f"{label}: {left} records still queued after {TIMEOUT}s, {len(delivered)} delivered; errors {errors}")

    group = S.group(CLIENT, label)
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "error_cb": errors.append})
    consumer.subscribe([topic])
    got = []
    deadline = time.time() + TIMEOUT
    while len(got) < len(want) and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            fail(f"{label}: consume: {msg.error()}")
        got.append((msg.partition(), msg.key(), msg.value()))
    compare_consumed(label, got, want)
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=TIMEOUT)
    committed_ok(label, {tp.partition: tp.offset for tp in committed}, want)
    consumer.close()
    step(f"{label}: {len(want)} records produced and consumed by group {group}")


def refused(label, conf, want_codes, mentions=""):
    """A client that must be turned away: its error_cb reports one of want_codes, with
    `mentions` in the message."""
    errors = []
    admin = AdminClient({**conf, "error_cb": errors.append})

    def seen():
        return any(e.code() in want_codes and mentions in e.str() for e in errors)

    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not seen():
        try:
            md = admin.list_topics(timeout=1)
            fail(f"{label}: Metadata answered ({len(md.topics)} topics) without valid credentials")
        except KafkaException:
            pass
        admin.poll(0.1)
    check(seen(), f"{label}: no error in {want_codes} mentioning {mentions!r} within {TIMEOUT}s; "
                  f"errors: {[str(e) for e in errors]}")
    step(f"{label}: refused ({[str(e) for e in errors][:1]})")


def main():
    labels = [label for label in ["plain", "scram-sha-256", "scram-sha-512", "oauthbearer", "ssl-client-cert"]
              if S.wants(label)]
    admin = AdminClient(sasl("PLAIN", S.admin_user, S.admin_password))
    create_topics(admin, [S.topic(CLIENT, label) for label in labels])
    step(f"topics created as {S.admin_user} over SASL_SSL/PLAIN")
    scram = S.wants("scram-sha-256")
    if scram:
        create_scram_credentials(admin)
        step(f"SCRAM credentials of {S.scram_user} created and described")
        propagation = float(os.environ.get("SCRAM_PROPAGATION_SECONDS") or 0)
        if propagation > 0:
            time.sleep(propagation)
            step(f"waited {propagation} s for every broker to know the credentials")
        alter_refused_for_plain_user()
        step(f"AlterUserScramCredentials refused for {S.plain_user}")

    round_trip("plain", sasl("PLAIN", S.plain_user, S.plain_password))
    if scram:
        round_trip("scram-sha-256", sasl("SCRAM-SHA-256", S.scram_user, S.scram_password))
        round_trip("scram-sha-512", sasl("SCRAM-SHA-512", S.scram_user, S.scram_password))
    if "oauthbearer" in labels:
        round_trip("oauthbearer", oauth())
    if "ssl-client-cert" in labels:
        round_trip("ssl-client-cert", ssl_client_cert())

    # last: each rejection delays the next authentication from this address
    refused("wrong PLAIN password", sasl("PLAIN", S.plain_user, "not-" + S.plain_password),
            {KafkaError._AUTHENTICATION})
    if "ssl-client-cert" in labels:
        no_cert = {k: v for k, v in ssl_client_cert().items() if not k.startswith("ssl.certificate") and k != "ssl.key.location"}
        refused("SSL without a client certificate", no_cert,
                {KafkaError._SSL, KafkaError._TRANSPORT}, mentions="certificate")
    if scram:
        refused("wrong SCRAM-SHA-256 password", sasl("SCRAM-SHA-256", S.scram_user, "not-" + S.scram_password),
                {KafkaError._AUTHENTICATION})
    finish("confluent-kafka security")


if __name__ == "__main__":
    main()
