"""Shared parts of the Python authorization suites (confluent-kafka, kafka-python).

The harness (apps/gateway/tests/authz_clients.rs) starts a gateway with one SASL_PLAINTEXT
listener (`BOOTSTRAP`, PLAIN), authorization on and allow-everyone-if-no-ACL-found off, and
passes three users: `ADMIN_USER` (a super user), `ALICE_USER` (tenant A) and `BOB_USER`
(tenant B), each with a password. Tenant A owns the names starting with `a.`, tenant B those
starting with `b.`; `TOPIC_PREFIX` keeps one run's names apart from another's.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import PARTITIONS, check, env, fail, finish, step  # noqa: E402,F401

# Kafka's error codes the suites expect.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31

TIMEOUT = 30.0
RECORDS = 6


class Settings:
    """Everything the harness passes in; a missing variable is a failure, not a skip."""

    def __init__(self):
        self.bootstrap, self.prefix = env()
        self.admin = (self._get("ADMIN_USER"), self._get("ADMIN_PASSWORD"))
        self.alice = (self._get("ALICE_USER"), self._get("ALICE_PASSWORD"))
        self.bob = (self._get("BOB_USER"), self._get("BOB_PASSWORD"))

    @staticmethod
    def _get(name):
        value = os.environ.get(name)
        if not value:
            fail(f"{name} is not set (the harness in apps/gateway/tests/authz_clients.rs sets it)")
        return value

    def name(self, tenant, what):
        """A topic or group name of `tenant` ("a" or "b"), under its prefix `<tenant>.`."""
        return f"{tenant}.{self.prefix}-{what}"


def records(label):
    """[(partition, key, value)]: two records per partition."""
    return [(i % PARTITIONS, f"{label}-key-{i}".encode(), f"{label}-value-{i}".encode()) for i in range(RECORDS)]


def same_records(label, got, want):
    """got, want: lists of (partition, key, value); order matters only within a partition."""
    by_part = lambda rows: {p: [(k, v) for pp, k, v in rows if pp == p] for p in range(PARTITIONS)}  # noqa: E731
    check(len(got) == len(want), f"{label}: consumed {len(got)} records, expected {len(want)}")
    check(by_part(got) == by_part(want), f"{label}: consumed {sorted(got)}, expected {sorted(want)}")


def foreign(names, tenant="b."):
    """The names in `names` that belong to the other tenant."""
    return sorted(n for n in names if n.startswith(tenant))


def result(label, future):
    """A confluent-kafka admin future's value; a failure of the suite if it raised."""
    from confluent_kafka import KafkaException
    try:
        return future.result(TIMEOUT)
    except KafkaException as e:
        fail(f"{label}: {e}")


def refused(label, future, code):
    """A confluent-kafka admin future that must fail with Kafka error `code`."""
    from confluent_kafka import KafkaException
    try:
        value = future.result(TIMEOUT)
    except KafkaException as e:
        check(e.args[0].code() == code, f"{label}: {e.args[0]}, expected error {code}")
        return
    fail(f"{label}: succeeded ({value!r}), expected error {code}")
