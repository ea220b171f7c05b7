"""Shared parts of the Python security suites (confluent-kafka, kafka-python, aiokafka).

The harness (apps/gateway/tests/support/security.rs) starts a gateway with a SASL_SSL
listener (`BOOTSTRAP`) and an SSL listener that requires a client certificate
(`SSL_BOOTSTRAP`), and passes the files and credentials below in the environment. Every
round trip uses its own topic (3 partitions) and its own consumer group, so a mechanism
that fails shows up on its own.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import PARTITIONS, check, env, fail, finish, step  # noqa: E402,F401

RECORDS_PER_ROUND_TRIP = 6


class Settings:
    """Everything the harness passes in; a missing variable is a failure, not a skip."""

    def __init__(self):
        self.bootstrap, self.prefix = env()
        self.ssl_bootstrap = self._get("SSL_BOOTSTRAP", required=False)
        self.ca_file = self._get("CA_FILE")
        self.client_cert_file = self._get("CLIENT_CERT_FILE", required=False)
        self.client_key_file = self._get("CLIENT_KEY_FILE", required=False)
        self.admin_user = self._get("ADMIN_USER")
        self.admin_password = self._get("ADMIN_PASSWORD")
        self.plain_user = self._get("PLAIN_USER")
        self.plain_password = self._get("PLAIN_PASSWORD")
        self.scram_user = self._get("SCRAM_USER", required=False)
        self.scram_password = self._get("SCRAM_PASSWORD", required=False)
        self.oauth_token = self._get("OAUTH_TOKEN", required=False)
        # MECHANISMS: which round trips to run (default all the suite knows), e.g. "plain"
        # against a gateway whose PLAIN goes to Iggy.
        only = os.environ.get("MECHANISMS")
        self.mechanisms = None if not only else {m.strip().lower() for m in only.split(",")}

    def wants(self, label):
        """Whether the round trip `label` runs: chosen by MECHANISMS, and its inputs are set."""
        if self.mechanisms is not None and label not in self.mechanisms:
            return False
        if label == "oauthbearer":
            return bool(self.oauth_token)
        if label == "ssl-client-cert":
            return bool(self.ssl_bootstrap and self.client_cert_file and self.client_key_file)
        return True

    @staticmethod
    def _get(name, required=True):
        value = os.environ.get(name)
        if required and not value:
            fail(f"{name} is not set (the harness in apps/gateway/tests/support/security.rs sets it)")
        return value

    def topic(self, client, label):
        return f"{self.prefix}-{client}-{label}"

    def group(self, client, label):
        return f"{self.prefix}-{client}-{label}-group"


def records(label):
    """[(partition, key, value)] for one round trip: two records per partition."""
    return [
        (i % PARTITIONS, f"{label}-key-{i}".encode(), f"{label}-value-{i} ".encode() + bytes(range(i * 7)))
        for i in range(RECORDS_PER_ROUND_TRIP)
    ]


def compare_consumed(label, got, want):
    """got, want: lists of (partition, key, value). Order matters only within a partition."""
    by_part = lambda rows: {p: [(k, v) for pp, k, v in rows if pp == p] for p in range(PARTITIONS)}  # noqa: E731
    check(len(got) == len(want), f"{label}: consumed {len(got)} records, expected {len(want)}")
    g, w = by_part(got), by_part(want)
    for p in range(PARTITIONS):
        check(g[p] == w[p], f"{label}: partition {p} gave {g[p]}, expected {w[p]}")


def committed_ok(label, committed, want):
    """committed: {partition: offset}; each partition's committed offset is its record count."""
    counts = {p: sum(1 for pp, _, _ in want if pp == p) for p in range(PARTITIONS)}
    check(committed == counts, f"{label}: committed offsets {committed}, expected {counts}")


class AuthErrorLog:
    """Collects the client library's log lines that report a SASL authentication failure
    (error 58): kafka-python and aiokafka log the broker's answer and then report only
    that bootstrapping failed."""

    def __init__(self, logger_name):
        import logging

        class Handler(logging.Handler):
            def __init__(self, seen):
                super().__init__(logging.DEBUG)
                self.seen = seen

            def emit(self, record):
                msg = record.getMessage()
                if (
                    "SaslAuthenticationFailed" in msg
                    or "[Error 58]" in msg
                    or "Authentication failed" in msg
                ):
                    self.seen.append(msg)

        self.seen = []
        logger = logging.getLogger(logger_name)
        logger.addHandler(Handler(self.seen))
        # The failure may be reported at any level depending on where the client's
        # connection was when the answer arrived (an error while connecting, a debug line
        # when the close was seen first): listen to all of them.
        if logger.getEffectiveLevel() > logging.DEBUG:
            logger.setLevel(logging.DEBUG)
